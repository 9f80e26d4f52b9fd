// BFC's sampled mode (Config::sample_ns: what sluiced runs in design A,
// where packets do not pass through the agent) against the port model:
// the queue is flow_hash % queues (the data path's classifier), a queue
// sampled above Th pauses that queue of the switch-facing neighbours only,
// resumes once sampled at or below Th, and other queues are never paused.
#include <gtest/gtest.h>

#include "lib/switch_model_util.h"
#include "core/error.h"
#include "mechanisms/bfc/bfc_config.h"
#include "mechanisms/bfc/bfc_logic.h"
#include "mechanisms/bfc/bfc_switch.h"
#include "switch/port_model.h"
#include "switch/registry.h"

using namespace sluice::sw;
using sluice::bfc::BfcLogic;
using sluice::bfc::Config;

namespace {

constexpr uint64_t k100M = 100'000'000ull;

PortConfig port(std::string name, size_t queues, PortRole role, uint64_t rate) {
  return sluice::test::model_port(std::move(name), queues, role, rate);
}

PacketMeta pkt(PortId in, PortId out, uint32_t bytes, uint32_t hash) {
  return sluice::test::model_pkt(in, out, bytes, hash);
}

struct Frames {
  std::vector<std::pair<uint64_t, ControlFrame>> pauses, resumes;
};

Frames frames_on(const SwitchModel& sw, PortId port) {
  Frames out;
  for (const auto& s : sw.sent_control()) {
    if (s.port != port) continue;
    ControlFrame f;
    EXPECT_EQ(decode(s.payload.data(), s.payload.size(), &f), SL_CTRL_R_OK);
    if (f.type == CtrlType::kPause) out.pauses.emplace_back(s.at_ns, f);
    if (f.type == CtrlType::kResume) out.resumes.emplace_back(s.at_ns, f);
  }
  return out;
}

Config sampled(std::string_view variant = "bfc") {
  Config c = Config::variant_named(variant);
  c.sample_ns = 100'000;  // 100 µs
  c.hrtt_ns = 400'000;    // Th = 5000 B at 100 Mbit/s with one active queue
  c.bitmap_interval_ns = 1'000'000;
  c.pause_expiry_ns = 10'000'000;
  return c;
}

// Port 0: the switch-facing neighbour the traffic comes from; port 1: the
// host-facing egress at 100 Mbit/s, 4 queues. 60 frames of 1000 B arrive
// back to back at 1 Gbit/s (8 µs apart): the egress queue builds to ~50 KB.
TEST(BfcSampled, AboveThPausesThatQueueUpstreamAndResumesWhenDrained) {
  BfcLogic logic(sampled());
  SwitchModel sw(
      {port("up", 4, PortRole::kSwitchFacing, 1'000'000'000ull), port("down", 4, PortRole::kHostFacing, k100M)}, logic);
  const uint32_t hash = 0x1234567u;
  const QueueId q = hash % 4;
  for (int i = 0; i < 60; ++i) sw.arrive(uint64_t(i) * 8'000, pkt(0, 1, 1000, hash));
  sw.run_until(20'000'000);

  for (const auto& d : sw.departures()) EXPECT_EQ(d.queue, q) << "queue = flow_hash % queues";
  Frames up = frames_on(sw, 0);
  ASSERT_EQ(up.pauses.size(), 1u);
  ASSERT_EQ(up.resumes.size(), 1u);
  EXPECT_EQ(up.pauses[0].second.queues.at(0).queue, q);
  EXPECT_EQ(up.resumes[0].second.queues.at(0).queue, q);
  // PAUSE within one sample of the queue crossing Th (5000 B: the 6th frame
  // at ~40 µs); RESUME after the queue drained to Th (~60 KB at 100 Mbit/s
  // = 4.8 ms in total), never before it.
  EXPECT_LE(up.pauses[0].first, 40'000u + 100'000u + 1);
  EXPECT_GE(up.resumes[0].first, 4'000'000u);
  EXPECT_LE(up.resumes[0].first, 5'000'000u);
  // Frames go to the switch-facing neighbour only, never out of the host port.
  Frames down = frames_on(sw, 1);
  EXPECT_TRUE(down.pauses.empty());
  EXPECT_EQ(logic.counters().pauses_sent, 1u);
  EXPECT_EQ(logic.counters().resumes_sent, 1u);
  EXPECT_EQ(logic.pause_counter(0, q), 0u);
  EXPECT_GT(logic.counters().samples, 100u);
}

TEST(BfcSampled, BelowThNothingIsPaused) {
  BfcLogic logic(sampled());
  SwitchModel sw(
      {port("up", 4, PortRole::kSwitchFacing, 1'000'000'000ull), port("down", 4, PortRole::kHostFacing, k100M)}, logic);
  // 1000 B every 100 µs = 80 Mbit/s into 100 Mbit/s: never queues past Th.
  for (int i = 0; i < 100; ++i) sw.arrive(uint64_t(i) * 100'000, pkt(0, 1, 1000, 77));
  sw.run_until(20'000'000);
  EXPECT_EQ(logic.counters().pauses_sent, 0u);
  EXPECT_EQ(sw.departures().size(), 100u);
}

TEST(BfcSampled, SingleVariantUsesQueueZero) {
  BfcLogic logic(sampled("bfc-single"));
  SwitchModel sw(
      {port("up", 4, PortRole::kSwitchFacing, 1'000'000'000ull), port("down", 4, PortRole::kHostFacing, k100M)}, logic);
  for (int i = 0; i < 60; ++i) sw.arrive(uint64_t(i) * 8'000, pkt(0, 1, 1000, 0x1234567u + i));
  sw.run_until(20'000'000);
  for (const auto& d : sw.departures()) EXPECT_EQ(d.queue, 0);
  Frames up = frames_on(sw, 0);
  ASSERT_FALSE(up.pauses.empty());
  EXPECT_EQ(up.pauses[0].second.queues.at(0).queue, 0);
}

TEST(BfcSampled, RegistryRowsBuildTheSampledModeForTheTree) {
  for (const char* name : {"bfc", "bfc-stochastic", "bfc-single"}) {
    const LogicInfo* info = find_logic(name);
    ASSERT_NE(info, nullptr) << name;
    ASSERT_NE(info->view, nullptr) << name;
    auto l = info->make(LogicContext{});
    ASSERT_NE(l, nullptr);
    EXPECT_EQ(l->name(), name);
    const auto& c = static_cast<const BfcLogic&>(*l).config();
    EXPECT_GT(c.sample_ns, 0u) << name << ": the tree data path has no per-packet calls";
    EXPECT_EQ(c.hrtt_ns, 1'000'000u) << name;
    EXPECT_EQ(c.check(), "");
    EXPECT_EQ(info->hash_flows, std::string_view(name) != "bfc-single");
    EXPECT_TRUE(info->upstream_q_tag) << name;
  }
  // bfc-nosticky has no assignment to make sticky in the sampled mode.
  const LogicInfo* ns = find_logic("bfc-nosticky");
  ASSERT_NE(ns, nullptr);
  EXPECT_THROW(ns->make(LogicContext{}), sluice::Error);
}

// datapath = "hold" (LogicContext::per_packet): §3.3's per-packet mode,
// sample_ns = 0 and the hold path's HRTT, with each variant's assignment.
TEST(BfcSampled, RegistryRowsRunPerPacketOnTheHoldPath) {
  for (const char* name : {"bfc", "bfc-stochastic", "bfc-single", "bfc-nosticky"}) {
    const LogicInfo* info = find_logic(name);
    ASSERT_NE(info, nullptr) << name;
    LogicContext ctx;
    ctx.per_packet = true;
    auto l = info->make(ctx);
    ASSERT_NE(l, nullptr);
    EXPECT_EQ(l->name(), name);
    const auto& c = static_cast<const BfcLogic&>(*l).config();
    EXPECT_EQ(c.sample_ns, 0u) << name;
    EXPECT_EQ(c.hrtt_ns, uint64_t(sluice::BfcSection::kHoldHrttUs) * 1000) << name;
    EXPECT_EQ(c.sticky, std::string_view(name) != "bfc-nosticky") << name;
    EXPECT_EQ(c.assign, std::string_view(name) == "bfc-stochastic" ? sluice::bfc::Assign::kStochastic
                        : std::string_view(name) == "bfc-single"   ? sluice::bfc::Assign::kSingle
                                                                   : sluice::bfc::Assign::kDynamic)
        << name;
    EXPECT_EQ(c.check(), "");
  }
  // Per packet, the dynamic row puts two flows arriving together in two
  // different (empty) queues, whatever their hashes say (the sampled mode
  // would put both in hash % queues = queue 1).
  LogicContext ctx;
  ctx.per_packet = true;
  auto l = find_logic("bfc")->make(ctx);
  SwitchModel sw({port("up", 4, PortRole::kSwitchFacing, k100M), port("down", 4, PortRole::kHostFacing, k100M)}, *l);
  sw.arrive(0, pkt(0, 1, 1000, 1));
  sw.arrive(0, pkt(0, 1, 1000, 5));
  sw.run_until(1'000'000);
  ASSERT_EQ(sw.departures().size(), 2u);
  EXPECT_NE(sw.departures()[0].queue, sw.departures()[1].queue);
}

}  // namespace
