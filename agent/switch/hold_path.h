// sluiced's switch mode with [switch] datapath = "hold" (docs/switch.md,
// "Design B in sluiced"): the agent holds the queues.
//
// Per port: the root qdisc is a TBF at the link rate (switch/tree.h with
// root_only), swhold's sw_hold_egress diverts every data frame to the agent
// through a ring buffer (bpf/switch/swhold.bpf.c), and the agent
//   - builds the logic's PacketMeta from what the program parsed (the
//     classifier's 5-tuple, flow hash and TOS), asks logic.on_enqueue(),
//   - (a frame of the network's control plane, not IP (ARP, LLDP) or IPv6
//     neighbour discovery, goes to the port at once, no logic, no queue:
//     it never waits behind a paused data queue; network_control()),
//   - holds the frame in the port's PortModel (strict priority levels, DRR,
//     shaper groups, per-queue pause: the model the logics are tested on),
//   - re-injects frames through AF_PACKET with SO_MARK = the reinject mark
//     (which the program lets pass) while the root qdisc holds fewer than
//     backlog_target() frames, calling logic.on_dequeue() for each, and
//     logic.on_drop() for a frame its queue's limit tail-drops.
// upstreamQ (a logic that reads PacketMeta::upstream_q, LogicInfo::
// upstream_q_tag): a port with read_upstream_q pops the tag of sluice/bfc.h
// at ingress (swhold's sw_hold_uq_ingress; the queue rides in skb->mark to
// the egress divert) into PacketMeta::upstream_q; a port with
// write_upstream_q pushes a tag naming the queue each frame leaves from
// into the frame it re-injects (a frame that already has an 802.1Q tag is
// sent as it is and counted).
// The qdisc's backlog is read from the qdisc by the qdisc_enqueue /
// qdisc_dequeue tracepoints (attached once for all ports), with the
// watchdog of switch/hold_backlog.h for dequeues the tracepoint misses.
// Pause, release, depth and drops act on the agent's queues: no netlink,
// a pause applies before the next frame leaves.
//
// Fail open. Killed (SIGKILL, crash): under tcx the egress program goes
// with the process; under clsact it stays but passes every frame once the
// agent's heartbeat is older than fail_open_ms (the liveness record the
// caller keeps beating, liveness()); the tracepoints go with the process.
// The root TBF at the link rate stays and forwards. Frames held in the
// agent at that moment are lost. Stopped (destructor): egress detached
// first, then every held frame is sent to the port (paused or not, as the
// qdisc's limit lets it drain, at most ~2 s), then the root removed.
//
// Threading: everything runs on sluiced's event loop except the read-only
// accessors (depth, paused, dropped, status), which a status request may
// call from another thread; one recursive mutex covers the queues (a logic
// calls back into depth()/paused() from inside on_enqueue/on_dequeue).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tc.h"
#include "sluice/liveness.h"
#include "switch/ecn.h"
#include "switch/hold_backlog.h"
#include "switch/logic.h"
#include "switch/port_model.h"

struct ring_buffer;
struct bpf_link;
struct sl_sw_hold_event;

namespace sluice {
class EventLoop;
class FdWatch;
}  // namespace sluice

namespace sluice::sw {

class HoldPath {
 public:
  struct PortSpec {
    PortId id = 0;
    int ifindex = 0;
    PortConfig cfg;                  // queues with their limit_bytes (tail drop in the agent)
    uint32_t buffer_bytes = 131072;  // the root TBF's limit
    uint32_t burst_bytes = 0;        // 0: the tree's default
    bool read_upstream_q = false;    // pop upstreamQ tags arriving on this port
    bool write_upstream_q = false;   // tag frames leaving with the queue they left from
    uint32_t ecn_k_pkts = 0;         // CE on ECT frames entering a queue deeper than this (0: off)
  };
  // Loads swhold (fail_open_ns: 0 = never fail open) and attaches the
  // tracepoints. Ports are added with add_port(), then start().
  HoldPath(EventLoop& loop, uint64_t fail_open_ns, AttachMode mode, std::string state_dir,
           uint32_t backlog_us = kDefaultBacklogUs);
  ~HoldPath();
  HoldPath(const HoldPath&) = delete;
  HoldPath& operator=(const HoldPath&) = delete;

