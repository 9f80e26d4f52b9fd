// TOP variants on the deterministic simulated network of the unit tests
// (tests/unit/top_sim.h): Poisson flows from a flow-size CDF between
// `senders` and `receivers` hosts on one switch (1 Gbit/s links, TOP switch
// ports), load relative to the receivers' links. This is a model, not the
// lab: it shows what the protocol logic does when the switch meets R1
// exactly, which the HTB tree does not (docs/top.md).
//   sluice-top-sim-bench --cdf bench/cdf/websearch.cdf --load 0.6 --flows 1000 --variant top
// Variants: tokens (one token class, no expiry: ExpressPass-like), top,
// top-noexpiry. One JSON object on stdout.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "top_sim.h"

using namespace sluice::top;

int main(int argc, char** argv) {
  CLI::App app{"TOP variants on the simulated network"};
  std::string cdf_path, variant = "top";
  double load = 0.6;
  int flows = 1000, senders = 4, receivers = 4;
  unsigned seed = 1;
  std::string flows_out;
  double p_pkts = 0, prio_a = 1, prio_b = 1, min_rate = RateParams{}.min_rate;
  app.add_option("--cdf", cdf_path)->required();
  app.add_option("--load", load);
  app.add_option("--flows", flows);
  app.add_option("--variant", variant)->check(CLI::IsMember({"tokens", "top", "top-noexpiry"}));
  app.add_option("--senders", senders);
  app.add_option("--receivers", receivers);
  app.add_option("--seed", seed);
  app.add_option("--flows-out", flows_out,
                 "write one line per flow: src dst size_bytes start_us fct_us ideal_us, then (after the start, us) "
                 "the SYNC at the receiver, its first token sent, received, its first data received");
  app.add_option("--p-pkts", p_pkts, "log base p of the FCT classes, packets (0: the CDF's largest flow)");
  int classes = 6;
  double rate_mbit = 1000, prop_us = 5, rtt_us = 100;
  app.add_option("--rate-mbit", rate_mbit, "every link's rate");
  app.add_option("--prop-us", prop_us, "propagation per link");
  app.add_option("--rtt-us", rtt_us, "receivers' and senders' rtt_ns (rate-control period, NACK spacing)");
  bool verbose = false;
  app.add_option("--classes", classes, "token classes K (top)");
  std::string fct_class = "remaining";
  std::string spare = "probe";
  bool spare_slots = false;
  app.add_option("--fct-class", fct_class, "x of the FCT classes (top): the flow's remaining or total size")
      ->check(CLI::IsMember({"remaining", "size"}));
  app.add_option("--spare", spare, "a slot no flow's rate allows (top): off, probe (default) or every")
      ->check(CLI::IsMember({"off", "probe", "every"}));
  app.add_flag("--spare-slots", spare_slots, "the same as --spare every");
  bool probe = false;
  app.add_flag("--spare-probe", probe, "the same as --spare probe");
  app.add_flag("--verbose", verbose, "per-class token counts on stderr");
  app.add_option("--prio-a", prio_a);
  app.add_option("--prio-b", prio_b);
  std::vector<double> bounds;
  app.add_option("--bounds", bounds,
                 "explicit FCT class bounds, packets (K - 1 increasing values) instead of §3.2's "
                 "log formula")
      ->delimiter(',');
  app.add_option("--min-rate", min_rate, "ExpressPass rate floor (1: no rate control)");
  std::string schedule;
  app.add_option("--schedule", schedule,
                 "run these flows instead of drawing them: lines 'start_us size_bytes pair' (pair i: sender i mod "
                 "senders to receiver i mod receivers), e.g. a lab run's (bench/top/lab_flows.py --schedule-out)");
  double token_burst = sim::NetConfig{}.token_burst;
  app.add_option("--token-burst", token_burst,
                 "tokens the switches' token group passes back to back (HTB's default in the lab: 16)");

  CLI11_PARSE(app, argc, argv);

  std::vector<std::pair<double, double>> cdf;  // bytes, probability
  std::ifstream in(cdf_path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream is(line);
    double b, p;
    if (is >> b >> p) cdf.push_back({b, p});
  }
  if (cdf.empty()) {
    std::fprintf(stderr, "no CDF in %s\n", cdf_path.c_str());
    return 2;
  }
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  auto draw = [&] {
    double x = u(rng);
    for (size_t i = 0; i < cdf.size(); i++) {
      if (x <= cdf[i].second) {
        double lo_b = i ? cdf[i - 1].first : 1, lo_p = i ? cdf[i - 1].second : 0;
        double f = cdf[i].second > lo_p ? (x - lo_p) / (cdf[i].second - lo_p) : 1;
        return std::max(1.0, lo_b + f * (cdf[i].first - lo_b));
      }
    }
    return cdf.back().first;
  };
  double mean = 0;
  for (int i = 0; i < 100000; i++) mean += draw();
  mean /= 100000;

  const double rate = rate_mbit * 1e6;
  sim::NetConfig nc;
  nc.rate_bps = rate;
  nc.expiry = variant == "top";
  nc.prop_ns = static_cast<uint64_t>(prop_us * 1000);
  nc.token_burst = std::max(1.0, token_burst);
  ReceiverConfig rc;
  // One token and one full data frame per slot, as charged on the wire: the
  // simulated token group (NetConfig::token_share) passes exactly that.
  rc.slot_ns = pacing_slot_ns(rate / 1e6, kDefaultMss);
  rc.rtt_ns = static_cast<uint64_t>(rtt_us * 1000);
  rc.objective = variant == "tokens" ? Objective::kFair : Objective::kFct;
  rc.prio.p = p_pkts > 0 ? p_pkts : std::ceil(cdf.back().first / kDefaultMss);
  rc.prio.a = prio_a;
  rc.prio.classes = classes;
  rc.fct_class_remaining = fct_class == "remaining";
  rc.spare = *parse_spare(probe ? "probe" : spare_slots ? "every" : spare);
  rc.prio.b = prio_b;
  rc.prio.bounds = bounds;
  rc.rate.min_rate = min_rate;
  if (auto e = rc.validate()) {
    std::fprintf(stderr, "%s\n", e->c_str());
    return 2;
  }
  rc.max_flows = 100000;
  SenderConfig sc;
  sc.rtt_ns = rc.rtt_ns;
  sc.max_flows = 100000;
  sim::Net net(nc, senders + receivers, rc, sc);
  double lambda = load * receivers * rate / (8 * mean);  // flows per second
  std::exponential_distribution<double> gap(lambda);
  double t = 0;
  std::vector<std::vector<int>> dst_of(senders);  // per sender, in the order its flows open
  if (!schedule.empty()) {
    std::ifstream sin(schedule);
    if (!sin) {
      std::fprintf(stderr, "cannot read %s\n", schedule.c_str());
      return 2;
    }
    flows = 0;
    for (std::string line; std::getline(sin, line);) {
      std::istringstream is(line);
      double st;
      uint64_t size;
      int pair;
      if (line.empty() || line[0] == '#') continue;
      if (!(is >> st >> size >> pair) || size == 0 || pair < 0) {
        std::fprintf(stderr, "%s: want 'start_us size_bytes pair': %s\n", schedule.c_str(), line.c_str());
        return 2;
      }
      FlowSpec f;
      f.size_bytes = size;
      int s = pair % senders, r = senders + pair % receivers;
      net.open(s, r, f, static_cast<uint64_t>(st * 1e3));
      dst_of[s].push_back(r);
      t = std::max(t, st / 1e6);
      flows++;
    }
  }
  for (int i = 0; schedule.empty() && i < flows; i++) {
    t += gap(rng);
    FlowSpec f;
    f.size_bytes = static_cast<uint64_t>(draw());
    int s = static_cast<int>(rng() % senders), r = senders + static_cast<int>(rng() % receivers);
    net.open(s, r, f, static_cast<uint64_t>(t * 1e9));
    dst_of[s].push_back(r);
  }
  bool all = net.run_all(static_cast<uint64_t>((t + 120) * 1e9));
  std::vector<double> fct, slow, short_fct, fct_recv, slow_recv;
  FILE* fo = flows_out.empty() ? nullptr : std::fopen(flows_out.c_str(), "w");
  if (!flows_out.empty() && !fo) {
    std::fprintf(stderr, "cannot write %s\n", flows_out.c_str());
    return 2;
  }
  // The receivers' view of each flow (the SYNC's arrival, the first token,
  // the first data), as `sluice-top recv` logs it.
  std::map<uint64_t, Completion> rdone;
  for (int h = 0; h < senders + receivers; h++)
    for (auto& c : net.receiver(h).take_completions()) rdone[c.flow] = c;
  for (int h = 0; h < senders; h++) {
    for (auto& c : net.sender(h).take_completions()) {
      double us = (c.done_ns - c.start_ns) / 1e3;
      double pk = std::ceil(c.size_bytes / double(kDefaultMss));
      double ideal =
          pk * data_frame_bytes(kDefaultMss) * 8 / rate * 1e6 + 4 * 2 * nc.prop_ns / 1e3;  // alone: data + one RTT
      fct.push_back(us);
      slow.push_back(us / ideal);
      // The receiver's view: until it has every byte (no DONE back).
      const Completion& rc = rdone[c.flow];
      if (rc.done_ns) {
        double rus = (rc.done_ns - rc.start_ns) / 1e3;
        fct_recv.push_back(rus);
        slow_recv.push_back(rus / ideal);
      }
      if (c.size_bytes < 100'000) short_fct.push_back(us);
      // Flow IDs count up from the sender's base in the order its flows open.
      uint64_t k = c.flow - (static_cast<uint64_t>(h + 1) << 32);
      auto since = [&](uint64_t t) { return us_after_start(t, c.start_ns); };
      if (fo)
        std::fprintf(fo, "%d %d %lu %.3f %.3f %.3f %.3f %.3f %.3f %.3f\n", h, k < dst_of[h].size() ? dst_of[h][k] : -1,
                     (unsigned long)c.size_bytes, c.start_ns / 1e3, us, ideal, since(rc.sync_ns),
                     since(rc.first_token_ns), since(c.first_token_ns), since(rc.first_data_ns));
    }
  }
  if (fo) std::fclose(fo);
  auto p99 = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(std::ceil(0.99 * v.size())) - 1)];
  };
  auto avg = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / v.size();
  };
  auto tot = net.totals();
  if (verbose) {
    uint64_t slots = 0, idle = 0, unused = 0;
    std::array<uint64_t, kPriorities> sent{}, recv{};
    for (int h = 0; h < senders + receivers; h++) {
      const auto& rs = net.receiver(h).stats();
      slots += rs.slots;
      idle += rs.slots_idle;
      const auto& ss = net.sender(h).stats();
      unused += ss.tokens_unused;
      for (int c = 0; c < kPriorities; c++) sent[c] += rs.tokens_sent[c], recv[c] += ss.tokens_received[c];
    }
    std::fprintf(stderr, "slots %lu idle %lu unused-tokens %lu\n", (unsigned long)slots, (unsigned long)idle,
                 (unsigned long)unused);
    for (int c = 0; c < kPriorities; c++)
      std::fprintf(stderr, "class %d sent %lu dropped %lu expired %lu received %lu\n", c, (unsigned long)sent[c],
                   (unsigned long)tot.token_drops[c], (unsigned long)tot.tokens_expired[c], (unsigned long)recv[c]);
  }
  uint64_t expired = 0;
  for (auto e : tot.tokens_expired) expired += e;
  std::printf(
      "{\"variant\":\"%s\",\"load\":%.2f,\"seed\":%u,\"flows\":%d,\"completed\":%zu,\"all_done\":%s,"
      "\"fct_mean_us\":%.1f,\"fct_p99_us\":%.1f,\"fct_n\":%zu,\"short_fct_p99_us\":%.1f,\"short_n\":%zu,"
      "\"slowdown_mean\":%.3f,\"fct_recv_mean_us\":%.1f,\"slowdown_recv_mean\":%.3f,\"fct_recv_n\":%zu,"
      "\"data_lost_packets\":%lu,\"tokens_expired\":%lu,\"max_data_queue_bytes\":%lu}\n",
      variant.c_str(), load, seed, flows, fct.size(), all ? "true" : "false", avg(fct), p99(fct), fct.size(),
      p99(short_fct), short_fct.size(), avg(slow), avg(fct_recv), avg(slow_recv), fct_recv.size(),
      (unsigned long)tot.data_drops, (unsigned long)expired, (unsigned long)tot.max_data_bytes);
  return 0;
}
