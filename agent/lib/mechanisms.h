// The mechanisms sluice knows, where each may run, and which kernel features
// it needs. `sluiced --check` and config validation both read this table.
#pragma once

#include <string>
#include <vector>

#include "config.h"
#include "features.h"

namespace sluice {

struct MechanismInfo {
  std::string name;
  bool on_host;
  bool on_switch_port;
  std::vector<Feature> needs;  // all required
  bool needs_line_rate = false;
  std::string summary;
};

const std::vector<MechanismInfo>& mechanisms();
const MechanismInfo* find_mechanism(const std::string& name);

}  // namespace sluice
