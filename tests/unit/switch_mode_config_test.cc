// sluiced's [switch] section (agent/switch/switch_config.h), the
// switch-logic registry (agent/switch/registry.h), the pfc logic against the
// port model, and `sluicectl switch`'s text view. No kernel.
#include <gtest/gtest.h>

#include <set>

#include "mechanisms/mechanisms.h"
#include "switch/pfc.h"
#include "switch/port_model.h"
#include "switch/registry.h"
#include "switch/switch_config.h"
#include "switch/view.h"

using namespace sluice;

namespace {

const std::string kGood = R"([switch]
logic = "pfc"
queues = 4
rate_mbit = 100
[[switch.ports]]
name = "swp1"
role = "switch-facing"
[[switch.ports]]
name = "swp2"
role = "host-facing"
rate_mbit = 1000
queues = 8
buffer_bytes = 65536
)";

// The one problem parsing `text` reports (fails the test if it parses or
// reports several).
ConfigProblem only_problem(const std::string& text) {
  try {
    // An interface after the section, so a configuration without switch
    // ports is complete and line numbers stay those of `text`.
    parse_config_string(text + "[[interface]]\nname = \"eth0\"\n", "sw.toml");
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.problems().size(), 1u) << e.what();
    if (!e.problems().empty()) return e.problems()[0];
  }
  ADD_FAILURE() << "parsed:\n" << text;
  return {};
}

TEST(SwitchConfig, ParsesPortsWithDefaultsAndOverrides) {
  Config c = parse_config_string(kGood, "sw.toml");
  const auto& s = c.get<SwitchConfig>();
  EXPECT_EQ(s.logic, "pfc");
  ASSERT_EQ(s.ports.size(), 2u);
  EXPECT_EQ(s.ports[0].name, "swp1");
  EXPECT_EQ(s.ports[0].role, sw::PortRole::kSwitchFacing);
  EXPECT_EQ(s.port_queues(s.ports[0]), 4u);
  EXPECT_EQ(s.port_rate_mbit(s.ports[0]), 100u);
  EXPECT_EQ(s.port_buffer(s.ports[0]), 131072u);
  EXPECT_EQ(s.ports[1].role, sw::PortRole::kHostFacing);
  EXPECT_EQ(s.port_queues(s.ports[1]), 8u);
  EXPECT_EQ(s.port_rate_mbit(s.ports[1]), 1000u);
  EXPECT_EQ(s.port_buffer(s.ports[1]), 65536u);
  EXPECT_EQ(s.ports[1].where, "sw.toml:8");  // its [[switch.ports]] line
  // The switch mode is asked for exactly when ports are listed.
  const MechanismInfo* m = nullptr;
  for (const auto& mi : mechanisms())
    if (mi.name == "switch") m = &mi;
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->service.used_by(c), "[switch] ports");
  EXPECT_EQ(m->service.used_by(parse_config_string("[switch]\nlogic = \"fifo\"\n[[interface]]\nname = \"eth0\"\n")),
            "");
  // Round trip through to_json (sluicectl config, reload fingerprint).
  auto j = to_json(c, mechanisms())["switch"];
  EXPECT_EQ(j["ports"][1]["role"], "host-facing");
  EXPECT_EQ(j["ports"][1]["queues"], 8);
  EXPECT_TRUE(j["ports"][0]["queues"].is_null());
}

