// ein: the host half of Pulser's EIN (bpf/host/ein.bpf.c) on one interface:
// the receiver echoes EIN in ACKs, the sender hands echoes to sluice_pulser.
#pragma once

#include <memory>

#include "core/module.h"
#include "mechanisms/cc/cc_config.h"
#include "mechanisms/ein/ein_config.h"

namespace sluice {

// tc priority of ein_ingress / ein_egress (core/tc.h): after flowstat.
inline constexpr uint32_t kEinTcPrio = 0xA550;

std::unique_ptr<Module> make_ein_module(const ModuleContext& ctx);

}  // namespace sluice
