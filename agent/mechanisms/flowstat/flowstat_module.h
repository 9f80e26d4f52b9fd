// flowstat: per-flow counters on one interface (bpf/host/flowstat.bpf.c).
#pragma once

#include <memory>
#include <vector>

#include "core/module.h"
#include "mechanisms/flowstat/flowstat_config.h"
#include "sluice/flow.h"
#include "core/tc.h"

namespace sluice {

// tc priority of flowstat_in / flowstat_out (core/tc.h: lower runs first).
inline constexpr uint32_t kFlowstatTcPrio = 0xA510;

struct FlowRow {
  sluice_flow_key key;
  sluice_flow_stats stats;
};

// Formats a flow key as "10.0.0.1:5201 -> 10.0.0.2:40000 tcp".
std::string format_flow(const sluice_flow_key& k);
nlohmann::json flow_json(const FlowRow& r, uint64_t now_ns);

class FlowstatModule : public Module {
 public:
  explicit FlowstatModule(const ModuleContext& ctx);
  ~FlowstatModule() override;

  std::string name() const override { return "flowstat"; }
  std::vector<ProgramCounters> counters() const override;
  nlohmann::json status() const override;
  nlohmann::json stats() const override;
  void metrics(std::vector<MetricSample>& out) const override;
  nlohmann::json flow_table(size_t limit) const override;

  std::vector<FlowRow> flows() const;
  // Removes flows idle longer than idle_ns; returns how many.
  size_t expire_idle(uint64_t now_ns, uint64_t idle_ns);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::unique_ptr<Module> make_flowstat_module(const ModuleContext& ctx);

}  // namespace sluice
