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

#include <algorithm>

#include "mechanisms/aqm/aqm_module.h"
#include "mechanisms/bfc/bfc_config.h"
#include "mechanisms/cc/cc.h"
#include "mechanisms/ein/ein_module.h"
#include "mechanisms/floodgate/config.h"
#include "mechanisms/floodgate/host_module.h"
#include "mechanisms/floodgate/host_runner.h"
#include "mechanisms/floodgate/switch_glue.h"
#include "mechanisms/flowstat/flowstat_module.h"
#include "mechanisms/pac/pac_module.h"
#include "switch/switch_config.h"
#include "switch/registry.h"
#include "switch/switch_mode.h"
#include "mechanisms/top/top_module.h"

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
       .on_by_default = true,
       .tc = {{"flowstat_in, flowstat_out", kFlowstatTcPrio}}},
      {.name = "pac",
       .on_host = true,
       .needs = {Feature::Btf, Feature::RingBuf},
       .summary = "proactive ACK control at the receiver: holds ACKs so ACK-triggered in-flight data stays under "
                  "the buffer",
       .host_module = &pac::make_pac_module,
       .section = &pac_section(),
       .tc = {{"pac_ingress, pac_egress", pac::kPacTcPrio}}},
      {.name = "ein",
       .on_host = true,
       .needs = {Feature::Btf},
       .summary = "Pulser host half: echo EIN in ACKs, hand echoes to sluice_pulser ([cc] register = [\"pulser\"])",
       .host_module = &make_ein_module,
       .section = &ein_section(),
       .tc = {{"ein_ingress, ein_egress", kEinTcPrio}}},
      {.name = "aqm",
       .on_switch_port = true,
       .needs = {Feature::Btf},
       .needs_line_rate = true,
       .summary = "ECN step marking at K and Pulser EIN marking (Algorithm 1) from the root qdisc backlog",
       .needs_one_of = {Feature::CastToKernCtx, Feature::TpBtfQdisc},
       .switch_module = &make_aqm_module,
       .section = &aqm_section(),
       .reads = {"ein"},  // the EIN bit it writes
       .tc = {{"aqm_egress", kAqmTcPrio}, {"aqm_departure", kAqmDepartureTcPrio}}},
      // Host-wide, on no interface: [cc] register.
      {.name = "cc",
       .needs = {Feature::StructOpsCc},
       .summary = "sluice_dctcp and sluice_pulser congestion controls, registered host-wide ([cc] register)",
       .service = {&make_cc_service, &cc_used_by},
       .section = &cc_section()},
      // Switch mode: the listed ports become one switch running a switch
      // logic (agent/switch/registry.h names them); host-wide, on no
      // [[interface]]: [switch] ports.
      {.name = "switch",
       .needs = {Feature::Btf, Feature::RingBuf},
       .summary = "switch mode: per-port queue trees, control frames, a switch logic ([switch] logic = " +
                  sw::logic_names() + "; docs/switch.md)",
       .service = {&make_switch_service, &switch_used_by},
       .section = &switch_section(),
       .reads = sw::logic_sections(),
       .tc = {{"sw_ingress, sw_egress", kSwportTcPrio}}},
      {.name = "top",
       .on_host = true,
       .needs = {Feature::Btf, Feature::Xdp},
       .summary = "TOP host side (top-tpds20 §4.3): XDP token expiry on synced clocks, clock manager ([top]); "
                  "transport: sluice-top",
       .host_module = &make_top_module,
       .section = &top_section(),
       .tc = {{"top_egress", kTopTcPrio}}},
      // Floodgate: the switch part is a switch logic ([switch] logic =
      // "floodgate"); on a host's uplink, the host part of dstPause (§4.3).
      {.name = "floodgate",
       .on_host = true,
       .needs = {Feature::Btf, Feature::RingBuf},
       .summary = "host part of Floodgate's dstPause (floodgate-conext21 §4.3) on the uplink to the first-hop ToR; "
                  "the switch part: [switch] logic = \"floodgate\"",
       .host_module = &floodgate::make_host_module,
       .section = &floodgate::floodgate_section(),
       .tc = {{"dp_ingress, dp_egress", floodgate::kDstPauseTcPrio}, {"fg_egress", floodgate::kSwitchTcPrio}}},
      // Coming: sluiced cannot run them yet. Listed so `sluiced --help` says so; an
      // interface that names one is refused. BFC itself runs as a switch logic
      // ([switch] logic = "bfc"); this row holds its [bfc] section.
      {.name = "bfc",
       .on_switch_port = true,
       .summary = "per-hop per-flow backpressure (bfc-nsdi22) as an interface mechanism; BFC runs today as "
                  "[switch] logic = \"bfc\" (a host: a one-port [switch] on its uplink; docs/bfc.md)",
       .section = &bfc_section(),
       .available = false},
  };
  return table;
}

const MechanismInfo* find_mechanism(const std::string& name) { return find_mechanism(mechanisms(), name); }

std::string mechanisms_help() {
  auto where = [](const MechanismInfo& m) -> std::string {
    if (m.on_host && m.on_switch_port) return "host, switch port";
    if (m.on_host) return "host";
    if (m.on_switch_port) return "switch port";
    return "host-wide";
  };
  std::string s = "Mechanisms that work today ([[interface]] mechanisms = [...]; cc: [cc] register):\n";
  for (bool available : {true, false}) {
    if (!available) s += "Coming, not runnable in sluiced yet (a configuration that names one is refused):\n";
    for (const auto& m : mechanisms()) {
      if (m.available != available) continue;
      std::string name = m.name, at = where(m);
      name.resize(std::max<size_t>(name.size(), 10), ' ');
      at.resize(std::max<size_t>(at.size(), 18), ' ');
      s += "  " + name + at + m.summary + "\n";
    }
  }
  return s;
}

Config parse_config_file(const std::string& path) { return parse_config_file(path, mechanisms()); }

Config parse_config_string(const std::string& text, const std::string& origin) {
  return parse_config_string(text, origin, mechanisms());
}

}  // namespace sluice
