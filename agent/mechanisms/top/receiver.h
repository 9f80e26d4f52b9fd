// The TOP receiver (top-tpds20 §4.4), free of I/O: flows open with SYNC;
// one token per pacing slot goes to the flow the objective ranks first,
// stamped with its priority class and the synced clock; data packets are
// checked for gaps (NACK signal, §4.4 "Packet Loss"); a flow closes (DONE)
// when every packet arrived. Per-flow token rates follow ExpressPass's
// credit-loss feedback. The caller supplies the clock and sends `out`.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "mechanisms/top/objective.h"
#include "mechanisms/top/wire.h"

namespace sluice::top {

// What a slot no flow's token rate allows carries (ReceiverConfig::spare).
enum class Spare { kOff, kProbe, kEvery };
const char* spare_name(Spare s);
std::optional<Spare> parse_spare(const std::string& s);

struct ReceiverConfig {
  uint64_t slot_ns = 12'000;  // token pacing slot: one data packet's time on the access link
  Objective objective = Objective::kFct;
  // §3.2 gives a flow the class floor(K log_p(a x + b)) of its size x.
  // true: x is the packets the flow still misses (its remaining size, as
  // SRPT ranks), so a flow climbs the classes as it completes and, where
  // tokens of several receivers meet, the flow nearest completion wins; a
  // new flow's class is the paper's. false: the total size (until
  // 2026-11-29). docs/top.md "Mean FCT against tokens".
  bool fct_class_remaining = true;
  // A slot in which no flow's ExpressPass rate (§3.1) allows a token:
  //  kOff   stays empty: ExpressPass's rate alone decides, as §3.1 has it
  //         (`sluice-top recv --spare off`, bench variant top-nospare;
  //         top-paper also takes the class from the total size).
  //  kProbe (default) carries one token, for the best-ranked flow that
  //         wants tokens, in its own class (§3.2), if no such spare token of
  //         this receiver is outstanding (until answered or
  //         token_timeout_ns); its answer sets that flow's rate back to the
  //         full token rate (RateControl::restore), the next lossy period
  //         cuts it as §3.1 does. A flow whose rate was cut while higher
  //         classes held a shared token group (§4.2) takes the group back
  //         about an RTT after they leave it instead of after several rate
  //         periods of ramp-up, while a blocked receiver offers the group
  //         one extra token per token timeout, not one per slot. Lab,
  //         2026-11-29: zero data lost, the data queue's peak within top's
  //         range, 1.01-1.21 tokens offered per data packet.
  //  kEvery carries one every such slot (opt-in, top-spare): the model's
  //         largest gain, but every receiver then offers the group a token
  //         every slot; in the lab (HTB, a loaded machine) the data queue
  //         reached the whole buffer and lost data in 2 of 9 web search runs.
  // Not for kFair (the one-class ExpressPass-like baseline), whatever the
  // setting. docs/top.md "Mean FCT against tokens", "The spare probe in the lab".
  Spare spare = Spare::kProbe;
  PriorityParams prio;
  RateParams rate;
  uint64_t rtt_ns = 100'000;  // base RTT: rate-control period, NACK spacing
  // An unanswered token counts as lost after this; 0: 2 x rtt_ns plus two
  // full token queues drained at the token rate (2 x token_queue x slot_ns,
  // the queueing §5.1 bounds T with): a token that waited in the switches'
  // token queues and was answered is late, not lost, and must not cut the
  // rate of a flow that is alone.
  uint64_t token_timeout_ns = 0;
  uint32_t token_queue = 8;  // tokens per switch token queue (ExpressPass's 8)
  // Each token gap is slot_ns * (1 + U(-jitter, jitter)), ExpressPass's
  // pacing jitter (its default 0.1; SlotPacer); 0: a fixed grid (as until
  // 2026-11-29). At most 0.5.
  double jitter = 0.1;
  uint64_t jitter_seed = 0;        // the pacer's generator; 0: a random seed per receiver
  uint64_t tail_timeout_ns = 0;    // no progress this long: NACK the missing tail; 0: 4 x rtt_ns
  uint32_t reorder_threshold = 3;  // a hole this far below the newest ID is a loss
  size_t max_flows = 4096;
  size_t closed_memory = 4096;  // closed flow IDs remembered to re-answer DONE
  std::optional<std::string> validate() const;
};

struct ReceiverStats {
  std::array<uint64_t, kPriorities> tokens_sent{};
  uint64_t data_received = 0;
  uint64_t data_duplicate = 0;
  uint64_t data_unknown_flow = 0;
  uint64_t nacks_sent = 0;
  uint64_t nack_ids = 0;
  uint64_t flows_opened = 0;
  uint64_t flows_closed = 0;
  uint64_t flows_rejected = 0;
  uint64_t slots = 0;        // on_slot calls
  uint64_t slots_idle = 0;   // no flow wanted or was allowed a token
  uint64_t slots_spare = 0;  // no flow's rate allowed one; `spare` gave it to the best flow
  uint64_t bad_packets = 0;  // wrong direction / inconsistent
  // Each data packet's delay since the token it answers left this receiver
  // (the token's path, the sender's answer, the data's path and queues), in
  // bins of kTokenDataBinNs; the last bin holds everything above.
  static constexpr uint64_t kTokenDataBinNs = 25'000;
  std::array<uint64_t, 400> token_data_ns{};
  // The delay below which `q` (0..1) of the data packets arrived, ns (a
  // bin's upper edge); 0 without any.
  uint64_t token_data_quantile(double q) const;
};

struct Completion {
  uint64_t flow = 0;
  uint64_t size_bytes = 0;
  uint64_t start_ns = 0;  // the SYNC's timestamp (sender's synced clock)
  uint64_t done_ns = 0;
  uint64_t deadline_ns = 0;  // absolute, 0 none
  bool deadline_met = true;
  // Where a flow's time went, on this receiver's clock: the SYNC's arrival,
  // the first token sent and the first data packet's arrival (0: none).
  uint64_t sync_ns = 0, first_token_ns = 0, first_data_ns = 0;
};

// A moment of a flow (Completion's or SenderCompletion's *_ns, one clock)
// as microseconds after the flow's start, for the per-flow log lines of
// sluice-top and the model; -1 when it never happened (0).
inline double us_after_start(uint64_t t_ns, uint64_t start_ns) {
  return t_ns ? (static_cast<double>(t_ns) - static_cast<double>(start_ns)) / 1e3 : -1.0;
}

// One flow as sluicectl shows it.
struct ReceiverFlowView {
  uint64_t flow;
  uint32_t received, total;  // total 0: not known yet (non-clairvoyant)
  int priority;
  double rate;
  uint32_t tokens_sent;
  size_t outstanding;
};

// The receiver's slot clock, free of I/O: slots on a fixed grid (absolute
// deadlines, so the average rate does not drift with wake-up latency); a
// late wake-up catches up at most `catch_up` slots back to back (a short
// token burst the switches' 8-token queues absorb), older missed slots are
// given up.
//
// Jitter (ExpressPass's credit pacing; TOP builds on ExpressPass, §3.1: every
// inter-credit gap is the nominal one times 1 + U(-j, j), j = 0.1 in its
// reference implementation): each gap is slot * (1 + U(-jitter, jitter)).
// Without it, receivers whose tokens meet at one switch token queue keep
// fixed phases against the queue's service, so the same receiver's tokens
// find it full slot after slot and its flows' rates fall to the floor (the
// `tokens` baseline's small flows on a quiet machine, docs/top.md). Here the
// send time's offset from the grid is a random walk of those steps held
// within half a slot of the grid (reflected at the bounds): the long-run
// rate stays the grid's exactly, while the phase wanders over a whole slot
// within tens of slots. The generator is seeded, so a run is repeatable.
class SlotPacer {
 public:
  SlotPacer(uint64_t slot_ns, uint32_t catch_up, double jitter = 0, uint64_t seed = 1)
      : slot_(slot_ns ? slot_ns : 1), catch_up_(catch_up), jitter_(jitter), rng_(seed ? seed : 1) {}
  // The first slot is now (a flow arrived at an idle receiver).
  void start(uint64_t now) {
    grid_ = now;
    off_ = 0;
  }
  bool due(uint64_t now) const { return now >= next(); }
  uint64_t next() const {
    return off_ >= 0 ? grid_ + uint64_t(off_) : (grid_ > uint64_t(-off_) ? grid_ - uint64_t(-off_) : 0);
  }
  // One slot was used at `now`; after a late one at most catch_up more are
  // due before the grid passes `now`.
  void fired(uint64_t now) {
    grid_ += slot_;
    uint64_t back = catch_up_ * slot_;
    uint64_t floor = now + slot_ > back ? now + slot_ - back : 0;
    if (grid_ < floor) {
      missed_ += (floor - grid_ + slot_ - 1) / slot_;
      grid_ += (floor - grid_ + slot_ - 1) / slot_ * slot_;
    }
    if (jitter_ > 0) step();
  }
  uint64_t missed() const { return missed_; }
  int64_t offset() const { return off_; }

