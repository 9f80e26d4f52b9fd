// Config validation checks shared by the unit tests.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/config.h"
#include "mechanisms/mechanisms.h"

namespace sluice::test {

// Parses `toml` and returns its problems (empty if valid).
std::vector<ConfigProblem> config_problems(const std::string& toml);

// Success when parsing `toml` reports a problem at `key` whose reason
// contains `reason_part`; otherwise a failure listing what was reported.
::testing::AssertionResult config_rejects(const std::string& toml, const std::string& key,
                                          const std::string& reason_part);

}  // namespace sluice::test