  // The liveness record swhold's egress checks: beat it before start().
  sluice_liveness* liveness();
  // Builds the port's root TBF and attaches the egress divert; throws Error
  // with nothing of this port left behind.
  void add_port(const PortSpec& spec);
  // Frames from now on go to `logic` (which outlives this object's use).
  void start(Logic& logic);
  // Sends what the queues may send now (after a logic changed pauses).
  void pump();
  // Called right before each frame is released: the caller hands pending
  // control frames to the logic there, so a PAUSE that arrived meanwhile
  // applies to the very next frame. Must not call pump().
  void set_control_poll(std::function<void()> fn) { poll_control_ = std::move(fn); }

  // Substrate operations on port p's queue q (p = PortSpec::id order).
  QueueDepth depth(PortId p, QueueId q) const;
  bool paused(PortId p, QueueId q) const;
  void set_paused(PortId p, QueueId q, bool paused);
  bool release(PortId p, QueueId q, uint64_t bytes);
  uint64_t dropped(PortId p, QueueId q) const;

  // Frames kept in the root qdisc: backlog_us of full-size frames at the
  // rate, at least one ([switch] hold_backlog_us).
  static constexpr uint32_t kDefaultBacklogUs = 100;
  static uint32_t backlog_target(uint64_t rate_bps, uint32_t backlog_us = kDefaultBacklogUs);
  // A diverted frame of the network's own control plane, sent past the
  // logic and the queues: not IP (ARP, LLDP, unparsed) or IPv6 neighbour
  // discovery (sluice/switch.h SLUICE_ND_TYPE_*).
  static bool network_control(const sl_sw_hold_event& ev);
  // The port's queues and data-path counters, for `sluicectl switch`.
  nlohmann::json port_json(PortId p) const;
  std::string object_name() const;

 private:
  struct Port;
  // Takes frames from the ring (and the wake-ups) until it is empty or
  // kConsumeNs has passed; returns how many it took.
  int consume();
  static int on_frame_cb(void* self, void* data, size_t len);
  static int on_wake_cb(void* self, void* data, size_t len);
  void on_frame(const void* ev);
  void pump(Port& p);
  void pump_ports();
  HoldRecord record(const Port& p) const;
  uint64_t kernel_backlog(const Port& p) const;
  void sync(Port& p);
  void arm_watchdog();
  void flush(Port& p);
  // Sends one frame to the port's qdisc now (counted in agent_sent first,
  // taken back if the send fails); whether it was sent.
  bool send_now(Port& p, const uint8_t* frame, size_t len);
  void push_upstream_q(Port& p, std::vector<uint8_t>& frame, QueueId q);
  static void note_held(Port& p, int64_t delta, uint64_t now);
  Port& port(PortId p) const;

  struct Obj;
  EventLoop& loop_;
  AttachMode mode_;
  std::string state_dir_;
  uint32_t backlog_us_ = kDefaultBacklogUs;
  std::unique_ptr<Obj> obj_;
  std::vector<bpf_link*> tps_;
  ring_buffer* rb_ = nullptr;
  std::unique_ptr<FdWatch> watch_;
  std::vector<std::unique_ptr<Port>> ports_;
  std::unordered_map<int, PortId> by_ifindex_;
  Logic* logic_ = nullptr;
  std::function<void()> poll_control_;
  uint64_t next_id_ = 1;
  bool resumed_ = false;           // a queue was resumed or released since pump() began its round
  bool draining_ = false;          // pump() is consuming the ring (no nested consume)
  uint64_t consume_until_ns_ = 0;  // the running consume() stops after this
  unsigned consumed_ = 0;          // frames it took so far
  mutable std::recursive_mutex mu_;
  struct Timer;
  std::unique_ptr<Timer> timer_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace sluice::sw
