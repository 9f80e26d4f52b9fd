// sluiced: the sluice host/switch agent.
#include <CLI/CLI.hpp>
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include "core/agent.h"
#include "core/bpf_util.h"
#include "core/config.h"
#include "core/features.h"
#include "core/log.h"
#include "mechanisms/cc/cc.h"
#include "mechanisms/mechanisms.h"

using namespace sluice;

namespace {

const char* kDefaultConfig = "/etc/sluice/sluiced.toml";

// --check: print every probe, then whether each configured mechanism can run.
// Parses the config file; on error prints it (naming the key, the value and
// the reason) and returns false.
bool load_config(const std::string& config_path, Config& cfg) {
  try {
    cfg = parse_config_file(config_path);
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluiced: %s\n", e.what());
    return false;
  }
}

int run_check(const std::string& config_path, bool have_config) {
  std::printf("kernel %s\n", kernel_release().c_str());
  FeatureReport rep = probe_features();
  for (Feature f : all_features()) {
    const auto& r = rep[f];
    std::printf("  %-22s %-4s %s\n", to_string(f), r.ok ? "yes" : "NO", r.detail.c_str());
  }
  if (!have_config) {
    std::printf("(no configuration given: probing only)\n");
    return 0;
  }
  Config cfg;
  if (!load_config(config_path, cfg)) return 2;
  int bad = 0;
  bool tc_ok = rep[Feature::Tcx].ok || rep[Feature::TcClsact].ok;
  if (cfg.agent.attach_mode == AttachMode::Tcx) tc_ok = rep[Feature::Tcx].ok;
  if (cfg.agent.attach_mode == AttachMode::Clsact) tc_ok = rep[Feature::TcClsact].ok;
  std::printf("configuration %s:\n", config_path.c_str());
  for (const auto& ic : cfg.interfaces) {
    std::printf("  interface %s (%s): %s\n", ic.name.c_str(), to_string(ic.role), describe_interface(ic.name).c_str());
    for (const auto& m : ic.mechanisms) {
      const MechanismInfo* mi = find_mechanism(m);
      std::string why;
      if (!tc_ok) why += " tc attach (" + std::string(to_string(cfg.agent.attach_mode)) + ")";
      for (const auto& [f, _] : missing_features(*mi, rep)) why += " " + f;
      std::printf("    %-10s %s%s\n", m.c_str(), why.empty() ? "can run" : "CANNOT RUN, missing:", why.c_str());
      if (!why.empty()) ++bad;
    }
  }
  return bad ? 1 : 0;
}

int run_purge(const Config& cfg) {
  int n = 0;
  std::error_code ec;
  for (const auto& ic : cfg.interfaces) {
    std::filesystem::path dir = cfg.agent.pin_root + "/" + ic.name;
    if (!std::filesystem::exists(dir, ec)) continue;
    for (auto& sub : std::filesystem::directory_iterator(dir, ec)) {
      remove_pins(sub.path());
      ++n;
    }
    rmdir(dir.c_str());
  }
  // The host-wide pins outside the interfaces' directories (Pulser's EIN
  // map), under any name an earlier build gave them.
  std::string shared = ein_map_pin_path(cfg.agent.pin_root);
  shared.erase(shared.rfind('/'));
  if (std::filesystem::exists(shared, ec)) {
    remove_pins(shared);
    ++n;
  }
  std::printf("removed pinned maps of %d module(s) under %s\n", n, cfg.agent.pin_root.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "sluiced: the sluice incast control agent for Linux hosts and switch ports.\n"
      "Works today: PAC (pac), Pulser (ein on hosts, aqm on switch ports, [cc] pulser), DCTCP ([cc] dctcp with aqm's\n"
      "ECN marking), per-flow counters (flowstat), TOP's host side (top), switch mode ([switch]) with the logics\n"
      "fifo, pfc, floodgate and bfc, and Floodgate's host dstPause (floodgate). docs/ has each one's measured state."};
  app.footer(mechanisms_help());
  std::string config_path = kDefaultConfig;
  bool check = false, validate = false, purge = false, version = false, libbpf_verbose = false;
  std::string log_level;
  app.add_option("-c,--config", config_path, "configuration file (TOML)");
  app.add_flag("--check", check, "probe kernel features; with a config, exit 1 if a configured mechanism cannot run");
  app.add_flag("--validate", validate, "validate the configuration and exit");
  app.add_flag("--purge", purge, "remove the pinned maps of the configured interfaces and exit");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical, off (overrides the config)");
  app.add_flag("--libbpf-debug", libbpf_verbose, "log libbpf debug messages (verifier logs)");
  app.add_flag("--version", version, "print the version");
  CLI11_PARSE(app, argc, argv);

  if (version) {
    std::printf("sluiced %s\n", SLUICE_VERSION);
    return 0;
  }
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  spdlog::flush_on(spdlog::level::info);
  route_libbpf_logs(libbpf_verbose);
  if (!log_level.empty() && !set_log_level(log_level)) {
    std::fprintf(stderr, "sluiced: --log-level %s: unknown level\n", log_level.c_str());
    return 2;
  }
  bool have_config = app.count("--config") > 0 || std::filesystem::exists(kDefaultConfig);
  if (check) return run_check(config_path, have_config);

  Config cfg;
  if (!load_config(config_path, cfg)) return 2;
  if (validate) {
    std::printf("%s: valid (%zu interface(s))\n", config_path.c_str(), cfg.interfaces.size());
    return 0;
  }
  if (purge) return run_purge(cfg);
  if (log_level.empty()) set_log_level(cfg.agent.log_level);

  // A dead control client must not kill the agent.
  signal(SIGPIPE, SIG_IGN);
  try {
    EventLoop loop;
    Agent agent(loop, config_path, cfg, probe_features(), mechanisms());
    agent.start();
    loop.on_signals({SIGTERM, SIGINT, SIGHUP}, [&](int sig) {
      if (sig == SIGHUP) {
        SLOG_INFO("SIGHUP", "reloading {}", config_path);
        agent.reload();
        return;
      }
      SLOG_INFO("SHUTDOWN", "signal {}: detaching and exiting", sig);
      agent.stop();
      loop.stop();
    });
    loop.run();
  } catch (const std::exception& e) {
    SLOG_ERROR("AGENT_FAILED", "{}", e.what());
    return 1;
  }
  return 0;
}
