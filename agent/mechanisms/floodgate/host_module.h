// Floodgate's host part (§4.3) as a sluiced mechanism: on a host's uplink
// to its first-hop ToR ([[interface]] role = "host", mechanisms =
// ["floodgate"]), HostRunner (host_runner.h: the dstpause BPF, the held
// frames' queues, re-sending) polled on the agent's loop every millisecond.
// The ToR is a sluice switch with [switch] logic = "floodgate", datapath =
// "hold" and [floodgate] dst_pause = true (docs/floodgate.md).
#pragma once

#include <memory>

#include "core/module.h"

namespace sluice::floodgate {

std::unique_ptr<Module> make_host_module(const ModuleContext& ctx);

}  // namespace sluice::floodgate
