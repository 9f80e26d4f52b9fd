// Fault drill for the switch mechanisms (docs/operations.md "Drills"):
// sluiced in switch mode on a router h1 -- sw -- h2 with each switch logic,
// a paced UDP flow h1 -> h2 (one datagram per ms) across it, then kill -9
// of sluiced under that traffic. The flow keeps reaching h2 (fail open: the
// classifier dies with the process under tcx, or stops steering on a stale
// heartbeat under clsact), and a restarted sluiced takes the ports over
// (the killed one's tree, filters and pins are still there) and forwards.
// Printed, not asserted: the longest delivery gap before the kill (the
// baseline of the same run) and after it.
#include <gtest/gtest.h>

#include <cstdio>
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

  SwitchAgent& start_agent(const std::string& tag) {
    const DrillCase& c = GetParam();
    agents_.push_back(std::make_unique<SwitchAgent>(*lab_, sw_, tag));
    std::string keys = "logic = \"" + c.logic + "\"\nrate_mbit = 100\n";
    if (c.logic != "fifo") keys += "queues = 2\n";
    // Floodgate's windows toward a switch-facing port open with the next
    // hop's credits; h2 is a plain host and sends none, so there both ports
    // face hosts (the two-switch chain is floodgate_switch_test).
    std::string swb_role = c.logic == "floodgate" ? "host-facing" : "switch-facing";
    agents_.back()->configure(keys, {{swa_, "host-facing"}, {swb_, swb_role}}, "attach_mode = \"" + c.mode + "\"\n");
    EXPECT_TRUE(agents_.back()->start());
    return *agents_.back();
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

}  // namespace
