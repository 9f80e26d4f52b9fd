// Floodgate's config section ([floodgate] in a sluiced switch config) and
// its sluicectl view. The section parser reads a TOML table into
// floodgate::Config; every bad key is reported (key, value, reason), none is
// ignored, and a bad section changes nothing (the caller keeps its old
// logic).
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <toml++/toml.h>
#include <vector>

#include "core/config_section.h"
#include "mechanisms/floodgate/host_pause.h"
#include "mechanisms/floodgate/logic.h"

namespace sluice::floodgate {

struct SectionProblem {
  std::string key;  // "floodgate.credit_interval_us"
  std::string value;
  std::string reason;
  std::string where;  // "file:line" of the value ("" when unknown)
};

class SectionError : public std::invalid_argument {
 public:
  explicit SectionError(std::vector<SectionProblem> problems);
  const std::vector<SectionProblem>& problems() const { return problems_; }

 private:
  std::vector<SectionProblem> problems_;
};

// Keys (all optional; defaults in Config):
//   credit_interval_us  T, 50..1000000
//   hop_rtt_us          0..1000000
//   max_voqs            1..127
//   thre_credit_bdp     1..1000, or thre_credit_bytes (bytes, wins when set)
//   voq_grouping        bool
//   down_voqs           0..126
//   up_ports            [port names]: resolved against `port_names`
//   syn_timeout_ms      1..60000
//   dst_pause           bool
//   thre_off_bytes, thre_on_bytes
//   voq                 "tbf" (default) or "agent": design A's VOQs (Config::voq_agent)
//   voq_limit_bytes     1536..2^34, voq = "agent" only
//   voq_ecn_packets     0..1000000 (0 = no CE marking in the agent's VOQs)
// The host part of dstPause (§4.3; Section::host, read by the floodgate
// mechanism on a host's uplink, not by the switch logic):
//   host_pause_timeout_ms  1..60000: a paused destination not refreshed
//                          for this long is released (fail open)
//   host_max_held_frames   1..262144: the most frames the host holds at
//                          once, all destinations together; the frame
//                          that would exceed it releases its destination
//   host_fail_open_ms      1..60000: the host's dp_egress stops holding
//                          (every frame passes) once sluiced's heartbeat
//                          is this old and its thread gone or stopped
// Throws SectionError.
Config parse_section(const toml::table& t, const std::vector<std::string>& port_names);

// [floodgate] as sluiced loads it (the mechanisms table's floodgate row):
// the parameters, with up_ports still names; switch mode's logic
// "floodgate" reads it with config.get<Section>() and resolves the names
// against its ports (resolve()).
struct Section {
  static constexpr const char* kSection = "floodgate";
  Config config;
  std::vector<std::string> up_port_names;
  HostPauseConfig host;                      // host_pause_timeout_ms, host_max_held_frames
  uint64_t host_fail_open_ns = 100'000'000;  // host_fail_open_ms
  // `config` with up_ports resolved; throws std::invalid_argument naming an
  // up port that is not one of `port_names`.
  Config resolve(const std::vector<std::string>& port_names) const;
};
// The section for the loader (core/config_section.h): the keys above, each
// problem reported with its key, value and line; a bad section changes
// nothing.
const sluice::ConfigSection& floodgate_section();

// `sluicectl floodgate --json`: windows, VOQs in use, credits sent and
// received, delayed credits, switchSYNs, dstPause state.
nlohmann::json view(const FloodgateLogic& fg, const std::vector<std::string>& port_names);
// The same as text.
std::string render(const nlohmann::json& v);

}  // namespace sluice::floodgate
