#include "mechanisms.h"

#include "flowstat_module.h"
#include "pac/pac_module.h"

namespace sluice {

const std::vector<MechanismInfo>& mechanisms() {
  static const std::vector<MechanismInfo> table = {
      {"flowstat", true, true, {Feature::Btf}, false,
       "per-flow packet/byte/ECN/retransmission counters at tc ingress and egress"},
      {"pac", true, false, {Feature::Btf, Feature::RingBuf}, false,
       "proactive ACK control at the receiver: holds ACKs so ACK-triggered in-flight data stays under the buffer"},
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
  if (mechanism == "pac" && role == Role::Host) return &pac::make_pac_module;
  return nullptr;
}

}  // namespace sluice
