#include "mechanisms/top/clock.h"

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cctype>
#include <sstream>
#include <vector>

namespace sluice::top {

ClockSample shared_clock_sample() {
  ClockSample s;
  s.shared = true;
  s.port_state = "SHARED";
  return s;
}

bool synced(const ClockSample& s) {
  return s.shared || (s.have_ptp && (s.port_state == "SLAVE" || s.port_state == "MASTER"));
}

ExpirySettings expiry_for(const ClockSample& s, uint64_t threshold_ns, uint64_t bound_ns) {
  ExpirySettings e;
  e.threshold_ns = threshold_ns;
  uint64_t off = static_cast<uint64_t>(std::llabs(s.offset_ns));
  if (s.shared) return e;
  if (!s.have_ptp) {
    e.widen_ns = bound_ns;
    e.why = "no PTP state (ptp4l not answering): threshold widened by the bound";
  } else if (!synced(s)) {
    e.widen_ns = bound_ns;
    e.why = "PTP port " + s.port_state + ", not synced: threshold widened by the bound";
  } else if (off > bound_ns) {
    e.widen_ns = off + bound_ns;
    e.why = "PTP offset " + std::to_string(s.offset_ns) + " ns above the bound: threshold widened";
  }
  return e;
}

int64_t local_offset_ns(const ClockSample& s, uint64_t bound_ns) {
  if (s.shared || !synced(s) || static_cast<uint64_t>(std::llabs(s.offset_ns)) > bound_ns) return s.injected_ns;
  return s.injected_ns - s.offset_ns;
}

uint64_t derive_threshold_ns(uint64_t base_one_way_ns, double link_bps, double token_share, unsigned token_queue,
                             unsigned token_frame_bytes) {
  double per_hop = token_queue * token_frame_bytes * 8e9 / (link_bps * token_share);
  return base_one_way_ns + static_cast<uint64_t>(2 * per_hop);
}

std::map<std::string, std::map<std::string, std::string>> parse_pmc(const std::string& text) {
  std::map<std::string, std::map<std::string, std::string>> out;
  std::istringstream in(text);
  std::string line, current;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<std::string> w;
    for (std::string t; ls >> t;) w.push_back(t);
    if (w.empty()) continue;
    auto resp = std::find(w.begin(), w.end(), "MANAGEMENT");
    if (w.size() >= 3 && std::find(w.begin(), w.end(), "RESPONSE") != w.end() && resp != w.end() &&
        resp + 1 != w.end()) {
      current = *(resp + 1);
      continue;
    }
    if (line.rfind("\t\t", 0) == 0 && !current.empty() && w.size() >= 2) out[current][w[0]] = w[1];
  }
  return out;
}

static std::optional<int64_t> num(const std::map<std::string, std::string>& m, const char* k) {
  auto it = m.find(k);
  if (it == m.end()) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end || !std::isfinite(v)) return std::nullopt;
  return static_cast<int64_t>(std::llround(v));
}

ClockSample sample_from_pmc(const std::string& text) {
  ClockSample s;
  auto r = parse_pmc(text);
  auto cds = r.find("CURRENT_DATA_SET");
  auto pds = r.find("PORT_DATA_SET");
  if (cds == r.end() || pds == r.end()) return s;
  auto off = num(cds->second, "offsetFromMaster");
  auto delay = num(cds->second, "meanPathDelay");
  auto steps = num(cds->second, "stepsRemoved");
  auto st = pds->second.find("portState");
  if (!off || !delay || !steps || st == pds->second.end()) return s;
  s.have_ptp = true;
  s.offset_ns = *off;
  s.path_delay_ns = *delay;
  s.steps_removed = static_cast<int>(*steps);
  s.port_state = st->second;
  return s;
}

ClockSample read_ptp4l(const std::string& uds_path) {
  for (char c : uds_path)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '/' || c == '.' || c == '_' || c == '-'))
      return {};  // never hand odd characters to the shell
  std::string cmd = "pmc -u -b 0 -s " + uds_path + " 'GET CURRENT_DATA_SET' 'GET PORT_DATA_SET' 2>/dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return {};
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  pclose(f);
  return sample_from_pmc(text);
}

}  // namespace sluice::top
