#include "switch/view.h"

#include <cstdio>

#include "ctl/print.h"

namespace sluice::sw {

// The status reply is sluicectl's untrusted input: every lookup goes through
// find() (the const operator[] reads past the object for a missing key) and
// every counter through ctl::as_count.
namespace {
const nlohmann::json& member(const nlohmann::json& j, const char* k) {
  static const nlohmann::json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(k);
  return it == j.end() ? kNull : *it;
}
// A counter, 0 when absent or not a count.
uint64_t u(const nlohmann::json& j, const char* k) {
  unsigned long long n = 0;
  return ctl::as_count(member(j, k), &n) ? n : 0;
}
}  // namespace

std::string render_switch_text(const nlohmann::json& sw) {
  std::string s;
  char line[512];
  std::snprintf(line, sizeof(line), "switch logic %s, fail-open after %llu ms\n",
                sw.value("logic", std::string("?")).c_str(), (unsigned long long)u(sw, "fail_open_ms"));
  s += line;
  for (const auto& p : sw.value("ports", nlohmann::json::array())) {
    const auto& c = member(p, "control");
    std::snprintf(line, sizeof(line),
                  "port %s (%s) id %llu  %.0f Mbit/s  control in %llu out %llu rejected %llu  pauses %llu "
                  "(failed %llu)\n",
                  p.value("name", std::string("?")).c_str(), p.value("role", std::string("?")).c_str(),
                  (unsigned long long)u(p, "port_id"), double(u(p, "rate_bps")) / 1e6, (unsigned long long)u(c, "in"),
                  (unsigned long long)u(c, "out"), (unsigned long long)u(c, "rejected"),
                  (unsigned long long)u(p, "pause_changes"), (unsigned long long)u(p, "pause_failures"));
    s += line;
    const auto& rejected = member(c, "rejected_by_reason");
    if (rejected.is_object() && !rejected.empty()) {
      s += "  rejected:";
      for (auto it = rejected.begin(); it != rejected.end(); ++it)
        s += " " + it.key() + "=" + std::to_string(u(rejected, it.key().c_str()));
      s += "\n";
    }
    s += "  queue    depth_B  depth_pkts  paused     pkts_in    pkts_out   dropped\n";
    auto row = [&](const std::string& name, const nlohmann::json& q, const char* paused) {
      std::snprintf(line, sizeof(line), "  %-5s %10llu %11llu  %-6s %11llu %11llu %9llu\n", name.c_str(),
                    (unsigned long long)u(q, "depth_bytes"), (unsigned long long)u(q, "depth_pkts"), paused,
                    (unsigned long long)u(q, "pkts_in"), (unsigned long long)u(q, "pkts_out"),
                    (unsigned long long)u(q, "dropped"));
      s += line;
    };
    for (const auto& q : p.value("queues", nlohmann::json::array()))
      row(std::to_string(u(q, "queue")), q, q.value("paused", false) ? "yes" : "no");
    if (p.is_object() && p.contains("fallback")) row("fb", member(p, "fallback"), "never");
  }
  if (sw.is_object() && sw.contains("logic_state"))
    s += "logic state: " + member(sw, "logic_state").dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n";
  return s;
}

}  // namespace sluice::sw
