// Fault drill for the switch mechanisms (docs/operations.md "Drills"):
// sluiced in switch mode on a router h1 -- sw -- h2 with each switch logic,
// a paced UDP flow h1 -> h2 (one datagram per ms) across it, then kill -9
// of sluiced under that traffic. The flow keeps reaching h2 (fail open: the
// classifier dies with the process under tcx, or stops steering on a stale
// heartbeat under clsact), and a restarted sluiced takes the ports over
// (the killed one's tree, filters and pins are still there) and forwards.
// Printed, not asserted: the longest delivery gap before the kill (the
// baseline of the same run) and after it.
//
// Killed while holding (SwitchHeldKill9): bfc with both queues of the port
// toward h2 paused by h2's PAUSE frames (pause_expiry_us = 0: a pause lasts
// until resumed), floodgate with that port switch-facing, so that its
// window toward h2 (a plain host: no credits ever come back) runs out and
// the flow waits in a VOQ. Killed then, the flow reaches h2 again (tcx: the
// classifier dies with the process; clsact: it stops steering once the
// heartbeat is fail_open_ms old, 1000 ms, the default), and every datagram
// sent is accounted: delivered, still held in the port's tree (its paused
// leaf leaks 1000 B/s) or counted as dropped by it.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <ostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "lib/drill.h"
#include "lib/netns_fixture.h"
#include "lib/switch_lab.h"

using namespace sluice;
using namespace sluice::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

constexpr uint16_t kDport = 7100;

struct DrillCase {
  std::string logic;
  std::string mode;  // attach_mode
};
void PrintTo(const DrillCase& c, std::ostream* os) { *os << c.logic << "/" << c.mode; }

class SwitchKill9 : public ::testing::TestWithParam<DrillCase> {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "integration tests need root";
    lab_ = std::make_unique<Lab>("dr");
    h1_ = lab_->add_ns("h1");
    sw_ = lab_->add_ns("sw");
    h2_ = lab_->add_ns("h2");
    swa_ = lab_->name("swa");
    swb_ = lab_->name("swb");
    lab_->add_veth(h1_, "h1", "10.72.1.2/24", sw_, "swa", "10.72.1.1/24");
    lab_->add_veth(sw_, "swb", "10.72.2.1/24", h2_, "h2", "10.72.2.2/24");
    ASSERT_EQ(lab_->nsh(h1_, "ip route add default via 10.72.1.1"), 0);
    ASSERT_EQ(lab_->nsh(h2_, "ip route add default via 10.72.2.1"), 0);
    ASSERT_EQ(lab_->nsh(sw_, "sysctl -qw net.ipv4.ip_forward=1"), 0);
  }
  void TearDown() override {
    src_.halt();
    for (auto& a : agents_) a->stop();
    lab_.reset();
  }

  // `hold`: configured to hold the flow toward h2 (see the top).
  SwitchAgent& start_agent(const std::string& tag, bool hold = false) {
    const DrillCase& c = GetParam();
    agents_.push_back(std::make_unique<SwitchAgent>(*lab_, sw_, tag));
    std::string keys = "logic = \"" + c.logic + "\"\nrate_mbit = 100\n";
    if (c.logic != "fifo") keys += "queues = 2\n";
    if (hold && c.logic == "bfc") keys += "[bfc]\npause_expiry_us = 0\n";
    // Floodgate's windows toward a switch-facing port open with the next
    // hop's credits; h2 is a plain host and sends none, so there both ports
    // face hosts (the two-switch chain is floodgate_switch_test) unless the
    // drill wants the window to run out.
    std::string swb_role = c.logic == "floodgate" && !hold ? "host-facing" : "switch-facing";
    agents_.back()->configure(keys, {{swa_, "host-facing"}, {swb_, swb_role}}, "attach_mode = \"" + c.mode + "\"\n");
    EXPECT_TRUE(agents_.back()->start());
    return *agents_.back();
  }

  // Packets held in (qlen) and dropped by swb's queue tree (its root qdisc
  // counts every leaf's).
  std::pair<uint64_t, uint64_t> tree_held_dropped() {
    json j = json::parse(lab_->out("tc -n " + sw_ + " -s -j qdisc show dev " + swb_), nullptr, false);
    if (j.is_array())
      for (const auto& q : j)
        if (q.value("root", false)) return {q.value("qlen", uint64_t(0)), q.value("drops", uint64_t(0))};
    ADD_FAILURE() << "no root qdisc on " << swb_ << ": " << j.dump();
    return {0, 0};
  }

  uint64_t got_during(std::chrono::milliseconds d) {
    uint64_t a = sink_.got();
    std::this_thread::sleep_for(d);
    return sink_.got() - a;
  }

  std::unique_ptr<Lab> lab_;
  std::string h1_, sw_, h2_, swa_, swb_;
  std::vector<std::unique_ptr<SwitchAgent>> agents_;
  UdpSink sink_;
  UdpSource src_;
};