TEST(SwitchConfig, DatapathIsTreeUnlessHoldIsAskedFor) {
  EXPECT_EQ(parse_config_string(kGood, "sw.toml").get<SwitchConfig>().datapath, SwitchDatapath::kTree);
  Config c = parse_config_string("[switch]\ndatapath = \"hold\"\n" + kGood.substr(kGood.find('\n') + 1), "sw.toml");
  EXPECT_EQ(c.get<SwitchConfig>().datapath, SwitchDatapath::kHold);
  EXPECT_EQ(to_json(c, mechanisms())["switch"]["datapath"], "hold");
  EXPECT_EQ(c.get<SwitchConfig>().hold_backlog_us, 100u);
  Config b = parse_config_string(
      "[switch]\ndatapath = \"hold\"\nhold_backlog_us = 150\n" + kGood.substr(kGood.find('\n') + 1), "sw.toml");
  EXPECT_EQ(b.get<SwitchConfig>().hold_backlog_us, 150u);
  EXPECT_EQ(b.get<SwitchConfig>().ecn_threshold_packets, 0u) << "no marking unless asked for";
  Config e = parse_config_string(
      "[switch]\ndatapath = \"hold\"\necn_threshold_packets = 20\n" + kGood.substr(kGood.find('\n') + 1), "sw.toml");
  EXPECT_EQ(e.get<SwitchConfig>().ecn_threshold_packets, 20u);
  EXPECT_EQ(c.get<SwitchConfig>().control_defer_us, 0u) << "every control frame wakes the agent unless asked";
  Config d = parse_config_string("[switch]\ncontrol_defer_us = 500\n" + kGood.substr(kGood.find('\n') + 1), "sw.toml");
  EXPECT_EQ(d.get<SwitchConfig>().control_defer_us, 500u);
}

TEST(SwitchConfig, InlineArrayFormIsTheSame) {
  Config a = parse_config_string(
      "[switch]\nports = [{ name = \"swp1\", role = \"switch-facing\" }, { name = \"swp2\", role = \"host-facing\" "
      "}]\n");
  EXPECT_EQ(a.get<SwitchConfig>().ports.size(), 2u);
}

struct Bad {
  const char* what;
  std::string text;
  std::string key;
  std::string where;  // "" = the key is missing, no line
  std::string reason_has;
};

TEST(SwitchConfig, BadInputNamesKeyLineAndReason) {
  const std::vector<Bad> cases = {
      {"unknown role", "[switch]\n[[switch.ports]]\nname = \"a\"\nrole = \"spine\"\n", "switch.ports[0].role",
       "sw.toml:4", "must be one of switch-facing, host-facing"},
      {"missing role", "[switch]\n[[switch.ports]]\nname = \"a\"\n", "switch.ports[0].role", "", "required"},
      {"missing name", "[switch]\n[[switch.ports]]\nrole = \"host-facing\"\n", "switch.ports[0].name", "", "required"},
      {"name too long", "[switch]\n[[switch.ports]]\nname = \"abcdefghijklmnopq\"\nrole = \"host-facing\"\n",
       "switch.ports[0].name", "sw.toml:3", "IFNAMSIZ"},
      {"port twice",
       "[switch]\n[[switch.ports]]\nname = \"a\"\nrole = \"host-facing\"\n[[switch.ports]]\nname = \"a\"\n"
       "role = \"switch-facing\"\n",
       "switch.ports[1].name", "sw.toml:6", "listed twice"},
      {"typo in a port", "[switch]\n[[switch.ports]]\nname = \"a\"\nrole = \"host-facing\"\nqueus = 4\n",
       "switch.ports[0].queus", "sw.toml:5", "unknown key"},
      {"too many queues", "[switch]\n[[switch.ports]]\nname = \"a\"\nrole = \"host-facing\"\nqueues = 129\n",
       "switch.ports[0].queues", "sw.toml:5", "out of range [1, 128]"},
      {"zero queues", "[switch]\nqueues = 0\n", "switch.queues", "sw.toml:2", "out of range"},
      {"unknown logic", "[switch]\nlogic = \"bfcc\"\n", "switch.logic", "sw.toml:2",
       "unknown switch logic; one of fifo"},
      {"logic not a string", "[switch]\nlogic = 3\n", "switch.logic", "sw.toml:2", "expected a string"},
      {"ports not an array", "[switch]\nports = \"swp1\"\n", "switch.ports", "sw.toml:2", "expected an array"},
      {"port not a table", "[switch]\nports = [\"swp1\"]\n", "switch.ports[0]", "sw.toml:2", "expected a table"},
      {"rate zero", "[switch]\nrate_mbit = 0\n", "switch.rate_mbit", "sw.toml:2", "out of range"},
      {"buffer below a frame", "[switch]\nbuffer_bytes = 100\n", "switch.buffer_bytes", "sw.toml:2", "out of range"},
      {"unknown key", "[switch]\nlogics = \"fifo\"\n", "switch.logics", "sw.toml:2", "unknown key"},
      {"unknown data path", "[switch]\nlogic = \"pfc\"\ndatapath = \"held\"\n", "switch.datapath", "sw.toml:3",
       "must be one of tree, hold"},
      {"data path not a string", "[switch]\ndatapath = 1\n", "switch.datapath", "sw.toml:2",
       "must be one of tree, hold"},
      {"held backlog zero", "[switch]\nhold_backlog_us = 0\n", "switch.hold_backlog_us", "sw.toml:2", "out of range"},
      {"control defer over a second", "[switch]\ncontrol_defer_us = 1000001\n", "switch.control_defer_us", "sw.toml:2",
       "out of range"},
      // Refused at parse (sluiced --validate), not only when the switch is built.
      {"marking without the held data path", "[switch]\necn_threshold_packets = 20\n", "switch.ecn_threshold_packets",
       "sw.toml:2", "needs datapath = \"hold\""},
  };
  for (const auto& b : cases) {
    SCOPED_TRACE(b.what);
    ConfigProblem p = only_problem(b.text);
    EXPECT_EQ(p.key, b.key);
    EXPECT_EQ(p.where, b.where);
    EXPECT_NE(p.reason.find(b.reason_has), std::string::npos) << p.reason;
    // The message a user sees names the line.
    if (!b.where.empty()) {
      EXPECT_NE(p.to_string().find(b.where), std::string::npos);
    }
  }
}

