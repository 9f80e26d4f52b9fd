// Floodgate over a network of port-model switches (floodgate_fabric.h):
// the §4.2 (Fig. 4) hold-and-wait deadlock with VOQ grouping off and its
// absence with grouping on; incast on the lab's leaf-spine shape against
// plain FIFO switches; credit loss recovered by PSN and switchSYN; dstPause.
// Deterministic simulations, no wall clock.
#include <gtest/gtest.h>

#include "fabric.h"
#include "mechanisms/floodgate/logic.h"

using namespace sluice::sw;
using sluice::fabric::Fabric;
using sluice::floodgate::Config;
using sluice::floodgate::FloodgateLogic;

namespace {

constexpr uint64_t k100M = 100'000'000, k200M = 200'000'000;
constexpr uint64_t kDelay = 50'000;  // one way per link: hop RTT 100 us
constexpr uint64_t kMs = 1'000'000;

PortConfig host_port(std::string name) {
  PortConfig c;
  c.name = std::move(name);
  c.role = PortRole::kHostFacing;
  c.rate_bps = k100M;
  return c;
}
PortConfig sw_port(std::string name, uint32_t voqs, uint64_t rate = k200M) {
  PortConfig c;
  c.name = std::move(name);
  c.role = PortRole::kSwitchFacing;
  c.rate_bps = rate;
  c.queues.assign(1 + voqs, QueueConfig{1, 1514, 0, -1});
  c.queues[0].priority = 0;
  return c;
}

Config base() {
  Config c;
  c.credit_interval_ns = 500'000;
  c.hop_rtt_ns = 2 * kDelay;
  c.syn_timeout_ns = 10 * kMs;
  return c;
}

std::unique_ptr<Logic> fg(Config c) { return std::make_unique<FloodgateLogic>(std::move(c)); }
FloodgateLogic& logic(Fabric& f, size_t sw) { return static_cast<FloodgateLogic&>(*f.sw(sw).logic); }

// §4.2 Fig. 4: two pods, each a leaf over two ToRs, one core. Hosts of
// pod A send to host B, hosts of pod B send to host A; a second ToR in each
// pod also sends to its own pod's destination host, so down traffic merges
// at the leaf from two ports (core and the ToR) and fills the leaf's window
// toward the destination's ToR. Leaves are middle-layer switches: windows
// toward the core (up) and toward their ToRs (down).
struct TwoPods {
  Fabric f{kDelay};
  size_t tor[2], tor2[2], leaf[2], core;
  size_t h[2][5];  // h[pod][0]: the pod's destination; 1,2 under tor (send across); 3,4 under tor2 (send inside)

  TwoPods(uint32_t leaf_voqs, bool grouping, uint64_t core_rate = k200M) {
    Config lc = base();
    lc.max_voqs = leaf_voqs;
    lc.voq_grouping = grouping;
    lc.up_ports = {1};
    Config tc = base();
    tc.up_ports = {3};
    core = f.add_switch("core", {sw_port("c0", 8, core_rate), sw_port("c1", 8, core_rate)}, fg(base()));
    for (int p = 0; p < 2; ++p) {
      std::string n = p ? "B" : "A";
      tor[p] = f.add_switch("tor" + n, {host_port("h0"), host_port("h1"), host_port("h2"), sw_port("up", 8)}, fg(tc));
      tor2[p] =
          f.add_switch("tor" + n + "2", {host_port("h3"), host_port("h4"), host_port("-"), sw_port("up", 8)}, fg(tc));
      leaf[p] = f.add_switch(
          "leaf" + n, {sw_port("down", leaf_voqs), sw_port("up", leaf_voqs, core_rate), sw_port("down2", leaf_voqs)},
          fg(lc));
      for (PortId i = 0; i < 5; ++i)
        h[p][i] = f.add_host(n + std::to_string(i), "10." + std::to_string(p + 1) + ".0." + std::to_string(i + 1),
                             k100M, i < 3 ? tor[p] : tor2[p], PortId(i < 3 ? i : i - 3));
      f.link(tor[p], 3, leaf[p], 0);
      f.link(tor2[p], 3, leaf[p], 2);
      f.link(leaf[p], 1, core, PortId(p));
    }
    for (int p = 0; p < 2; ++p)
      for (int q = 0; q < 2; ++q)
        for (PortId i = 0; i < 5; ++i) {
          const size_t host = h[q][i];
          const bool under_tor = i < 3;
          f.route(tor[p], host, p == q && under_tor ? i : 3);
          f.route(tor2[p], host, p == q && !under_tor ? PortId(i - 3) : 3);
          f.route(leaf[p], host, p != q ? 1 : under_tor ? 0 : 2);
          f.route(core, host, PortId(q));
        }
  }
  void cross_traffic(uint64_t bytes, uint64_t inside_start_ns = 0) {
    for (int p = 0; p < 2; ++p) {
      for (int i = 1; i < 3; ++i) f.send(h[p][i], h[1 - p][0], bytes);               // across: up at this leaf
      for (int i = 3; i < 5; ++i) f.send(h[p][i], h[p][0], bytes, inside_start_ns);  // inside: down at this leaf
    }
  }
};

}  // namespace

