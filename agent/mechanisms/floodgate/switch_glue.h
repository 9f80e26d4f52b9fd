// Floodgate as a sluiced switch logic ([switch] logic = "floodgate").
//
// With [switch] datapath = "hold" every packet passes through sluiced's
// queues and the substrate runs FloodgateLogic (logic.h) per packet, as in
// the model: nothing below is used. In the substrate's design A packets never pass through the agent, so the
// per-packet half of Floodgate (windows, VOQ steering, counting what to
// credit) is bpf/switch/floodgate.bpf.c on every switch port's egress, and
// this class is the agent half, on the event loop: every T it returns
// credits upstream per ingress port (§4.1, with delayCredit), tracks what
// left each VOQ, releases a VOQ by as many bytes as its window allows when
// credits arrive (Substrate::release: the paused TBF leaf's bucket set to
// the window), sends switchSYN after a silence and answers one (§4.3 loss
// recovery). docs/floodgate.md "In sluiced".
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>

#include "switch/registry.h"

namespace sluice::floodgate {

// fg_egress's tc slot: after the substrate's classifier (kSwportTcPrio),
// which it may override. Listed in floodgate's row of the mechanisms table.
inline constexpr uint32_t kSwitchTcPrio = 0xA502;

// ctx.per_packet (datapath "hold"), or outside sluiced: FloodgateLogic (the
// model logic, per packet). Design A ("tree"): the glue below.
std::unique_ptr<sw::Logic> make_switch_logic(const sw::LogicContext& ctx);
// Per packet: queue 0 at priority 0, the VOQs at 1 (§7.2); "tree" unchanged.
void switch_layout(const sw::LogicContext& ctx, sw::PortConfig& port);
nlohmann::json switch_view(const sw::Logic& logic, const sw::Substrate& sw);

}  // namespace sluice::floodgate