TEST_P(SwitchKill9, TrafficKeepsFlowingAndARestartTakesThePortsOver) {
  const DrillCase& c = GetParam();
  SwitchAgent& first = start_agent("sw1");
  if (HasFailure()) return;
  sink_.start(h2_, {kDport});
  src_.start(h1_, {{"10.72.2.2", kDport, 41000, 1}});
  ASSERT_TRUE(eventually([&] { return sink_.got() > 100; }, 5s)) << "no traffic across the switch";
  auto count = [&] { return sink_.got(); };
  double before = longest_stall_ms(count, 1000ms);
  first.proc().kill9();
  double after = longest_stall_ms(count, 1500ms);
  EXPECT_GT(got_during(500ms), 100u) << "the flow stopped after kill -9 of sluiced (" << c.logic << ", " << c.mode
                                     << ")";
  // The killed agent's tree (and, under clsact, its filters) are still on
  // the ports: the restart takes them over.
  SwitchAgent& second = start_agent("sw2");
  if (HasFailure()) return;
  json s = second.state();
  EXPECT_EQ(s.value("logic", std::string()), c.logic) << s.dump(2);
  EXPECT_FALSE(SwitchAgent::port(s, swb_).empty());
  EXPECT_GT(got_during(500ms), 100u) << "the flow does not cross the restarted switch";
  EXPECT_EQ(second.stop(), 0) << second.proc().log();
  EXPECT_GT(got_during(500ms), 100u) << "the flow stopped after the restarted sluiced stopped";
  std::printf(
      "drill switch %s/%s: longest delivery gap %.1f ms in the second before kill -9, %.1f ms in the 1.5 s "
      "after it\n",
      c.logic.c_str(), c.mode.c_str(), before, after);
}

INSTANTIATE_TEST_SUITE_P(Logics, SwitchKill9,
                         ::testing::Values(DrillCase{"fifo", "tcx"}, DrillCase{"fifo", "clsact"},
                                           DrillCase{"bfc", "tcx"}, DrillCase{"bfc", "clsact"},
                                           DrillCase{"floodgate", "tcx"}, DrillCase{"floodgate", "clsact"}),
                         [](const auto& info) { return info.param.logic + "_" + info.param.mode; });

class SwitchHeldKill9 : public SwitchKill9 {};

// Polls `pred` about every half millisecond until true or `timeout`.
bool eventually_fine(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(500us);
  }
  return pred();
}

