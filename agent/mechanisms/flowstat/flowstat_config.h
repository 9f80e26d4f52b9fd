// [flowstat]: the per-flow counters' section.
#pragma once

#include <cstdint>

#include "core/config_section.h"

namespace sluice {

struct FlowstatConfig {
  static constexpr const char* kSection = "flowstat";
  bool track_flows = true;
  // Flows idle longer than this are dropped from the table by the agent.
  uint32_t idle_timeout_s = 300;
};

const ConfigSection& flowstat_section();

}  // namespace sluice
