// The queue tree sluiced builds and owns on one switch port's egress
// (design A, docs/switch.md), over netlink:
//
//   root htb 51: default fff0
//    └ 51:1000 htb at the link rate
//       ├ 51:(q+1) htb rate link/N ceil link, quantum 1514, prio from the
//       │   queue's priority; leaf: tbf (5100+q+1): at 4x the link rate (it
//       │   never throttles; HTB shapes), limit buffer_bytes. Pause = this
//       │   TBF's rate to 1000 B/s; resume = 4x the link again (an HTB class slowed to a stop keeps the debt of
//       │   the packet it let out and stays silent after "resume").
//       └ 51:fff0 the fallback class (rate link/100, ceil link; bfifo,
//           buffer_bytes), never paused:
//           HTB's default class, so a packet the classifier did not steer
//           (sluiced gone, classifier detached, heartbeat stale, control
//           frames sluiced sends) still leaves at the link rate.
//
// Only the handles recorded here are ever changed or deleted. remove()
// deletes the root 51: (its classes and leaves go with it) only if the
// root is still ours; the port then has the kernel's default qdisc. A root
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

constexpr uint32_t kTreeMajor = 0x51;
constexpr uint32_t kRootClassMinor = 0x1000;
constexpr uint32_t kFallbackMinor = SL_SW_FALLBACK_MINOR;
constexpr uint32_t kLeafMajorBase = 0x5100;
constexpr uint32_t kPausedRateBytes = 1000;  // bytes/s of a paused queue's TBF
constexpr uint64_t kLeafRateFactor = 4;      // an unpaused TBF leaf: 4x the link

struct TreeSpec {
  std::string ifname;
  int ifindex = 0;
  uint64_t rate_bps = 0;
  uint32_t buffer_bytes = 131072;
  std::vector<QueueConfig> queues;
  uint32_t burst_bytes = 0;  // 0: 100 us at the rate, >= two MTU frames
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
  // Per queue, then the fallback class last. Empty on a netlink failure.
  std::vector<ClassCounters> read() const;
  void remove() noexcept;

  const TreeSpec& spec() const { return spec_; }
  // What was on the port before ("" = nothing but the kernel default).
  const std::string& replaced() const { return replaced_; }
  // The handles this tree created, "51:", "51:1000", "5101:", ...
  std::vector<std::string> handles() const;
  uint32_t burst_bytes() const;

 private:
  void add_class(uint32_t parent, uint32_t handle, uint64_t rate, uint64_t ceil, uint32_t prio);
  int add_tbf(uint32_t q, bool paused, bool create);
  TreeSpec spec_;
  nl_sock* sk_ = nullptr;
  std::string replaced_;
  bool built_ = false;
};

}  // namespace sluice::sw
