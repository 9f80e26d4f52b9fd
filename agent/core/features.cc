#include "features.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <netlink/genl/ctrl.h>
#include <netlink/genl/genl.h>
#include <netlink/netlink.h>
#include <netlink/route/link.h>
#include <netlink/route/link/veth.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "bpf_util.h"
#include "log.h"
#include "netns.h"
#include "probe_basic.skel.h"
#include "probe_cc.skel.h"
#include "probe_kern_ctx.skel.h"
#include "sluice/liveness.h"
#include "probe_liveness.skel.h"
#include "probe_liveness_xdp.skel.h"
#include "probe_qdisc_tp.skel.h"
#include "tc.h"

SLUICE_SKELETON(probe_basic);
SLUICE_SKELETON(probe_cc);
SLUICE_SKELETON(probe_kern_ctx);
SLUICE_SKELETON(probe_liveness);
SLUICE_SKELETON(probe_liveness_xdp);
SLUICE_SKELETON(probe_qdisc_tp);

namespace sluice {

const char* to_string(Feature f) {
  switch (f) {
    case Feature::Btf: return "btf";
    case Feature::RingBuf: return "ringbuf";
    case Feature::TcClsact: return "tc-clsact";
    case Feature::Tcx: return "tcx";
    case Feature::StructOpsCc: return "struct-ops-tcp-cc";
    case Feature::TpBtfQdisc: return "tp-btf-qdisc";
    case Feature::CastToKernCtx: return "bpf-cast-to-kern-ctx";
    case Feature::TaskFromPid: return "bpf-task-from-pid";
    case Feature::TaskFromPidXdp: return "bpf-task-from-pid-xdp";
    case Feature::Xdp: return "xdp";
  }
  return "?";
}

const std::vector<Feature>& all_features() {
  static const std::vector<Feature> v = {Feature::Btf,
                                         Feature::RingBuf,
                                         Feature::TcClsact,
                                         Feature::Tcx,
                                         Feature::StructOpsCc,
                                         Feature::TpBtfQdisc,
                                         Feature::CastToKernCtx,
                                         Feature::TaskFromPid,
                                         Feature::TaskFromPidXdp,
                                         Feature::Xdp};
  return v;
}

namespace {

// Runs one probe; an exception is "not available" with its message.
template <typename Fn>
FeatureResult probe(Fn&& fn) {
  try {
    return FeatureResult{true, fn()};
  } catch (const std::exception& e) {
    return FeatureResult{false, e.what()};
  }
}

// Quiet libbpf while probing: a failed probe is an answer, not a warning.
struct QuietLibbpf {
  libbpf_print_fn_t old;
  QuietLibbpf() { old = libbpf_set_print(nullptr); }
  ~QuietLibbpf() { libbpf_set_print(old); }
};

// Says which piece is missing rather than libbpf's bare errno: throws when
// the kernel's BTF lacks the kfunc (both probed here came with 6.2).
void require_kfunc(const char* name) {
  if (btf* b = btf__load_vmlinux_btf()) {
    bool has = btf__find_by_name_kind(b, name, BTF_KIND_FUNC) >= 0;
    btf__free(b);
    if (!has) throw Error(std::string("kfunc ") + name + " is not in the kernel's BTF (added in 6.2)");
  }
}

}  // namespace

static FeatureResult probe_task_from_pid() {
  QuietLibbpf quiet;
  return probe([] {
    require_kfunc("bpf_task_from_pid");
    Skeleton<probe_liveness> s;
    s.load();
    return std::string("kfunc callable from tc programs: fail-open tells a dead agent from a busy machine");
  });
}

const FeatureResult& task_from_pid_feature() {
  static const FeatureResult r = probe_task_from_pid();
  return r;
}

static FeatureResult probe_task_from_pid_xdp() {
  QuietLibbpf quiet;
  return probe([] {
    require_kfunc("bpf_task_from_pid");
    Skeleton<probe_liveness_xdp> s;
    try {
      s.load();
    } catch (const std::exception& e) {
      throw Error(std::string("kfunc not callable from XDP programs (6.8+): ") + e.what());
    }
    return std::string("kfunc callable from XDP programs");
  });
}

const FeatureResult& task_from_pid_xdp_feature() {
  static const FeatureResult r = probe_task_from_pid_xdp();
  return r;
}

std::string kernel_release() {
  std::ifstream f("/proc/sys/kernel/osrelease");
  std::string s;
  std::getline(f, s);
  return s;
}

namespace {
// Runs `undo` when the scope ends, also by an exception.
template <typename Fn>
struct Undo {
  Fn fn;
  ~Undo() { fn(); }
};
template <typename Fn>
Undo(Fn) -> Undo<Fn>;
}  // namespace

AttachProbeResults probe_attach(int ifindex) {
  QuietLibbpf quiet;
  AttachProbeResults r;
  if (ifindex <= 0) {
    r.tc = r.tcx = r.xdp = FeatureResult{false, "no interface to probe on"};
    return r;
  }
  Skeleton<probe_basic> s;
  s.load();
  int tc_fd = bpf_program__fd(s->progs.probe_tc);
  // Each probe undoes exactly what it did, in reverse order, whether it
  // succeeds or not: the interface is left as it was found.
  r.tc = probe([&] {
    DECLARE_LIBBPF_OPTS(bpf_tc_hook, h, .ifindex = ifindex, .attach_point = BPF_TC_INGRESS);
    bool had_clsact = clsact_exists(ifindex);
    int rc = had_clsact ? 0 : bpf_tc_hook_create(&h);
    if (rc) throw SysError("create clsact qdisc", rc);
    Undo drop_qdisc{[&] {
      if (had_clsact) return;
      DECLARE_LIBBPF_OPTS(bpf_tc_hook, all, .ifindex = ifindex,
                          .attach_point = static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS));
      bpf_tc_hook_destroy(&all);
    }};
    // The last priority tc allows, and a handle of its own: never one of
    // sluice's filter slots, never someone else's filter on a reused clsact.
    DECLARE_LIBBPF_OPTS(bpf_tc_opts, o, .prog_fd = tc_fd, .handle = kTcHandle + 1, .priority = 0xFFFF);
    rc = bpf_tc_attach(&h, &o);
    if (rc) throw SysError("attach cls_bpf filter", rc);
    DECLARE_LIBBPF_OPTS(bpf_tc_opts, d, .handle = kTcHandle + 1, .priority = 0xFFFF);
    rc = bpf_tc_detach(&h, &d);
    if (rc) throw SysError("detach cls_bpf filter", rc);
    return std::string("clsact + cls_bpf direct-action");
  });
  r.tcx = probe([&] {
    int fd = tcx_link_create(tc_fd, ifindex, Hook::Ingress);
    if (fd < 0) throw SysError("BPF_LINK_CREATE tcx (kernel 6.6+)", fd);
    close(fd);  // the link's only reference: closing it detaches
    return std::string("tcx link");
  });
  r.xdp = probe([&] {
    int fd = bpf_program__fd(s->progs.probe_xdp);
    int rc = bpf_xdp_attach(ifindex, fd, XDP_FLAGS_DRV_MODE | XDP_FLAGS_UPDATE_IF_NOEXIST, nullptr);
    if (rc) throw SysError("native XDP on veth", rc);
    rc = bpf_xdp_detach(ifindex, XDP_FLAGS_DRV_MODE, nullptr);
    if (rc) throw SysError("detach native XDP", rc);
    return std::string("native XDP on veth");
  });
  return r;
}

