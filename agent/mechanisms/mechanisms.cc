#include "mechanisms.h"

#include "mechanisms/aqm/aqm_module.h"
#include "mechanisms/ein/ein_module.h"
#include "mechanisms/flowstat/flowstat_module.h"
#include "mechanisms/pac/pac_module.h"

namespace sluice {

const std::vector<MechanismInfo>& mechanisms() {
  static const std::vector<MechanismInfo> table = {
      {"flowstat", true, true, {Feature::Btf}, false,
       "per-flow packet/byte/ECN/retransmission counters at tc ingress and egress"},
      {"pac", true, false, {Feature::Btf, Feature::RingBuf}, false,
       "proactive ACK control at the receiver: holds ACKs so ACK-triggered in-flight data stays under the buffer"},
      {"ein", true, false, {Feature::Btf}, false,
       "Pulser host half: echo EIN in ACKs, hand echoes to sluice_pulser ([cc] register = [\"pulser\"])"},
      {"aqm", false, true, {Feature::Btf}, true,
       "ECN step marking at K and Pulser EIN marking (Algorithm 1) from the root qdisc backlog",
       {Feature::CastToKernCtx, Feature::TpBtfQdisc}},
  };
  return table;
}

const MechanismInfo* find_mechanism(const std::string& name) {
  for (const auto& m : mechanisms())
    if (m.name == name) return &m;
  return nullptr;
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

namespace sluice {

ModuleFactory module_factory(const std::string& mechanism, Role role) {
  if (mechanism == "flowstat") return &make_flowstat_module;
  if (mechanism == "pac" && role == Role::Host) return &pac::make_pac_module;
  if (mechanism == "ein" && role == Role::Host) return &make_ein_module;
  if (mechanism == "aqm" && role == Role::SwitchPort) return &make_aqm_module;
  return nullptr;
}

}  // namespace sluice
