// sluicectl: talks to sluiced over its control socket.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "core/control.h"
#include "switch/view.h"
#include "mechanisms/top/top_view.h"

using nlohmann::json;

namespace {

std::string human_bytes(double b) {
  const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024 && i < 4) b /= 1024, ++i;
  char s[32];
  std::snprintf(s, sizeof(s), i ? "%.1f %s" : "%.0f %s", b, u[i]);
  return s;
}

void print_status(const json& j) {
  std::printf("sluiced %s  pid %d  up %.0fs  kernel %s\n", j["version"].get<std::string>().c_str(),
              j["pid"].get<int>(), j["uptime_s"].get<double>(), j["kernel"].get<std::string>().c_str());
  std::printf("config %s  attach %s  pins %s\n", j["config_path"].get<std::string>().c_str(),
              j["attach_mode"].get<std::string>().c_str(), j["pin_root"].get<std::string>().c_str());
  std::printf("metrics %s  reloads ok %llu rejected %llu\n", j["metrics"].get<std::string>().c_str(),
              (unsigned long long)j["reloads"]["ok"], (unsigned long long)j["reloads"]["rejected"]);
  for (const auto& i : j["interfaces"]) {
    std::printf("interface %s (%s)\n", i["name"].get<std::string>().c_str(), i["role"].get<std::string>().c_str());
    for (const auto& m : i["modules"]) {
      std::printf("  %s\n", m["name"].get<std::string>().c_str());
      const auto& st = m["status"];
      if (st.contains("attachments"))
        for (const auto& a : st["attachments"])
          std::printf("    %-22s %-8s %s\n", a["program"].get<std::string>().c_str(),
                      a["hook"].get<std::string>().c_str(), a["mode"].get<std::string>().c_str());
      for (auto it = st.begin(); it != st.end(); ++it)
        if (it.key() != "attachments") std::printf("    %s: %s\n", it.key().c_str(), it.value().dump().c_str());
    }
  }
  if (j.contains("congestion_control"))
    for (const auto& c : j["congestion_control"]) {
      std::printf("congestion control %s (%s) %s", c.value("name", "?").c_str(), c.value("algorithm", "?").c_str(),
                  c.value("registered", false) ? "registered" : "NOT registered");
      for (auto it = c.begin(); it != c.end(); ++it)
        if (it.key() != "name" && it.key() != "algorithm" && it.key() != "registered")
          std::printf(" %s=%s", it.key().c_str(), it.value().dump().c_str());
      std::printf("\n");
    }
  std::printf("kernel features:");
  for (auto it = j["features"].begin(); it != j["features"].end(); ++it)
    std::printf(" %s=%s", it.key().c_str(), it.value()["ok"].get<bool>() ? "yes" : "no");
  std::printf("\n");
}

// "ingress.packets=12 ingress.bytes=3.4 MiB ..." for a module's stats object.
void flatten(const json& j, const std::string& prefix, std::string& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    std::string k = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it.value().is_object()) {
      flatten(it.value(), k, out);
    } else {
      std::string v = it.value().dump();
      if (k.size() >= 5 && k.compare(k.size() - 5, 5, "bytes") == 0 && it.value().is_number())
        v = human_bytes(it.value().get<double>());
      out += (out.empty() ? "" : "  ") + k + "=" + v;
    }
  }
}

void print_stats(const json& j) {
  for (const auto& i : j["interfaces"]) {
    std::printf("interface %s\n", i["name"].get<std::string>().c_str());
    for (const auto& m : i["modules"]) {
      std::printf("  %s\n", m["name"].get<std::string>().c_str());
      std::string flat;
      flatten(m["stats"], "", flat);
      if (!flat.empty()) std::printf("    %s\n", flat.c_str());
      for (const auto& p : m["programs"]) {
        for (const auto& v : p["verdicts"])
          std::printf("    %-12s %-6s %-22s %12llu pkts %12s\n", p["program"].get<std::string>().c_str(),
                      v["verdict"].get<std::string>().c_str(), v["reason"].get<std::string>().c_str(),
                      (unsigned long long)v["packets"], human_bytes(v["bytes"].get<double>()).c_str());
      }
    }
  }
}

