// BFC — Backpressure Flow Control (Goyal et al., NSDI '22), the switch half,
// as a switch logic of the sluice switch substrate (agent/switch/logic.h).
// Pure state machine: no I/O, no wall clock. It runs unchanged against the
// deterministic port model (tests, bench model runs) and in sluiced.
//
// What it does, per egress port (§3.3):
//  * the port's queues (32 by default; any 1..SLUICE_SW_MAX_QUEUES) are
//    served by the substrate's DRR among the queues that are not paused;
//  * a flow table, an array indexed by (egress port, hash of the 5-tuple),
//    `flow_table_factor` (100) entries per queue, each {queue, size,
//    timestamp} (§3.3.1). A new or idle flow (size 0 and timestamp older than
//    the sticky threshold, 2·HRTT) takes an empty queue if one exists, else
//    the least-loaded one; a flow with packets in the switch keeps its queue;
//  * pause counters per (ingress port, upstreamQ) (§3.3.2): a packet that
//    arrives when its queue holds more than Th bytes increments the counter
//    and is remembered; its departure decrements it. 0→1 sends PAUSE for the
//    upstream queue, 1→0 sends RESUME. A periodic bitmap of the queues that
//    should be paused repairs lost frames;
//  * Th = HRTT·μ/N_active (§3.3.2), N_active = this port's queues that hold
//    data and are not paused, recomputed at every arrival (so whenever
//    N_active changes);
//  * as the upstream hop: PAUSE/RESUME/bitmaps arriving on a port pause and
//    resume that port's own egress queues (the substrate's scheduler skips a
//    paused queue), with RFC 1982 sequence checks (include/sluice/wire.h).
//
// Units (logic.h): queue lengths and Th in BYTES (wire bytes, Ethernet
// header on; depth().bytes). The flow table's `size` and the pause counters
// count PACKETS = skbs, one per on_enqueue: both are only compared with zero,
// so a GSO skb counting once keeps them exact.
//
// Additions beyond the paper, each because software differs from the ASIC:
//  * A paused egress queue whose pause is not refreshed (by a bitmap or a
//    new PAUSE) within `pause_expiry_ns` is resumed: a dead or restarted
//    downstream can never hold traffic forever (fail open). A downstream
//    with a non-zero counter sends a bitmap every `bitmap_interval_ns`, so
//    a live pause is refreshed well within the expiry.
//  * on_drop (a packet the substrate dropped after on_enqueue) undoes that
//    packet's flow-table size and pause count, so a drop cannot leak a pause.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "switch/logic.h"

namespace sluice::bfc {

using sw::PortId;
using sw::QueueId;

// Queue assignment (§3.3.1 and the ablations of §6.1 / App. E.4).
enum class Assign : uint8_t {
  kDynamic,     // bfc: empty queue, else least-loaded
  kStochastic,  // bfc-stochastic: hash of the flow modulo the queues (SFQ-like)
  kSingle,      // bfc-single: every flow in queue 0 (PFC-like)
};

struct Config {
  std::string variant = "bfc";  // bfc | bfc-stochastic | bfc-single | bfc-nosticky
  Assign assign = Assign::kDynamic;
  bool sticky = true;  // bfc-nosticky: reassign as soon as a flow's size is 0
  // Flow-table entries per queue of a port (§3.3.1: 100× the queues).
  uint32_t flow_table_factor = 100;
  // One-hop RTT, the max over the ingresses (§3.3.2). Th and the sticky
  // threshold derive from it.
  uint64_t hrtt_ns = 2'000;
  // Sticky threshold; 0 = 2·HRTT (§3.3.2).
  uint64_t sticky_ns = 0;
  // Th bounds. th_fixed_bytes > 0 replaces HRTT·μ/N_active (the Th sweep of
  // Fig. 7b); th_min_bytes floors the formula (0 = the paper's formula).
  uint64_t th_fixed_bytes = 0;
  uint64_t th_min_bytes = 0;
  // Period of the paused-queue bitmap (§3.3.2, "periodically").
  uint64_t bitmap_interval_ns = 1'000'000;
  // Fail open: resume an egress queue whose pause was not refreshed for this
  // long; 0 = never. Default 5 bitmap intervals.
  uint64_t pause_expiry_ns = 5'000'000;
  // Design A (sluiced's real data path, docs/switch.md): packets do not
  // pass through the agent, so on_enqueue/on_dequeue are never called. With
  // sample_ns > 0 the logic instead samples every queue's depth each
  // sample_ns and derives the pause state from it (see "Sampled mode" in
  // bfc_logic.cc); 0 = the per-packet semantics of §3.3.2.
  uint64_t sample_ns = 0;
  // Per-packet mode: record the queue-vs-Th trace (trace()) every trace_ns
  // from the substrate's depths; 0 = no trace. The sampled mode traces at
  // every sample.
  uint64_t trace_ns = 0;

