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

// One tc hook priority a mechanism's programs use (core/tc.h).
struct TcSlot {
  std::string programs;  // which programs attach at it, for messages
  uint32_t prio = 0;
};

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
  // Per-flow rows for `sluicectl flows` ({"total": n, "flows": [...]},
  // largest first, at most `limit` rows, 0 = all); null for a module that
  // keeps no flow table.
  virtual nlohmann::json flow_table(size_t limit) const {
    (void)limit;
    return nullptr;
  }
};

using ModuleFactory = std::unique_ptr<Module> (*)(const ModuleContext&);

// A mechanism's host-wide part, not tied to an interface (the congestion
// controls of [cc] are registered for the whole machine). Construction does
// the work (throws, leaving nothing behind, on failure); destruction undoes it.
class HostService {
 public:
  virtual ~HostService() = default;
  // Adds this service's part to `sluicectl status` (top-level keys).
  virtual void status(nlohmann::json& out) const = 0;
  virtual void metrics(std::vector<MetricSample>& out) const { (void)out; }
};

// What a host-wide part is built with.
struct ServiceContext {
  const Config& config;
  EventLoop& loop;         // the agent's loop (timers, ring buffers, fds)
  AttachMode attach_mode;  // resolved: Tcx or Clsact
  const FeatureReport* features = nullptr;
};

struct HostServiceHooks {
  // Built at start for every configuration, rebuilt on reload when the
  // mechanism's section changes. May return nullptr when the configuration
  // asks nothing of it.
  std::unique_ptr<HostService> (*make)(const ServiceContext&) = nullptr;
  // What in `cfg` asks for the service ("[cc] register"), "" when nothing:
  // then the mechanism's kernel features are not required.
  std::string (*used_by)(const Config& cfg) = nullptr;
};

struct ConfigSection;

// One row of the mechanisms table (agent/mechanisms/mechanisms.cc). The
// core is handed the table and names no mechanism itself.
struct MechanismInfo {
  std::string name;
  bool on_host = false;         // may be listed on a role = "host" interface
  bool on_switch_port = false;  // may be listed on a role = "switch-port" interface
  std::vector<Feature> needs;   // all required
  bool needs_line_rate = false;
  std::string summary;
  std::vector<Feature> needs_one_of;      // and at least one of these (when not empty)
  ModuleFactory host_module = nullptr;    // its module on a host interface
  ModuleFactory switch_module = nullptr;  // its module on a switch port
  HostServiceHooks service;               // its host-wide part, if any
  // Its configuration section ([name], core/config_section.h), if any, and
  // the other sections its modules or its host-wide part read (they join
  // its interfaces' reload fingerprint; a change rebuilds its host-wide
  // part).
  const ConfigSection* section = nullptr;
  std::vector<std::string> reads;
  // false: planned, not built yet (listed so `sluiced --help` can say so;
  // an interface cannot list it).
  bool available = true;
  // Runs on an interface whose [[interface]] lists no mechanisms.
  bool on_by_default = false;
  // The tc filter priorities its programs attach at (core/tc.h), each
  // declared as a constant in its own folder: unique across the table.
  std::vector<TcSlot> tc;
};

using MechanismTable = std::vector<MechanismInfo>;

// The available row named `name` that may be listed on an interface
// (on_host or on_switch_port), or nullptr.
const MechanismInfo* find_mechanism(const MechanismTable& table, const std::string& name);

// The module of `mi` for `role`; nullptr if it has none there.
ModuleFactory module_factory(const MechanismInfo& mi, Role role);

// What `mi` needs and `rep` lacks: (feature name(s), why) pairs; a
// needs_one_of group is one pair, "a or b", when none of it is there.
std::vector<std::pair<std::string, std::string>> missing_features(const MechanismInfo& mi, const FeatureReport& rep);

}  // namespace sluice
