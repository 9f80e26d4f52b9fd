#include "top_config.h"

#include <arpa/inet.h>

#include <cctype>

#include "mechanisms/top/clock.h"

namespace sluice {

uint64_t TopConfig::threshold_ns() const {
  if (threshold_us) return uint64_t(*threshold_us) * 1000;
  // top-tpds20 §5.1: T = base one-way delay + 2 x max per-hop token queueing.
  return top::derive_threshold_ns(uint64_t(base_one_way_us) * 1000, link_mbit * 1e6, token_share, token_queue,
                                  token_frame_bytes);
}

namespace {

using S = TopConfig;

// peer_clock_offset_ns = { "10.0.0.2" = -20000000, ... }: keys are IPv4/IPv6
// addresses, values nanoseconds within +-10 s.
Field<S> peer_offsets() {
  const char* k = "peer_clock_offset_ns";
  auto parse = [k](ConfigReader& r, S& s) {
    auto n = r.node(k);
    if (!n) return;
    auto t = n->as_table();
    if (!t) return r.problem(k, n, "expected a table of \"address\" = nanoseconds, e.g. { \"10.0.0.2\" = -20000000 }");
    std::map<std::string, int64_t> m;
    for (const auto& [key, v] : *t) {
      std::string addr(key.str());
      std::string where = std::string(k) + "." + addr;
      unsigned char buf[16];
      if (inet_pton(AF_INET, addr.c_str(), buf) != 1 && inet_pton(AF_INET6, addr.c_str(), buf) != 1) {
        r.problem(where, &v, "not an IPv4 or IPv6 address");
        continue;
      }
      auto x = v.value<int64_t>();
      if (!v.is_integer() || !x) {
        r.problem(where, &v, "expected an integer (nanoseconds)");
        continue;
      }
      if (*x < -10'000'000'000LL || *x > 10'000'000'000LL) {
        r.problem(where, &v, "out of range [-10000000000, 10000000000]");
        continue;
      }
      m[addr] = *x;
    }
    if (m.size() > 1024) return r.problem(k, n, "at most 1024 peers");
    s.peer_clock_offset_ns = m;
  };
  auto to_json = [](const S& s) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [a, v] : s.peer_clock_offset_ns) j[a] = v;
    return j;
  };
  return {k, parse, to_json, "{ \"10.0.0.2\" = 1000 }"};
}

void validate(ConfigReader& r, S& s) {
  bool path_ok = !s.ptp_uds.empty() && s.ptp_uds[0] == '/';
  for (char c : s.ptp_uds)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '/' || c == '.' || c == '_' || c == '-')) path_ok = false;
  if (!path_ok)
    r.problem("ptp_uds", r.table().get("ptp_uds"), "expected an absolute path of letters, digits and / . _ -");
  if (s.threshold_us) return;
  uint64_t t = s.threshold_ns();
  if (t > 10'000'000'000ULL)
    r.problem("token_share", r.table().get("token_share"),
              "the derived threshold (" + std::to_string(t / 1000) +
                  " us) is above 10 s: check link_mbit, token_share, token_queue or set threshold_us");
}

}  // namespace

const ConfigSection& top_section() {
  static const ConfigSection s =
      make_section<S>(S::kSection,
                      {
                          field::optional_integer("threshold_us", &S::threshold_us, 1, 10'000'000),
                          field::integer("base_one_way_us", &S::base_one_way_us, 0, 10'000'000),
                          field::integer("link_mbit", &S::link_mbit, 1, 1'000'000),
                          field::number("token_share", &S::token_share, 0.001, 0.5),
                          field::integer("token_queue", &S::token_queue, 1, 4096),
                          field::integer("token_frame_bytes", &S::token_frame_bytes, 64, 1600),
                          field::flag("expire", &S::expire),
                          field::integer("port", &S::port, 1, 65535),
                          field::choice("clock_source", &S::clock_source,
                                        {{"ptp4l", TopClockSource::Ptp4l}, {"shared", TopClockSource::Shared}}),
                          field::text("ptp_uds", &S::ptp_uds, "\"/run/ptp4l-lab\""),
                          field::integer("clock_poll_ms", &S::clock_poll_ms, 10, 60'000),
                          field::integer("offset_bound_us", &S::offset_bound_us, 0, 10'000'000),
                          field::integer("clock_offset_ns", &S::clock_offset_ns, -10'000'000'000LL, 10'000'000'000LL),
                          peer_offsets(),
                          field::integer("fail_open_ms", &S::fail_open_ms, 1, 60'000),
                      },
                      validate);
  return s;
}

}  // namespace sluice
