// [cc]: the congestion controls registered while the agent runs (bpf/cc/).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config_section.h"

namespace sluice {

struct CcConfig {
  static constexpr const char* kSection = "cc";
  std::vector<std::string> register_cc;  // "dctcp", "pulser"
  std::string dctcp_name = "sluice_dctcp";
  std::string pulser_name = "sluice_pulser";
  uint32_t dctcp_shift_g = 4;           // DCTCP g = 1/2^shift_g
  uint32_t dctcp_alpha_on_init = 1024;  // α at connection start, 1/1024 units
  uint32_t pulser_cwnd_safe = 4;        // Pulser cwnd_safe, segments
};

const ConfigSection& cc_section();

// TCP_CA_NAME_MAX: a congestion control's name field, NUL included.
inline constexpr size_t kCcNameMax = 16;

// Checks a congestion control name; returns an empty string or why not.
std::string check_cc_name(const std::string& name);

}  // namespace sluice