TEST(SwitchLogicRegistry, EveryRowIsComplete) {
  std::set<std::string> names;
  ASSERT_FALSE(sw::switch_logics().empty());
  std::vector<sw::PortConfig> ports(1);
  for (const auto& l : sw::switch_logics()) {
    SCOPED_TRACE(l.name);
    EXPECT_TRUE(names.insert(l.name).second) << "listed twice";
    EXPECT_FALSE(l.summary.empty());
    ASSERT_NE(l.make, nullptr);
    // A row may run only where the logic is called per packet (datapath =
    // "hold"): it refuses the tree with an Error naming why.
    std::unique_ptr<sw::Logic> logic;
    try {
      logic = l.make({nullptr, &ports});
    } catch (const Error&) {
      logic = l.make({nullptr, &ports, nullptr, true});
    }
    ASSERT_NE(logic, nullptr);
    EXPECT_EQ(logic->name(), l.name);
    EXPECT_EQ(sw::find_logic(l.name), &l);
  }
  EXPECT_EQ(sw::find_logic("nope"), nullptr);
  EXPECT_EQ(sw::find_logic("fifo")->hash_flows, false);
}

sw::PortConfig port(std::string name, size_t queues) {
  sw::PortConfig c;
  c.name = std::move(name);
  c.queues.assign(queues, sw::QueueConfig{});
  return c;
}

std::vector<uint8_t> frame(sw::CtrlType t, std::vector<sw::QueueRec> recs) {
  sw::ControlFrame f;
  f.type = t;
  f.queues = std::move(recs);
  return sw::encode(f);
}

TEST(PfcLogic, PausesAndResumesTheNamedQueueOfTheArrivalPort) {
  sw::PfcLogic logic;
  sw::SwitchModel m({port("a", 4), port("b", 4)}, logic);
  m.arrive_control(0, 1, frame(sw::CtrlType::kPause, {{2, 10}}));
  m.run_until(1000);
  EXPECT_TRUE(m.paused(1, 2));
  EXPECT_FALSE(m.paused(0, 2));
  // Older (reordered) resume: ignored; newer: applied.
  m.arrive_control(2000, 1, frame(sw::CtrlType::kResume, {{2, 9}}));
  m.run_until(3000);
  EXPECT_TRUE(m.paused(1, 2));
  m.arrive_control(4000, 1, frame(sw::CtrlType::kResume, {{2, 11}}));
  m.run_until(5000);
  EXPECT_FALSE(m.paused(1, 2));
  // A queue the port does not have: counted, nothing changes.
  m.arrive_control(6000, 1, frame(sw::CtrlType::kPause, {{7, 12}}));
  m.run_until(7000);
  EXPECT_EQ(logic.counters().pauses, 1u);
  EXPECT_EQ(logic.counters().resumes, 1u);
  EXPECT_EQ(logic.counters().stale, 1u);
  EXPECT_EQ(logic.counters().out_of_range, 1u);
}

