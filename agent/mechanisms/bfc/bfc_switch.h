// BFC as rows of the switch-logic registry (agent/switch/logics.cc): the
// factories sluiced calls for [switch] logic = "bfc" | "bfc-stochastic" |
// "bfc-single", and the logic's view for `sluicectl switch`.
//
// In sluiced (design A: packets do not pass through the agent) BfcLogic
// runs in its sampled mode (Config::sample_ns, bfc_logic.cc "Sampled
// mode"): pause from sampled queue depth vs Th, flows hashed over the
// queues. Parameters: the [bfc] section (bfc_config.h).
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
// plus the [bfc] section (nullptr: its defaults, the sampled mode's: sample
// every 1 ms; HRTT = 1 ms (the control loop's round trip in this mode is
// one sample plus the agent's netlink pause, not the wire's few µs; Th =
// HRTT·μ/N_active = 12.5 KB at 100 Mbit/s with one active queue); bitmap
// every 2 ms; a pause not refreshed for 20 ms expires (fail open)).
Config sluiced_config(std::string_view variant, const sluice::Config* config = nullptr);

std::unique_ptr<sw::Logic> make_bfc(const sw::LogicContext&);
std::unique_ptr<sw::Logic> make_bfc_stochastic(const sw::LogicContext&);
std::unique_ptr<sw::Logic> make_bfc_single(const sw::LogicContext&);
nlohmann::json switch_view(const sw::Logic& logic, const sw::Substrate& sw);

}  // namespace sluice::bfc
