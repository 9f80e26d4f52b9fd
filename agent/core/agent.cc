#include "agent.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "bpf_util.h"
#include "config_section.h"
#include "control.h"
#include "heartbeat.h"
#include "log.h"
#include "metrics.h"
#include "tc.h"

namespace sluice {

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "0.0.0"
#endif

// What an interface's modules depend on: its own section, the sections of
// its mechanisms (and those they read), and the agent section. Equal
// fingerprints = keep running.
std::string fingerprint(const Config& c, const InterfaceConfig& ic, const MechanismTable& mechanisms) {
  auto all = to_json(c, mechanisms);
  nlohmann::json f = {{"agent", all["agent"]}, {"metrics_per_flow", c.metrics.per_flow}};
  for (const auto& i : all["interface"])
    if (i["name"] == ic.name) f["iface"] = i;
  for (const auto& m : ic.mechanisms) {
    const MechanismInfo* mi = find_mechanism(mechanisms, m);
    if (!mi) continue;
    std::vector<std::string> sections = mi->reads;
    if (mi->section) sections.push_back(mi->section->name);
    for (const auto& s : sections)
      if (all.contains(s)) f[s] = all[s];
  }
  return f.dump();
}

bool ReloadPlan::changes_anything() const {
  return !refused.empty() || !reattach.empty() || !detach.empty() || !services.empty() || metrics || log_level;
}

ReloadPlan plan_reload(const Config& running, const Config& next, const MechanismTable& mechanisms) {
  ReloadPlan p;
  const AgentConfig &a = running.agent, &b = next.agent;
  for (auto [key, differs] : {std::pair{"attach_mode", a.attach_mode != b.attach_mode},
                              {"pin_root", a.pin_root != b.pin_root},
                              {"state_dir", a.state_dir != b.state_dir},
                              {"control_socket", a.control_socket != b.control_socket}})
    if (differs) p.restart_keys.push_back(std::string("agent.") + key);
  if (!p.restart_keys.empty())
    p.refused = "agent.attach_mode, pin_root, state_dir and control_socket need a restart to change";
  for (const auto& ic : running.interfaces) {
    const InterfaceConfig* n = next.find_interface(ic.name);
    if (!n || fingerprint(next, *n, mechanisms) != fingerprint(running, ic, mechanisms)) p.detach.push_back(ic.name);
  }
  for (const auto& ic : next.interfaces) {
    const InterfaceConfig* r = running.find_interface(ic.name);
    if (!r || fingerprint(running, *r, mechanisms) != fingerprint(next, ic, mechanisms)) p.reattach.push_back(ic.name);
  }
  auto nj = to_json(next, mechanisms), rj = to_json(running, mechanisms);
  for (const auto& mi : mechanisms) {
    if (!mi.service.make) continue;
    // Its own section and the sections it reads (e.g. a switch logic's).
    std::vector<std::string> secs = mi.reads;
    secs.push_back(mi.section ? mi.section->name : mi.name);
    auto sect = [&](const nlohmann::json& j, const std::string& s) { return j.contains(s) ? j[s] : nlohmann::json(); };
    if (std::any_of(secs.begin(), secs.end(), [&](const std::string& s) { return sect(nj, s) != sect(rj, s); }))
      p.services.push_back(mi.name);
  }
  p.metrics = next.metrics.enabled != running.metrics.enabled || next.metrics.bind != running.metrics.bind ||
              next.metrics.port != running.metrics.port;
  p.log_level = next.agent.log_level != running.agent.log_level;
  return p;
}

Agent::Agent(EventLoop& loop, std::string config_path, Config cfg, FeatureReport features,
             const MechanismTable& mechanisms)
    : loop_(loop),
      mechanisms_(mechanisms),
      config_path_(std::move(config_path)),
      cfg_(std::move(cfg)),
      features_(std::move(features)) {}

Agent::~Agent() { stop(); }

void Agent::check_features(const Config& cfg) const {
  std::string missing;
  for (const auto& ic : cfg.interfaces) {
    for (const auto& m : ic.mechanisms) {
      const MechanismInfo* mi = find_mechanism(mechanisms_, m);
      if (!mi) continue;
      for (const auto& [f, why] : missing_features(*mi, features_))
        missing += "\n  " + m + " on " + ic.name + " needs " + f + ": " + why;
    }
  }
  for (const auto& mi : mechanisms_) {
    if (!mi.service.make) continue;
    std::string what = mi.service.used_by ? mi.service.used_by(cfg) : "";
    if (what.empty()) continue;
    for (const auto& [f, why] : missing_features(mi, features_)) missing += "\n  " + what + " needs " + f + ": " + why;
  }
  if (!missing.empty()) throw Error("kernel lacks features the configuration needs:" + missing);
}

std::vector<Agent::ServiceRuntime> Agent::build_services(const Config& cfg) {
  std::vector<ServiceRuntime> out;
  for (const auto& mi : mechanisms_)
    // On a throw, `out` undoes what was built so far.
    if (mi.service.make) out.push_back({&mi, mi.service.make({cfg, loop_, attach_mode_, &features_})});
  return out;
}

Agent::IfaceRuntime Agent::build_iface(const Config& cfg, const InterfaceConfig& ic) {
  IfaceRuntime rt;
  rt.cfg = ic;
  rt.fingerprint = fingerprint(cfg, ic, mechanisms_);
  for (const auto& m : ic.mechanisms) {
    const MechanismInfo* mi = find_mechanism(mechanisms_, m);
    ModuleFactory f = mi ? module_factory(*mi, ic.role) : nullptr;
    if (!f) throw Error("mechanism " + m + " has no module for role " + to_string(ic.role));
    ModuleContext ctx{cfg, ic, attach_mode_, cfg.agent.pin_root + "/" + ic.name + "/" + m, loop_, &features_};
    try {
      rt.modules.push_back(f(ctx));
    } catch (const std::exception& e) {
      // rt.modules unwinds (detaches) in reverse order as the exception leaves.
      while (!rt.modules.empty()) rt.modules.pop_back();
      throw Error("interface " + ic.name + ", mechanism " + m + ": " + e.what());
    }
  }
  return rt;
}

std::vector<Agent::IfaceRuntime> Agent::build_all(const Config& cfg, std::vector<IfaceRuntime>* reuse) {
  std::vector<IfaceRuntime> out;
  std::vector<bool> reused;
  try {
    for (const auto& ic : cfg.interfaces) {
      if (reuse) {
        auto fp = fingerprint(cfg, ic, mechanisms_);
        auto it = std::find_if(reuse->begin(), reuse->end(),
                               [&](const IfaceRuntime& r) { return r.cfg.name == ic.name && r.fingerprint == fp; });
        if (it != reuse->end()) {
          out.push_back(std::move(*it));
          reused.push_back(true);
          reuse->erase(it);
          continue;
        }
      }
      out.push_back(build_iface(cfg, ic));
      reused.push_back(false);
    }
  } catch (...) {
    // Newly built runtimes detach (reverse order); reused ones go back.
    while (!out.empty()) {
      if (reused.back()) reuse->push_back(std::move(out.back()));
      out.pop_back();
      reused.pop_back();
    }
    throw;
  }
  return out;
}

void Agent::start_metrics() {
  metrics_.reset();
  if (!cfg_.metrics.enabled) return;
  metrics_ = std::make_unique<MetricsServer>(cfg_.metrics.bind, cfg_.metrics.port, [this] { return metric_samples(); });
  SLOG_INFO("METRICS_LISTENING", "Prometheus endpoint on http://{}/metrics", metrics_->address());
}

void Agent::start() {
  start_ns_ = monotonic_ns();
  start_unix_ = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  check_features(cfg_);
  bool has_tcx = features_.count(Feature::Tcx) && features_.at(Feature::Tcx).ok;
  if (cfg_.agent.attach_mode == AttachMode::Tcx && !has_tcx)
    throw Error("agent.attach_mode = \"tcx\" but this kernel has no tcx: " + features_[Feature::Tcx].detail);
  attach_mode_ = resolve_attach_mode(cfg_.agent.attach_mode, has_tcx);
  ensure_bpffs(cfg_.agent.pin_root);
  make_dirs(cfg_.agent.state_dir);

  services_ = build_services(cfg_);
  std::vector<IfaceRuntime> built;
  try {
    built = build_all(cfg_, nullptr);
  } catch (...) {
    services_.clear();
    throw;
  }
  try {
    control_ = std::make_unique<ControlServer>(loop_.io(), cfg_.agent.control_socket,
                                               [this](const nlohmann::json& r) { return handle_request(r); });
    {
      std::unique_lock lk(mu_);
      ifaces_ = std::move(built);
    }
    start_metrics();
  } catch (...) {
    std::unique_lock lk(mu_);
    ifaces_.clear();
    built.clear();
    control_.reset();
    services_.clear();
    throw;
  }
  SLOG_INFO("AGENT_STARTED", "sluiced {} running: {} interface(s), attach mode {}, control {}", SLUICE_VERSION,
            cfg_.interfaces.size(), to_string(attach_mode_), cfg_.agent.control_socket);
}

void Agent::stop() {
  // Detach first: the datapath returns to plain Linux before anything else.
  {
    std::unique_lock lk(mu_);
    while (!ifaces_.empty()) {
      auto& rt = ifaces_.back();
      while (!rt.modules.empty()) rt.modules.pop_back();
      ifaces_.pop_back();
    }
  }
  {
    // Host-wide parts (congestion controls) are never left behind.
    std::unique_lock lk(mu_);
    while (!services_.empty()) services_.pop_back();
  }
  control_.reset();
  metrics_.reset();
}

bool Agent::reload(std::string* why) {
  Config next;
  ReloadPlan plan;
  try {
    next = parse_config_file(config_path_, mechanisms_);
    // Same feature gate as at start.
    check_features(next);
    plan = plan_reload(cfg_, next, mechanisms_);
    if (!plan.refused.empty()) throw Error(plan.refused);
  } catch (const std::exception& e) {
    ++reloads_rejected_;
    SLOG_ERROR("CONFIG_REJECTED", "reload of {} rejected, keeping the running configuration: {}", config_path_,
               e.what());
    if (why) *why = e.what();
    return false;
  }
  std::unique_lock lk(mu_);
  std::vector<IfaceRuntime> old = std::move(ifaces_);
  ifaces_.clear();
  // Interfaces whose configuration is unchanged keep running untouched; the
  // others are detached first (so a re-attach never races its old self).
  for (auto it = old.begin(); it != old.end();) {
    bool keep = std::any_of(next.interfaces.begin(), next.interfaces.end(), [&](const InterfaceConfig& ic) {
      return ic.name == it->cfg.name && fingerprint(next, ic, mechanisms_) == it->fingerprint;
    });
    if (keep) {
      ++it;
    } else {
      while (!it->modules.empty()) it->modules.pop_back();
      it = old.erase(it);
    }
  }
  try {
    ifaces_ = build_all(next, &old);
  } catch (const std::exception& e) {
    // Roll back to the running configuration.
    ++reloads_rejected_;
    SLOG_ERROR("CONFIG_REJECTED", "reload of {} failed to attach ({}); restoring the running configuration",
               config_path_, e.what());
    if (why) *why = e.what();
    try {
      ifaces_ = build_all(cfg_, &old);
    } catch (const std::exception& e2) {
      SLOG_ERROR("RESTORE_FAILED", "could not restore the running configuration: {}", e2.what());
    }
    return false;
  }
  old.clear();
  {
    for (auto& sr : services_) {
      const MechanismInfo& mi = *sr.mechanism;
      if (std::find(plan.services.begin(), plan.services.end(), mi.name) == plan.services.end()) continue;
      // Same names are re-registered: the old ones go first. Sockets already
      // using them keep the old code until they close.
      sr.service.reset();
      try {
        sr.service = mi.service.make({next, loop_, attach_mode_, &features_});
      } catch (const std::exception& e) {
        SLOG_ERROR("SERVICE_RELOAD_FAILED", "[{}] of the new configuration failed ({}); restoring the running one",
                   mi.name, e.what());
        try {
          sr.service = mi.service.make({cfg_, loop_, attach_mode_, &features_});
        } catch (const std::exception& e2) {
          SLOG_ERROR("RESTORE_FAILED", "could not restore [{}]: {}", mi.name, e2.what());
        }
        if (mi.section) next.sections[mi.section->name] = cfg_.sections[mi.section->name];
      }
    }
  }
  bool metrics_changed = plan.metrics;
  cfg_ = std::move(next);
  set_log_level(cfg_.agent.log_level);
  lk.unlock();
  if (metrics_changed) {
    try {
      start_metrics();
    } catch (const std::exception& e) {
      SLOG_ERROR("METRICS_FAILED", "{}", e.what());
    }
  }
  ++reloads_ok_;
  SLOG_INFO("CONFIG_RELOADED", "configuration {} reloaded: {} interface(s)", config_path_, cfg_.interfaces.size());
  return true;
}

nlohmann::json Agent::status() const {
  std::shared_lock lk(mu_);
  nlohmann::json ifs = nlohmann::json::array();
  for (const auto& rt : ifaces_) {
    nlohmann::json mods = nlohmann::json::array();
    for (const auto& m : rt.modules) mods.push_back({{"name", m->name()}, {"status", m->status()}});
    ifs.push_back({{"name", rt.cfg.name}, {"role", to_string(rt.cfg.role)}, {"modules", mods}});
  }
  nlohmann::json feats = nlohmann::json::object();
  for (const auto& [f, r] : features_) feats[to_string(f)] = {{"ok", r.ok}, {"detail", r.detail}};
  nlohmann::json out = {
      {"version", SLUICE_VERSION},
      {"pid", getpid()},
      {"uptime_s", (monotonic_ns() - start_ns_) / 1e9},
      {"kernel", kernel_release()},
      {"config_path", config_path_},
      {"attach_mode", to_string(attach_mode_)},
      {"pin_root", cfg_.agent.pin_root},
      {"metrics", metrics_ ? "http://" + metrics_->address() + "/metrics" : "disabled"},
      {"reloads", {{"ok", reloads_ok_}, {"rejected", reloads_rejected_}}},
      {"interfaces", ifs},
      {"features", feats},
  };
  if (const HeartbeatThread* hb = loop_.heartbeats_if_started()) out["heartbeat"] = hb->status();
  for (const auto& sr : services_)
    if (sr.service) sr.service->status(out);
  return out;
}

nlohmann::json Agent::stats() const {
  std::shared_lock lk(mu_);
  nlohmann::json ifs = nlohmann::json::array();
  for (const auto& rt : ifaces_) {
    nlohmann::json mods = nlohmann::json::array();
    for (const auto& m : rt.modules) {
      nlohmann::json progs = nlohmann::json::array();
      for (const auto& pc : m->counters()) {
        nlohmann::json rows = nlohmann::json::array();
        for (uint32_t r = 0; r < pc.counters.size(); ++r) {
          const auto& c = pc.counters[r];
          const ReasonInfo* ri = reason_info(r);
          if (!c.packets && !c.bytes) continue;
          rows.push_back({{"reason", ri ? ri->name : "R" + std::to_string(r)},
                          {"verdict", ri ? ri->verdict : "?"},
                          {"packets", c.packets},
                          {"bytes", c.bytes}});
        }
        progs.push_back({{"program", pc.program}, {"verdicts", rows}});
      }
      mods.push_back({{"name", m->name()}, {"programs", progs}, {"stats", m->stats()}});
    }
    ifs.push_back({{"name", rt.cfg.name}, {"modules", mods}});
  }
  return {{"interfaces", ifs}};
}

nlohmann::json Agent::flows(const std::string& iface, size_t limit) const {
  std::shared_lock lk(mu_);
  nlohmann::json ifs = nlohmann::json::array();
  for (const auto& rt : ifaces_) {
    if (!iface.empty() && rt.cfg.name != iface) continue;
    for (const auto& m : rt.modules) {
      nlohmann::json t = m->flow_table(limit);
      if (t.is_null()) continue;
      t["name"] = rt.cfg.name;
      ifs.push_back(std::move(t));
    }
  }
  return {{"interfaces", ifs}};
}

std::vector<MetricSample> Agent::metric_samples() const {
  std::vector<MetricSample> out;
  out.push_back({"sluice_agent_info",
                 "sluiced build and mode",
                 false,
                 {{"version", SLUICE_VERSION}, {"attach_mode", to_string(attach_mode_)}},
                 1});
  out.push_back({"sluice_agent_start_time_seconds", "Unix time sluiced started", false, {}, start_unix_});
  out.push_back(
      {"sluice_agent_config_reloads_total", "Configuration reloads", true, {{"result", "ok"}}, double(reloads_ok_)});
  out.push_back({"sluice_agent_config_reloads_total",
                 "Configuration reloads",
                 true,
                 {{"result", "rejected"}},
                 double(reloads_rejected_)});
  std::shared_lock lk(mu_);
  for (const auto& sr : services_)
    if (sr.service) sr.service->metrics(out);
  for (const auto& rt : ifaces_) {
    out.push_back({"sluice_interface_modules",
                   "Modules attached per interface",
                   false,
                   {{"iface", rt.cfg.name}},
                   double(rt.modules.size())});
    for (const auto& m : rt.modules) {
      for (const auto& pc : m->counters()) {
        for (uint32_t r = 0; r < pc.counters.size(); ++r) {
          const ReasonInfo* ri = reason_info(r);
          if (!ri) continue;
          std::vector<std::pair<std::string, std::string>> l = {{"iface", rt.cfg.name},
                                                                {"module", m->name()},
                                                                {"program", pc.program},
                                                                {"verdict", ri->verdict},
                                                                {"reason", ri->name}};
          out.push_back({"sluice_verdict_packets_total", "Packets by BPF verdict and reason", true, l,
                         double(pc.counters[r].packets)});
          out.push_back(
              {"sluice_verdict_bytes_total", "Bytes by BPF verdict and reason", true, l, double(pc.counters[r].bytes)});
        }
      }
      m->metrics(out);
    }
  }
  return out;
}

nlohmann::json Agent::handle_request(const nlohmann::json& req) {
  const std::string cmd = req["cmd"];
  nlohmann::json r;
  if (cmd == "status") {
    r = status();
  } else if (cmd == "stats") {
    r = stats();
  } else if (cmd == "flows") {
    std::string iface = req.contains("iface") && req["iface"].is_string() ? req["iface"].get<std::string>() : "";
    size_t limit = req.contains("limit") && req["limit"].is_number_unsigned() ? req["limit"].get<size_t>() : 0;
    r = flows(iface, limit);
  } else if (cmd == "config") {
    r = {{"config", to_json(cfg_, mechanisms_)}};
  } else if (cmd == "reload") {
    std::string why;
    bool ok = reload(&why);
    if (!ok) return {{"ok", false}, {"error", "reload rejected, running configuration kept: " + why}};
    r = {{"reloaded", true}};
  } else {
    return {{"ok", false}, {"error", "unknown command \"" + cmd + "\" (status, stats, flows, config, reload)"}};
  }
  r["ok"] = true;
  return r;
}

}  // namespace sluice