  // The named variant with the defaults above; throws std::invalid_argument
  // on an unknown name.
  static Config variant_named(std::string_view name);
  // "" if usable, else what is wrong.
  std::string check() const;
  uint64_t sticky_threshold_ns() const { return sticky_ns ? sticky_ns : 2 * hrtt_ns; }
};

struct Counters {
  uint64_t assignments = 0;         // a flow-table entry took a (new) queue
  uint64_t collisions = 0;          // a flow became active in a queue that had another active flow
  uint64_t table_index_shared = 0;  // a packet of a different flow hash reused a live entry
  uint64_t above_th = 0;            // packets that arrived above Th (pause counter increments)
  uint64_t pauses_sent = 0;
  uint64_t resumes_sent = 0;
  uint64_t bitmaps_sent = 0;
  uint64_t pauses_rx = 0;
  uint64_t resumes_rx = 0;
  uint64_t bitmaps_rx = 0;
  uint64_t stale_rx = 0;        // records older than the last one applied for that queue
  uint64_t bad_queue_rx = 0;    // records naming a queue this port does not have
  uint64_t bitmap_repairs = 0;  // a bitmap changed a queue's pause state
  uint64_t expired = 0;         // pauses dropped by pause_expiry_ns (fail open)
  uint64_t drops_undone = 0;    // on_drop calls
  uint64_t samples = 0;         // sampled mode: depth samples taken (all ports)
};

class BfcLogic final : public sw::Logic {
 public:
  explicit BfcLogic(Config cfg);

  std::string_view name() const override { return cfg_.variant; }
  void on_start(sw::Substrate& sw) override;
  sw::Verdict on_enqueue(const sw::PacketMeta& pkt, PortId in_port) override;
  void on_dequeue(const sw::PacketMeta& pkt, PortId out_port, QueueId q) override;
  void on_drop(const sw::PacketMeta& pkt, PortId out_port, QueueId q) override;
  void on_control(const sw::ControlFrame& frame, PortId port) override;
  void on_timer(uint64_t now_ns) override;

  const Config& config() const { return cfg_; }
  const Counters& counters() const { return ctr_; }

  // Th of egress port p now, bytes (§3.3.2).
  uint64_t threshold_bytes(PortId p) const;
  // Queues of port p holding data and not paused (N_active).
  uint32_t active_queues(PortId p) const;
  // Pause counter for (ingress port, upstreamQ).
  uint32_t pause_counter(PortId in_port, uint16_t upstream_q) const;
  // Whether this switch currently asks `in_port`'s upstream to pause upstream_q.
  bool upstream_paused(PortId in_port, uint16_t upstream_q) const { return pause_counter(in_port, upstream_q) > 0; }
  // The non-zero pause counters of ingress port p: (upstreamQ, count).
  std::vector<std::pair<uint16_t, uint32_t>> pause_counters(PortId p) const;
  // Flow-table entries of port p that have packets in the switch.
  uint32_t live_entries(PortId p) const;
  uint32_t table_entries(PortId p) const;
  // Flows (live flow-table entries) assigned to port p's queue q.
  uint32_t flows_in_queue(PortId p, QueueId q) const;
  // The flow-table slot (p, flow_hash) maps to, 0 .. table_entries(p)-1.
  uint32_t table_index(PortId p, uint32_t flow_hash) const;
  // The queue the flow-table entry of (p, flow_hash) holds (kNoQueue if never used).
  QueueId entry_queue(PortId p, uint32_t flow_hash) const;

