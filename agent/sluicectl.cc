// sluicectl: talks to sluiced over its control socket.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <stdexcept>

#include "core/control.h"
#include "ctl/print.h"
#include "switch/view.h"
#include "mechanisms/bfc/bfc_view.h"
#include "mechanisms/top/top_view.h"

using nlohmann::json;

int main(int argc, char** argv) {
  CLI::App app{"sluicectl: query and control a running sluiced"};
  std::string socket = "/run/sluice/sluiced.sock";
  bool as_json = false;
  int timeout_ms = 5000;
  app.add_option("-s,--socket", socket, "control socket of sluiced");
  app.add_option("-t,--timeout", timeout_ms, "how long to wait for sluiced's answer, in ms")
      ->check(CLI::Range(1, 3600 * 1000));
  app.add_flag("--json", as_json, "print the raw JSON reply");
  app.require_subcommand(1);
  auto* status = app.add_subcommand("status", "agent, interfaces, attachments, kernel features");
  auto* stats = app.add_subcommand("stats", "verdict counters per program and per-module statistics");
  auto* flows = app.add_subcommand("flows", "per-flow counters, largest first");
  auto* config = app.add_subcommand("config", "the configuration in effect");
  auto* reload = app.add_subcommand("reload", "reload the configuration file (like SIGHUP)");
  auto* sw = app.add_subcommand("switch", "switch mode: per port and queue depth, pause, packets, control frames");
  auto* top_cmd = app.add_subcommand("top", "TOP: clock state, expiry threshold, tokens per priority, flows");
  auto* bfc_cmd = app.add_subcommand("bfc", "BFC switch: flow table, queue assignment, pause counters, paused queues");
  std::string iface;
  size_t top = 20;
  flows->add_option("-i,--iface", iface, "only this interface");
  flows->add_option("-n,--top", top, "show at most N flows per interface (0 = all)");
  for (auto* sc : {status, stats, flows, config, reload, sw, top_cmd, bfc_cmd})
    sc->add_flag("--json", as_json, "print the raw JSON reply");
  CLI11_PARSE(app, argc, argv);

  json req;
  if (*status) req = {{"cmd", "status"}};
  if (*stats) req = {{"cmd", "stats"}};
  if (*flows) req = {{"cmd", "flows"}, {"iface", iface}, {"limit", top}};
  if (*config) req = {{"cmd", "config"}};
  if (*reload) req = {{"cmd", "reload"}};
  if (*sw || *bfc_cmd) req = {{"cmd", "status"}};
  if (*top_cmd) req = {{"cmd", "stats"}};
  json reply;
  try {
    reply = sluice::control_request(socket, req, timeout_ms);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluicectl: %s\n", e.what());
    return 2;
  }
  // The reply is untrusted input (whatever listens on the socket path): any
  // shape sluicectl does not expect is reported, never a crash.
  try {
    if (!reply.is_object()) throw std::runtime_error("not a JSON object");
    const auto ok = reply.find("ok");
    if (ok == reply.end() || !ok->is_boolean() || !ok->get<bool>()) {
      const auto err = reply.find("error");
      std::fprintf(stderr, "sluicectl: %s\n",
                   err != reply.end() && err->is_string() ? err->get<std::string>().c_str() : "request failed");
      return 1;
    }
    if (*sw) {
      // The switch mode's part of the status; absent when [switch] lists no ports.
      if (!reply.contains("switch")) {
        std::fprintf(stderr, "sluicectl: sluiced is not in switch mode ([switch] ports is empty)\n");
        return 1;
      }
      if (as_json) std::cout << reply.at("switch").dump(2, ' ', false, json::error_handler_t::replace) << "\n";
      else std::cout << sluice::sw::render_switch_text(reply.at("switch"));
      return 0;
    }
    if (*bfc_cmd) {
      std::string why;
      json v = sluice::bfc::view_from_status(reply, why);
      if (!why.empty()) {
        std::fprintf(stderr, "sluicectl: %s\n", why.c_str());
        return 1;
      }
      std::cout << (as_json ? v.dump(2, ' ', false, json::error_handler_t::replace) + "\n"
                            : sluice::bfc::render_text(v));
      return 0;
    }
    if (*top_cmd) {
      json v = sluice::top::view_from_stats(reply);
      std::cout << (as_json ? v.dump(2, ' ', false, json::error_handler_t::replace) + "\n"
                            : sluice::top::render_text(v));
      return v.at("interfaces").empty() ? 3 : 0;
    }
    if (as_json) {
      reply.erase("ok");
      std::cout << reply.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
      return 0;
    }
    if (*status) sluice::ctl::print_status(stdout, reply);
    if (*stats) sluice::ctl::print_stats(stdout, reply);
    if (*flows) sluice::ctl::print_flows(stdout, reply);
    if (*config) std::cout << reply.at("config").dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    if (*reload) std::printf("configuration reloaded\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluicectl: unexpected reply: %s\n", e.what());
    return 1;
  }
  return 0;
}
