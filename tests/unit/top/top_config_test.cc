// TOP's [top] section (agent/mechanisms/top/top_config.cc): defaults, the
// threshold derived as top-tpds20 §5.1 does, the lab's clock offsets, and
// bad input refused naming the key, the value and the line; and the clock
// manager's offsets (clock.h): shared clocks are synced, a trustworthy PTP
// offset is corrected, an untrustworthy one is not.
#include <gtest/gtest.h>

#include "lib/config_check.h"
#include "mechanisms/mechanisms.h"
#include "mechanisms/top/clock.h"
#include "mechanisms/top/top_config.h"

using namespace sluice;

namespace {

const std::string kIface = "[[interface]]\nname = \"eth0\"\nmechanisms = [\"top\"]\n";

TopConfig parse(const std::string& top) { return parse_config_string(kIface + "[top]\n" + top).get<TopConfig>(); }

std::vector<ConfigProblem> problems(const std::string& top) { return test::config_problems(kIface + "[top]\n" + top); }

}  // namespace

TEST(TopConfig, DefaultsDeriveTFromSection51) {
  TopConfig c = parse("");
  EXPECT_FALSE(c.threshold_us);
  EXPECT_TRUE(c.expire);
  EXPECT_EQ(c.clock_source, TopClockSource::Ptp4l);
  EXPECT_EQ(c.port, 7217u);
  // 10 us + 2 x 8 x 98 B x 8 / (10 Gbit/s x 98/1636) = 10 + 2 x 10.47 us:
  // a full token queue is 8 pacing slots (wire.h).
  EXPECT_NEAR(double(c.threshold_ns()), 10'000 + 2 * 8 * 98 * 8 / (10e9 * 98 / 1636) * 1e9, 2.0);
  EXPECT_EQ(parse("link_mbit = 100\nbase_one_way_us = 100\n").threshold_ns(),
            top::derive_threshold_ns(100'000, 100e6, 98.0 / 1636, 8, 98));
  EXPECT_EQ(parse("threshold_us = 2000\nlink_mbit = 100\n").threshold_ns(), 2'000'000u) << "T given wins";
}

TEST(TopConfig, LabOffsetsAndClockSource) {
  TopConfig c = parse(
      "clock_source = \"shared\"\nclock_offset_ns = -5\n"
      "peer_clock_offset_ns = { \"10.77.0.2\" = -20000000, \"fd00::2\" = 7 }\n");
  EXPECT_EQ(c.clock_source, TopClockSource::Shared);
  EXPECT_EQ(c.clock_offset_ns, -5);
  ASSERT_EQ(c.peer_clock_offset_ns.size(), 2u);
  EXPECT_EQ(c.peer_clock_offset_ns.at("10.77.0.2"), -20'000'000);
  EXPECT_EQ(c.peer_clock_offset_ns.at("fd00::2"), 7);
}

// fail_open_ms: how long sluiced may be gone or stopped before the XDP
// program stops dropping expired tokens (bpf/lib/liveness.h).
TEST(TopConfig, FailOpenMs) {
  EXPECT_EQ(parse("").fail_open_ms, 100u);
  EXPECT_EQ(to_json(parse_config_string(kIface), mechanisms())["top"]["fail_open_ms"], 100);
  EXPECT_EQ(parse("fail_open_ms = 1\n").fail_open_ms, 1u);
  EXPECT_EQ(parse("fail_open_ms = 60000\n").fail_open_ms, 60000u);
  EXPECT_EQ(to_json(parse_config_string(kIface + "[top]\nfail_open_ms = 250\n"), mechanisms())["top"]["fail_open_ms"],
            250);
  std::string base = kIface + "[top]\n";
  EXPECT_TRUE(test::config_rejects(base + "fail_open_ms = 0\n", "top.fail_open_ms", "out of range [1, 60000]"));
  EXPECT_TRUE(test::config_rejects(base + "fail_open_ms = 60001\n", "top.fail_open_ms", "out of range [1, 60000]"));
  EXPECT_TRUE(test::config_rejects(base + "fail_open_ms = -5\n", "top.fail_open_ms", "out of range [1, 60000]"));
  EXPECT_TRUE(test::config_rejects(base + "fail_open_ms = \"100\"\n", "top.fail_open_ms", "expected an integer"));
  EXPECT_TRUE(test::config_rejects(base + "fail_open_ms = 1.5\n", "top.fail_open_ms", "expected an integer"));
  auto ps = problems("fail_open_ms = 0\n");
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0].value, "0");
  EXPECT_NE(ps[0].where.find(":5"), std::string::npos) << ps[0].to_string();
}

TEST(TopConfig, BadInputNamesKeyValueAndLine) {
  std::string base = kIface + "[top]\n";  // [top] is line 4
  auto ps = problems("offset_bound_us = -1\n");
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0].key, "top.offset_bound_us");
  EXPECT_EQ(ps[0].value, "-1");
  EXPECT_NE(ps[0].reason.find("out of range"), std::string::npos);
  EXPECT_NE(ps[0].where.find(":5"), std::string::npos) << ps[0].to_string();

  ps = problems("expire = true\npeer_clock_offset_ns = { \"10.0.0.300\" = 1 }\n");
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0].key, "top.peer_clock_offset_ns.10.0.0.300");
  EXPECT_NE(ps[0].reason.find("not an IPv4 or IPv6 address"), std::string::npos);
  EXPECT_NE(ps[0].where.find(":6"), std::string::npos) << ps[0].to_string();

  EXPECT_TRUE(test::config_rejects(base + "peer_clock_offset_ns = { \"10.0.0.2\" = \"soon\" }\n",
                                   "top.peer_clock_offset_ns.10.0.0.2", "expected an integer"));
  EXPECT_TRUE(
      test::config_rejects(base + "peer_clock_offset_ns = [1]\n", "top.peer_clock_offset_ns", "expected a table"));
  EXPECT_TRUE(
      test::config_rejects(base + "clock_source = \"gps\"\n", "top.clock_source", "must be one of ptp4l, shared"));
  EXPECT_TRUE(test::config_rejects(base + "ptp_uds = \"/run/ptp4l; rm -rf /\"\n", "top.ptp_uds", "absolute path"));
  EXPECT_TRUE(test::config_rejects(base + "ptp_uds = \"relative\"\n", "top.ptp_uds", "absolute path"));
  EXPECT_TRUE(test::config_rejects(base + "threshold_us = 0\n", "top.threshold_us", "out of range"));
  EXPECT_TRUE(test::config_rejects(base + "token_share = 0.9\n", "top.token_share", "out of range"));
  EXPECT_TRUE(test::config_rejects(base + "link_mbit = 1\ntoken_queue = 4096\ntoken_share = 0.001\n", "top.token_share",
                                   "above 10 s"));
  EXPECT_TRUE(test::config_rejects(base + "clock_offset_ns = 20000000000\n", "top.clock_offset_ns", "out of range"));
  EXPECT_TRUE(test::config_rejects(base + "expiry = false\n", "top.expiry", "unknown key"));
  // top runs on hosts only: the switch side is a queue tree (docs/top.md).
  EXPECT_TRUE(test::config_rejects(
      "[[interface]]\nname = \"eth0\"\nrole = \"switch-port\"\nline_rate_mbps = 100\nmechanisms = [\"top\"]\n",
      "interface[0].mechanisms[0]", "cannot run on a switch-port"));
}

