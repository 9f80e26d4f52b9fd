// PAC agent logic without the kernel: the MLFQ of held ACKs (§III-D), the
// release rule of Algorithm 1, threshold adaptation (eq. 2), deviation
// correction (eq. 6), per-flow phase inference (§III-C) and stale ACK
// handling (§III-D). PacModule wires it to the BPF maps and the re-injection
// socket through the Datapath interface; unit tests drive it directly.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "sluice/pac.h"

namespace sluice::pac {

struct FlowKeyHash {
  size_t operator()(const sluice_pac_flow_key& k) const noexcept;
};
struct FlowKeyEq {
  bool operator()(const sluice_pac_flow_key& a, const sluice_pac_flow_key& b) const noexcept;
};
std::string format_key(const sluice_pac_flow_key& k);

struct Params {
  uint64_t buffer_bytes = 131072;                // initial and maximum threshold
  std::vector<uint64_t> level_bytes{20480};      // MLFQ level boundaries (bytes received)
  double lambda = 0.8;                           // eq. (6) and phase inference
  double ewma_gain = 0.125;                      // BW_S and in_flight_S filters
  size_t max_held = 8192;                        // hold queue size; full -> release head
  uint64_t max_hold_ns = 50'000'000;             // never hold an ACK longer
  uint64_t max_hold_request_ns = 5'000'000'000;  // ...nor a held request (hold_requests)
  uint64_t min_threshold = 2 * SLUICE_PAC_DEFAULT_MSS;
  bool ecn = true;  // adapt the threshold to α (eq. 2)
  // Held requests yield to held ACKs: responses in progress finish before
  // new ones start. Set with rwnd_cap_bytes, where an ACK of a capped flow
  // only refills its window.
  bool requests_yield = false;
};

// PAC §III-B eq. (2): threshold ← threshold·(1−α/2) if α > 0, else
// min(2·threshold, buffer_size). Never below `floor`.
uint64_t adapt_threshold(uint64_t threshold, double alpha, uint64_t buffer_size, uint64_t floor);

// PAC §III-C eq. (6): deviation correction once per control interval.
class DeviationCorrector {
 public:
  DeviationCorrector(double lambda, double gain) : lambda_(lambda), gain_(gain) {}
  // bw: BW_T of this interval (bytes/s); in_flight: current estimate;
  // alpha: ECN fraction; holding: ACKs were held during the interval.
  // Returns the corrected in_flight when eq. (6) lowers it, nullopt
  // otherwise. Then updates BW_S and in_flight_S.
  // A throughput drop is only blamed on the estimate while ACKs are held
  // on it: otherwise PAC did not slow anything (the sender paused, GRO
  // lumped the arrivals of a short interval), and lowering the estimate
  // would only let the next ACKs overfill the buffer.
  std::optional<int64_t> on_interval(double bw, int64_t in_flight, double alpha, bool holding = true);
  double bw_s() const { return bw_s_; }
  double in_flight_s() const { return inflight_s_; }

 private:
  double lambda_, gain_;
  double bw_s_ = 0, inflight_s_ = 0;
  bool primed_ = false;
};

// PAC §III-C: slow start vs congestion avoidance per flow, from the
// flow's incoming throughput over two consecutive intervals with λ.
// The paper compares BW_N with BW_{N-1}. Under PAC a flow's throughput is set
// by the ACKs PAC releases, not by its window, so a flat BW says nothing
// about the sender's phase; what does is whether the data arriving keeps up
// with what the released ACKs should trigger if the sender were in slow
// start (eq. 3). We therefore compare BW_N with the trigger rate of the
// ACKs released in the interval before (the data they trigger arrives one
// RTT = one control interval later): BW_N <= λ·TRIG_{N-1} for two
// consecutive intervals means the window grows slower than slow start:
// congestion avoidance. docs/pac.md discusses the choice.
class PhaseTracker {
 public:
  // received/expected: bytes that arrived in this interval / bytes the
  // ACKs released in the previous interval were expected to trigger.
  // Returns true when this sample moved the flow into congestion avoidance.
  bool on_interval(double received, double expected, double lambda);
  bool ca() const { return ca_; }
  void reset_slow_start() {
    ca_ = false;
    drops_ = 0;
    prev_expected_ = 0;
  }
  void set_ca() { ca_ = true; }

