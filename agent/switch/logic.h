// The switch-logic interface of the sluice switch substrate.
//
// CONTRACT
//
// Who calls what. A switch logic (fifo, and the Floodgate / BFC / TOP switch
// halves) implements `Logic`. The substrate (`Substrate` below: the
// deterministic PortModel/SwitchModel in unit tests, the real data path in
// sluiced, an ns-3 harness later) owns the ports, the queues, the scheduler,
// the clock and the control-frame I/O, and calls the logic:
//   on_start(sw)              once, before any other call; `sw` outlives the logic
//   on_enqueue(pkt, in_port)  for every data packet routed to a switch port,
//                             before it is queued; the Verdict says into which
//                             queue of pkt.out_port it goes, or drops it
//   on_dequeue(pkt, port, q)  when the packet starts leaving port's queue q
//                             (the scheduler picked it; it is no longer in the
//                             depth), exactly once per enqueued packet that
//                             was not dropped later by the substrate
//   on_drop(pkt, port, q)     instead of on_dequeue, when the substrate drops
//                             a packet after on_enqueue put it in port's
//                             queue q (tail drop at the queue limit), so a
//                             logic that counts packets in the switch can
//                             undo what on_enqueue counted
//   on_control(frame, port)   for every control frame that arrived on `port`
//                             and passed validation and the port-role check
//                             (include/sluice/wire.h); rejected frames never
//                             reach the logic, they are only counted
//   on_timer(now)             at or after the time the logic last asked for
//                             with sw.arm_timer(); one pending timer per logic
// The logic calls back into `Substrate` (only from inside these callbacks):
// depth(), set_paused(), paused(), send_control(), arm_timer(), now_ns(),
// port(). It never does I/O itself: it is a pure state machine over these
// calls, which is what lets the same object run in tests, in sluiced and in a
// simulator.
//
// Threading. Every call happens on one thread (sluiced's event loop; the
// test's thread in the model). A logic needs no locks and must not block or
// take long: the data path waits for on_enqueue. Calls are never re-entrant
// (the substrate never calls the logic from inside set_paused() or
// send_control()). set_paused() takes effect at once: a pause set in
// on_enqueue applies before that very packet can be dequeued.
//
// Time. now_ns() is the substrate's monotonic clock in nanoseconds
// (CLOCK_MONOTONIC in sluiced, simulated time in the model). Timers are
// best effort in the real data path (event-loop latency, ~100 µs), exact in
// the model.
//
// Units: BYTES first, packets second. depth() gives both; thresholds and
// windows should be in bytes. Why: the kernel hands a forwarding box GSO/GRO
// super-packets of up to 64 KB when offloads are on (the 1g-gso lab
// profile); counting skbs there makes "one packet" mean anything from 64 B
// to 64 KB, and a per-packet window or credit loses its meaning. Bytes mean
// the same with and without offloads. Wire bytes = the frame from the
// Ethernet header on (skb->len at tc; no preamble/FCS). `segs` is the
// number of MTU-sized wire segments (gso_segs, 1 for a plain frame): a
// logic written in packets (Floodgate's window of packets, BFC's counters)
// may count segs, which equals frames on switch ports run with GRO off (the
// 100m-mtu profile and 1G with GSO off). Credits and PSNs on the wire carry
// bytes (and packets, see wire.h).
//
// Queues. Each switch port has num_queues queues (<= SLUICE_SW_MAX_QUEUES),
// numbered from 0, configured with a priority level (0 highest; strict
// priority between levels) and a DRR quantum in bytes within a level, and
// optionally a shaper group (a set of queues rate-limited as one, TOP's
// token group). A paused queue keeps its packets and is skipped by the
// scheduler; a packet that already started leaving is not recalled. To
// HOLD a packet (a Floodgate VOQ waiting for credits, a BFC queue paused by
// its downstream) the logic enqueues it into a queue it keeps paused and
// resumes the queue when the packet may go: holding is pausing, there is no
// third verdict.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "switch/control.h"

