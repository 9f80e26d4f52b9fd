// Helpers for the scale and fault drills (docs/operations.md "Drills"):
// what is attached to an interface's hooks, before/after comparisons, and
// someone else's programs on every hook sluice attaches to.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace sluice::test {

// BPF objects (maps, programs, links) this process holds open, by fd.
int bpf_fds_open();

// Ids of the tcx programs on `ifindex` (calling thread's namespace), in
// chain order; empty when none or the kernel has no tcx.
std::vector<uint32_t> tcx_prog_ids(int ifindex, bool ingress);

// Everything attached to interface `ifname` of namespace `ns`, as text for
// a before/after comparison: its qdiscs, the clsact filters of both hooks,
// its XDP program and its tcx programs.
std::string hook_snapshot(const std::string& ns, const std::string& ifname);

// Polls `count` about every millisecond for `d` and returns the longest time,
// in ms, during which it did not grow (from the start of the window: a
// counter that never grows gives d). Coarse (the poller shares the CPU): an
// upper bound of the real gap, for figures, never for a timed assertion.
double longest_stall_ms(const std::function<uint64_t()>& count, std::chrono::milliseconds d);

// Someone else's programs on every hook sluice uses, attached while this
// object lives: clsact ingress and egress filters (cls_bpf, handle
// kForeignHandle, priority `prio`) and tcx links on ingress and egress
// (appended). A prog fd < 0 leaves that hook alone. The clsact qdisc is
// created if missing, the way another tool would; the destructor detaches
// what is still there and leaves the qdisc.
class ForeignHooks {
 public:
  static constexpr uint32_t kForeignHandle = 7;
  struct Progs {
    int clsact_in = -1, clsact_out = -1, tcx_in = -1, tcx_out = -1;
  };
  ForeignHooks(const std::string& ns, const std::string& ifname, Progs progs, uint32_t prio = 0xF000);
  ~ForeignHooks();
  ForeignHooks(const ForeignHooks&) = delete;
  ForeignHooks& operator=(const ForeignHooks&) = delete;

  // Which of the foreign attachments are no longer on their hook ("" when
  // all are): e.g. "clsact egress filter handle 0x7 prio 0xf000".
  std::string missing() const;

 private:
  std::string ns_, ifname_;
  Progs progs_;
  uint32_t prio_;
  int tcx_in_link_ = -1, tcx_out_link_ = -1;
};

}  // namespace sluice::test
