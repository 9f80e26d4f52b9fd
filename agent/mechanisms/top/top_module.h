// TOP's host side in sluiced (top-tpds20 §4.3, R2): the token-expiry XDP
// program on the interface tokens arrive on, a tc egress counter for the
// tokens and data this host sends, and the clock manager that keeps the
// program's threshold and corrections right (bpf/host/top_expiry.bpf.c).
#pragma once

#include <cstdint>
#include <memory>

#include "core/module.h"
#include "mechanisms/top/top_config.h"

namespace sluice {

// tc egress slot of top_egress (counting only; after flowstat).
inline constexpr uint32_t kTopTcPrio = 0xA570;

std::unique_ptr<Module> make_top_module(const ModuleContext& ctx);

}  // namespace sluice
