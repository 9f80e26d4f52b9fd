// The mechanisms sluice knows, where each may run, which kernel features it
// needs, and what builds it: THE table (mechanisms.cc). sluiced, `sluiced
// --check` and config validation all read it; the core is handed it.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"
#include "core/features.h"
#include "core/module.h"

namespace sluice {

const MechanismTable& mechanisms();
// find_mechanism(mechanisms(), name)
const MechanismInfo* find_mechanism(const std::string& name);
// The table for `sluiced --help`: what works today, and what is coming.
std::string mechanisms_help();

// The configuration loader (core/config.h) with this table.
Config parse_config_file(const std::string& path);
Config parse_config_string(const std::string& text, const std::string& origin = "<string>");

}  // namespace sluice