TEST(FloodgateFabric, VoqGroupingPreventsTheHoldAndWaitDeadlock) {
  // One VOQ per leaf without grouping: up- and downstream traffic share it
  // (the VOQs are used up, §4.2). Fig. 4's cycle forms and nothing moves.
  // The core links run at 100M, oversubscribed 2:1 by each pod's two
  // senders across, so the leaves' up windows run out (up packets at the
  // head of the leaf's VOQ) while the pod's own traffic fills the down
  // window behind them.
  TwoPods off(1, false, k100M);
  off.cross_traffic(300'000);
  EXPECT_FALSE(off.f.run_to_completion(2000 * kMs, 100 * kMs)) << "expected the §4.2 deadlock";
  EXPECT_GT(off.f.packets_in_network(), 0u);
  // Both leaves hold packets in their shared VOQ, with both directions in it.
  for (size_t l : off.leaf) {
    auto v = logic(off.f, l).voqs();
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].dsts.size(), 2u) << "a VOQ holding traffic for both hosts";
    EXPECT_TRUE(v[0].head_blocked);
    EXPECT_EQ(v[0].head_port, 1) << "an upstream packet at the head, waiting for the core's credit";
  }
  // switchSYNs went out during the stall and could not help: nothing was lost.
  EXPECT_GT(logic(off.f, off.leaf[0]).stats().syn_out, 0u);
  // The same traffic with two VOQs per leaf, one per group, completes.
  TwoPods on(2, true, k100M);
  on.cross_traffic(300'000);
  EXPECT_TRUE(on.f.run_to_completion(2000 * kMs, 100 * kMs));
  EXPECT_EQ(on.f.host(on.h[0][0]).rx_bytes, 1'200'000u);
  EXPECT_EQ(on.f.host(on.h[1][0]).rx_bytes, 1'200'000u);
  for (size_t l : on.leaf) EXPECT_GT(logic(on.f, l).stats().voq_enqueued, 0u);
}

namespace {

// §5.2's testbed at lab scale: one core, three ToRs, two hosts per ToR,
// host links 100M, core links 200M (1:2).
struct LeafSpine {
  Fabric f{kDelay};
  size_t core, tor[3], h[6];

  explicit LeafSpine(std::function<std::unique_ptr<Logic>(bool is_tor)> make) {
    core = f.add_switch("core", {sw_port("c0", 8), sw_port("c1", 8), sw_port("c2", 8)}, make(false));
    for (int t = 0; t < 3; ++t) {
      tor[t] =
          f.add_switch("tor" + std::to_string(t), {host_port("h0"), host_port("h1"), sw_port("up", 8)}, make(true));
      f.link(tor[t], 2, core, PortId(t));
      for (PortId i = 0; i < 2; ++i)
        h[2 * t + i] = f.add_host("h" + std::to_string(2 * t + i),
                                  "10.0." + std::to_string(t) + "." + std::to_string(i + 1), k100M, tor[t], i);
    }
    for (int t = 0; t < 3; ++t)
      for (int x = 0; x < 6; ++x) {
        f.route(tor[t], h[x], x / 2 == t ? PortId(x % 2) : 2);
        f.route(core, h[x], PortId(x / 2));
      }
  }
  // Four cross-rack senders to h0, all at once.
  void incast(uint64_t bytes) {
    for (int s = 2; s < 6; ++s) f.send(h[s], h[0], bytes);
  }
  uint64_t tor_down_max() { return f.sw(tor[0]).max_port_bytes[0]; }
  uint64_t core_max() {
    uint64_t m = 0;
    for (auto b : f.sw(core).max_port_bytes) m = std::max(m, b);
    return m;
  }
  uint64_t tor_up_max() {
    uint64_t m = 0;
    for (size_t t : tor) m = std::max(m, f.sw(t).max_port_bytes[2]);
    return m;
  }
};

std::unique_ptr<Logic> fifo(bool) { return std::make_unique<FifoLogic>(); }
std::unique_ptr<Logic> floodgate(bool is_tor, bool dst_pause = false) {
  Config c = base();
  if (is_tor) c.up_ports = {2};
  c.dst_pause = dst_pause;
  return fg(c);
}

}  // namespace

