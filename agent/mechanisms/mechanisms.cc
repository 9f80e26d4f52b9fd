#include "mechanisms.h"

#include "mechanisms/aqm/aqm_module.h"
#include "mechanisms/cc/cc.h"
#include "mechanisms/ein/ein_module.h"
#include "mechanisms/flowstat/flowstat_module.h"
#include "mechanisms/pac/pac_module.h"

namespace sluice {

const MechanismTable& mechanisms() {
  static const MechanismTable table = {
      {.name = "flowstat",
       .on_host = true,
       .on_switch_port = true,
       .needs = {Feature::Btf},
       .summary = "per-flow packet/byte/ECN/retransmission counters at tc ingress and egress",
       .host_module = &make_flowstat_module,
       .switch_module = &make_flowstat_module},
      {.name = "pac",
       .on_host = true,
       .needs = {Feature::Btf, Feature::RingBuf},
       .summary = "proactive ACK control at the receiver: holds ACKs so ACK-triggered in-flight data stays under "
                  "the buffer",
       .host_module = &pac::make_pac_module},
      {.name = "ein",
       .on_host = true,
       .needs = {Feature::Btf},
       .summary = "Pulser host half: echo EIN in ACKs, hand echoes to sluice_pulser ([cc] register = [\"pulser\"])",
       .host_module = &make_ein_module},
      {.name = "aqm",
       .on_switch_port = true,
       .needs = {Feature::Btf},
       .needs_line_rate = true,
       .summary = "ECN step marking at K and Pulser EIN marking (Algorithm 1) from the root qdisc backlog",
       .needs_one_of = {Feature::CastToKernCtx, Feature::TpBtfQdisc},
       .switch_module = &make_aqm_module},
      // Host-wide, on no interface: [cc] register.
      {.name = "cc",
       .needs = {Feature::StructOpsCc},
       .summary = "sluice_dctcp and sluice_pulser congestion controls, registered host-wide ([cc] register)",
       .service = {&make_cc_service, &cc_used_by, &keep_cc_section}},
  };
  return table;
}

const MechanismInfo* find_mechanism(const std::string& name) { return find_mechanism(mechanisms(), name); }

Config parse_config_file(const std::string& path) { return parse_config_file(path, mechanisms()); }

Config parse_config_string(const std::string& text, const std::string& origin) {
  return parse_config_string(text, origin, mechanisms());
}

}  // namespace sluice
