#include "pac_config.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdlib>

#include "sluice/pac.h"

namespace sluice {

namespace {

using S = PacConfig;

// rwnd_cap_bytes: "auto" (the default), 0 (off) or a byte count.
struct RwndCap {
  static void parse(ConfigReader& r, S& pc) {
    pc.rwnd_cap_bytes = kAuto;
    auto n = r.node("rwnd_cap_bytes");
    if (!n) return;
    auto v = n->value<int64_t>();
    auto str = n->as_string();
    if (str && str->get() == "auto") return;
    if (!v || str || (*v != 0 && (*v < 1024 || *v > (int64_t(1) << 30))))
      return r.problem("rwnd_cap_bytes", n, "expected \"auto\", 0 (off) or a byte count from 1024 to 1073741824");
    pc.rwnd_cap_bytes = uint32_t(*v);
  }
  // "auto": no flow may have more in flight than the threshold lets all of
  // them have together (the buffer's payload, eq. 2's largest threshold),
  // so clamping its window there takes nothing PAC would allow, and makes a
  // long flow's in-flight bytes exact (README "PAC": iperf3 0.99 of the
  // baseline with the clamp, 0.94 without). With hold_requests and
  // cap_to_response the cap decides how many responses are under way at
  // once: a third of buffer_bytes, so three are, and every flow's share is
  // counted exactly from sequence numbers (the in-flight bound), new
  // connections included (docs/pac.md, "New connections": 0 RTO rounds at
  // N = 32-256 where the estimate had up to 10 of 10). hold_requests
  // without cap_to_response has no bound: off, as before.
  static void resolve(S& pc) {
    if (pc.rwnd_cap_bytes != kAuto) return;
    if (pc.hold_requests)
      pc.rwnd_cap_bytes =
          pc.cap_to_response ? uint32_t(std::clamp<uint64_t>(pc.buffer_bytes / 3, 4096, uint64_t(1) << 30)) : 0;
    else
      pc.rwnd_cap_bytes =
          uint32_t(std::clamp<uint64_t>(sluice_pac_payload_capacity(pc.buffer_bytes), 4096, uint64_t(1) << 30));
  }
  // Not a valid cap (above 1 GiB): marks "auto" until resolve().
  static constexpr uint32_t kAuto = 0xffffffffu;
};

void parse_lambda(ConfigReader& r, S& pc) {
  if (auto n = r.node("lambda")) {
    auto v = n->value<double>();
    if (!v) r.problem("lambda", n, "expected a number");
    else if (*v <= 0 || *v >= 1) r.problem("lambda", n, "must be in (0, 1)");
    else pc.lambda = *v;
  }
}

void parse_levels(ConfigReader& r, S& pc) {
  if (auto n = r.node("mlfq_level_bytes")) {
    auto arr = n->as_array();
    std::vector<uint64_t> v;
    bool ok = arr != nullptr;
    if (arr)
      for (size_t i = 0; i < arr->size(); ++i) {
        auto x = arr->get(i)->value<int64_t>();
        if (!x || *x <= 0 || (!v.empty() && uint64_t(*x) <= v.back())) ok = false;
        else v.push_back(uint64_t(*x));
      }
    if (!ok || v.size() > 7)
      r.problem("mlfq_level_bytes", n, "expected up to 7 increasing positive byte counts (levels = count + 1)");
    else pc.mlfq_level_bytes = v;
  }
}

nlohmann::json ranges_json(const std::vector<PacPortRange>& v) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& x : v)
    a.push_back(x.lo == x.hi ? std::to_string(x.lo) : std::to_string(x.lo) + "-" + std::to_string(x.hi));
  return a;
}

Field<S> ports(const char* k, std::vector<PacPortRange> S::*m, const char* alt) {
  auto parse = [k, m](ConfigReader& r, S& pc) {
    auto n = r.node(k);
    if (!n) return;
    auto arr = n->as_array();
    if (!arr) return r.problem(k, n, "expected an array of ports or \"lo-hi\" ranges");
    std::vector<PacPortRange> v;
    for (size_t i = 0; i < arr->size(); ++i) {
      const toml::node& e = *arr->get(i);
      std::string key = std::string(k) + "[" + std::to_string(i) + "]";
      long lo = -1, hi = -1;
      if (auto x = e.value<int64_t>()) {
        lo = hi = long(*x);
      } else if (auto str = e.as_string()) {
        const std::string& q = str->get();
        char* end = nullptr;
        lo = std::strtol(q.c_str(), &end, 10);
        if (end && *end == '-') hi = std::strtol(end + 1, &end, 10);
        else hi = lo;
        if (!end || *end) lo = -1;
      }
      if (lo < 1 || hi < lo || hi > 65535) {
        r.problem(key, &e, "expected a port 1-65535 or a range \"lo-hi\"");
        continue;
      }
      v.push_back({uint16_t(lo), uint16_t(hi)});
    }
    if (v.size() > 8) return r.problem(k, n, "at most 8 entries");
    pc.*m = v;
  };
  return {k, parse, [m](const S& pc) { return ranges_json(pc.*m); }, alt};
}

