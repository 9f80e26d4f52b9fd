// Floodgate's [floodgate] section and its sluicectl view
// (agent/mechanisms/floodgate/config.h).
#include <gtest/gtest.h>

#include <functional>

#include "lib/config_check.h"
#include "mechanisms/floodgate/config.h"
#include "mechanisms/mechanisms.h"
#include "switch/port_model.h"

using namespace sluice::sw;
using namespace sluice::floodgate;

namespace {

const std::vector<std::string> kPorts = {"h0", "h1", "up"};

Config parse(const std::string& text) { return parse_section(toml::parse(text), kPorts); }

std::vector<SectionProblem> problems(const std::string& text) {
  try {
    parse(text);
  } catch (const SectionError& e) {
    return e.problems();
  }
  ADD_FAILURE() << "accepted: " << text;
  return {};
}

// A bad [floodgate] line: alone, it gives exactly one problem, this key
// and this reason.
struct BadKey {
  std::string text, key, reason;
};
// Each case alone is refused with its key and reason; `also` checks more
// per case (e.g. through sluiced's loader).
void expect_each_refused(const std::vector<BadKey>& cases, const std::function<void(const BadKey&)>& also = {}) {
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    auto ps = problems(c.text);
    ASSERT_EQ(ps.size(), 1u);
    EXPECT_EQ(ps[0].key, c.key);
    EXPECT_EQ(ps[0].reason, c.reason);
    if (also) also(c);
  }
}

}  // namespace

