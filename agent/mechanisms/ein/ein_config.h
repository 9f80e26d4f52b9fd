// [ein]: the EIN bit, shared by switch-side marking (aqm) and the host-side
// echo (ein).
#pragma once

#include <cstdint>
#include <string>

#include "core/config_section.h"

namespace sluice {

struct EinConfig {
  static constexpr const char* kSection = "ein";
  std::string bit = "tos:0x04";  // "tos:0xNN" (one DSCP bit) or "ipv4-reserved"
  uint8_t field = 0;             // SLUICE_EIN_FIELD_*, parsed from `bit`
  uint16_t mask = 0x04;
  uint32_t echo_fresh_us = 2000;  // receiver: an EIN mark older than this is not echoed
};

const ConfigSection& ein_section();

}  // namespace sluice