FeatureReport probe_features() {
  QuietLibbpf quiet;
  FeatureReport r;

  r[Feature::Btf] = probe([] {
    btf* b = btf__load_vmlinux_btf();
    if (!b) throw Error("no vmlinux BTF (/sys/kernel/btf/vmlinux): kernel lacks CONFIG_DEBUG_INFO_BTF");
    std::string d = std::to_string(btf__type_cnt(b)) + " types";
    btf__free(b);
    return d;
  });
  r[Feature::RingBuf] = probe([] {
    int rc = libbpf_probe_bpf_map_type(BPF_MAP_TYPE_RINGBUF, nullptr);
    if (rc != 1) throw Error("BPF_MAP_TYPE_RINGBUF not supported (5.8+)");
    return std::string("map type supported");
  });
  r[Feature::StructOpsCc] = probe([] {
    Skeleton<probe_cc> s;
    s.load();  // verifies the programs against tcp_congestion_ops; no registration
    return std::string("tcp_congestion_ops programs verified");
  });
  r[Feature::CastToKernCtx] = probe([] {
    require_kfunc("bpf_cast_to_kern_ctx");
    Skeleton<probe_kern_ctx> s;
    s.load();
    return std::string("kfunc resolved, qdisc backlog readable from tc");
  });
  r[Feature::TaskFromPid] = probe_task_from_pid();
  r[Feature::TaskFromPidXdp] = probe_task_from_pid_xdp();
  r[Feature::TpBtfQdisc] = probe([] {
    for (int which = 0; which < 2; ++which) {
      Skeleton<probe_qdisc_tp> s;
      bpf_program__set_autoload(s->progs.probe_qdisc_enqueue, which == 0);
      bpf_program__set_autoload(s->progs.probe_qdisc_dequeue, which == 1);
      try {
        s.load();
      } catch (const std::exception& e) {
        throw Error(std::string(which ? "qdisc_dequeue" : "qdisc_enqueue") + ": " + e.what());
      }
    }
    return std::string("qdisc_enqueue and qdisc_dequeue");
  });

  // Attach probes run on a veth pair in a private network namespace.
  FeatureResult tc{false, "not probed"}, tcx{false, "not probed"}, xdp{false, "not probed"};
  try {
    run_in_new_netns([&] {
      // Deleted when the probes end, not left to the namespace's teardown
      // (which the kernel does later, asynchronously).
      ScopedVethPair veth("slprobe");
      AttachProbeResults a = probe_attach(static_cast<int>(if_nametoindex(veth.a().c_str())));
      tc = a.tc;
      tcx = a.tcx;
      xdp = a.xdp;
    });
  } catch (const std::exception& e) {
    std::string why = std::string("probe namespace: ") + e.what();
    for (auto* f : {&tc, &tcx, &xdp})
      if (f->detail == "not probed") *f = FeatureResult{false, why};
  }
  r[Feature::TcClsact] = tc;
  r[Feature::Tcx] = tcx;
  r[Feature::Xdp] = xdp;
  return r;
}

