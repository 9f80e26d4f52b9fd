// The TOP sender (top-tpds20 §4.4), free of I/O: SYNC announces a flow
// (size, priority class, deadline); every valid token is answered with one
// full-length data packet of its flow (a NACKed ID first, each resent at
// most once per RTT, then the next new ID); a non-clairvoyant flow ends with
// FIN; DONE closes the flow. Token expiry happens before this, in XDP
// (bpf/host/top_expiry.bpf.c): every token that reaches on_packet is valid.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "mechanisms/top/wire.h"

namespace sluice::top {

struct SenderConfig {
  uint16_t mss = kDefaultMss;  // data bytes per full-length packet (1500-byte IPv4 frame)
  uint64_t rtt_ns = 100'000;   // a NACKed ID is resent at most once per this
  uint64_t sync_retry_ns = 0;  // SYNC again when no token came; 0: 4 x rtt_ns
  uint64_t probe_ns = 0;       // all sent, no DONE: FIN probe; 0: 8 x rtt_ns
  uint64_t flow_id_base = 1;   // IDs are base, base+1, ... (make them unique per host)
  size_t max_flows = 4096;
  std::optional<std::string> validate() const;
};

struct FlowSpec {
  uint64_t size_bytes = 0;
  bool clairvoyant = true;   // false: the size is told only by FIN (§4.4)
  uint64_t deadline_ns = 0;  // relative to open; 0 none
  uint8_t prio_class = kPrioByObjective;
};

struct SenderStats {
  std::array<uint64_t, kPriorities> tokens_received{};
  uint64_t data_sent = 0;
  uint64_t data_resent = 0;
  uint64_t tokens_unused = 0;  // nothing to send for a valid token
  uint64_t tokens_unknown_flow = 0;
  uint64_t syncs_sent = 0;
  uint64_t fins_sent = 0;
  uint64_t nacks_received = 0;
  uint64_t flows_done = 0;
  uint64_t bad_packets = 0;
};

struct SenderCompletion {
  uint64_t flow = 0;
  uint64_t size_bytes = 0;
  uint64_t start_ns = 0;
  uint64_t done_ns = 0;
  uint64_t first_token_ns = 0;  // the first valid token's arrival (0: none)
};

struct SenderFlowView {
  uint64_t flow;
  uint32_t next_new, total;
  size_t resend_pending;
  uint64_t tokens;
};

class Sender {
 public:
  explicit Sender(const SenderConfig& cfg);
  ~Sender();
  Sender(const Sender&) = delete;
  Sender& operator=(const Sender&) = delete;

  // Opens a flow and emits its SYNC. Throws std::invalid_argument for a
  // size of 0, a bad priority class, or when max_flows are open.
  uint64_t open_flow(const FlowSpec& spec, uint64_t now, std::vector<Packet>& out);
  // TOKEN, NACK, DONE; anything else is counted as bad.
  void on_packet(const Packet& p, uint64_t now, std::vector<Packet>& out);
  // SYNC retries and FIN probes; call every few RTTs.
  void on_timer(uint64_t now, std::vector<Packet>& out);

  size_t open_flows() const { return flows_.size(); }
  const SenderStats& stats() const { return stats_; }
  std::vector<SenderCompletion> take_completions();
  std::vector<SenderFlowView> flows() const;
  const SenderConfig& config() const { return cfg_; }

 private:
  struct Flow;
  Packet sync_of(const Flow& f, Type t, uint64_t now) const;

  SenderConfig cfg_;
  SenderStats stats_;
  uint64_t next_id_;
  std::map<uint64_t, std::unique_ptr<Flow>> flows_;  // ordered: deterministic timers
  std::vector<SenderCompletion> done_;
};

}  // namespace sluice::top
