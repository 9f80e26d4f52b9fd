#include "module.h"

namespace sluice {

const MechanismInfo* find_mechanism(const MechanismTable& table, const std::string& name) {
  for (const auto& m : table)
    if (m.name == name && m.available && (m.on_host || m.on_switch_port)) return &m;
  return nullptr;
}

ModuleFactory module_factory(const MechanismInfo& mi, Role role) {
  return role == Role::Host ? mi.host_module : mi.switch_module;
}

std::vector<std::pair<std::string, std::string>> missing_features(const MechanismInfo& mi, const FeatureReport& rep) {
  std::vector<std::pair<std::string, std::string>> out;
  auto why = [&](Feature f) -> std::string {
    auto it = rep.find(f);
    return it == rep.end() ? "not probed" : it->second.detail;
  };
  auto ok = [&](Feature f) {
    auto it = rep.find(f);
    return it != rep.end() && it->second.ok;
  };
  for (Feature f : mi.needs)
    if (!ok(f)) out.emplace_back(to_string(f), why(f));
  if (!mi.needs_one_of.empty()) {
    std::string names, whys;
    bool any = false;
    for (Feature f : mi.needs_one_of) {
      any = any || ok(f);
      names += (names.empty() ? "" : " or ") + std::string(to_string(f));
      whys += (whys.empty() ? "" : "; ") + std::string(to_string(f)) + ": " + why(f);
    }
    if (!any) out.emplace_back(names, whys);
  }
  return out;
}

}  // namespace sluice