void print_flows(const json& j) {
  for (const auto& i : j["interfaces"]) {
    std::printf("interface %s: %llu flows\n", i["name"].get<std::string>().c_str(),
                (unsigned long long)i["total"]);
    std::printf("  %-7s %-5s %-44s %10s %12s %6s %8s\n", "dir", "proto", "flow", "packets", "bytes", "ce",
                "retrans?");
    for (const auto& f : i["flows"]) {
      std::string flow = f["src"].get<std::string>() + ":" + std::to_string(f["sport"].get<int>()) + " > " +
                         f["dst"].get<std::string>() + ":" + std::to_string(f["dport"].get<int>());
      std::printf("  %-7s %-5s %-44s %10llu %12s %6llu %8llu\n", f["dir"].get<std::string>().c_str(),
                  f["proto"].get<std::string>().c_str(), flow.c_str(), (unsigned long long)f["packets"],
                  human_bytes(f["bytes"].get<double>()).c_str(), (unsigned long long)f["ce_packets"],
                  (unsigned long long)f["retrans_hints"]);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sluicectl: query and control a running sluiced"};
  std::string socket = "/run/sluice/sluiced.sock";
  bool as_json = false;
  app.add_option("-s,--socket", socket, "control socket of sluiced");
  app.add_flag("--json", as_json, "print the raw JSON reply");
  app.require_subcommand(1);
  auto* status = app.add_subcommand("status", "agent, interfaces, attachments, kernel features");
  auto* stats = app.add_subcommand("stats", "verdict counters per program and per-module statistics");
  auto* flows = app.add_subcommand("flows", "per-flow counters, largest first");
  auto* config = app.add_subcommand("config", "the configuration in effect");
  auto* reload = app.add_subcommand("reload", "reload the configuration file (like SIGHUP)");
  auto* sw = app.add_subcommand("switch", "switch mode: per port and queue depth, pause, packets, control frames");
  auto* top_cmd = app.add_subcommand("top", "TOP: clock state, expiry threshold, tokens per priority, flows");
  std::string iface;
  size_t top = 20;
  flows->add_option("-i,--iface", iface, "only this interface");
  flows->add_option("-n,--top", top, "show at most N flows per interface (0 = all)");
  for (auto* sc : {status, stats, flows, config, reload, sw, top_cmd}) sc->add_flag("--json", as_json, "print the raw JSON reply");
  CLI11_PARSE(app, argc, argv);

  json req;
  if (*status) req = {{"cmd", "status"}};
  if (*stats) req = {{"cmd", "stats"}};
  if (*flows) req = {{"cmd", "flows"}, {"iface", iface}, {"limit", top}};
  if (*config) req = {{"cmd", "config"}};
  if (*reload) req = {{"cmd", "reload"}};
  if (*sw) req = {{"cmd", "status"}};
  if (*top_cmd) req = {{"cmd", "stats"}};
  json reply;
  try {
    reply = sluice::control_request(socket, req);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluicectl: %s\n", e.what());
    return 2;
  }
  if (!reply.value("ok", false)) {
    std::fprintf(stderr, "sluicectl: %s\n", reply.value("error", std::string("request failed")).c_str());
    return 1;
  }
  if (*sw) {
    // The switch mode's part of the status; absent when [switch] lists no ports.
    if (!reply.contains("switch")) {
      std::fprintf(stderr, "sluicectl: sluiced is not in switch mode ([switch] ports is empty)\n");
      return 1;
    }
    if (as_json) std::cout << reply["switch"].dump(2) << "\n";
    else std::cout << sluice::sw::render_switch_text(reply["switch"]);
    return 0;
  }
  if (*top_cmd) {
    json v = sluice::top::view_from_stats(reply);
    try {
      std::cout << (as_json ? v.dump(2) + "\n" : sluice::top::render_text(v));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sluicectl: unexpected reply: %s\n", e.what());
      return 1;
    }
    return v["interfaces"].empty() ? 3 : 0;
  }
  if (as_json) {
    reply.erase("ok");
    std::cout << reply.dump(2) << "\n";
    return 0;
  }
  try {
    if (*status) print_status(reply);
    if (*stats) print_stats(reply);
    if (*flows) print_flows(reply);
    if (*config) std::cout << reply["config"].dump(2) << "\n";
    if (*reload) std::printf("configuration reloaded\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluicectl: unexpected reply: %s\n", e.what());
    return 1;
  }
  return 0;
}
