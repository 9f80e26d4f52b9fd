// BFC as rows of the switch-logic registry (agent/switch/logics.cc): the
// factories sluiced calls for [switch] logic = "bfc" | "bfc-stochastic" |
// "bfc-single" | "bfc-nosticky", and the logic's view for `sluicectl switch`.
//
// With [switch] datapath = "hold" (LogicContext::per_packet) every packet
// passes through the logic: BfcLogic runs per packet as in §3.3 (dynamic
// assignment, sticky, pause counters per (ingress port, upstreamQ) read from
// the tag the substrate pops, Th = HRTT·μ/N_active). With "tree" (packets
// never reach the agent) it runs its sampled mode (Config::sample_ns,
// bfc_logic.cc "Sampled mode"): pause from sampled queue depth vs Th, flows
// hashed over the queues; bfc-nosticky is refused there. Parameters: the
// [bfc] section (bfc_config.h).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>

#include "mechanisms/bfc/bfc_logic.h"
#include "switch/registry.h"

namespace sluice {
struct Config;
}

namespace sluice::bfc {

// The configuration sluiced runs a variant with: Config::variant_named()
// plus the [bfc] section (nullptr: its defaults). Per packet: sample_ns = 0,
// HRTT 300 us (BfcSection::kHoldHrttUs; Th = 3750 B at 100 Mbit/s with one
// active queue). Sampled: a sample every 1 ms, HRTT 1 ms (one sample plus
// the agent's netlink pause; Th = 12.5 KB at 100 Mbit/s). Both: bitmap every
// 2 ms; a pause not refreshed for 20 ms expires (fail open).
Config sluiced_config(std::string_view variant, const sluice::Config* config = nullptr, bool per_packet = false);

std::unique_ptr<sw::Logic> make_bfc(const sw::LogicContext&);
std::unique_ptr<sw::Logic> make_bfc_stochastic(const sw::LogicContext&);
std::unique_ptr<sw::Logic> make_bfc_single(const sw::LogicContext&);
std::unique_ptr<sw::Logic> make_bfc_nosticky(const sw::LogicContext&);
nlohmann::json switch_view(const sw::Logic& logic, const sw::Substrate& sw);

}  // namespace sluice::bfc
