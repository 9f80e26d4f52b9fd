// The `sluicectl bfc` view of a running BfcLogic (flow table occupancy,
// queue assignment, pause counters, paused queues) as JSON and text.
#include <gtest/gtest.h>

#include "mechanisms/bfc/bfc_view.h"
#include "switch/port_model.h"

using namespace sluice::sw;
using sluice::bfc::BfcLogic;
using sluice::bfc::Config;

TEST(BfcView, ShowsOccupancyAssignmentCountersAndPauses) {
  Config c = Config::variant_named("bfc");
  c.th_fixed_bytes = 1000;
  BfcLogic bfc(c);
  PortConfig up{"up0", PortRole::kSwitchFacing, 10'000'000'000ull, std::vector<QueueConfig>(4), {}};
  PortConfig down{"down1", PortRole::kSwitchFacing, 10'000'000'000ull, std::vector<QueueConfig>(16), {}};
  SwitchModel sw({up, down}, bfc);
  for (int i = 0; i < 4; ++i) {
    PacketMeta p;
    p.in_port = 0;
    p.out_port = 1;
    p.wire_bytes = 1000;
    p.flow_hash = 42;
    p.upstream_q = 3;
    sw.arrive(0, p);
  }
  sw.run_until(0);
  ControlFrame f{CtrlType::kPause};
  f.queues = {{bfc.entry_queue(1, 42), 1}};
  sw.arrive_control(1, 1, encode(f));
  sw.run_until(1);

  nlohmann::json v = sluice::bfc::view(bfc, sw);
  EXPECT_EQ(v["variant"], "bfc");
  EXPECT_EQ(v["counters"]["pauses_sent"], 1);
  EXPECT_EQ(v["counters"]["pauses_rx"], 1);
  ASSERT_EQ(v["ports"].size(), 2u);
  const auto& p0 = v["ports"][0];
  EXPECT_EQ(p0["name"], "up0");
  ASSERT_EQ(p0["pause_counters"].size(), 1u);
  EXPECT_EQ(p0["pause_counters"][0]["upstream_q"], 3);
  EXPECT_EQ(p0["pause_counters"][0]["count"], 2);  // packets 3 and 4 found > 1000 B queued
  const auto& p1 = v["ports"][1];
  EXPECT_EQ(p1["flow_table"]["entries"], 1600);
  EXPECT_EQ(p1["flow_table"]["live"], 1);
  EXPECT_EQ(p1["threshold_bytes"], 1000);
  ASSERT_EQ(p1["queues"].size(), 1u);
  EXPECT_EQ(p1["queues"][0]["queue"], bfc.entry_queue(1, 42));
  EXPECT_EQ(p1["queues"][0]["flows"], 1);
  EXPECT_EQ(p1["queues"][0]["paused"], true);
  EXPECT_EQ(p1["queues"][0]["pkts"], 3);  // one left before the pause
  EXPECT_EQ(p1["active_queues"], 0);      // its only queue is paused

  std::string text = sluice::bfc::render_text(v);
  EXPECT_NE(text.find("PAUSED by the next hop"), std::string::npos) << text;
  EXPECT_NE(text.find("pausing upstream queue 3 (2 packets above Th)"), std::string::npos) << text;
  EXPECT_NE(text.find("flow table 1/1600 live"), std::string::npos) << text;
}