TEST(FloodgateFabric, IncastMovesTheQueueOffTheLastHop) {
  // 4 x 90 KB to one host: 360 KB into a 100M last hop.
  LeafSpine plain(fifo);
  plain.incast(90'000);
  ASSERT_TRUE(plain.f.run_to_completion(1000 * kMs, 50 * kMs));
  LeafSpine flood([](bool t) { return floodgate(t); });
  flood.incast(90'000);
  ASSERT_TRUE(flood.f.run_to_completion(1000 * kMs, 50 * kMs));
  EXPECT_EQ(flood.f.host(flood.h[0]).rx_bytes, 360'000u);
  // The last hop holds about one window (BDP_nextHop + C T = 15 KB at the
  // core's 200M), not the burst; the core holds less too; the first hop
  // (ToR up) holds what the windows keep back (§5.2, Fig. 6b).
  const uint64_t w0 = uint64_t(logic(flood.f, flood.core).initial_window(0));
  EXPECT_EQ(w0, 15'000u);
  EXPECT_LE(flood.tor_down_max(), w0 + 2 * 1514);
  EXPECT_GE(plain.tor_down_max(), 6 * flood.tor_down_max());
  EXPECT_LT(flood.core_max(), plain.core_max());
  EXPECT_GT(flood.tor_up_max(), plain.tor_up_max());
  // The bottleneck never idles for long: the incast ends within 10% of FIFO.
  const uint64_t t_plain = plain.f.host(plain.h[0]).last_rx_ns;
  const uint64_t t_flood = flood.f.host(flood.h[0]).last_rx_ns;
  EXPECT_LE(t_flood, t_plain + t_plain / 10);
  // Credits are a small share of the bytes on the wire (§7.4: 0.175% at
  // T = 10 us and 100G; one 60-byte frame per T per port here).
  EXPECT_LT(double(flood.f.ctrl_bytes()), 0.01 * double(flood.f.data_bytes() + flood.f.ctrl_bytes()));
}

TEST(FloodgateFabric, LostCreditFramesAreRecoveredByPsnAndSwitchSyn) {
  // Every credit frame the last-hop ToR sends during the first 40 ms is
  // lost: the core's window for h0 vanishes. Later credits carry PSNs
  // (§4.3), and once the ToR has nothing new to credit, only the core's
  // switchSYN after its timeout brings the window back.
  LeafSpine flood([](bool t) { return floodgate(t); });
  const size_t tor0 = flood.tor[0];
  Fabric& f = flood.f;
  f.drop_ctrl = [&](size_t sw, PortId, const std::vector<uint8_t>&) { return sw == tor0 && f.now() < 40 * kMs; };
  flood.incast(90'000);
  ASSERT_TRUE(f.run_to_completion(2000 * kMs, 100 * kMs));
  EXPECT_GT(f.ctrl_dropped(), 0u);
  EXPECT_EQ(f.host(flood.h[0]).rx_bytes, 360'000u);
  EXPECT_GT(logic(f, flood.core).stats().syn_out, 0u);
  EXPECT_GT(logic(f, tor0).stats().syn_in, 0u);
  // The windows are whole again once the last credits are in.
  f.run_until(f.now() + 5 * kMs);
  EXPECT_EQ(logic(f, flood.core).inflight(0, f.host(flood.h[0]).addr), 0);
  // Without switchSYN (a timeout longer than the run) the same loss stalls.
  LeafSpine nosyn([](bool t) {
    Config c = base();
    if (t) c.up_ports = {2};
    c.syn_timeout_ns = 100'000 * kMs;
    return fg(c);
  });
  Fabric& g = nosyn.f;
  const size_t tor0b = nosyn.tor[0];
  g.drop_ctrl = [&](size_t sw, PortId, const std::vector<uint8_t>&) { return sw == tor0b && g.now() < 40 * kMs; };
  nosyn.incast(90'000);
  EXPECT_FALSE(g.run_to_completion(2000 * kMs, 100 * kMs));
}

TEST(FloodgateFabric, DstPauseKeepsTheIncastAtTheSources) {
  LeafSpine flood([](bool t) { return floodgate(t); });
  flood.incast(90'000);
  ASSERT_TRUE(flood.f.run_to_completion(1000 * kMs, 50 * kMs));
  LeafSpine paused([](bool t) { return floodgate(t, true); });
  paused.incast(90'000);
  ASSERT_TRUE(paused.f.run_to_completion(1000 * kMs, 50 * kMs));
  EXPECT_EQ(paused.f.host(paused.h[0]).rx_bytes, 360'000u);
  uint64_t pauses = 0, resumes = 0;
  for (int s = 2; s < 6; ++s) {
    pauses += paused.f.host(paused.h[s]).pauses;
    resumes += paused.f.host(paused.h[s]).resumes;
    EXPECT_TRUE(paused.f.host(paused.h[s]).paused.empty()) << "every pause was resumed";
  }
  EXPECT_GT(pauses, 0u);
  EXPECT_EQ(pauses, resumes);
  // The first hop holds at most about thre_off + a host's frames in flight,
  // far below Floodgate without host support (Fig. 11a, §6.3).
  EXPECT_LT(paused.tor_up_max(), flood.tor_up_max() / 2);
  // Non-incast hosts are never paused.
  EXPECT_EQ(paused.f.host(paused.h[1]).pauses, 0u);
}
