// THE table of switch logics sluiced can run ([switch] logic = "NAME").
// One row per logic; see registry.h for how to add one.
#include "switch/registry.h"

#include "switch/pfc.h"

namespace sluice::sw {

namespace {
std::unique_ptr<Logic> make_fifo(const LogicContext&) { return std::make_unique<FifoLogic>(); }
std::unique_ptr<Logic> make_pfc(const LogicContext&) { return std::make_unique<PfcLogic>(); }
}  // namespace

const std::vector<LogicInfo>& switch_logics() {
  static const std::vector<LogicInfo> kLogics = {
      {.name = "fifo",
       .summary = "one queue per port, never pauses: the plain port, the substrate's baseline",
       .make = &make_fifo},
      {.name = "pfc",
       .summary = "flows hashed over the port's queues; PAUSE/RESUME/bitmap frames from the neighbour pause "
                  "and resume the named queue of the port they arrive on (per-queue link-level pause)",
       .make = &make_pfc,
       .hash_flows = true,
       .view = &pfc_view},
  };
  return kLogics;
}

const LogicInfo* find_logic(std::string_view name) {
  for (const auto& l : switch_logics())
    if (l.name == name) return &l;
  return nullptr;
}

std::string logic_names() {
  std::string s;
  for (const auto& l : switch_logics()) s += (s.empty() ? "" : ", ") + l.name;
  return s;
}

}  // namespace sluice::sw
