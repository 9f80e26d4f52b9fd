#include "ctl/print.h"

#include <stdexcept>

namespace sluice::ctl {

using nlohmann::json;

namespace {

// Lookups go through at(): a missing key throws json::out_of_range (the
// const operator[] would read past the object).
std::string str(const json& j, const char* key) { return j.at(key).get<std::string>(); }

// Counters: a non-negative integer, or a float that fits (json's own get<>
// would convert an out-of-range float with undefined behaviour).
unsigned long long count(const json& j, const char* key) {
  const json& v = j.at(key);
  unsigned long long n = 0;
  if (as_count(v, &n)) return n;
  throw std::out_of_range(std::string("\"") + key +
                          "\" is not a count: " + v.dump(-1, ' ', false, json::error_handler_t::replace));
}
long long integer(const json& j, const char* key) {
  const json& v = j.at(key);
  if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<long long>();
  if (v.is_number_unsigned() && v.get<unsigned long long>() <= 9223372036854775807ull) return v.get<long long>();
  throw std::out_of_range(std::string("\"") + key +
                          "\" is not an integer: " + v.dump(-1, ' ', false, json::error_handler_t::replace));
}
double number(const json& j, const char* key) {
  const json& v = j.at(key);
  if (!v.is_number()) throw std::out_of_range(std::string("\"") + key + "\" is not a number");
  return v.get<double>();
}

// "ingress.packets=12 ingress.bytes=3.4 MiB ..." for a module's stats object.
void flatten(const json& j, const std::string& prefix, std::string& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    std::string k = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it.value().is_object()) {
      flatten(it.value(), k, out);
    } else {
      std::string v = it.value().dump(-1, ' ', false, json::error_handler_t::replace);
      if (k.size() >= 5 && k.compare(k.size() - 5, 5, "bytes") == 0 && it.value().is_number())
        v = human_bytes(it.value().get<double>());
      out += (out.empty() ? "" : "  ") + k + "=" + v;
    }
  }
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

bool as_count(const json& v, unsigned long long* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<unsigned long long>();
    return true;
  }
  if (v.is_number_integer() && v.get<long long>() >= 0) {
    *out = static_cast<unsigned long long>(v.get<long long>());
    return true;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (d >= 0 && d < 18446744073709551616.0) {
      *out = static_cast<unsigned long long>(d);
      return true;
    }
  }
  return false;
}

std::string human_bytes(double b) {
  const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024 && i < 4) b /= 1024, ++i;
  char s[400];  // %.0f of the largest double is 309 digits
  std::snprintf(s, sizeof(s), i ? "%.1f %s" : "%.0f %s", b, u[i]);
  return s;
}

void print_status(std::FILE* out, const json& j) {
  std::fprintf(out, "sluiced %s  pid %lld  up %.0fs  kernel %s\n", str(j, "version").c_str(), integer(j, "pid"),
               number(j, "uptime_s"), str(j, "kernel").c_str());
  std::fprintf(out, "config %s  attach %s  pins %s\n", str(j, "config_path").c_str(), str(j, "attach_mode").c_str(),
               str(j, "pin_root").c_str());
  std::fprintf(out, "metrics %s  reloads ok %llu rejected %llu\n", str(j, "metrics").c_str(),
               count(j.at("reloads"), "ok"), count(j.at("reloads"), "rejected"));
  for (const auto& i : j.at("interfaces")) {
    std::fprintf(out, "interface %s (%s)\n", str(i, "name").c_str(), str(i, "role").c_str());
    for (const auto& m : i.at("modules")) {
      std::fprintf(out, "  %s\n", str(m, "name").c_str());
      const auto& st = m.at("status");
      if (st.contains("attachments"))
        for (const auto& a : st.at("attachments"))
          std::fprintf(out, "    %-22s %-8s %s\n", str(a, "program").c_str(), str(a, "hook").c_str(),
                       str(a, "mode").c_str());
      if (st.is_object())
        for (auto it = st.begin(); it != st.end(); ++it)
          if (it.key() != "attachments") std::fprintf(out, "    %s: %s\n", it.key().c_str(), dump(it.value()).c_str());
    }
  }
  if (j.contains("congestion_control"))
    for (const auto& c : j.at("congestion_control")) {
      std::fprintf(out, "congestion control %s (%s) %s", c.value("name", "?").c_str(),
                   c.value("algorithm", "?").c_str(), c.value("registered", false) ? "registered" : "NOT registered");
      for (auto it = c.begin(); it != c.end(); ++it)
        if (it.key() != "name" && it.key() != "algorithm" && it.key() != "registered")
          std::fprintf(out, " %s=%s", it.key().c_str(), dump(it.value()).c_str());
      std::fprintf(out, "\n");
    }
  std::fprintf(out, "kernel features:");
  const auto& features = j.at("features");
  for (auto it = features.begin(); it != features.end(); ++it)
    std::fprintf(out, " %s=%s", it.key().c_str(), it.value().at("ok").get<bool>() ? "yes" : "no");
  std::fprintf(out, "\n");
}

void print_stats(std::FILE* out, const json& j) {
  for (const auto& i : j.at("interfaces")) {
    std::fprintf(out, "interface %s\n", str(i, "name").c_str());
    for (const auto& m : i.at("modules")) {
      std::fprintf(out, "  %s\n", str(m, "name").c_str());
      std::string flat;
      const auto& stats = m.at("stats");
      if (stats.is_object()) flatten(stats, "", flat);
      if (!flat.empty()) std::fprintf(out, "    %s\n", flat.c_str());
      for (const auto& p : m.at("programs")) {
        for (const auto& v : p.at("verdicts"))
          std::fprintf(out, "    %-12s %-6s %-22s %12llu pkts %12s\n", str(p, "program").c_str(),
                       str(v, "verdict").c_str(), str(v, "reason").c_str(), count(v, "packets"),
                       human_bytes(number(v, "bytes")).c_str());
      }
    }
  }
}

void print_flows(std::FILE* out, const json& j) {
  for (const auto& i : j.at("interfaces")) {
    std::fprintf(out, "interface %s: %llu flows\n", str(i, "name").c_str(), count(i, "total"));
    std::fprintf(out, "  %-7s %-5s %-44s %10s %12s %6s %8s\n", "dir", "proto", "flow", "packets", "bytes", "ce",
                 "retrans?");
    for (const auto& f : i.at("flows")) {
      std::string flow = str(f, "src") + ":" + std::to_string(integer(f, "sport")) + " > " + str(f, "dst") + ":" +
                         std::to_string(integer(f, "dport"));
      std::fprintf(out, "  %-7s %-5s %-44s %10llu %12s %6llu %8llu\n", str(f, "dir").c_str(), str(f, "proto").c_str(),
                   flow.c_str(), count(f, "packets"), human_bytes(number(f, "bytes")).c_str(), count(f, "ce_packets"),
                   count(f, "retrans_hints"));
    }
  }
}

}  // namespace sluice::ctl
