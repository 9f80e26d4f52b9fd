// Kernel feature probes. Each probe really exercises the feature (loads a
// program, creates a map, attaches in a throw-away network namespace), so
// `sluiced --check` tells the truth about this kernel, not about its version
// number.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace sluice {

enum class Feature {
  Btf,             // /sys/kernel/btf/vmlinux (CO-RE)
  RingBuf,         // BPF_MAP_TYPE_RINGBUF
  TcClsact,        // clsact qdisc + cls_bpf direct-action
  Tcx,             // tcx links (6.6+)
  StructOpsCc,     // struct_ops tcp_congestion_ops written in BPF
  TpBtfQdisc,      // tp_btf/qdisc_enqueue and qdisc_dequeue
  CastToKernCtx,   // bpf_cast_to_kern_ctx kfunc (6.2+)
  TaskFromPid,     // bpf_task_from_pid kfunc from tc programs (6.2+)
  TaskFromPidXdp,  // the same from XDP programs (6.8+)
  Xdp,             // XDP, native on veth
};

const char* to_string(Feature f);
const std::vector<Feature>& all_features();

struct FeatureResult {
  bool ok = false;
  std::string detail;  // why not, or what was found
};

using FeatureReport = std::map<Feature, FeatureResult>;

// Runs every probe; the attach probes on a veth pair of their own in a
// private network namespace (deleted before it returns), so nothing on the
// host's interfaces changes. Needs root.
FeatureReport probe_features();

// The attach probes (tc-clsact, tcx, xdp) on interface `ifindex` of the
// calling thread's namespace. Each attaches the smallest program of its kind
// and undoes exactly what it did -- the filter, the clsact qdisc if it
// created it, the tcx link, the XDP program -- also when a step fails: the
// interface is left as it was found (tests/integration/agent_test.cc).
struct AttachProbeResults {
  FeatureResult tc, tcx, xdp;
};
AttachProbeResults probe_attach(int ifindex);

// The bpf-task-from-pid probe, run once per process and remembered: whether
// the programs that fail open may look at the agent's heartbeat thread
// (bpf/lib/liveness.h) or must use their *_compat twin.
const FeatureResult& task_from_pid_feature();
// The same for XDP programs (TOP's token expiry), which may call the kfunc
// from 6.8 on only.
const FeatureResult& task_from_pid_xdp_feature();

std::string kernel_release();

// Native XDP features the driver of `ifindex` reports (netdev netlink,
// 6.3+), e.g. "basic,redirect,ndo-xmit".
std::string xdp_features(int ifindex);

// Per-interface facts for --check (driver, XDP attach modes it reports).
std::string describe_interface(const std::string& ifname);

}  // namespace sluice