TEST_P(SwitchHeldKill9, KilledWhileHoldingTheFlowResumesAndEveryDatagramIsAccounted) {
  const DrillCase& c = GetParam();
  SwitchAgent& a = start_agent("sw1", true);
  if (HasFailure()) return;
  sink_.start(h2_, {kDport});
  src_.start(h1_, {{"10.72.2.2", kDport, 41000, 1}});
  // Floodgate lets its first window through (~8 datagrams) before it holds.
  ASSERT_TRUE(eventually([&] { return sink_.got() > 5; }, 5s)) << "no traffic across the switch";
  // The accounting starts with nothing on the way (ARP resolved, the warm-up
  // flow stopped and settled), with a second flow and its own count.
  src_.halt();
  std::this_thread::sleep_for(300ms);
  const auto tree0 = tree_held_dropped();
  const uint64_t got0 = sink_.got();
  UdpSource src;
  src.start(h1_, {{"10.72.2.2", kDport, 41001, 1}});
  if (c.logic == "bfc") {
    for (uint16_t q = 0; q < 2; ++q) send_pause_frame(h2_, lab_->name("h2"), true, q, 1);
    ASSERT_TRUE(eventually(
        [&] {
          json p = SwitchAgent::port(a.state(), swb_);
          return p["queues"][0]["paused"] == true && p["queues"][1]["paused"] == true;
        },
        3s))
        << a.state().dump(2) << "\n"
        << a.proc().log();
  }
  // Holding: the tree keeps the flow's datagrams, almost none arrive (a
  // paused leaf leaks 1000 B/s: ~1 datagram a second; 500 are sent).
  ASSERT_TRUE(eventually([&] { return tree_held_dropped().first > 20; }, 5s))
      << "the switch does not hold the flow: " << lab_->out("tc -n " + sw_ + " -s class show dev " + swb_) << "\n"
      << a.state().dump(2);
  std::this_thread::sleep_for(100ms);
  uint64_t while_held = got_during(500ms);
  EXPECT_LE(while_held, 10u) << "the flow was not held";
  const uint64_t held_at_kill = tree_held_dropped().first;

  // Until the flow is back: 10 datagrams more than at the kill (the paused
  // leaf's leak brings ~1 a second; the flow 1 a millisecond). Polled by
  // this thread, so an upper bound; printed, not asserted.
  const uint64_t got_at_kill = sink_.got();
  auto t_kill = std::chrono::steady_clock::now();
  a.proc().kill9();
  bool back = eventually_fine([&] { return sink_.got() >= got_at_kill + 10; }, 5s);
  double resume_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_kill).count();
  EXPECT_TRUE(back) << "nothing arrived for 5 s after kill -9";
  EXPECT_TRUE(eventually([&] { return got_during(100ms) > 20; }, 5s))
      << "the held flow did not resume after kill -9 (" << c.logic << ", " << c.mode
      << "): " << lab_->out("tc -n " + sw_ + " -s class show dev " + swb_);

  // Every datagram of the second flow is delivered, held in the tree or
  // counted as dropped by it. Slack: a held datagram leaking out (1000 B/s)
  // between the reads of the tree and of the receiver counts twice.
  src.halt();
  std::this_thread::sleep_for(300ms);
  const uint64_t sent = src.sent();
  const auto tree = tree_held_dropped();
  const uint64_t got = sink_.got() - got0;
  const int64_t held = int64_t(tree.first) - int64_t(tree0.first), dropped = int64_t(tree.second - tree0.second);
  const int64_t unaccounted = int64_t(sent) - int64_t(got) - held - dropped;
  EXPECT_LE(std::llabs(unaccounted), 5) << "sent " << sent << ", delivered " << got << ", held " << held << ", dropped "
                                        << dropped;
  std::printf(
      "drill held %s/%s: %llu datagrams held at the kill; 10 more delivered %.1f ms after kill -9; "
      "sent %llu = delivered %llu + still held %lld + dropped (counted) %lld %+lld\n",
      c.logic.c_str(), c.mode.c_str(), (unsigned long long)held_at_kill, resume_ms, (unsigned long long)sent,
      (unsigned long long)got, (long long)held, (long long)dropped, (long long)unaccounted);
}

INSTANTIATE_TEST_SUITE_P(Logics, SwitchHeldKill9,
                         ::testing::Values(DrillCase{"bfc", "tcx"}, DrillCase{"bfc", "clsact"},
                                           DrillCase{"floodgate", "tcx"}, DrillCase{"floodgate", "clsact"}),
                         [](const auto& info) { return info.param.logic + "_" + info.param.mode; });

}  // namespace