TEST(TopClock, SharedClockIsSyncedAndNeverWidened) {
  top::ClockSample s = top::shared_clock_sample();
  EXPECT_TRUE(top::synced(s));
  auto e = top::expiry_for(s, 2'000'000, 500'000);
  EXPECT_EQ(e.threshold_ns, 2'000'000u);
  EXPECT_EQ(e.widen_ns, 0u);
  EXPECT_TRUE(e.why.empty());
  s.injected_ns = -20'000'000;
  EXPECT_EQ(top::local_offset_ns(s, 500'000), -20'000'000) << "the lab's skew is applied as configured";
}

TEST(TopClock, LocalOffsetCorrectsOnlyATrustworthyPtpOffset) {
  top::ClockSample s;
  s.have_ptp = true;
  s.port_state = "SLAVE";
  s.offset_ns = 300;  // we run 300 ns ahead of the master
  s.injected_ns = 1000;
  EXPECT_EQ(top::local_offset_ns(s, 500), 700);
  s.offset_ns = -800;  // above the bound: T is widened instead (expiry_for)
  EXPECT_EQ(top::local_offset_ns(s, 500), 1000);
  EXPECT_EQ(top::expiry_for(s, 2000, 500).widen_ns, 1300u);
  s.offset_ns = 300;
  s.port_state = "UNCALIBRATED";
  EXPECT_EQ(top::local_offset_ns(s, 500), 1000);
  EXPECT_EQ(top::expiry_for(s, 2000, 500).widen_ns, 500u);
  top::ClockSample none;  // ptp4l not answering
  EXPECT_FALSE(top::synced(none));
  EXPECT_EQ(top::expiry_for(none, 2000, 500).widen_ns, 500u);
  EXPECT_NE(top::expiry_for(none, 2000, 500).why.find("not answering"), std::string::npos);
}