TEST(PfcLogic, PausedQueueHoldsItsFlowOnly) {
  sw::PfcLogic logic;
  sw::SwitchModel m({port("in", 1), port("out", 2)}, logic);
  m.arrive_control(0, 1, frame(sw::CtrlType::kPause, {{1, 1}}));
  for (uint32_t i = 0; i < 10; ++i) {
    sw::PacketMeta p;
    p.in_port = 0;
    p.out_port = 1;
    p.wire_bytes = 1514;
    p.flow_hash = i;  // even -> queue 0, odd -> queue 1
    m.arrive(1000 + i, p);
  }
  m.run_until(10'000'000);
  for (const auto& d : m.departures()) EXPECT_EQ(d.queue, 0) << "a paused queue sent";
  EXPECT_EQ(m.departures().size(), 5u);
  EXPECT_EQ(m.depth(1, 1).pkts, 5u);
  m.arrive_control(20'000'000, 1, frame(sw::CtrlType::kResume, {{1, 2}}));
  m.run_idle(100'000'000);
  EXPECT_EQ(m.departures().size(), 10u);
}

TEST(PfcLogic, BitmapRestatesButNeverUndoesANewerFrame) {
  sw::PfcLogic logic;
  sw::SwitchModel m({port("a", 4)}, logic);
  m.arrive_control(0, 0, frame(sw::CtrlType::kPause, {{1, 20}}));
  sw::ControlFrame bm;
  bm.type = sw::CtrlType::kPauseBitmap;
  bm.bitmaps.push_back({0, 19, 0b0101});  // older: says q1 runs, q0 and q2 paused
  m.arrive_control(1000, 0, sw::encode(bm));
  m.run_until(2000);
  EXPECT_TRUE(m.paused(0, 1)) << "an older bitmap undid a newer pause";
  EXPECT_TRUE(m.paused(0, 0));
  EXPECT_TRUE(m.paused(0, 2));
  bm.bitmaps[0] = {0, 21, 0};
  m.arrive_control(3000, 0, sw::encode(bm));
  m.run_until(4000);
  for (sw::QueueId q = 0; q < 4; ++q) EXPECT_FALSE(m.paused(0, q));
}

TEST(SwitchView, TextShowsEveryQueueAndTheRejections) {
  nlohmann::json sw = {
      {"logic", "pfc"},
      {"fail_open_ms", 200},
      {"ports",
       {{{"name", "swp1"},
         {"role", "host-facing"},
         {"port_id", 0},
         {"rate_bps", 100000000},
         {"pause_changes", 2},
         {"pause_failures", 0},
         {"control", {{"in", 0}, {"out", 0}, {"rejected", 3}, {"rejected_by_reason", {{"WRONG_PORT", 3}}}}},
         {"queues",
          {{{"queue", 0},
            {"depth_bytes", 3028},
            {"depth_pkts", 2},
            {"paused", true},
            {"pkts_in", 9},
            {"pkts_out", 7},
            {"dropped", 0}}}},
         {"fallback", {{"pkts_out", 4}}}}}}};
  std::string t = sw::render_switch_text(sw);
  EXPECT_NE(t.find("port swp1 (host-facing)"), std::string::npos) << t;
  EXPECT_NE(t.find("rejected 3"), std::string::npos) << t;
  EXPECT_NE(t.find("WRONG_PORT=3"), std::string::npos) << t;
  EXPECT_NE(t.find("yes"), std::string::npos) << t;
  EXPECT_NE(t.find("never"), std::string::npos) << t;
}

}  // namespace