 private:
  void step() {
    // splitmix64: small, seedable, the same sequence on every platform.
    uint64_t z = (rng_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    double u = double(z >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
    int64_t half = int64_t(slot_ / 2);
    int64_t o = off_ + int64_t((2 * u - 1) * jitter_ * double(slot_));
    if (o > half) o = 2 * half - o;
    if (o < -half) o = -2 * half - o;
    off_ = o;
  }
  uint64_t slot_;
  uint64_t catch_up_;
  double jitter_;
  uint64_t rng_;
  uint64_t grid_ = 0;
  int64_t off_ = 0;
  uint64_t missed_ = 0;
};

class Receiver {
 public:
  explicit Receiver(const ReceiverConfig& cfg);
  ~Receiver();
  Receiver(const Receiver&) = delete;
  Receiver& operator=(const Receiver&) = delete;

  // SYNC, DATA, FIN; anything else is counted as bad and ignored.
  void on_packet(const Packet& p, uint64_t now, std::vector<Packet>& out);
  // One pacing slot: at most one token, plus rate updates and tail NACKs.
  void on_slot(uint64_t now, std::vector<Packet>& out);

  bool idle() const { return flows_.empty(); }
  const ReceiverStats& stats() const { return stats_; }
  std::vector<Completion> take_completions();
  std::vector<ReceiverFlowView> flows(uint64_t now) const;
  const ReceiverConfig& config() const { return cfg_; }

 private:
  struct Flow;
  int priority_of(const Flow& f, uint64_t now) const;
  void on_data(Flow& f, const Packet& p, uint64_t now, std::vector<Packet>& out);
  void nack_range(Flow& f, uint32_t from, uint32_t to, uint64_t now, std::vector<Packet>& out);
  void maybe_close(Flow& f, uint64_t now, std::vector<Packet>& out);
  void period_update(Flow& f, uint64_t now);
  void remember_closed(uint64_t id);

  ReceiverConfig cfg_;
  ReceiverStats stats_;
  std::unordered_map<uint64_t, std::unique_ptr<Flow>> flows_;
  std::vector<Flow*> order_;  // stable iteration order (determinism)
  std::unordered_set<uint64_t> closed_;
  std::deque<uint64_t> closed_fifo_;
  std::vector<Completion> done_;
  uint64_t serve_counter_ = 0;
  bool probe_out_ = false;  // Spare::kProbe: a probe outstanding
  uint64_t probe_flow_ = 0;
  uint32_t probe_seq_ = 0;
  uint64_t probe_at_ = 0;
};

}  // namespace sluice::top
