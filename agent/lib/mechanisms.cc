#include "mechanisms.h"

#include "flowstat_module.h"

namespace sluice {

const std::vector<MechanismInfo>& mechanisms() {
  static const std::vector<MechanismInfo> table = {
      {"flowstat", true, true, {Feature::Btf}, false,
       "per-flow packet/byte/ECN/retransmission counters at tc ingress and egress"},
  };
  return table;
}

const MechanismInfo* find_mechanism(const std::string& name) {
  for (const auto& m : mechanisms())
    if (m.name == name) return &m;
  return nullptr;
}

}  // namespace sluice

namespace sluice {

ModuleFactory module_factory(const std::string& mechanism, Role role) {
  (void)role;
  if (mechanism == "flowstat") return &make_flowstat_module;
  return nullptr;
}

}  // namespace sluice
