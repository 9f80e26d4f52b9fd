#include "agent.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "bpf_util.h"
#include "control.h"
#include "log.h"
#include "metrics.h"
#include "tc.h"

namespace sluice {

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "0.0.0"
#endif

static nlohmann::json pac_to_json(const PacConfig& p) {
  auto ranges = [](const std::vector<PacPortRange>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& r : v) a.push_back(r.lo == r.hi ? std::to_string(r.lo) : std::to_string(r.lo) + "-" + std::to_string(r.hi));
    return a;
  };
  nlohmann::json pfx = nlohmann::json::array();
  for (const auto& x : p.remote_prefixes) {
    char buf[INET6_ADDRSTRLEN] = "";
    inet_ntop(x.family == 4 ? AF_INET : AF_INET6, x.addr, buf, sizeof(buf));
    pfx.push_back(std::string(buf) + "/" + std::to_string(x.len));
  }
  return {{"buffer_bytes", p.buffer_bytes}, {"mlfq_level_bytes", p.mlfq_level_bytes}, {"lambda", p.lambda},
          {"ecn", p.ecn}, {"max_held", p.max_held}, {"max_hold_ms", p.max_hold_ms},
          {"max_hold_request_ms", p.max_hold_request_ms},
          {"fail_open_ms", p.fail_open_ms}, {"reinject_mark", p.reinject_mark},
          {"idle_timeout_s", p.idle_timeout_s}, {"control_interval_min_us", p.control_interval_min_us},
          {"account_requests", p.account_requests}, {"cap_to_response", p.cap_to_response},
          {"hold_requests", p.hold_requests}, {"request_max_bytes", p.request_max_bytes},
          {"trigger_age_min_us", p.trigger_age_min_us}, {"busy_poll_us", p.busy_poll_us},
          {"rwnd_cap_bytes", p.rwnd_cap_bytes},
          {"local_ports", ranges(p.local_ports)}, {"remote_ports", ranges(p.remote_ports)},
          {"remote_prefixes", pfx}};
}

nlohmann::json to_json(const Config& c) {
  nlohmann::json ifs = nlohmann::json::array();
  for (const auto& i : c.interfaces) {
    nlohmann::json j = {{"name", i.name}, {"role", to_string(i.role)}, {"mechanisms", i.mechanisms}};
    if (i.line_rate_mbps) j["line_rate_mbps"] = *i.line_rate_mbps;
    ifs.push_back(j);
  }
  return {
      {"agent",
       {{"pin_root", c.agent.pin_root},
        {"state_dir", c.agent.state_dir},
        {"control_socket", c.agent.control_socket},
        {"log_level", c.agent.log_level},
        {"attach_mode", to_string(c.agent.attach_mode)},
        {"heartbeat_ms", c.agent.heartbeat_ms}}},
      {"metrics",
       {{"enabled", c.metrics.enabled},
        {"bind", c.metrics.bind},
        {"port", c.metrics.port},
        {"per_flow", c.metrics.per_flow}}},
      {"flowstat", {{"track_flows", c.flowstat.track_flows}, {"idle_timeout_s", c.flowstat.idle_timeout_s}}},
      {"pac", pac_to_json(c.pac)},
      {"cc",
       {{"register", c.cc.register_cc},
        {"dctcp_name", c.cc.dctcp_name},
        {"pulser_name", c.cc.pulser_name},
        {"dctcp_shift_g", c.cc.dctcp_shift_g},
        {"dctcp_alpha_on_init", c.cc.dctcp_alpha_on_init},
        {"pulser_cwnd_safe", c.cc.pulser_cwnd_safe}}},
      {"ein", {{"bit", c.ein.bit}, {"echo_fresh_us", c.ein.echo_fresh_us}}},
      {"aqm",
       {{"ecn", c.aqm.ecn},
        {"ecn_threshold", c.aqm.k()},
        {"ecn_threshold_unit", c.aqm.k_in_packets() ? "packets" : "bytes"},
        {"ein", c.aqm.ein},
        {"ein_samples", c.aqm.ein_samples},
        {"ein_threshold", c.aqm.ein_threshold},
        {"ein_high_water", c.aqm.high_water()},
        {"queue_source", to_string(c.aqm.queue_source)}}},
      {"interface", ifs},
  };
}

