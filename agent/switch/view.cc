#include "switch/view.h"

#include <cstdio>

namespace sluice::sw {

namespace {
uint64_t u(const nlohmann::json& j, const char* k) {
  return j.contains(k) && j[k].is_number() ? j[k].get<uint64_t>() : 0;
}
}  // namespace

std::string render_switch_text(const nlohmann::json& sw) {
  std::string s;
  char line[512];
  std::snprintf(line, sizeof(line), "switch logic %s, fail-open after %llu ms\n",
                sw.value("logic", std::string("?")).c_str(), (unsigned long long)u(sw, "fail_open_ms"));
  s += line;
  for (const auto& p : sw.value("ports", nlohmann::json::array())) {
    const auto& c = p["control"];
    std::snprintf(line, sizeof(line),
                  "port %s (%s) id %llu  %.0f Mbit/s  control in %llu out %llu rejected %llu  pauses %llu "
                  "(failed %llu)\n",
                  p.value("name", std::string("?")).c_str(), p.value("role", std::string("?")).c_str(),
                  (unsigned long long)u(p, "port_id"), double(u(p, "rate_bps")) / 1e6, (unsigned long long)u(c, "in"),
                  (unsigned long long)u(c, "out"), (unsigned long long)u(c, "rejected"),
                  (unsigned long long)u(p, "pause_changes"), (unsigned long long)u(p, "pause_failures"));
    s += line;
    if (c.contains("rejected_by_reason") && !c["rejected_by_reason"].empty()) {
      s += "  rejected:";
      for (auto it = c["rejected_by_reason"].begin(); it != c["rejected_by_reason"].end(); ++it)
        s += " " + it.key() + "=" + std::to_string(it.value().get<uint64_t>());
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
    if (p.contains("fallback")) row("fb", p["fallback"], "never");
  }
  if (sw.contains("logic_state")) s += "logic state: " + sw["logic_state"].dump() + "\n";
  return s;
}

}  // namespace sluice::sw
