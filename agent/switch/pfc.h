// pfc: per-queue link-level pause driven by the downstream neighbour.
// Flows are spread over the port's queues by the substrate's flow hash; a
// PAUSE / RESUME / PAUSE_BITMAP frame (include/sluice/wire.h) arriving on
// port p pauses or resumes the named queues of p's egress: the hop behind
// p asks this switch to stop sending that queue into it. This is the
// receiving half of IEEE 802.1Qbb-style per-class pause and of BFC's
// upstream queue pause (BFC §3.3.2: a pause/resume is applied only if its
// sequence number is newer than the last one applied for that queue, and a
// bitmap never undoes a newer frame). It never sends frames itself: it is
// the logic the substrate's own pause/resume tests and benchmarks run.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "switch/logic.h"

namespace sluice::sw {

class PfcLogic final : public Logic {
 public:
  std::string_view name() const override { return "pfc"; }
  Verdict on_enqueue(const PacketMeta& pkt, PortId in_port) override;
  void on_control(const ControlFrame& frame, PortId port) override;

  struct Counters {
    uint64_t pauses = 0, resumes = 0;  // records applied
    uint64_t stale = 0;                // records older than what was applied
    uint64_t out_of_range = 0;         // queue the port does not have
  };
  const Counters& counters() const { return c_; }

 private:
  // Applies one pause/resume for (port, q) carrying `seq`.
  void apply(PortId port, uint32_t q, uint32_t seq, bool pause);
  std::map<std::pair<PortId, uint32_t>, uint32_t> last_seq_;
  Counters c_;
};

nlohmann::json pfc_view(const Logic& logic, const Substrate& sw);

}  // namespace sluice::sw
