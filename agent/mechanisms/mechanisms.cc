// THE table of sluice's mechanisms: the one place that lists them.
//
// Adding a mechanism touches nothing in agent/core:
//   1. a folder agent/mechanisms/<name>/ with
//      - <name>_config.{h,cc}: its section struct (static kSection =
//        "<name>") and <name>_section(), ONE field table
//        (core/config_section.h) that parses, defaults, prints and
//        fingerprints every key of [<name>];
//      - <name>_module.{h,cc}: a Module (core/module.h) per interface, and/or
//        a HostService for a host-wide part (see cc/cc_service.cc);
//      - CMakeLists.txt: add_library(sluice_<name> ...) linking sluice_core
//        and its BPF skeletons;
//   2. one row below (name, roles, kernel features, summary, factories,
//      .section = &<name>_section()), its include, and sluice_<name> in
//      ../CMakeLists.txt (add_subdirectory + sluice_mechanisms' links);
//   3. its keys in agent/sluiced.example.toml, its unit tests in
//      tests/unit/<name>/. The reload test (tests/unit/core/
//      config_reload_test.cc) covers the new keys from the field table.
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
       .switch_module = &make_flowstat_module,
       .section = &flowstat_section(),
       .on_by_default = true},
      {.name = "pac",
       .on_host = true,
       .needs = {Feature::Btf, Feature::RingBuf},
       .summary = "proactive ACK control at the receiver: holds ACKs so ACK-triggered in-flight data stays under "
                  "the buffer",
       .host_module = &pac::make_pac_module,
       .section = &pac_section()},
      {.name = "ein",
       .on_host = true,
       .needs = {Feature::Btf},
       .summary = "Pulser host half: echo EIN in ACKs, hand echoes to sluice_pulser ([cc] register = [\"pulser\"])",
       .host_module = &make_ein_module,
       .section = &ein_section()},
      {.name = "aqm",
       .on_switch_port = true,
       .needs = {Feature::Btf},
       .needs_line_rate = true,
       .summary = "ECN step marking at K and Pulser EIN marking (Algorithm 1) from the root qdisc backlog",
       .needs_one_of = {Feature::CastToKernCtx, Feature::TpBtfQdisc},
       .switch_module = &make_aqm_module,
       .section = &aqm_section(),
       .reads = {"ein"}},  // the EIN bit it writes
      // Host-wide, on no interface: [cc] register.
      {.name = "cc",
       .needs = {Feature::StructOpsCc},
       .summary = "sluice_dctcp and sluice_pulser congestion controls, registered host-wide ([cc] register)",
       .service = {&make_cc_service, &cc_used_by},
       .section = &cc_section()},
  };
  return table;
}

const MechanismInfo* find_mechanism(const std::string& name) { return find_mechanism(mechanisms(), name); }

Config parse_config_file(const std::string& path) { return parse_config_file(path, mechanisms()); }

Config parse_config_string(const std::string& text, const std::string& origin) {
  return parse_config_string(text, origin, mechanisms());
}

}  // namespace sluice
