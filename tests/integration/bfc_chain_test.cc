// BFC (logic "bfc") on two sluice switches in a chain, in a lab:
//   h1 -- A -- B -- h2   (B -> h2 at 10 Mbit/s: the congested egress)
//               \-- h3   (B -> h3 at 100 Mbit/s)
// Both switches run sluiced with [switch] logic = "bfc", 4 queues per port.
// A heavy UDP flow h1 -> h2 (~40 Mbit/s) fills B's queue toward h2 past Th:
// B sends PAUSE for that queue to A (its switch-facing port), A stops
// serving its queue, B RESUMEs as it drains. A light flow h1 -> h3 (~8
// Mbit/s) in another queue keeps flowing through A (no head-of-line
// blocking). The backlog moves from B to A: B's congested queue does not
// tail-drop while A's paused queue does.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "lib/netns_fixture.h"
#include "lib/switch_lab.h"

using namespace sluice;
using namespace sluice::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

constexpr uint16_t kDport = 7100;
constexpr int kQueues = 4;

class BfcChain : public ::testing::Test {
 protected:
  void SetUp() override {
    lab_ = std::make_unique<Lab>("bc");
    h1_ = lab_->add_ns("h1");
    a_ = lab_->add_ns("a");
    b_ = lab_->add_ns("b");
    h2_ = lab_->add_ns("h2");
    h3_ = lab_->add_ns("h3");
    a1_ = lab_->name("a1");
    a2_ = lab_->name("a2");
    b1_ = lab_->name("b1");
    b2_ = lab_->name("b2");
    b3_ = lab_->name("b3");
    lab_->add_veth(h1_, "h1", "10.73.1.2/24", a_, "a1", "10.73.1.1/24");
    lab_->add_veth(a_, "a2", "10.73.9.1/24", b_, "b1", "10.73.9.2/24");
    lab_->add_veth(b_, "b2", "10.73.2.1/24", h2_, "h2", "10.73.2.2/24");
    lab_->add_veth(b_, "b3", "10.73.3.1/24", h3_, "h3", "10.73.3.2/24");
    ASSERT_EQ(lab_->nsh(h1_, "ip route add default via 10.73.1.1"), 0);
    ASSERT_EQ(lab_->nsh(h2_, "ip route add default via 10.73.2.1"), 0);
    ASSERT_EQ(lab_->nsh(h3_, "ip route add default via 10.73.3.1"), 0);
    ASSERT_EQ(lab_->nsh(a_, "ip route add default via 10.73.9.2"), 0);
    ASSERT_EQ(lab_->nsh(b_, "ip route add 10.73.1.0/24 via 10.73.9.1"), 0);
    ASSERT_EQ(lab_->nsh(a_, "sysctl -qw net.ipv4.ip_forward=1"), 0);
    ASSERT_EQ(lab_->nsh(b_, "sysctl -qw net.ipv4.ip_forward=1"), 0);
    const std::string keys = "logic = \"bfc\"\nqueues = " + std::to_string(kQueues) +
                             "\nrate_mbit = 100\nbuffer_bytes = 65536\nfail_open_ms = 500\n";
    A_ = std::make_unique<SwitchAgent>(*lab_, a_, "a");
    B_ = std::make_unique<SwitchAgent>(*lab_, b_, "b");
    A_->configure(keys, {{a1_, "host-facing"}, {a2_, "switch-facing"}});
    B_->configure(keys, {{b1_, "switch-facing"}, {b2_, "host-facing", 10}, {b3_, "host-facing"}});
  }
  void TearDown() override {
    if (A_) A_->stop();
    if (B_) B_->stop();
    lab_.reset();
  }

  std::unique_ptr<Lab> lab_;
  std::string h1_, a_, b_, h2_, h3_, a1_, a2_, b1_, b2_, b3_;
  std::unique_ptr<SwitchAgent> A_, B_;
};

