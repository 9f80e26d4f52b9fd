// BFC end to end in the port model: hosts and switches running the same
// BfcLogic, joined by links with delay (net_model.h). These are the
// model-level claims of the paper that a unit test can check:
//  * §6.1 Fig. 7: two flows competing at a link keep their queues near Th
//    (within 2·Th) while the link stays >= 90 % busy;
//  * §3.2 / App. E.4: dynamic assignment has far fewer collisions than
//    stochastic hashing for the same arrivals, and short flows finish
//    sooner.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <tuple>

#include "lib/switch_model_util.h"
#include "mechanisms/bfc/bfc_logic.h"
#include "net_model.h"

using namespace sluice::sw;
using sluice::bfc::BfcLogic;
using sluice::bfc::Config;
using testnet::Net;

namespace {

constexpr uint64_t k10G = 10'000'000'000ull;
constexpr uint32_t kMtu = 1514;

PortConfig port(std::string name, size_t queues, PortRole role, uint64_t rate = k10G) {
  return sluice::test::model_port(std::move(name), queues, role, rate);
}

// A host: port 0 is the application side, port 1 the NIC (BFC queues that
// obey pause from the first switch).
std::vector<PortConfig> host_ports() {
  return {port("app", 1, PortRole::kNone), port("nic", 32, PortRole::kSwitchFacing)};
}

}  // namespace