void parse_prefixes(ConfigReader& r, S& pc) {
  auto n = r.node("remote_prefixes");
  if (!n) return;
  auto arr = n->as_array();
  if (!arr) return r.problem("remote_prefixes", n, "expected an array of CIDR strings");
  std::vector<PacPrefix> v;
  for (size_t i = 0; i < arr->size(); ++i) {
    const toml::node& e = *arr->get(i);
    std::string key = "remote_prefixes[" + std::to_string(i) + "]";
    auto str = e.as_string();
    PacPrefix p;
    bool ok = false;
    if (str) {
      std::string q = str->get();
      auto slash = q.find('/');
      std::string a = q.substr(0, slash);
      p.family = a.find(':') == std::string::npos ? 4 : 6;
      int maxlen = p.family == 4 ? 32 : 128;
      long len = maxlen;
      if (slash != std::string::npos) {
        char* end = nullptr;
        len = std::strtol(q.c_str() + slash + 1, &end, 10);
        if (!end || *end || slash + 1 == q.size()) len = -1;
      }
      ok = len >= 0 && len <= maxlen && inet_pton(p.family == 4 ? AF_INET : AF_INET6, a.c_str(), p.addr) == 1;
      p.len = uint8_t(len);
    }
    if (!ok) r.problem(key, &e, "expected an IPv4/IPv6 CIDR such as \"10.0.0.0/8\"");
    else v.push_back(p);
  }
  if (v.size() > 8) r.problem("remote_prefixes", n, "at most 8 entries");
  else pc.remote_prefixes = v;
}

nlohmann::json prefixes_json(const S& pc) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& x : pc.remote_prefixes) {
    char buf[INET6_ADDRSTRLEN] = "";
    inet_ntop(x.family == 4 ? AF_INET : AF_INET6, x.addr, buf, sizeof(buf));
    a.push_back(std::string(buf) + "/" + std::to_string(x.len));
  }
  return a;
}

void validate(ConfigReader& r, S& pc) {
  RwndCap::resolve(pc);
  if (pc.max_hold_ms * 1000 < pc.control_interval_min_us)
    r.problem("max_hold_ms", r.table().get("max_hold_ms"), "shorter than control_interval_min_us");
}

}  // namespace

const ConfigSection& pac_section() {
  static const ConfigSection s = make_section<S>(
      S::kSection,
      {
          field::integer("buffer_bytes", &S::buffer_bytes, 3000, int64_t(1) << 32),
          {"mlfq_level_bytes", parse_levels, [](const S& pc) { return nlohmann::json(pc.mlfq_level_bytes); },
           "[10000, 40000]"},
          {"lambda", parse_lambda, [](const S& pc) { return nlohmann::json(pc.lambda); }, "0.5"},
          field::flag("ecn", &S::ecn),
          field::integer("max_held", &S::max_held, 1, 1 << 20),
          field::integer("max_hold_ms", &S::max_hold_ms, 1, 10000),
          field::integer("max_hold_request_ms", &S::max_hold_request_ms, 1, 10000),
          field::integer("fail_open_ms", &S::fail_open_ms, 10, 100),
          field::integer("reinject_mark", &S::reinject_mark, 1, 0xffffffffll),
          field::integer("idle_timeout_s", &S::idle_timeout_s, 1, 86400),
          field::integer("control_interval_min_us", &S::control_interval_min_us, 100, 1000000),
          field::flag("account_requests", &S::account_requests),
          field::flag("cap_to_response", &S::cap_to_response),
          field::flag("hold_requests", &S::hold_requests),
          field::integer("request_max_bytes", &S::request_max_bytes, 1, 65535),
          field::integer("trigger_age_min_us", &S::trigger_age_min_us, 0, 1000000),
          field::integer("busy_poll_us", &S::busy_poll_us, 0, 10000),
          {"rwnd_cap_bytes", RwndCap::parse, [](const S& pc) { return nlohmann::json(pc.rwnd_cap_bytes); }, "8192"},
          ports("local_ports", &S::local_ports, "[80]"),
          ports("remote_ports", &S::remote_ports, "[\"5000-5100\"]"),
          {"remote_prefixes", parse_prefixes, prefixes_json, "[\"10.0.0.0/8\"]"},
      },
      validate);
  return s;
}

}  // namespace sluice
