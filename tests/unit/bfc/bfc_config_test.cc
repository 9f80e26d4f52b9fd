// [bfc] (agent/mechanisms/bfc/bfc_config.h): parsed into the logic's
// configuration the registry rows build; bad values are refused with their
// key. `sluicectl bfc`'s view taken from sluiced's status reply. The sampled
// mode's queue-vs-Th trace.
#include <gtest/gtest.h>

#include <set>

#include "mechanisms/mechanisms.h"
#include "lib/switch_model_util.h"
#include "mechanisms/bfc/bfc_config.h"
#include "mechanisms/bfc/bfc_view.h"
#include "switch/port_model.h"
#include "switch/registry.h"

using namespace sluice;

namespace {

Config parse(const std::string& text) {
  return parse_config_string(text + "[[interface]]\nname = \"eth0\"\n", "b.toml");
}

TEST(BfcConfig, SectionReachesTheLogicTheRegistryBuilds) {
  Config c = parse(R"([bfc]
hrtt_us = 500
sample_us = 250
bitmap_interval_us = 4000
pause_expiry_us = 40000
th_min_bytes = 3000
flow_table_factor = 50
)");
  for (const char* name : {"bfc", "bfc-stochastic", "bfc-single"}) {
    sw::LogicContext ctx;
    ctx.config = &c;
    auto l = sw::find_logic(name)->make(ctx);
    const auto& bc = static_cast<const bfc::BfcLogic&>(*l).config();
    EXPECT_EQ(bc.variant, name);
    EXPECT_EQ(bc.hrtt_ns, 500'000u);
    EXPECT_EQ(bc.sample_ns, 250'000u);
    EXPECT_EQ(bc.bitmap_interval_ns, 4'000'000u);
    EXPECT_EQ(bc.pause_expiry_ns, 40'000'000u);
    EXPECT_EQ(bc.th_min_bytes, 3000u);
    EXPECT_EQ(bc.flow_table_factor, 50u);
  }
  // Absent: the sampled mode's defaults.
  Config d = parse("");
  EXPECT_EQ(d.get<BfcSection>().logic_config("bfc").hrtt_ns, 1'000'000u);
  EXPECT_EQ(d.get<BfcSection>().logic_config("bfc").sample_ns, 1'000'000u);
}

TEST(BfcConfig, BadValuesAreRefusedWithTheirKey) {
  for (auto [text, key] : std::vector<std::pair<std::string, std::string>>{
           {"[bfc]\nhrtt_us = 0\n", "bfc.hrtt_us"},
           {"[bfc]\nsample_us = \"fast\"\n", "bfc.sample_us"},
           {"[bfc]\nbitmap_interval_us = 5000\npause_expiry_us = 5000\n", "bfc.pause_expiry_us"},
           {"[bfc]\nhrt_us = 5\n", "bfc.hrt_us"},
       }) {
    try {
      parse(text);
      ADD_FAILURE() << "parsed: " << text;
    } catch (const ConfigError& e) {
      ASSERT_EQ(e.problems().size(), 1u) << e.what();
      EXPECT_EQ(e.problems()[0].key, key) << e.what();
    }
  }
}

TEST(BfcConfig, CtlViewComesFromTheSwitchStatus) {
  std::string why;
  nlohmann::json v = bfc::view_from_status({{"ok", true}}, why);
  EXPECT_NE(why.find("not in switch mode"), std::string::npos) << why;
  v = bfc::view_from_status({{"switch", {{"logic", "pfc"}, {"logic_state", {{"pauses_applied", 0}}}}}}, why);
  EXPECT_NE(why.find("runs logic 'pfc'"), std::string::npos) << why;
  nlohmann::json st = {{"variant", "bfc"}, {"ports", nlohmann::json::array()}};
  v = bfc::view_from_status({{"switch", {{"logic", "bfc-single"}, {"logic_state", st}}}}, why);
  EXPECT_EQ(why, "");
  EXPECT_EQ(v, st);
}

// Two flows in two queues of a 100 Mbit/s port fed at 1 Gbit/s: every
// sample records both queues with the port's Th, oldest first.
TEST(BfcConfig, SampledModeTracesQueuesAgainstTh) {
  bfc::Config c = bfc::Config::variant_named("bfc");
  c.sample_ns = 100'000;
  c.hrtt_ns = 400'000;
  bfc::BfcLogic logic(c);
  sw::SwitchModel sw({test::model_port("up", 4, sw::PortRole::kSwitchFacing, 1'000'000'000ull),
                      test::model_port("down", 4, sw::PortRole::kHostFacing, 100'000'000ull)},
                     logic);
  for (int i = 0; i < 40; ++i) {
    sw.arrive(uint64_t(i) * 16'000, test::model_pkt(0, 1, 1000, 1));
    sw.arrive(uint64_t(i) * 16'000 + 8'000, test::model_pkt(0, 1, 1000, 2));
  }
  sw.run_until(10'000'000);
  auto tr = logic.trace();
  ASSERT_GT(tr.size(), 10u);
  std::set<int> queues;
  for (size_t i = 0; i < tr.size(); ++i) {
    if (i) {
      EXPECT_GE(tr[i].t_ns, tr[i - 1].t_ns);
    }
    if (tr[i].port == 1) queues.insert(tr[i].queue);
    if (tr[i].port == 1 && tr[i].bytes) {
      EXPECT_GT(tr[i].th_bytes, 0u);
    }
  }
  EXPECT_EQ(queues, (std::set<int>{1, 2}));
  // The queue's last record says it drained.
  EXPECT_EQ(tr.back().bytes, 0u);
  nlohmann::json v = bfc::view(logic, sw);
  EXPECT_EQ(v["trace"].size(), tr.size());
  EXPECT_EQ(v["trace"][0].size(), 5u);
  EXPECT_NE(sluice::bfc::render_text(v).find("collisions n/a (sampled mode)"), std::string::npos);
}

}  // namespace
