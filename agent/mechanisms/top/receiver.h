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

struct ReceiverConfig {
  uint64_t slot_ns = 12'000;  // token pacing slot: one data packet's time on the access link
  Objective objective = Objective::kFct;
  PriorityParams prio;
  RateParams rate;
  uint64_t rtt_ns = 100'000;       // base RTT: rate-control period, NACK spacing
  uint64_t token_timeout_ns = 0;   // unanswered token counts as lost; 0: 2 x rtt_ns
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
  uint64_t slots_idle = 0;   // no flow wanted or was allowed a token
  uint64_t bad_packets = 0;  // wrong direction / inconsistent
};

struct Completion {
  uint64_t flow = 0;
  uint64_t size_bytes = 0;
  uint64_t start_ns = 0;  // the SYNC's timestamp (sender's synced clock)
  uint64_t done_ns = 0;
  uint64_t deadline_ns = 0;  // absolute, 0 none
  bool deadline_met = true;
};

// One flow as sluicectl shows it.
struct ReceiverFlowView {
  uint64_t flow;
  uint32_t received, total;  // total 0: not known yet (non-clairvoyant)
  int priority;
  double rate;
  uint32_t tokens_sent;
  size_t outstanding;
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
};

}  // namespace sluice::top