TEST(FloodgateConfig, EmptySectionGivesTheDefaults) {
  Config c = parse("");
  Config d;
  EXPECT_EQ(c.credit_interval_ns, d.credit_interval_ns);
  EXPECT_EQ(c.credit_interval_ns, 500'000u);
  EXPECT_EQ(c.max_voqs, 100u);
  EXPECT_EQ(c.thre_credit_bdp, 10u);
  EXPECT_TRUE(c.voq_grouping);
  EXPECT_FALSE(c.dst_pause);
  EXPECT_TRUE(c.up_ports.empty());
}

TEST(FloodgateConfig, EveryKeyIsRead) {
  Config c = parse(R"(
credit_interval_us = 1000
hop_rtt_us = 120
max_voqs = 16
thre_credit_bytes = 90000
voq_grouping = false
down_voqs = 4
up_ports = ["up"]
syn_timeout_ms = 50
dst_pause = true
thre_off_bytes = 6000
thre_on_bytes = 3000
)");
  EXPECT_EQ(c.credit_interval_ns, 1'000'000u);
  EXPECT_EQ(c.hop_rtt_ns, 120'000u);
  EXPECT_EQ(c.max_voqs, 16u);
  EXPECT_EQ(c.thre_credit_bytes, 90'000u);
  EXPECT_FALSE(c.voq_grouping);
  EXPECT_EQ(c.down_voqs, 4u);
  EXPECT_EQ(c.up_ports, std::vector<PortId>{2});
  EXPECT_EQ(c.syn_timeout_ns, 50'000'000u);
  EXPECT_TRUE(c.dst_pause);
  EXPECT_EQ(c.thre_off_bytes, 6000u);
  EXPECT_EQ(c.thre_on_bytes, 3000u);
}

TEST(FloodgateConfig, BadKeysAreAllReported) {
  expect_each_refused({
      {"credit_intervall_us = 5", "floodgate.credit_intervall_us", "unknown key"},
      {"credit_interval_us = \"fast\"", "floodgate.credit_interval_us", "expected an integer"},
      {"credit_interval_us = 10", "floodgate.credit_interval_us", "out of range [50, 1000000]"},
      {"max_voqs = 0", "floodgate.max_voqs", "out of range [1, 127]"},
      {"max_voqs = 128", "floodgate.max_voqs", "out of range [1, 127]"},
      {"voq_grouping = 1", "floodgate.voq_grouping", "expected true or false"},
      {"up_ports = \"up\"", "floodgate.up_ports", "expected an array of port names"},
      {"up_ports = [\"eth9\"]", "floodgate.up_ports", "not a port of this switch"},
      {"up_ports = [3]", "floodgate.up_ports", "expected a port name"},
      {"thre_off_bytes = 1000\nthre_on_bytes = 2000", "floodgate", "floodgate: thre_on must not exceed thre_off"},
      {"credit_interval_us = 10000\nsyn_timeout_ms = 5", "floodgate",
       "floodgate: syn_timeout must be at least 2 credit intervals (a silence is longer than T)"},
  });
  // Several at once: all of them, not the first.
  EXPECT_EQ(problems("max_voqs = 0\ndst_pause = \"yes\"\nbogus = 1").size(), 3u);
}

TEST(FloodgateConfig, ViewShowsWindowsVoqsCreditsAndPauses) {
  Config c = parse("dst_pause = true\nup_ports = [\"up\"]\nhop_rtt_us = 200");
  FloodgateLogic fg(c);
  auto host = [](std::string n) {
    PortConfig p;
    p.name = std::move(n);
    p.role = PortRole::kHostFacing;
    return p;
  };
  PortConfig up;
  up.name = "up";
  up.rate_bps = 200'000'000;
  up.queues.assign(5, QueueConfig{1, 1514, 0, -1});
  up.queues[0].priority = 0;
  SwitchModel sw({host("h0"), host("h1"), up}, fg);
  const Addr d = addr_parse("10.0.9.1");
  for (int i = 0; i < 20; ++i) {
    PacketMeta p;
    p.in_port = PortId(i % 2);
    p.out_port = 2;
    p.dst = d;
    p.wire_bytes = 1514;
    sw.arrive(0, p);
  }
  sw.run_until(1'000'000);
  auto v = view(fg, kPorts);
  ASSERT_EQ(v["windows"].size(), 1u);
  EXPECT_EQ(v["windows"][0]["port"], "up");
  EXPECT_EQ(v["windows"][0]["dst"], "10.0.9.1");
  EXPECT_EQ(v["windows"][0]["initial_bytes"], 17500);
  EXPECT_EQ(v["windows"][0]["window_bytes"], 17500 - 12 * 1514);
  ASSERT_EQ(v["voqs"].size(), 1u);
  EXPECT_EQ(v["voqs"][0]["packets"], 8);
  EXPECT_EQ(v["voqs"][0]["head_blocked"], true);
  EXPECT_EQ(v["voqs_in_use"], 1);
  EXPECT_EQ(v["voqs_total"], 4);
  ASSERT_EQ(v["dst_pause"].size(), 1u);
  EXPECT_EQ(v["dst_pause"][0]["paused_ports"], (nlohmann::json{"h0", "h1"}));
  EXPECT_EQ(v["counters"]["forwarded"], 12);
  EXPECT_EQ(v["counters"]["dst_pause_out"], 2);
  const std::string text = render(v);
  EXPECT_NE(text.find("up -> 10.0.9.1: -668 of 17500 B, in flight 18168 B"), std::string::npos) << text;
  EXPECT_NE(text.find("voq 0 (all): 8 pkts 12112 B, head 10.0.9.1 via up (waiting for credit)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("10.0.9.1 paused on h0 h1"), std::string::npos) << text;
}

// sluiced's loader reads [floodgate] (the mechanisms table's row) into a
// Section; switch mode resolves its up_ports against the switch's ports.
const std::string kIface = "[[interface]]\nname = \"eth0\"\n";

TEST(FloodgateConfig, SluicedLoadsTheSection) {
  sluice::Config all = sluice::parse_config_string(
      kIface + "[floodgate]\nhop_rtt_us = 400\ncredit_interval_us = 250\nup_ports = [\"swp1\"]\n", "sw.toml");
  const Section& s = all.get<Section>();
  EXPECT_EQ(s.config.hop_rtt_ns, 400'000u);
  EXPECT_EQ(s.config.credit_interval_ns, 250'000u);
  EXPECT_EQ(s.up_port_names, std::vector<std::string>{"swp1"});
  Config c = s.resolve({"swp0", "swp1"});
  EXPECT_EQ(c.up_ports, std::vector<PortId>{1});
  try {
    s.resolve({"swp0"});
    ADD_FAILURE() << "an up port that is not a port of the switch was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "floodgate.up_ports: \"swp1\" is not a port of this switch");
  }
  // Absent: the defaults.
  sluice::Config none = sluice::parse_config_string(kIface, "sw.toml");
  EXPECT_EQ(none.get<Section>().config.hop_rtt_ns, Config{}.hop_rtt_ns);
  EXPECT_EQ(sluice::to_json(all, sluice::mechanisms())["floodgate"]["hop_rtt_us"], 400);
}

TEST(FloodgateConfig, SluicedRejectsABadSectionWithItsKeyAndLine) {
  using sluice::test::config_rejects;
  EXPECT_TRUE(config_rejects("[floodgate]\ncredit_interval_us = 10\n", "floodgate.credit_interval_us",
                             "out of range [50, 1000000]"));
  EXPECT_TRUE(config_rejects("[floodgate]\nhop_rtt = 400\n", "floodgate.hop_rtt", "unknown key"));
  EXPECT_TRUE(config_rejects("[floodgate]\nup_ports = [1]\n", "floodgate.up_ports", "expected a port name"));
  EXPECT_TRUE(config_rejects("[floodgate]\ncredit_interval_us = 10000\nsyn_timeout_ms = 5\n", "floodgate",
                             "syn_timeout must be at least 2 credit intervals"));
  auto ps = sluice::test::config_problems(kIface + "[floodgate]\nmax_voqs = 0\n");
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0].key, "floodgate.max_voqs");
  EXPECT_EQ(ps[0].where, "<string>:4") << ps[0].to_string();
}

// The host part of dstPause (§4.3): read by the floodgate mechanism on a
// host's uplink (host_module.cc), not by the switch logic.
TEST(FloodgateConfig, HostKeysDefaultsAndValues) {
  const sluice::Config none = sluice::parse_config_string(kIface, "h.toml");
  const HostPauseConfig& d = none.get<Section>().host;
  EXPECT_EQ(d.pause_timeout_ns, 20'000'000u) << "absent: the 20 ms the host part always had";
  EXPECT_EQ(d.max_frames, 4096u);
  EXPECT_EQ(sluice::to_json(none, sluice::mechanisms())["floodgate"]["host_pause_timeout_ms"], 20);
  EXPECT_EQ(sluice::to_json(none, sluice::mechanisms())["floodgate"]["host_max_held_frames"], 4096);
  EXPECT_EQ(none.get<Section>().host_fail_open_ns, 100'000'000u);
  EXPECT_EQ(sluice::to_json(none, sluice::mechanisms())["floodgate"]["host_fail_open_ms"], 100);

  const sluice::Config set = sluice::parse_config_string(
      kIface + "[floodgate]\nhost_pause_timeout_ms = 200\nhost_max_held_frames = 8192\nhost_fail_open_ms = 250\n",
      "h.toml");
  const Section& s = set.get<Section>();
  EXPECT_EQ(s.host.pause_timeout_ns, 200'000'000u);
  EXPECT_EQ(s.host.max_frames, 8192u);
  EXPECT_EQ(sluice::to_json(set, sluice::mechanisms())["floodgate"]["host_pause_timeout_ms"], 200);
  EXPECT_EQ(sluice::to_json(set, sluice::mechanisms())["floodgate"]["host_max_held_frames"], 8192);
  EXPECT_EQ(s.host_fail_open_ns, 250'000'000u);
  EXPECT_EQ(sluice::to_json(set, sluice::mechanisms())["floodgate"]["host_fail_open_ms"], 250);
  // The switch logic's parameters are not touched by them.
  EXPECT_EQ(s.config.syn_timeout_ns, Config{}.syn_timeout_ns);
  // The ends of the ranges are accepted.
  const sluice::Config lo = sluice::parse_config_string(
      kIface + "[floodgate]\nhost_pause_timeout_ms = 1\nhost_max_held_frames = 1\n", "h.toml");
  EXPECT_EQ(lo.get<Section>().host.pause_timeout_ns, 1'000'000u);
  EXPECT_EQ(lo.get<Section>().host.max_frames, 1u);
  const sluice::Config hi = sluice::parse_config_string(
      kIface + "[floodgate]\nhost_pause_timeout_ms = 60000\nhost_max_held_frames = 262144\n", "h.toml");
  EXPECT_EQ(hi.get<Section>().host.pause_timeout_ns, 60'000'000'000u);
  EXPECT_EQ(hi.get<Section>().host.max_frames, 262'144u);
  // The switch-side parser accepts them too (one [floodgate] section).
  EXPECT_NO_THROW(parse("host_pause_timeout_ms = 200\nhost_max_held_frames = 8192"));
}

TEST(FloodgateConfig, BadHostKeysAreRefusedWithTheirRange) {
  expect_each_refused(
      {
          {"host_pause_timeout_ms = 0", "floodgate.host_pause_timeout_ms", "out of range [1, 60000]"},
          {"host_pause_timeout_ms = 60001", "floodgate.host_pause_timeout_ms", "out of range [1, 60000]"},
          {"host_pause_timeout_ms = -5", "floodgate.host_pause_timeout_ms", "out of range [1, 60000]"},
          {"host_pause_timeout_ms = \"200\"", "floodgate.host_pause_timeout_ms", "expected an integer"},
          {"host_pause_timeout_ms = 20.5", "floodgate.host_pause_timeout_ms", "expected an integer"},
          {"host_max_held_frames = 0", "floodgate.host_max_held_frames", "out of range [1, 262144]"},
          {"host_max_held_frames = 262145", "floodgate.host_max_held_frames", "out of range [1, 262144]"},
          {"host_max_held_frames = true", "floodgate.host_max_held_frames", "expected an integer"},
          {"host_fail_open_ms = 0", "floodgate.host_fail_open_ms", "out of range [1, 60000]"},
          {"host_fail_open_ms = 60001", "floodgate.host_fail_open_ms", "out of range [1, 60000]"},
          {"host_fail_open_ms = \"100\"", "floodgate.host_fail_open_ms", "expected an integer"},
          {"host_pause_timeout = 200", "floodgate.host_pause_timeout", "unknown key"},
      },
      [](const BadKey& c) {
        // sluiced's loader refuses the file (a reload with it keeps the
        // running configuration, core/agent.cc), naming the key, the range
        // and the line.
        EXPECT_TRUE(sluice::test::config_rejects("[floodgate]\n" + c.text + "\n", c.key, c.reason));
        auto lps = sluice::test::config_problems(kIface + "[floodgate]\n" + c.text + "\n");
        ASSERT_EQ(lps.size(), 1u);
        EXPECT_EQ(lps[0].where, "<string>:4") << lps[0].to_string();
      });
  // Both bad at once: both reported.
  EXPECT_EQ(problems("host_pause_timeout_ms = 0\nhost_max_held_frames = 0").size(), 2u);
}