 private:
  double prev_expected_ = 0;
  int drops_ = 0;
  bool ca_ = false;
};

struct HeldAck {
  uint64_t enq_ns = 0;
  uint32_t ack = 0;
  uint16_t window = 0;
  uint8_t flags = 0;  // SLUICE_PAC_EVF_*
  uint16_t frame_len = 0;
  uint32_t req_bytes = 0;  // a held request: the response it sets going
  std::array<uint8_t, SLUICE_PAC_FRAME_MAX> frame{};
};

// What the engine needs from the kernel side.
class Datapath {
 public:
  virtual ~Datapath() = default;
  virtual int64_t in_flight() = 0;
  virtual uint64_t threshold() = 0;
  // Re-injects one ACK; returns false if it could not be sent.
  virtual bool send(const sluice_pac_flow_key& key, const HeldAck& a) = 0;
  // Tells BPF the agent dropped `total` held ACKs of this flow so far and
  // its inferred phase/window (sl_pac_ctl_v2).
  virtual void write_ctl(const sluice_pac_flow_key& key, const sluice_pac_flow_ctl& ctl) = 0;
  // Held count and the head ACK's trigger, for the ingress wake-up; the
  // trigger of the first held ACK that is not a request (0: none), which the
  // kernel keeps free before it admits another flow's ACK.
  virtual void set_wake(uint64_t held, uint64_t room, uint64_t ack_room) = 0;
};

enum class ReleaseWhy { Threshold, QueueFull, MaxHold, Flush };

struct EngineStats {
  uint64_t held_events = 0;
  uint64_t released = 0;             // re-injected because they fit (Algorithm 1)
  uint64_t released_queue_full = 0;  // released early: hold queue full
  uint64_t released_max_hold = 0;    // released early: held max_hold
  uint64_t released_flush = 0;       // released on shutdown / after a stall
  uint64_t send_failures = 0;        // re-injection failed (counted, ACK dropped)
  uint64_t dropped_stale = 0;        // §III-D out-of-order ACKs dropped
  uint64_t dropped_superseded = 0;   // overtaken by a non-held segment's ACK
  uint64_t dropped_teardown = 0;     // flow reset while ACKs were held
  uint64_t stale_events = 0;         // §III-D stale arrivals (retransmissions seen)
  uint64_t level_moves = 0;
  // Hold time histogram: upper bounds in µs, last bucket = +Inf.
  static constexpr std::array<uint64_t, 12> kHoldBucketsUs{10,   50,   100,   250,   500,   1000,
                                                           2500, 5000, 10000, 25000, 50000, 100000};
  std::array<uint64_t, 13> hold_hist{};
  uint64_t hold_sum_us = 0;
  uint64_t hold_count = 0;
};

class Engine {
 public:
  Engine(Params p, Datapath& dp) : p_(std::move(p)), dp_(dp) {}

  // Ring buffer events.
  void on_event(const sluice_pac_event& ev, uint64_t now_ns);
  // Algorithm 1 lines 9-14: release head ACKs while they fit; then the
  // early-release rules (queue full, max hold). Returns ACKs sent.
  size_t release(uint64_t now_ns);
  // Releases everything (shutdown, or the datapath failed open meanwhile).
  size_t flush(uint64_t now_ns);

  // Per-flow phase inference results from a map scan (bytes received by the
  // flow during the last interval, its CE flag). Writes ctl when it changes.
  // received/triggered: bytes that arrived / trigger bytes accounted for the
  // flow during the interval (eq. 3 summed).
  void on_flow_sample(const sluice_pac_flow_key& key, uint64_t received, uint64_t triggered, bool ce_seen);
  // Flow gone from the BPF table (expired/closed): drop agent state.
  void forget(const sluice_pac_flow_key& key);

