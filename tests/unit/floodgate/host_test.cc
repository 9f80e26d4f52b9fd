// Floodgate §4.3 on a host: the per-destination queue state machine
// (agent/mechanisms/floodgate/host_pause.h).
#include <gtest/gtest.h>

#include "mechanisms/floodgate/config.h"
#include "mechanisms/floodgate/host_pause.h"

using namespace sluice::sw;
using namespace sluice::floodgate;
using Effect = HostPause::Effect;

namespace {

const Addr kD = addr_parse("10.0.9.1");
const Addr kE = addr_parse("10.0.9.2");

ControlFrame frame(CtrlType t, const Addr& dst, uint32_t seq) {
  ControlFrame f{t};
  f.dsts = {{dst, seq}};
  return f;
}
std::vector<uint8_t> pkt(uint8_t tag) { return std::vector<uint8_t>(60, tag); }

// "H d" hold, "S d t" send frame tagged t, "R d" release.
std::vector<std::string> show(const std::vector<Effect>& es) {
  std::vector<std::string> out;
  for (const auto& e : es) {
    std::string d = addr_str(e.dst);
    if (e.kind == Effect::kHold) out.push_back("H " + d);
    if (e.kind == Effect::kRelease) out.push_back("R " + d);
    if (e.kind == Effect::kSend) out.push_back("S " + d + " " + std::to_string(e.frame.at(0)));
  }
  return out;
}

}  // namespace

TEST(FloodgateHost, PauseHoldsResumeSendsInOrderThenReleases) {
  HostPause hp;
  std::vector<Effect> out;
  hp.on_control(frame(CtrlType::kDstPause, kD, 1), 0, out);
  EXPECT_EQ(show(out), (std::vector<std::string>{"H 10.0.9.1"}));
  EXPECT_TRUE(hp.paused(kD));
  EXPECT_FALSE(hp.paused(kE));
  out.clear();
  for (uint8_t t = 1; t <= 3; ++t) hp.on_frame(kD, pkt(t).data(), 60, 100, out);
  EXPECT_TRUE(out.empty()) << "held";
  EXPECT_EQ(hp.queued(kD), 3u);
  hp.on_control(frame(CtrlType::kDstResume, kD, 2), 200, out);
  EXPECT_EQ(show(out), (std::vector<std::string>{"S 10.0.9.1 1", "S 10.0.9.1 2", "S 10.0.9.1 3", "R 10.0.9.1"}));
  EXPECT_FALSE(hp.paused(kD));
  // A straggler stolen before the release took effect goes straight out.
  out.clear();
  hp.on_frame(kD, pkt(4).data(), 60, 300, out);
  EXPECT_EQ(show(out), (std::vector<std::string>{"S 10.0.9.1 4"}));
  EXPECT_EQ(hp.stats().pauses, 1u);
  EXPECT_EQ(hp.stats().resumes, 1u);
  EXPECT_EQ(hp.stats().held_frames, 3u);
  EXPECT_EQ(hp.stats().resent_frames, 4u);
  EXPECT_EQ(hp.stats().passed_frames, 1u) << "the straggler was never held";
}

TEST(FloodgateHost, StaleAndRepeatedFramesChangeNothing) {
  HostPause hp;
  std::vector<Effect> out;
  hp.on_control(frame(CtrlType::kDstPause, kD, 10), 0, out);
  out.clear();
  // A resume older than the pause (reordered): ignored.
  hp.on_control(frame(CtrlType::kDstResume, kD, 9), 1, out);
  hp.on_control(frame(CtrlType::kDstResume, kD, 10), 1, out);
  EXPECT_TRUE(out.empty());
  EXPECT_TRUE(hp.paused(kD));
  EXPECT_EQ(hp.stats().stale, 2u);
  // A repeated pause (newer seq) keeps holding, no second hold effect.
  hp.on_control(frame(CtrlType::kDstPause, kD, 11), 2, out);
  EXPECT_TRUE(out.empty());
  // Serial arithmetic across the wrap.
  hp.on_control(frame(CtrlType::kDstPause, kE, 0xfffffffe), 3, out);
  out.clear();
  hp.on_control(frame(CtrlType::kDstResume, kE, 1), 4, out);
  EXPECT_EQ(show(out), (std::vector<std::string>{"R 10.0.9.2"}));
  // Other frame types are not ours.
  ControlFrame credit{CtrlType::kCredit};
  credit.credits = {{kD, 1, 1, 1}};
  out.clear();
  hp.on_control(credit, 5, out);
  EXPECT_TRUE(out.empty());
  EXPECT_TRUE(hp.paused(kD));
}

