// PAC on one receiver interface (bpf/host/pac.bpf.c + the agent's MLFQ).
#pragma once

#include <memory>

#include "core/module.h"
#include "mechanisms/pac/pac_config.h"
#include "mechanisms/pac/pac_core.h"

namespace sluice::pac {

// tc priority of pac_ingress / pac_egress (core/tc.h): before flowstat, so
// a diverted ACK is counted once, when it is re-injected.
inline constexpr uint32_t kPacTcPrio = 0xA420;

class PacModule : public Module {
 public:
  explicit PacModule(const ModuleContext& ctx);
  ~PacModule() override;

  std::string name() const override { return "pac"; }
  std::vector<ProgramCounters> counters() const override;
  nlohmann::json status() const override;
  nlohmann::json stats() const override;
  void metrics(std::vector<MetricSample>& out) const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::unique_ptr<Module> make_pac_module(const ModuleContext& ctx);

}  // namespace sluice::pac