  size_t held() const { return held_; }
  size_t held_at_level(size_t level) const;
  size_t levels() const { return p_.level_bytes.size() + 1; }
  size_t flows() const { return flows_.size(); }
  size_t level_of_bytes(uint64_t bytes) const;
  const EngineStats& stats() const { return st_; }
  const Params& params() const { return p_; }
  // Trigger of the ACK Algorithm 1 would release next (0 if none).
  uint64_t head_trigger() const;
  // Order in which ACK numbers would leave if everything fit (for tests).
  std::vector<std::pair<sluice_pac_flow_key, uint32_t>> order() const;
  std::vector<uint32_t> queued_acks(const sluice_pac_flow_key& key) const;
  std::vector<sluice_pac_flow_key> holding_flows() const;
  bool flow_ca(const sluice_pac_flow_key& key) const;
  // The bookkeeping release() relies on, recomputed from the queues (for
  // tests): every listed flow at its recorded place, the lists of flows
  // whose head is an ACK (requests_yield), and the max_hold bound at or
  // below every head's deadline. Empty when consistent, else what is wrong.
  std::string check() const;

 private:
  struct Flow {
    sluice_pac_flow_key key{};
    std::deque<HeldAck> q;
    uint32_t last_ack = 0;  // ACK_prev as the agent released it
    bool ack_valid = false;
    uint32_t mss = SLUICE_PAC_DEFAULT_MSS;
    uint64_t bytes_rcvd = 0;
    uint32_t retrans_seen = 0;
    bool ce_ca = false;  // CE seen (from BPF)
    PhaseTracker phase;
    uint32_t window = 0;
    uint64_t dropped = 0;  // total dropped, mirrored into sl_pac_ctl_v2
    size_t level = 0;
    bool boosted = false;  // §III-D: stale flow moved to the top level
    bool queued = false;   // present in a level's RR list, at rr_pos
    std::list<Flow*>::iterator rr_pos{};
    uint64_t rr_seq = 0;      // when it was appended to that list (its RR order)
    bool ack_listed = false;  // in ack_rr_[ack_level] under rr_seq
    size_t ack_level = 0;
  };
  using FlowMap = std::unordered_map<sluice_pac_flow_key, Flow, FlowKeyHash, FlowKeyEq>;

  Flow& flow(const sluice_pac_flow_key& k);
  uint32_t trigger(const Flow& f, const HeldAck& a) const;
  void enqueue_flow(Flow& f);
  void unlink_flow(Flow& f);
  void set_level(Flow& f, size_t level);
  // Drops queued ACKs of f strictly before `ack`; returns how many.
  size_t drop_before(Flow& f, uint32_t ack);
  void drop_all(Flow& f);
  void push_ctl(Flow& f);
  // Sends the head ACK of f; returns false on failure (ACK dropped).
  void send_head(Flow& f, uint64_t now_ns, ReleaseWhy why);
  Flow* head_flow();
  Flow* first_ack_flow() const;
  static constexpr uint64_t kNoAck = ~uint64_t(0);
  uint64_t ack_trigger() const;
  void update_wake();
  // When the head ACK of f passes max_hold (saturating).
  uint64_t hold_deadline(const HeldAck& a) const;
  // After f's head or its place in the lists changed: lowers the max_hold
  // bound and keeps ack_rr_ in step.
  void head_changed(Flow& f);
  void make_levels();

  Params p_;
  Datapath& dp_;
  // Node-based: a Flow's address stays valid until it is erased (forget(),
  // only for a flow that holds nothing and so is in no list).
  FlowMap flows_;
  std::vector<std::list<Flow*>> rr_;  // per level: flows with ACKs, RR order
  // Per level, with requests_yield: the listed flows whose head is an ACK,
  // by rr_seq, i.e. in the level's RR order (first_ack_flow() without a walk
  // past the flows that hold only requests).
  std::vector<std::map<uint64_t, Flow*>> ack_rr_;
  uint64_t rr_seq_next_ = 0;
  std::vector<size_t> held_per_level_;
  size_t held_ = 0;
  // No head ACK passes max_hold before this: a lower bound, lowered whenever
  // a flow gets a new head, recomputed by the scan it lets through. A
  // release() before it skips the scan of every holding flow.
  uint64_t next_hold_deadline_ = ~uint64_t(0);
  EngineStats st_;
};

}  // namespace sluice::pac
