// The switch logics sluiced can run, by name ([switch] logic = "NAME").
//
// Adding a switch logic (Floodgate, BFC, TOP, yours):
//   1. its folder (agent/mechanisms/<name>/ or anywhere) with a class
//      implementing sw::Logic (switch/logic.h), free of I/O, unit-tested
//      against sw::SwitchModel (switch/port_model.h);
//   2. ONE row in kLogics (agent/switch/logics.cc) naming it, a factory, and
//      optionally its view for `sluicectl switch`; its library linked into
//      sluice_switch_logics (agent/switch/CMakeLists.txt).
// Its own parameters live in its own config section (a mechanisms-table
// row with .section, see agent/mechanisms/mechanisms.cc); the factory gets
// the whole Config and reads them with config.get<ItsConfig>().
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "switch/logic.h"

namespace sluice {
struct Config;
struct ServiceContext;
}  // namespace sluice

namespace sluice::sw {

struct LogicContext {
  // The whole configuration (a logic reads its own section); nullptr when
  // built outside sluiced (tests, simulators): use defaults.
  const sluice::Config* config = nullptr;
  // The ports as the substrate will run them (index = PortId).
  const std::vector<PortConfig>* ports = nullptr;
  // sluiced's service context (attach mode, loop) for a logic whose data-path
  // half is its own BPF on the ports (design A: packets never reach the
  // agent); nullptr outside sluiced.
  const sluice::ServiceContext* service = nullptr;
  // true when every data packet passes through the agent's queues and the
  // substrate calls on_enqueue/on_dequeue/on_drop per packet ([switch]
  // datapath = "hold", the model, a simulator); false for design A
  // ("tree": packets never reach the agent, a logic samples or runs its
  // own BPF).
  bool per_packet = false;
};

struct LogicInfo {
  std::string name;
  std::string summary;
  std::unique_ptr<Logic> (*make)(const LogicContext&) = nullptr;
  // How the real data path (design A: packets do not pass through the
  // agent) queues a flow the logic has not placed: true = flow hash %
  // the port's queues (what the logic's on_enqueue must also return for
  // such a flow), false = queue 0.
  bool hash_flows = false;
  // With datapath = "hold": the logic reads PacketMeta::upstream_q, so the
  // substrate carries it on the wire as sluice/bfc.h's tag (BFC §3.3.2
  // upstreamQ): every held port pops a tag that arrives (into upstream_q),
  // and a switch-facing port pushes one naming the queue each frame leaves
  // from. Host-facing ports never send a tag.
  bool upstream_q_tag = false;
  // Optional: the logic's own state for `sluicectl switch` (shown under
  // "logic"); pure, called on the agent's thread.
  nlohmann::json (*view)(const Logic& logic, const Substrate& sw) = nullptr;
  // Optional: the config section it reads ([name], a mechanisms-table
  // row's .section); a change to it rebuilds the switch on reload.
  std::string section;
  // Optional: the queue layout (priority levels, quanta) the logic needs on
  // a port, applied to each port's PortConfig before the substrate builds
  // it (ctx.ports is not set yet; ctx.per_packet is). E.g. Floodgate's
  // VOQs one priority level below queue 0 (floodgate-conext21 §7.2).
  void (*layout)(const LogicContext& ctx, PortConfig& port) = nullptr;
};

// THE table (logics.cc).
const std::vector<LogicInfo>& switch_logics();
const LogicInfo* find_logic(std::string_view name);
// "fifo, pfc, ..." for error messages.
std::string logic_names();
// The sections the logics read (switch mode's `reads`).
std::vector<std::string> logic_sections();

}  // namespace sluice::sw
