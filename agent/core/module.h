// A Module is one mechanism's BPF object(s) loaded and attached to one
// interface, plus whatever control logic it runs on the agent's loop.
// Construction loads and attaches (and throws on failure, leaving nothing
// attached); destruction detaches. The agent owns modules per interface.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bpf_util.h"
#include "config.h"
#include "features.h"

namespace sluice {

class EventLoop;

struct ModuleContext {
  const Config& config;
  const InterfaceConfig& iface;
  AttachMode attach_mode;  // resolved: Tcx or Clsact
  std::string pin_dir;     // <pin_root>/<iface>/<module>
  EventLoop& loop;
  const FeatureReport* features = nullptr;  // the agent's probe (nullptr: not probed)
};

// One program's verdict counters, for stats and metrics.
struct ProgramCounters {
  std::string program;  // e.g. "flowstat"
  ReasonCounters counters;
};

// A metric sample a module exports beyond the verdict counters.
struct MetricSample {
  std::string name;  // full metric name, e.g. sluice_pac_threshold_bytes
  std::string help;
  bool counter = false;  // counter or gauge
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
};

class Module {
 public:
  virtual ~Module() = default;
  virtual std::string name() const = 0;
  // Verdict counters of every program in this module.
  virtual std::vector<ProgramCounters> counters() const = 0;
  // Attachments and state for `sluicectl status`.
  virtual nlohmann::json status() const = 0;
  // Extra metrics (gauges, histograms as buckets) for Prometheus.
  virtual void metrics(std::vector<MetricSample>& out) const { (void)out; }
  // Module-specific view for `sluicectl stats` (beyond counters).
  virtual nlohmann::json stats() const { return nlohmann::json::object(); }
};

using ModuleFactory = std::unique_ptr<Module> (*)(const ModuleContext&);

// Factory for a mechanism name from the mechanisms table; nullptr if the
// mechanism has no module on this role.
ModuleFactory module_factory(const std::string& mechanism, Role role);

}  // namespace sluice
