// What `sluicectl bfc` shows (issue: flow table occupancy, queue assignment,
// pause counters, paused upstream queues), as JSON built from a running
// BfcLogic and its substrate, and as text. Pure: no I/O.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "mechanisms/bfc/bfc_logic.h"

namespace sluice::bfc {

// {"variant", "counters": {...}, "ports": [{"port", "name", "rate_bps",
//  "threshold_bytes", "active_queues", "flow_table": {"entries", "live"},
//  "queues": [{"queue", "bytes", "pkts", "flows", "paused"}] (queues that
//  hold data, flows or a pause only), "pause_counters": [{"upstream_q",
//  "count"}] (non-zero only: what this switch asks the hop behind the port
//  to pause)}], "trace": [[t_us, port, queue, bytes, th_bytes], ...] (the
//  sampled mode's queue-vs-Th samples, oldest first), "samples"}
nlohmann::json view(const BfcLogic& logic, const sw::Substrate& sw);
std::string render_text(const nlohmann::json& v);
// `sluicectl bfc`: the BFC view inside sluiced's status reply (its switch
// part's logic_state), with the switch's logic name added. An empty object
// and `why` set when sluiced is not in switch mode or runs another logic.
nlohmann::json view_from_status(const nlohmann::json& status, std::string& why);

}  // namespace sluice::bfc
