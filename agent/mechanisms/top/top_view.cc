#include "mechanisms/top/top_view.h"

#include <cstdio>

namespace sluice::top {

nlohmann::json view_from_stats(const nlohmann::json& reply) {
  nlohmann::json out = {{"interfaces", nlohmann::json::array()}};
  if (!reply.contains("interfaces") || !reply["interfaces"].is_array()) return out;
  for (const auto& i : reply["interfaces"]) {
    if (!i.contains("modules") || !i["modules"].is_array()) continue;
    for (const auto& m : i["modules"])
      if (m.value("name", "") == "top" && m.contains("stats"))
        out["interfaces"].push_back({{"name", i.value("name", "?")}, {"top", m["stats"]}});
  }
  return out;
}

namespace {

std::string fmt(const char* f, auto... a) {
  char b[512];
  std::snprintf(b, sizeof(b), f, a...);
  return b;
}

uint64_t u(const nlohmann::json& j, const char* k) {
  return j.contains(k) && j[k].is_number() ? j[k].get<uint64_t>() : 0;
}
int64_t s64(const nlohmann::json& j, const char* k) {
  return j.contains(k) && j[k].is_number() ? j[k].get<int64_t>() : 0;
}

}  // namespace

std::string render_text(const nlohmann::json& v) {
  std::string s;
  if (v["interfaces"].empty()) return "no interface runs TOP\n";
  for (const auto& i : v["interfaces"]) {
    const auto& t = i["top"];
    const auto& c = t["clock"];
    s += fmt("interface %s: T = %.1f us, expiry %s, port %llu\n", i.value("name", "?").c_str(),
             u(t, "threshold_ns") / 1000.0, t.value("expire", true) ? "on" : "off (count only)",
             (unsigned long long)u(t, "port"));
    s += fmt("  clock %s (%s, source %s): offset %lld ns, path delay %lld ns, steps removed %lld\n",
             c.value("state", "?").c_str(), c.value("port_state", "?").c_str(), c.value("source", "?").c_str(),
             (long long)s64(c, "offset_ns"), (long long)s64(c, "path_delay_ns"), (long long)s64(c, "steps_removed"));
    s += fmt("  bound %.1f us, injected offset %lld ns, applied local offset %lld ns\n",
             u(c, "offset_bound_ns") / 1000.0, (long long)s64(c, "injected_offset_ns"),
             (long long)s64(c, "local_offset_ns"));
    if (u(c, "widen_ns"))
      s += fmt("  T WIDENED by %.1f us: %s\n", u(c, "widen_ns") / 1000.0, c.value("widened_because", "").c_str());
    s += "  tokens     prio0      prio1      prio2      prio3      prio4      prio5\n";
    for (const char* k : {"sent", "valid", "expired", "future"}) {
      s += fmt("  %-8s", k);
      const auto& a = t["tokens"][k];
      for (size_t p = 0; p < a.size(); p++) s += fmt(" %10llu", (unsigned long long)a[p].get<uint64_t>());
      s += "\n";
    }
    if (u(t, "fail_open"))
      s += fmt("  %llu expired tokens passed: sluiced was gone or stopped for over %llu ms (fail open)\n",
               (unsigned long long)u(t, "fail_open"), (unsigned long long)u(t, "fail_open_ms"));
    const auto& f = t["flows"];
    s += fmt("  flows: %llu (most recent first)\n", (unsigned long long)u(f, "total"));
    if (!f["flows"].empty())
      s += fmt("  %-28s %-20s %4s %10s %10s %10s %10s %10s\n", "peer", "flow", "prio", "tok_sent", "tok_valid",
               "tok_expir", "data_sent", "data_recv");
    for (const auto& r : f["flows"])
      s += fmt("  %-28s %-20llu %4llu %10llu %10llu %10llu %10llu %10llu\n", r.value("peer", "?").c_str(),
               (unsigned long long)u(r, "flow_id"), (unsigned long long)u(r, "priority"),
               (unsigned long long)u(r, "tokens_sent"), (unsigned long long)u(r, "tokens_valid"),
               (unsigned long long)u(r, "tokens_expired"), (unsigned long long)u(r, "data_sent"),
               (unsigned long long)u(r, "data_received"));
  }
  return s;
}

}  // namespace sluice::top
