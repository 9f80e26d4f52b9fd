// What `sluicectl top` shows: per interface running TOP, the clock state and
// the expiry settings it implies, tokens sent/valid/expired/future per
// priority, and the flows seen. Built from the TOP module's stats JSON
// (TopModule::stats()); pure, no I/O.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace sluice::top {

// From a `stats` reply: {"interfaces": [{"name", "top": <module stats>}]}
// for every interface with a TOP module.
nlohmann::json view_from_stats(const nlohmann::json& stats_reply);
std::string render_text(const nlohmann::json& view);

}  // namespace sluice::top
