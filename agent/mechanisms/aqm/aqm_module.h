// aqm: ECN step marking at K and EIN marking (Pulser Algorithm 1) on a
// switch egress port (bpf/switch/aqm.bpf.c).
#pragma once

#include <memory>
#include <string>

#include "core/module.h"
#include "mechanisms/aqm/aqm_config.h"
#include "mechanisms/ein/ein_config.h"

namespace sluice {

// tc priorities (core/tc.h). aqm_egress, the switch port's marking: after
// flowstat. aqm_departure, at the far end of the port's link: EIN written
// as packets leave the port's queue, before anything of the host there
// sees them.
inline constexpr uint32_t kAqmTcPrio = 0xA560;
inline constexpr uint32_t kAqmDepartureTcPrio = 0xA300;

std::unique_ptr<Module> make_aqm_module(const ModuleContext& ctx);

// Kind of the root qdisc of an interface ("noqueue", "tbf", ...), or "" if
// it cannot be read.
std::string root_qdisc_kind(const std::string& ifname);

}  // namespace sluice
