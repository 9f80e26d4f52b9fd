// `sluicectl switch` as text, from the "switch" object sluiced's switch
// mode adds to its status (switch_mode.cc port_json). Pure.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace sluice::sw {

std::string render_switch_text(const nlohmann::json& sw);

}  // namespace sluice::sw