// What an interface's modules depend on: its own section, the sections of
// its mechanisms, and the agent section. Equal fingerprints = keep running.
std::string fingerprint(const Config& c, const InterfaceConfig& ic) {
  auto all = to_json(c);
  nlohmann::json f = {{"agent", all["agent"]}, {"metrics_per_flow", c.metrics.per_flow}};
  for (const auto& i : all["interface"])
    if (i["name"] == ic.name) f["iface"] = i;
  for (const auto& m : ic.mechanisms)
    if (all.contains(m)) f[m] = all[m];
  // The switch-side marker writes the EIN bit configured in [ein].
  for (const auto& m : ic.mechanisms)
    if (m == "aqm") f["ein"] = all["ein"];
  return f.dump();
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

std::vector<Agent::ServiceRuntime> Agent::build_services(const Config& cfg) const {
  std::vector<ServiceRuntime> out;
  for (const auto& mi : mechanisms_)
    // On a throw, `out` undoes what was built so far.
    if (mi.service.make) out.push_back({&mi, mi.service.make(cfg)});
  return out;
}

Agent::IfaceRuntime Agent::build_iface(const Config& cfg, const InterfaceConfig& ic) {
  IfaceRuntime rt;
  rt.cfg = ic;
  rt.fingerprint = fingerprint(cfg, ic);
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
        auto fp = fingerprint(cfg, ic);
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
  metrics_ = std::make_unique<MetricsServer>(cfg_.metrics.bind, cfg_.metrics.port,
                                             [this] { return metric_samples(); });
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
  try {
    next = parse_config_file(config_path_, mechanisms_);
    // Same feature gate as at start.
    check_features(next);
    if (next.agent.attach_mode != cfg_.agent.attach_mode || next.agent.pin_root != cfg_.agent.pin_root ||
        next.agent.control_socket != cfg_.agent.control_socket || next.agent.state_dir != cfg_.agent.state_dir)
      throw Error("agent.attach_mode, pin_root, state_dir and control_socket need a restart to change");
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
      return ic.name == it->cfg.name && fingerprint(next, ic) == it->fingerprint;
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
    auto next_json = to_json(next), running_json = to_json(cfg_);
    auto section = [](const nlohmann::json& j, const std::string& name) {
      return j.contains(name) ? j[name] : nlohmann::json();
    };
    for (auto& sr : services_) {
      const MechanismInfo& mi = *sr.mechanism;
      if (section(next_json, mi.name) == section(running_json, mi.name)) continue;
      // Same names are re-registered: the old ones go first. Sockets already
      // using them keep the old code until they close.
      sr.service.reset();
      try {
        sr.service = mi.service.make(next);
      } catch (const std::exception& e) {
        SLOG_ERROR("SERVICE_RELOAD_FAILED", "[{}] of the new configuration failed ({}); restoring the running one", mi.name,
                   e.what());
        try {
          sr.service = mi.service.make(cfg_);
        } catch (const std::exception& e2) {
          SLOG_ERROR("RESTORE_FAILED", "could not restore [{}]: {}", mi.name, e2.what());
        }
        if (mi.service.keep_section) mi.service.keep_section(next, cfg_);
      }
    }
  }
  bool metrics_changed = next.metrics.enabled != cfg_.metrics.enabled || next.metrics.bind != cfg_.metrics.bind ||
                         next.metrics.port != cfg_.metrics.port;
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
  out.push_back({"sluice_agent_info", "sluiced build and mode", false,
                 {{"version", SLUICE_VERSION}, {"attach_mode", to_string(attach_mode_)}}, 1});
  out.push_back({"sluice_agent_start_time_seconds", "Unix time sluiced started", false, {}, start_unix_});
  out.push_back({"sluice_agent_config_reloads_total", "Configuration reloads", true, {{"result", "ok"}},
                 double(reloads_ok_)});
  out.push_back({"sluice_agent_config_reloads_total", "Configuration reloads", true, {{"result", "rejected"}},
                 double(reloads_rejected_)});
  std::shared_lock lk(mu_);
  for (const auto& sr : services_)
    if (sr.service) sr.service->metrics(out);
  for (const auto& rt : ifaces_) {
    out.push_back({"sluice_interface_modules", "Modules attached per interface", false, {{"iface", rt.cfg.name}},
                   double(rt.modules.size())});
    for (const auto& m : rt.modules) {
      for (const auto& pc : m->counters()) {
        for (uint32_t r = 0; r < pc.counters.size(); ++r) {
          const ReasonInfo* ri = reason_info(r);
          if (!ri) continue;
          std::vector<std::pair<std::string, std::string>> l = {
              {"iface", rt.cfg.name}, {"module", m->name()}, {"program", pc.program},
              {"verdict", ri->verdict}, {"reason", ri->name}};
          out.push_back({"sluice_verdict_packets_total", "Packets by BPF verdict and reason", true, l,
                         double(pc.counters[r].packets)});
          out.push_back({"sluice_verdict_bytes_total", "Bytes by BPF verdict and reason", true, l,
                         double(pc.counters[r].bytes)});
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
    r = {{"config", to_json(cfg_)}};
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