TEST(FloodgateHost, PausesExpireAndOverflowReleases) {
  HostPause hp(HostPauseConfig{1'000'000, 4});
  std::vector<Effect> out;
  hp.on_control(frame(CtrlType::kDstPause, kD, 1), 0, out);
  hp.on_frame(kD, pkt(1).data(), 60, 10, out);
  out.clear();
  hp.on_tick(999'999, out);
  EXPECT_TRUE(out.empty());
  // Refreshed by a newer pause at 0.5 ms: expires at 1.5 ms, not 1 ms.
  hp.on_control(frame(CtrlType::kDstPause, kD, 2), 500'000, out);
  hp.on_tick(1'000'000, out);
  EXPECT_TRUE(out.empty());
  hp.on_tick(1'500'000, out);
  EXPECT_EQ(show(out), (std::vector<std::string>{"S 10.0.9.1 1", "R 10.0.9.1"}));
  EXPECT_EQ(hp.stats().expired, 1u);
  // More than max_frames held: the destination is let go (fail open).
  out.clear();
  hp.on_control(frame(CtrlType::kDstPause, kE, 1), 2'000'000, out);
  out.clear();
  for (uint8_t t = 1; t <= 5; ++t) hp.on_frame(kE, pkt(t).data(), 60, 2'000'001, out);
  EXPECT_EQ(show(out), (std::vector<std::string>{"S 10.0.9.2 1", "S 10.0.9.2 2", "S 10.0.9.2 3", "S 10.0.9.2 4",
                                                 "S 10.0.9.2 5", "R 10.0.9.2"}));
  EXPECT_EQ(hp.stats().overflow, 1u);
  EXPECT_EQ(hp.stats().queued_frames, 0u);
}

// [floodgate] host_pause_timeout_ms as the host module gets it (the
// section's Section::host): a pause that is never refreshed is released at
// the configured timeout, not at the 20 ms default and not a nanosecond
// before; without the key, at 20 ms.
TEST(FloodgateHost, ConfiguredPauseTimeoutReleasesAtThatTimeAndNotBefore) {
  auto host_config = [](const std::string& text) {
    std::vector<sluice::ConfigProblem> problems;
    const toml::table t = toml::parse(text);
    std::any a = floodgate_section().parse(&t, problems, nullptr);
    EXPECT_TRUE(problems.empty()) << text;
    return std::any_cast<const Section&>(a).host;
  };
  struct Case {
    std::string text;
    uint64_t timeout_ns;
  };
  for (const Case& c : {Case{"host_pause_timeout_ms = 200", 200'000'000}, Case{"", 20'000'000}}) {
    SCOPED_TRACE(c.text);
    HostPause hp(host_config(c.text));
    EXPECT_EQ(hp.config().pause_timeout_ns, c.timeout_ns);
    std::vector<Effect> out;
    const uint64_t t0 = 1'000'000'000;
    hp.on_control(frame(CtrlType::kDstPause, kD, 1), t0, out);
    hp.on_frame(kD, pkt(7).data(), 60, t0 + 1, out);
    out.clear();
    // Ticks every millisecond up to the timeout: held all along.
    for (uint64_t t = t0; t < t0 + c.timeout_ns; t += 1'000'000) hp.on_tick(t, out);
    hp.on_tick(t0 + c.timeout_ns - 1, out);
    EXPECT_TRUE(out.empty());
    EXPECT_TRUE(hp.paused(kD));
    EXPECT_EQ(hp.stats().expired, 0u);
    hp.on_tick(t0 + c.timeout_ns, out);
    EXPECT_EQ(show(out), (std::vector<std::string>{"S 10.0.9.1 7", "R 10.0.9.1"}));
    EXPECT_FALSE(hp.paused(kD));
    EXPECT_EQ(hp.stats().expired, 1u);
  }
}

// host_max_held_frames: the most frames held at once over all
// destinations; the frame past it releases the destination it was for.
TEST(FloodgateHost, ConfiguredFrameLimitCountsAllDestinations) {
  std::vector<sluice::ConfigProblem> problems;
  const toml::table t = toml::parse("host_max_held_frames = 3");
  std::any a = floodgate_section().parse(&t, problems, nullptr);
  ASSERT_TRUE(problems.empty());
  HostPause hp(std::any_cast<const Section&>(a).host);
  std::vector<Effect> out;
  hp.on_control(frame(CtrlType::kDstPause, kD, 1), 0, out);
  hp.on_control(frame(CtrlType::kDstPause, kE, 1), 0, out);
  out.clear();
  hp.on_frame(kD, pkt(1).data(), 60, 1, out);
  hp.on_frame(kD, pkt(2).data(), 60, 2, out);
  hp.on_frame(kE, pkt(3).data(), 60, 3, out);
  EXPECT_TRUE(out.empty()) << "3 held: at the limit, not past it";
  hp.on_frame(kE, pkt(4).data(), 60, 4, out);
  EXPECT_EQ(show(out), (std::vector<std::string>{"S 10.0.9.2 3", "S 10.0.9.2 4", "R 10.0.9.2"}));
  EXPECT_TRUE(hp.paused(kD));
  EXPECT_EQ(hp.queued(kD), 2u);
  EXPECT_EQ(hp.stats().overflow, 1u);
}