namespace {

struct TwoFlows {
  uint64_t th2 = 0;   // Th with both queues active (HRTT·μ/2), bytes
  uint64_t peak = 0;  // largest queue of either flow, bytes
  double worst = 0;   // max over samples of queue / Th at that instant
  double util = 0;    // bottleneck busy fraction after warm-up
  double share = 0;   // flow 1's part of the delivered bytes
  uint64_t pauses = 0, resumes = 0, collisions = 0, host_pauses_rx[2] = {0, 0};
};

// §6.1 Fig. 7a: a group-2 flow and a group-3 flow compete at switch 2's
// port to receiver 2. 10 Gbit/s links with d1, d2 ns propagation each way;
// HRTT = the larger round trip + one MTU's serialization (§3.3.2: the max
// over the ingresses), Th = HRTT·μ/N_active. The flows start `offset` apart.
TwoFlows run_two_flows(uint64_t d1, uint64_t d2, uint64_t offset) {
  Config c = Config::variant_named("bfc");
  c.hrtt_ns = 2 * std::max(d1, d2) + tx_time_ns(kMtu, k10G);
  Net net;
  int h1 = net.add_node(host_ports(), std::make_unique<BfcLogic>(c));
  int h2 = net.add_node(host_ports(), std::make_unique<BfcLogic>(c));
  int s = net.add_node({port("h1", 32, PortRole::kSwitchFacing), port("h2", 32, PortRole::kSwitchFacing),
                        port("rx", 32, PortRole::kHostFacing)},
                       std::make_unique<BfcLogic>(c));
  net.link(h1, 1, s, 0, d1);
  net.link(h2, 1, s, 1, d2);
  int f1 = net.add_flow({{h1, 1}, {s, 2}}, 0, 0x1111);
  int f2 = net.add_flow({{h2, 1}, {s, 2}}, 0, 0x2222);
  net.send(f1, 0, 5000, kMtu);
  net.send(f2, offset, 5000, kMtu);

  auto& bfc = static_cast<BfcLogic&>(net.logic(s));
  auto& sw = net.node(s);
  const uint64_t warm = 1'000'000, end = 6'000'000;
  TwoFlows r;
  r.th2 = c.hrtt_ns * k10G / 8'000'000'000ull / 2;
  net.on_step([&](uint64_t now) {
    if (now < warm) return;
    uint64_t th = bfc.threshold_bytes(2);
    for (uint32_t h : {0x1111u, 0x2222u}) {
      uint64_t d = sw.depth(2, bfc.entry_queue(2, h)).bytes;
      r.peak = std::max(r.peak, d);
      r.worst = std::max(r.worst, double(d) / double(th));
    }
  });
  net.run_until(warm, 1'000);
  uint64_t before = net.delivered_bytes(f1) + net.delivered_bytes(f2);
  net.run_until(end, 1'000);
  uint64_t after = 0;
  for (const auto& d : net.deliveries()) after += d.at_ns <= end ? d.bytes : 0;
  r.util = double(after - before) * 8 / (double(k10G) * double(end - warm) / 1e9);
  r.share = double(net.delivered_bytes(f1)) / double(net.delivered_bytes(f1) + net.delivered_bytes(f2));
  r.pauses = bfc.counters().pauses_sent;
  r.resumes = bfc.counters().resumes_sent;
  r.collisions = bfc.counters().collisions;
  r.host_pauses_rx[0] = static_cast<BfcLogic&>(net.logic(h1)).counters().pauses_rx;
  r.host_pauses_rx[1] = static_cast<BfcLogic&>(net.logic(h2)).counters().pauses_rx;
  std::printf(
      "two flows d=%llu/%llu ns offset %llu ns: Th(N=2) %llu B, peak queue %llu B (%.2f Th), "
      "max queue/Th(now) %.2f, utilization %.3f, share %.3f, pauses %llu\n",
      (unsigned long long)d1, (unsigned long long)d2, (unsigned long long)offset, (unsigned long long)r.th2,
      (unsigned long long)r.peak, double(r.peak) / double(r.th2), r.worst, r.util, r.share,
      (unsigned long long)r.pauses);
  return r;
}

}  // namespace

// The queue bound: 2·Th rounded up to whole packets (the pause fires on the
// first packet that finds the queue above Th, App. A phase 1 adds HRTT of
// growth at μ - μ/2 = Th more).
uint64_t two_th_in_packets(uint64_t th) { return (2 * th + kMtu - 1) / kMtu * kMtu; }

// Fig. 7a's groups reach switch 2 over different paths; here 10 µs and 7 µs.
TEST(BfcModel, TwoCompetingFlowsStayWithinTwoThAtHighUtilization) {
  TwoFlows r = run_two_flows(10'000, 7'000, 0);
  EXPECT_GT(r.pauses, 10u);  // the mechanism was exercised, many times
  EXPECT_GT(r.resumes, 10u);
  EXPECT_LE(r.peak, two_th_in_packets(r.th2));
  EXPECT_GE(r.util, 0.90);
  EXPECT_EQ(r.collisions, 0u);
  // The hosts stopped serving their paused queue.
  EXPECT_GT(r.host_pauses_rx[0], 10u);
  EXPECT_GT(r.host_pauses_rx[1], 10u);
  EXPECT_GT(r.share, 0.40);
  EXPECT_LT(r.share, 0.60);
}

// Identical paths make the two flows pause and resume in lock step, so
// their queues run empty at the same time for an HRTT after each resume:
// App. A's worst case (each flow out of packets up to 1/5 of the time for
// Th = HRTT·μ_f, x = 2) becomes link idle time. Utilization ~ 0.8 — why
// Fig. 7b trades Th against utilization.
TEST(BfcModel, SynchronizedFlowsLoseAtMostAppendixABound) {
  TwoFlows r = run_two_flows(10'000, 10'000, 0);
  EXPECT_LE(r.peak, two_th_in_packets(r.th2));
  EXPECT_GE(r.util, 0.78);
  EXPECT_LT(r.util, 0.90);  // if this passes, the model no longer shows the effect: look why
  EXPECT_NEAR(r.share, 0.5, 0.01);
}

// The same two flows with every PAUSE/RESUME lost: only the periodic
// bitmap carries the state. The queue is bounded by one bitmap interval of
// growth instead of one HRTT, and nothing stays paused at the end.
TEST(BfcModel, BitmapAloneStillBoundsTheQueueWhenFramesAreLost) {
  const uint64_t delay = 10'000;
  Config c = Config::variant_named("bfc");
  c.hrtt_ns = 2 * delay + tx_time_ns(kMtu, k10G);
  c.bitmap_interval_ns = 50'000;
  c.pause_expiry_ns = 500'000;
  Net net;
  int h1 = net.add_node(host_ports(), std::make_unique<BfcLogic>(c));
  int h2 = net.add_node(host_ports(), std::make_unique<BfcLogic>(c));
  int s = net.add_node({port("h1", 32, PortRole::kSwitchFacing), port("h2", 32, PortRole::kSwitchFacing),
                        port("rx", 32, PortRole::kHostFacing)},
                       std::make_unique<BfcLogic>(c));
  net.link(h1, 1, s, 0, delay);
  net.link(h2, 1, s, 1, delay);
  int f1 = net.add_flow({{h1, 1}, {s, 2}}, 0, 0x1111);
  int f2 = net.add_flow({{h2, 1}, {s, 2}}, 0, 0x2222);
  net.send(f1, 0, 2000, kMtu);
  net.send(f2, 0, 2000, kMtu);
  net.drop_control_if([](int, const SwitchModel::SentControl& sc) {
    ControlFrame f;
    return decode(sc.payload.data(), sc.payload.size(), &f) == SL_CTRL_R_OK && f.type != CtrlType::kPauseBitmap;
  });
  auto& bfc = static_cast<BfcLogic&>(net.logic(s));
  uint64_t peak = 0;
  net.on_step([&](uint64_t) {
    for (uint32_t h : {0x1111u, 0x2222u})
      if (bfc.entry_queue(2, h) != kNoQueue) peak = std::max(peak, net.node(s).depth(2, bfc.entry_queue(2, h)).bytes);
  });
  net.run_until(8'000'000, 1'000);
  auto& host = static_cast<BfcLogic&>(net.logic(h1));
  std::printf("bitmap only: peak queue %llu B, repairs at host %llu, delivered %llu + %llu B\n",
              (unsigned long long)peak, (unsigned long long)host.counters().bitmap_repairs,
              (unsigned long long)net.delivered_bytes(f1), (unsigned long long)net.delivered_bytes(f2));
  EXPECT_GT(host.counters().bitmap_repairs, 5u);
  EXPECT_EQ(host.counters().pauses_rx, 0u);
  // A flow's queue grows at μ - μ/2 from Th until the next bitmap and its
  // HRTT: Th + (interval + HRTT)·μ/2 (+ a packet), far below the 3 MB the
  // flows would otherwise pile up.
  const uint64_t th2 = c.hrtt_ns * k10G / 8'000'000'000ull / 2;
  EXPECT_LE(peak, th2 + (c.bitmap_interval_ns + c.hrtt_ns) * k10G / 8'000'000'000ull / 2 + kMtu);
  EXPECT_EQ(net.delivered_bytes(f1), 2000u * kMtu);
  EXPECT_EQ(net.delivered_bytes(f2), 2000u * kMtu);
}

namespace {

struct ArrivalResult {
  uint64_t collisions = 0;
  double short_p99_us = 0;
  size_t short_n = 0;
};

// Open-loop arrivals at one 10 Gbit/s port with 32 queues: 70 % of flows of
// 1-8 packets, 30 % of 40-300 packets, exponential inter-arrivals at ~75 %
// load. The same seed gives the same arrivals for every variant.
ArrivalResult run_arrivals(const char* variant) {
  Config c = Config::variant_named(variant);
  c.hrtt_ns = 4'000;
  BfcLogic bfc(c);
  SwitchModel sw({port("in", 1, PortRole::kSwitchFacing), port("out", 32, PortRole::kHostFacing)}, bfc);
  std::mt19937_64 rng(20220404);
  auto unit = [&] { return double(rng() >> 11) * 0x1.0p-53; };
  const double pkt_ns = double(tx_time_ns(kMtu, k10G));
  double mean_pkts = 0.7 * 4.5 + 0.3 * 170;
  double gap_ns = mean_pkts * pkt_ns / 0.75;
  double t = 0;
  std::map<uint32_t, std::pair<uint64_t, uint32_t>> flows;  // hash -> (start, packets)
  std::map<uint64_t, uint32_t> hash_of;
  uint64_t id = 1;
  for (uint32_t f = 0; f < 3000; ++f) {
    t += -std::log(1 - unit()) * gap_ns;
    uint32_t n = unit() < 0.7 ? 1 + uint32_t(unit() * 8) : 40 + uint32_t(unit() * 261);
    uint32_t hash = uint32_t(rng());
    flows[hash] = {uint64_t(t), n};
    for (uint32_t i = 0; i < n; ++i) {
      PacketMeta p;
      p.id = id++;
      p.in_port = 0;
      p.out_port = 1;
      p.wire_bytes = kMtu;
      p.flow_hash = hash;
      hash_of[p.id] = hash;
      // The flow's packets arrive back to back at 40 Gbit/s (a faster
      // ingress), so a flow is active for a while.
      sw.arrive(uint64_t(t) + i * uint64_t(pkt_ns / 4), p);
    }
  }
  sw.run_idle(UINT64_MAX / 2);
  std::map<uint32_t, uint64_t> last;
  for (const auto& d : sw.departures()) last[hash_of[d.id]] = d.end_ns;
  std::vector<double> fct;
  for (const auto& [h, f] : flows)
    if (f.second <= 8) fct.push_back(double(last[h] - f.first) / 1e3);
  std::sort(fct.begin(), fct.end());
  ArrivalResult r;
  r.collisions = bfc.counters().collisions;
  r.short_n = fct.size();
  r.short_p99_us = fct[size_t(0.99 * double(fct.size() - 1))];
  return r;
}

}  // namespace

// §3.2 (birthday paradox) and App. E.4 (Fig. 21): with the same arrivals,
// stochastic hashing collides far more often than dynamic assignment, and
// the short flows' tail completion time is worse.
TEST(BfcModel, DynamicAssignmentBeatsStochasticOnCollisions) {
  ArrivalResult dyn = run_arrivals("bfc");
  ArrivalResult sto = run_arrivals("bfc-stochastic");
  std::printf(
      "collisions: dynamic %llu, stochastic %llu; short-flow FCT p99 (n=%zu): dynamic %.1f us, "
      "stochastic %.1f us\n",
      (unsigned long long)dyn.collisions, (unsigned long long)sto.collisions, dyn.short_n, dyn.short_p99_us,
      sto.short_p99_us);
  EXPECT_GT(sto.collisions, 0u);
  EXPECT_LT(dyn.collisions * 5, sto.collisions);
  EXPECT_LT(dyn.short_p99_us, sto.short_p99_us);
}

namespace {

struct Fig8 {
  double g1_fct_us = 0;  // mean FCT of the group-1 flows
  uint64_t collisions_s1 = 0;
};

// §6.1 Fig. 6/8: group 1 (2 flows) host → switch 1 → switch 2 → receiver 1;
// group 2 (n2 flows) host → switch 1 → switch 2 → receiver 2; group 3 (8
// flows) host → switch 3 → switch 2 → receiver 2. All flows 1.5 MB, every
// link 10 Gbit/s with 2 µs propagation. Groups 2 and 3 are bottlenecked at
// switch 2 → receiver 2, so switch 2 pauses group 2's queues at switch 1;
// group 1 shares switch 1 → switch 2 with group 2 and suffers when it
// shares a queue there (HoL blocking). `salt` changes the flow hashes (the
// paper's runs).
Fig8 run_fig8(const char* variant, int n2, uint32_t salt) {
  const uint64_t delay = 2'000;
  Config c = Config::variant_named(variant);
  c.hrtt_ns = 2 * delay + tx_time_ns(kMtu, k10G);
  Net net;
  const int n1 = 2, n3 = 8;
  std::vector<PortConfig> s1p, s3p;
  for (int i = 0; i < n1 + n2; ++i) s1p.push_back(port("h", 32, PortRole::kSwitchFacing));
  s1p.push_back(port("s2", 32, PortRole::kSwitchFacing));
  for (int i = 0; i < n3; ++i) s3p.push_back(port("h", 32, PortRole::kSwitchFacing));
  s3p.push_back(port("s2", 32, PortRole::kSwitchFacing));
  int s1 = net.add_node(s1p, std::make_unique<BfcLogic>(c));
  int s3 = net.add_node(s3p, std::make_unique<BfcLogic>(c));
  int s2 = net.add_node({port("s1", 32, PortRole::kSwitchFacing), port("s3", 32, PortRole::kSwitchFacing),
                         port("r1", 32, PortRole::kHostFacing), port("r2", 32, PortRole::kHostFacing)},
                        std::make_unique<BfcLogic>(c));
  const PortId s1_up = PortId(n1 + n2), s3_up = PortId(n3);
  net.link(s1, s1_up, s2, 0, delay);
  net.link(s3, s3_up, s2, 1, delay);
  std::vector<int> g1;
  std::mt19937 rng(salt);
  auto add = [&](int sw, PortId sw_in, PortId sw_up, PortId s2_out) {
    int h = net.add_node(host_ports(), std::make_unique<BfcLogic>(c));
    net.link(h, 1, sw, sw_in, delay);
    int f = net.add_flow({{h, 1}, {sw, sw_up}, {s2, s2_out}}, 0, uint32_t(rng()));
    net.send(f, 0, 1000, kMtu);  // 1.5 MB
    return f;
  };
  for (int i = 0; i < n1; ++i) g1.push_back(add(s1, PortId(i), s1_up, 2));
  for (int i = 0; i < n2; ++i) add(s1, PortId(n1 + i), s1_up, 3);
  for (int i = 0; i < n3; ++i) add(s3, PortId(i), s3_up, 3);
  // Until group 1 is done (the rest is not measured).
  auto g1_done = [&] {
    for (int f : g1)
      if (net.delivered_bytes(f) < 1000u * kMtu) return false;
    return true;
  };
  while (net.now() < 100'000'000 && !g1_done()) net.run_until(net.now() + 1'000'000, 1'000);
  Fig8 r;
  std::map<int, uint64_t> done;
  for (const auto& d : net.deliveries()) done[d.flow] = std::max(done[d.flow], d.at_ns);
  for (int f : g1) {
    EXPECT_EQ(net.delivered_bytes(f), 1000u * kMtu) << variant << " flow " << f << " did not finish";
    r.g1_fct_us += double(done[f]) / 1e3 / n1;
  }
  r.collisions_s1 = static_cast<BfcLogic&>(net.logic(s1)).counters().collisions;
  return r;
}

}  // namespace

// §6.1 Fig. 8: with fewer flows than queues at switch 1 → switch 2, dynamic
// assignment gives group 1 queues of its own (no collision, so no HoL
// blocking behind group 2's pauses); stochastic hashing sometimes puts
// them together; a single queue (PFC-like) always does.
TEST(BfcModel, DynamicAssignmentGivesGroupOneTheBestFctFig8) {
  const int n2 = 12;
  double fct[3] = {0, 0, 0};
  uint64_t coll[3] = {0, 0, 0};
  const char* names[3] = {"bfc", "bfc-stochastic", "bfc-single"};
  const int runs = 4;
  for (int v = 0; v < 3; ++v)
    for (uint32_t salt = 1; salt <= runs; ++salt) {
      Fig8 r = run_fig8(names[v], n2, salt);
      fct[v] += r.g1_fct_us / runs;
      coll[v] += r.collisions_s1;
    }
  for (int v = 0; v < 3; ++v)
    std::printf("fig8 n2=%d %-15s group-1 mean FCT %.0f us, collisions at switch 1 %llu (%d runs)\n", n2, names[v],
                fct[v], (unsigned long long)coll[v], runs);
  EXPECT_EQ(coll[0], 0u);
  EXPECT_LE(fct[0], fct[1]);
  EXPECT_LT(fct[0] * 1.5, fct[2]);
}