  // The queue-length-vs-Th trace (§6.1 Fig. 7). Every sample (sampled
  // mode) or every trace_ns (per-packet mode) records each queue that holds
  // data, or held data at the previous record, with the port's Th then; the
  // last kTraceCap records are kept.
  struct TracePoint {
    uint64_t t_ns;
    PortId port;
    QueueId queue;
    uint64_t bytes;
    uint64_t th_bytes;
  };
  static constexpr size_t kTraceCap = 8192;
  // Oldest first.
  std::vector<TracePoint> trace() const;

 private:
  struct Entry {
    QueueId queue = sw::kNoQueue;  // kNoQueue: never assigned
    uint32_t size = 0;             // packets of this entry in the switch
    uint64_t ts = 0;               // last enqueue or dequeue
    uint32_t last_hash = 0;        // for counting shared indexes only
  };
  struct QueueState {
    uint32_t pkts = 0;    // as seen through on_enqueue/on_dequeue/on_drop
    uint32_t flows = 0;   // live entries assigned here
    bool paused = false;  // by the downstream (mirrors sw.set_paused)
    bool have_seq = false;
    uint32_t last_seq = 0;      // last pause/resume/bitmap seq applied
    uint64_t refreshed_ns = 0;  // last PAUSE or bitmap bit that kept it paused
  };
  struct Port {
    uint32_t nq = 0;
    uint64_t rate_bps = 0;
    std::vector<QueueState> q;
    uint32_t n_active = 0;     // queues with pkts > 0 and not paused
    uint32_t cursor = 0;       // rotating start for the empty-queue search
    std::vector<Entry> table;  // flow_table_factor × nq entries
    // As a downstream: pause counters indexed by the upstream's queue.
    std::vector<uint32_t> pause_counter;  // SLUICE_SW_MAX_QUEUES entries
    uint32_t nonzero = 0;                 // counters > 0
    uint64_t last_nonzero_ns = 0;
    bool ever_paused = false;  // a counter was ever non-zero: bitmaps go out
    uint32_t seq = 0;          // sequence of the state changes this port announces
  };
  // What a departing packet must undo (the paper's packet metadata: we
  // cannot write into the substrate's PacketMeta, so keep it by id).
  struct Mark {
    PortId in_port;
    uint16_t upstream_q;
  };

  Entry& entry(PortId out, uint32_t flow_hash);
  QueueId choose_queue(PortId out, uint32_t flow_hash);
  void set_active(Port& P, QueueState& Q, bool was_active);
  void release(const sw::PacketMeta& pkt, PortId out, QueueId q);
  void send_queue_frame(PortId port, sw::CtrlType type, uint16_t upstream_q);
  void send_bitmap(PortId port);
  void apply_pause(PortId port, QueueId q, bool paused, uint32_t seq, bool from_bitmap);
  static bool seq_after(uint32_t a, uint32_t b) { return int32_t(a - b) > 0; }
  void sample(uint64_t now);
  void record_trace(uint64_t now, const std::vector<std::vector<uint64_t>>& bytes, const std::vector<uint64_t>& th);
  void trace_depths(uint64_t now);
  void bitmaps_and_expiry(uint64_t now);

  Config cfg_;
  std::vector<Port> ports_;
  std::unordered_map<uint64_t, Mark> marks_;
  Counters ctr_;
  uint64_t next_bitmap_ns_ = 0;    // bitmaps and expiry keep their own period (samples/traces are more often)
  std::vector<TracePoint> trace_;  // ring of kTraceCap
  size_t trace_next_ = 0;
  std::vector<std::vector<uint64_t>> last_bytes_;  // previous sample's depth per port and queue
};

}  // namespace sluice::bfc
