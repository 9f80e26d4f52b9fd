// The queue tree sluiced builds and owns on one switch port's egress
// (design A, docs/switch.md), over netlink:
//
//   root tbf 51: at the link rate, burst_bytes: the port's shaper, the same
//    │   qdisc and parameters as the plain lab port it replaces
//    └ htb 52: default fff0, under 51:1; its classes never run out of tokens
//       │   (4x the link), so HTB only schedules: strict priority between
//       │   levels, DRR by quantum (1514) within one
//       └ 52:1000
//          ├ 52:(q+1) one class per queue, prio = the queue's priority; leaf:
//          │   tbf (5200+q+1): at 4x the link (never throttles), limit
//          │   buffer_bytes - 1514 (the root holds one peeked frame). Pause = this TBF's rate to 1000 B/s; resume = 4x
//          │   the link again (a TBF change refills its bucket; an HTB class
//          │   slowed to a stop keeps the debt of the packet it let out and
//          │   stays silent after "resume").
//          └ 52:fff0 the fallback class (bfifo 52f0:, buffer_bytes), never
//              paused: HTB's default class, so a packet the classifier did
//              not steer (sluiced gone, classifier detached, heartbeat
//              stale, control frames sluiced sends) still leaves.
//
// With TreeSpec::root_only, just the root tbf 51: (the held data path).
//
// Only the handles recorded here are ever changed or deleted. remove()
// deletes the root 51: (everything under it goes with it) only if the root
// is still ours; the port then has the kernel's default qdisc. A root
// qdisc that was there before (the lab's TBF, say) is replaced, not
// restored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/switch.h"
#include "switch/logic.h"

struct nl_sock;

namespace sluice::sw {

constexpr uint32_t kTreeMajor = 0x51;  // root tbf
constexpr uint32_t kHtbMajor = 0x52;   // the queues' htb (sl_sw_port.htb_major)
constexpr uint32_t kRootClassMinor = 0x1000;
constexpr uint32_t kFallbackMinor = SL_SW_FALLBACK_MINOR;
constexpr uint32_t kLeafMajorBase = 0x5200;
constexpr uint32_t kPausedRateBytes = 1000;  // bytes/s of a paused queue's TBF
constexpr uint64_t kLeafRateFactor = 4;      // HTB classes and unpaused TBF leaves: 4x the link
constexpr uint32_t kMinReleaseBytes = 1518;  // a release's bucket: one full frame (with VLAN tag)
// A paused leaf's bucket. A TBF change refills the bucket and what it holds
// leaves at once, so this is what a pause lets through: one full frame
// (with VLAN tag, and margin for the kernel's rounding of the bucket to
// time), not the link's burst (at 1 Gbit/s 12.5-64 KB: 8-43 frames). Not
// less: TBF drops a frame larger than its bucket instead of holding it.
constexpr uint32_t kPausedBucketBytes = 1600;

struct TreeSpec {
  std::string ifname;
  int ifindex = 0;
  uint64_t rate_bps = 0;
  uint32_t buffer_bytes = 131072;
  std::vector<QueueConfig> queues;
  uint32_t burst_bytes = 0;  // 0: 100 us at the rate, >= two MTU frames
  // Only the root tbf 51: at the link rate (limit buffer_bytes), no HTB, no
  // leaves: [switch] datapath = "hold", where the queues are in the agent
  // (switch/hold_path.h). set_paused/release then fail, read() is empty.
  bool root_only = false;
};

struct ClassCounters {
  uint64_t packets = 0;  // left the class (GSO segments counted)
  uint64_t bytes = 0;
  uint64_t drops = 0;    // dropped by its leaf (tail drop at buffer_bytes)
  uint32_t qlen = 0;     // skbs queued now
  uint32_t backlog = 0;  // bytes queued now
};

class PortTree {
 public:
  // Builds the tree; throws Error naming the step, with nothing left
  // behind, on failure.
  explicit PortTree(TreeSpec spec);
  ~PortTree();
  PortTree(const PortTree&) = delete;
  PortTree& operator=(const PortTree&) = delete;

  // Pauses or resumes queue q (its TBF leaf's rate). Returns 0 or a
  // negative libnl error.
  int set_paused(uint32_t q, bool paused);
  // Paused queue q with a bucket of `bytes` (>= one full frame): about that
  // many bytes leave, then it is paused again (a TBF change refills its
  // bucket). Returns 0 or a negative libnl error.
  int release(uint32_t q, uint64_t bytes);
  // Per queue, then the fallback class last. Empty on a netlink failure.
  std::vector<ClassCounters> read() const;
  void remove() noexcept;

  const TreeSpec& spec() const { return spec_; }
  // What was on the port before ("" = nothing but the kernel default).
  const std::string& replaced() const { return replaced_; }
  // The handles this tree created, "51:", "51:1000", "5101:", ...
  std::vector<std::string> handles() const;
  uint32_t burst_bytes() const;
  // Each queue's tail-drop limit: buffer_bytes less the frame the root TBF
  // holds after peeking it from HTB.
  uint32_t leaf_limit() const;

 private:
  void add_class(uint32_t parent, uint32_t handle, uint64_t rate, uint64_t ceil, uint32_t prio);
  int add_tbf(uint32_t q, bool paused, bool create, uint32_t bucket = 0);
  TreeSpec spec_;
  nl_sock* sk_ = nullptr;
  std::string replaced_;
  bool built_ = false;
};

}  // namespace sluice::sw
