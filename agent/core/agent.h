// The sluiced agent: owns the configuration, the modules attached to each
// interface, the control socket and the metrics endpoint, all driven by one
// EventLoop.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <shared_mutex>
#include <string>
#include <vector>

#include "config.h"
#include "event_loop.h"
#include "features.h"
#include "module.h"

namespace sluice {

class ControlServer;
class MetricsServer;

// What a reload from `running` to `next` does; Agent::reload follows it.
struct ReloadPlan {
  std::string refused;                    // non-empty: the reload is refused (why)
  std::vector<std::string> restart_keys;  // the keys that need a restart instead
  std::vector<std::string> detach;        // interfaces whose modules go (changed or removed)
  std::vector<std::string> reattach;      // interfaces whose modules are built anew
  std::vector<std::string> services;      // mechanisms whose host-wide part is rebuilt
  bool metrics = false;                   // the metrics endpoint restarts
  bool log_level = false;                 // the log level changes
  bool changes_anything() const;
};
ReloadPlan plan_reload(const Config& running, const Config& next, const MechanismTable& mechanisms);

class Agent {
 public:
  // `mechanisms`: the table (agent/mechanisms/mechanisms.cc); must outlive
  // the agent.
  Agent(EventLoop& loop, std::string config_path, Config cfg, FeatureReport features, const MechanismTable& mechanisms);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Attaches every configured module, then opens the control socket and the
  // metrics endpoint. On any failure everything already attached is detached
  // and Error is thrown.
  void start();
  // Detaches everything (SIGTERM path). Pinned maps stay.
  void stop();
  // Re-reads the config file; keeps the running config if the new one is
  // invalid or cannot be attached. Returns true if the new one is in effect.
  bool reload(std::string* why = nullptr);

  nlohmann::json status() const;
  nlohmann::json stats() const;
  nlohmann::json flows(const std::string& iface, size_t limit) const;
  std::vector<MetricSample> metric_samples() const;
  nlohmann::json handle_request(const nlohmann::json& req);

  AttachMode attach_mode() const { return attach_mode_; }

 private:
  struct IfaceRuntime {
    InterfaceConfig cfg;
    std::string fingerprint;
    std::vector<std::unique_ptr<Module>> modules;
  };
  // Builds the runtime of one interface (all modules or none).
  IfaceRuntime build_iface(const Config& cfg, const InterfaceConfig& ic);
  // Builds all interfaces (all or none).
  std::vector<IfaceRuntime> build_all(const Config& cfg, std::vector<IfaceRuntime>* reuse);
  void check_features(const Config& cfg) const;
  struct ServiceRuntime {
    const MechanismInfo* mechanism;
    std::unique_ptr<HostService> service;
  };
  // Builds the host-wide part of every mechanism that has one (all or none).
  std::vector<ServiceRuntime> build_services(const Config& cfg);
  void start_metrics();

  EventLoop& loop_;
  const MechanismTable& mechanisms_;
  std::string config_path_;
  Config cfg_;
  FeatureReport features_;
  AttachMode attach_mode_ = AttachMode::Clsact;
  std::vector<IfaceRuntime> ifaces_;
  std::vector<ServiceRuntime> services_;  // host-wide: alive while running
  mutable std::shared_mutex mu_;          // guards ifaces_ against metric scrapes
  std::unique_ptr<ControlServer> control_;
  std::unique_ptr<MetricsServer> metrics_;
  uint64_t start_ns_ = 0;
  double start_unix_ = 0;
  uint64_t reloads_ok_ = 0, reloads_rejected_ = 0;
};

std::string fingerprint(const Config& c, const InterfaceConfig& ic, const MechanismTable& mechanisms);

}  // namespace sluice