namespace {
// netdev generic netlink family (6.3+): per-device XDP feature bits. The
// constants are from the kernel UAPI; Debian 12's headers predate them.
constexpr int kNetdevCmdDevGet = 1;
constexpr int kNetdevAttrIfindex = 1;
constexpr int kNetdevAttrXdpFeatures = 3;
constexpr int kNetdevAttrMax = 16;

int xdp_features_cb(nl_msg* msg, void* arg) {
  nlattr* tb[kNetdevAttrMax + 1] = {};
  if (genlmsg_parse(nlmsg_hdr(msg), 0, tb, kNetdevAttrMax, nullptr) == 0 && tb[kNetdevAttrXdpFeatures])
    *static_cast<int64_t*>(arg) = static_cast<int64_t>(nla_get_u64(tb[kNetdevAttrXdpFeatures]));
  return NL_OK;
}
}  // namespace

std::string xdp_features(int ifindex) {
  nl_sock* sk = nl_socket_alloc();
  if (!sk) return "unknown";
  std::string out = "unknown";
  int64_t bits = -1;
  if (genl_connect(sk) == 0) {
    int fam = genl_ctrl_resolve(sk, "netdev");
    if (fam < 0) {
      out = "not reported (no netdev netlink family; kernel < 6.3)";
    } else {
      nl_msg* m = nlmsg_alloc();
      if (m && genlmsg_put(m, NL_AUTO_PORT, NL_AUTO_SEQ, fam, 0, 0, kNetdevCmdDevGet, 1) &&
          nla_put_u32(m, kNetdevAttrIfindex, static_cast<uint32_t>(ifindex)) == 0 && nl_send_auto(sk, m) >= 0) {
        nl_socket_modify_cb(sk, NL_CB_VALID, NL_CB_CUSTOM, xdp_features_cb, &bits);
        nl_recvmsgs_default(sk);
      }
      nlmsg_free(m);
    }
  }
  nl_socket_free(sk);
  if (bits >= 0) {
    static const char* names[] = {"basic",      "redirect", "ndo-xmit",   "xsk-zerocopy",
                                  "hw-offload", "rx-sg",    "ndo-xmit-sg"};
    out.clear();
    for (int i = 0; i < 7; ++i)
      if (bits & (1ll << i)) out += (out.empty() ? "" : ",") + std::string(names[i]);
    if (out.empty()) out = "none (generic XDP only)";
  }
  return out;
}

std::string describe_interface(const std::string& ifname) {
  unsigned idx = if_nametoindex(ifname.c_str());
  if (!idx) return "not found in this network namespace";
  std::string out = "ifindex " + std::to_string(idx);
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s >= 0) {
    ethtool_drvinfo info{};
    info.cmd = ETHTOOL_GDRVINFO;
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
    ifr.ifr_data = reinterpret_cast<char*>(&info);
    if (ioctl(s, SIOCETHTOOL, &ifr) == 0) out += ", driver " + std::string(info.driver);
    close(s);
  }
  out += ", native XDP: " + xdp_features(static_cast<int>(idx));
  LIBBPF_OPTS(bpf_xdp_query_opts, q);
  if (bpf_xdp_query(static_cast<int>(idx), 0, &q) == 0 && q.attach_mode != XDP_ATTACHED_NONE)
    out += ", an XDP program is already attached (mode " + std::to_string(q.attach_mode) + ")";
  return out;
}

}  // namespace sluice
