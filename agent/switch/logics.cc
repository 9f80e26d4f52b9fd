// THE table of switch logics sluiced can run ([switch] logic = "NAME").
// One row per logic; see registry.h for how to add one.
#include "switch/registry.h"

#include <algorithm>

#include "mechanisms/bfc/bfc_switch.h"
#include "mechanisms/floodgate/switch_glue.h"
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
      {.name = "bfc",
       .summary = "BFC (bfc-nsdi22) backpressure: with datapath = \"hold\" per packet (§3.3: dynamic queue "
                  "assignment, pause counters per (ingress port, upstreamQ), Th = HRTT*rate/N_active, upstreamQ "
                  "tagged on the wire); with \"tree\" a sampled mode (pause from sampled depth, flows hashed). "
                  "docs/bfc.md",
       .make = &bfc::make_bfc,
       .hash_flows = true,
       .upstream_q_tag = true,
       .view = &bfc::switch_view,
       .section = "bfc"},
      {.name = "bfc-stochastic",
       .summary = "BFC with stochastic (hash) queue assignment, the ablation of bfc-nsdi22 Fig. 8",
       .make = &bfc::make_bfc_stochastic,
       .hash_flows = true,
       .upstream_q_tag = true,
       .view = &bfc::switch_view,
       .section = "bfc"},
      {.name = "bfc-single",
       .summary = "BFC with every flow in queue 0 (PFC-like), the ablation of bfc-nsdi22 Fig. 8",
       .make = &bfc::make_bfc_single,
       .upstream_q_tag = true,
       .view = &bfc::switch_view,
       .section = "bfc"},
      {.name = "bfc-nosticky",
       .summary = "BFC without sticky assignment (a flow may change queue as soon as it has no packet in the "
                  "switch), the ablation of bfc-nsdi22 §3.3.2; per packet with datapath = \"hold\" only",
       .make = &bfc::make_bfc_nosticky,
       .hash_flows = true,
       .upstream_q_tag = true,
       .view = &bfc::switch_view,
       .section = "bfc"},
      {.name = "floodgate",
       .summary = "per-destination windows toward the next hop, VOQs for destinations out of window, credits "
                  "per ingress port every T (floodgate-conext21; docs/floodgate.md)",
       .make = &floodgate::make_switch_logic,
       .view = &floodgate::switch_view,
       .section = "floodgate",
       .layout = &floodgate::switch_layout},
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

std::vector<std::string> logic_sections() {
  std::vector<std::string> v;
  for (const auto& l : switch_logics())
    if (!l.section.empty() && std::find(v.begin(), v.end(), l.section) == v.end()) v.push_back(l.section);
  return v;
}

}  // namespace sluice::sw