TEST_F(BfcChain, CongestedEgressPausesTheUpstreamQueueOtherQueueKeepsFlowing) {
  ASSERT_EQ(geteuid(), 0u);
  ASSERT_TRUE(A_->start());
  ASSERT_TRUE(B_->start());

  // Source ports whose flows land in different queues (flow_hash % 4, the
  // classifier's choice for the bfc logic in sluiced).
  const uint16_t sport_heavy = 42000;
  const uint16_t qh = udp_queue("10.73.1.2", "10.73.2.2", sport_heavy, kDport, kQueues);
  uint16_t sport_light = 0;
  for (uint16_t p = 42001; p < 42200 && !sport_light; ++p)
    if (udp_queue("10.73.1.2", "10.73.3.2", p, kDport, kQueues) != qh) sport_light = p;
  ASSERT_NE(sport_light, 0);
  const uint16_t ql = udp_queue("10.73.1.2", "10.73.3.2", sport_light, kDport, kQueues);

  UdpSink heavy_rx, light_rx;
  heavy_rx.start(h2_, {kDport});
  light_rx.start(h3_, {kDport});
  UdpSource heavy, light;
  heavy.start(h1_, {{"10.73.2.2", kDport, sport_heavy, 5}});  // ~40 Mbit/s into B's 10 Mbit/s port
  light.start(h1_, {{"10.73.3.2", kDport, sport_light, 1}});  // ~8 Mbit/s, uncongested path
  if (HasFatalFailure()) return;

  // B pauses A's heavy queue.
  ASSERT_TRUE(eventually(
      [&] {
        json s = A_->state();
        return s["logic_state"]["counters"]["pauses_rx"].get<uint64_t>() > 0;
      },
      5s))
      << "A received no PAUSE; B: " << B_->state().dump(2) << "\nB log:\n"
      << B_->proc().log();

  uint64_t h0 = heavy_rx.got(), l0 = light_rx.got(), ls0 = light.sent();
  std::this_thread::sleep_for(3s);
  uint64_t heavy_got = heavy_rx.got() - h0, light_got = light_rx.got() - l0, light_sent = light.sent() - ls0;
  json sa = A_->state(), sb = B_->state();
  const json& ca = sa["logic_state"]["counters"];
  const json& cb = sb["logic_state"]["counters"];
  std::printf(
      "3 s: heavy delivered %lu datagrams (%.1f Mbit/s), light %lu of %lu sent; B pauses %lu resumes %lu "
      "bitmaps %lu; A pauses_rx %lu resumes_rx %lu\n",
      (unsigned long)heavy_got, heavy_got * 1042 * 8 / 3e6, (unsigned long)light_got, (unsigned long)light_sent,
      (unsigned long)cb["pauses_sent"].get<uint64_t>(), (unsigned long)cb["resumes_sent"].get<uint64_t>(),
      (unsigned long)cb["bitmaps_sent"].get<uint64_t>(), (unsigned long)ca["pauses_rx"].get<uint64_t>(),
      (unsigned long)ca["resumes_rx"].get<uint64_t>());
  std::printf("A port %s: %s\nB port %s: %s\n", a2_.c_str(), SwitchAgent::port(sa, a2_)["queues"].dump().c_str(),
              b2_.c_str(), SwitchAgent::port(sb, b2_)["queues"].dump().c_str());

  // B paused and resumed A's heavy queue, repeatedly, and only that queue.
  EXPECT_GT(cb["pauses_sent"].get<uint64_t>(), 1u);
  EXPECT_GT(cb["resumes_sent"].get<uint64_t>(), 1u);
  EXPECT_GT(ca["pauses_rx"].get<uint64_t>(), 1u);
  EXPECT_GT(ca["resumes_rx"].get<uint64_t>(), 1u);
  const json qa_heavy = SwitchAgent::port(sa, a2_)["queues"][qh];
  const json qa_light = SwitchAgent::port(sa, a2_)["queues"][ql];
  EXPECT_GT(qa_heavy["dropped"].get<uint64_t>(), 0u) << "the backlog did not move to A's paused queue";
  EXPECT_EQ(qa_light["dropped"].get<uint64_t>(), 0u);
  // No head-of-line blocking: the light flow, in another queue of the same
  // port of A, keeps flowing while the heavy one is held.
  EXPECT_GE(light_got, light_sent * 9 / 10) << "the light flow was blocked behind the paused queue";
  // The heavy flow still gets a good part of B's 10 Mbit/s (RESUMEs as B
  // drains), while B's own queue for it does not overflow.
  EXPECT_GT(heavy_got * 1042 * 8, uint64_t(3 * 10e6 * 0.4)) << "the heavy flow starved";
  const json qb_heavy = SwitchAgent::port(sb, b2_)["queues"][qh];
  EXPECT_LT(qb_heavy["dropped"].get<uint64_t>(), qa_heavy["dropped"].get<uint64_t>() / 10)
      << "B dropped instead of pushing back";

  // Stop the heavy flow: B resumes everything.
  heavy.halt();
  EXPECT_TRUE(eventually(
      [&] {
        json s = A_->state();
        const json port = SwitchAgent::port(s, a2_);
        for (const auto& q : port.value("queues", json::array()))
          if (q["paused"] == true) return false;
        return true;
      },
      5s))
      << A_->state().dump(2);
}

}  // namespace
