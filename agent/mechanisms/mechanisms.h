// The mechanisms sluice knows, where each may run, and which kernel features
// it needs. `sluiced --check` and config validation both read this table.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"
#include "core/features.h"

namespace sluice {

struct MechanismInfo {
  std::string name;
  bool on_host;
  bool on_switch_port;
  std::vector<Feature> needs;  // all required
  bool needs_line_rate = false;
  std::string summary;
  std::vector<Feature> needs_one_of;  // and at least one of these (when not empty)
};

const std::vector<MechanismInfo>& mechanisms();
const MechanismInfo* find_mechanism(const std::string& name);

// What `mi` needs and `rep` lacks: (feature name(s), why) pairs; a
// needs_one_of group is one pair, "a or b", when none of it is there.
std::vector<std::pair<std::string, std::string>> missing_features(const MechanismInfo& mi, const FeatureReport& rep);

}  // namespace sluice
