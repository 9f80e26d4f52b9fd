#include "lib/config_check.h"

namespace sluice::test {

std::vector<ConfigProblem> config_problems(const std::string& toml) {
  try {
    parse_config_string(toml);
  } catch (const ConfigError& e) {
    return e.problems();
  }
  return {};
}

::testing::AssertionResult config_rejects(const std::string& toml, const std::string& key,
                                          const std::string& reason_part) {
  auto ps = config_problems(toml);
  for (const auto& p : ps)
    if (p.key == key && p.reason.find(reason_part) != std::string::npos) return ::testing::AssertionSuccess();
  std::string got;
  for (const auto& p : ps) got += "\n  " + p.to_string();
  return ::testing::AssertionFailure() << "expected a problem at " << key << " containing \"" << reason_part
                                       << "\", got:" << (got.empty() ? " none" : got);
}

}  // namespace sluice::test