namespace sluice::sw {

using PortId = uint16_t;
using QueueId = uint16_t;
constexpr QueueId kNoQueue = 0xffff;

// What the substrate knows about a data packet. Addresses are IPv6 or
// IPv4-mapped (as in control frames), network order; ports host order.
struct PacketMeta {
  uint64_t id = 0;          // substrate-unique, for matching enqueue/dequeue
  uint32_t wire_bytes = 0;  // Ethernet header onward
  uint16_t segs = 1;        // wire segments (gso_segs; 1 without GSO)
  PortId in_port = 0;
  PortId out_port = 0;  // chosen by forwarding (bridge/FIB) before the logic
  Addr src{};
  Addr dst{};
  uint16_t sport = 0, dport = 0;
  uint8_t proto = 0;               // IP protocol, 0 if not IP
  uint8_t tos = 0;                 // IPv4 TOS / IPv6 traffic class
  uint16_t upstream_q = kNoQueue;  // BFC upstreamQ the previous hop tagged, if any
  uint32_t flow_hash = 0;          // stable hash of the 5-tuple
  uint64_t enqueue_ns = 0;         // set by the substrate when queued
};

struct Verdict {
  enum Kind : uint8_t { kEnqueue, kDrop } kind = kEnqueue;
  QueueId queue = 0;
  static Verdict enqueue(QueueId q) { return {kEnqueue, q}; }
  static Verdict drop() { return {kDrop, 0}; }
};

struct QueueDepth {
  uint64_t bytes = 0;
  uint32_t pkts = 0;  // skbs
  uint32_t segs = 0;  // wire segments
};

struct QueueConfig {
  uint8_t priority = 0;      // 0 = highest; strict priority between levels
  uint32_t quantum = 1514;   // DRR quantum, bytes
  uint64_t limit_bytes = 0;  // tail-drop limit, 0 = unlimited
  int shaper_group = -1;     // index into PortConfig::groups, -1 = none
};

struct ShaperGroup {
  uint64_t rate_bps = 0;  // the queues of the group share this rate
  uint32_t burst_bytes = 3028;
};

enum class PortRole : uint8_t {
  kNone = SL_PORT_NONE,
  kSwitchFacing = SL_PORT_SWITCH_FACING,
  kHostFacing = SL_PORT_HOST_FACING,
  kHostUplink = SL_PORT_HOST_UPLINK,
};

struct PortConfig {
  std::string name;  // interface name in sluiced, free text in the model
  PortRole role = PortRole::kSwitchFacing;
  uint64_t rate_bps = 100'000'000;
  // One default queue. Built by count, not from an initializer list: GCC 12
  // at -O3 reports the list's backing array as maybe uninitialised
  // (-Wmaybe-uninitialized) in every copy of a default PortConfig.
  std::vector<QueueConfig> queues = std::vector<QueueConfig>(1);
  std::vector<ShaperGroup> groups;
};

// The substrate as a logic sees it.
class Substrate {
 public:
  virtual ~Substrate() = default;
  virtual uint64_t now_ns() const = 0;
  virtual size_t num_ports() const = 0;
  virtual const PortConfig& port(PortId p) const = 0;
  virtual QueueDepth depth(PortId p, QueueId q) const = 0;
  virtual bool paused(PortId p, QueueId q) const = 0;
  // Pause (true) or resume (false) port p's queue q. Idempotent.
  virtual void set_paused(PortId p, QueueId q, bool paused) = 0;
  // Sends `frame` out of port p (validated first: an invalid frame is not
  // sent and counted as rejected out).
  virtual void send_control(PortId p, const ControlFrame& frame) = 0;
  // Asks for on_timer() at or after at_ns (replaces an earlier request).
  virtual void arm_timer(uint64_t at_ns) = 0;
  // Lets about `bytes` out of paused queue q of port p, which stays paused
  // afterwards (a credit-based release). At least one full frame is let out
  // (a held frame larger than the allowance would otherwise be dropped).
  // Returns false where the substrate cannot do it (then nothing changed).
  virtual bool release(PortId /*p*/, QueueId /*q*/, uint64_t /*bytes*/) { return false; }
  // Packets port p's queue q has dropped (tail drop at its limit) since the
  // port was set up, where the substrate counts them (0 where it does not).
  virtual uint64_t dropped(PortId /*p*/, QueueId /*q*/) const { return 0; }
};

class Logic {
 public:
  virtual ~Logic() = default;
  virtual std::string_view name() const = 0;
  virtual void on_start(Substrate& sw) { sw_ = &sw; }
  virtual Verdict on_enqueue(const PacketMeta& pkt, PortId in_port) = 0;
  virtual void on_dequeue(const PacketMeta& /*pkt*/, PortId /*out_port*/, QueueId /*q*/) {}
  virtual void on_drop(const PacketMeta& /*pkt*/, PortId /*out_port*/, QueueId /*q*/) {}
  virtual void on_control(const ControlFrame& /*frame*/, PortId /*port*/) {}
  virtual void on_timer(uint64_t /*now_ns*/) {}

 protected:
  Substrate* sw_ = nullptr;
};

// One queue, never pauses: the substrate's own baseline (a plain FIFO port).
class FifoLogic final : public Logic {
 public:
  std::string_view name() const override { return "fifo"; }
  Verdict on_enqueue(const PacketMeta&, PortId) override { return Verdict::enqueue(0); }
};

}  // namespace sluice::sw
