// [cc], [ein] and [aqm]: defaults, and invalid combinations refused with the
// key named.
#include <gtest/gtest.h>

#include "core/config.h"
#include "mechanisms/aqm/aqm_config.h"
#include "mechanisms/cc/cc_config.h"
#include "mechanisms/ein/ein_config.h"
#include "mechanisms/mechanisms.h"
#include "lib/config_check.h"
#include "sluice/pulser.h"

using namespace sluice;

namespace {

// tests/lib/config_check.h
constexpr auto& rejects = test::config_rejects;

const std::string kSwitch =
    "[[interface]]\nname = \"sw0\"\nrole = \"switch-port\"\nmechanisms = [\"aqm\"]\nline_rate_mbps = 100\n";

TEST(PulserConfig, Defaults) {
  Config c = parse_config_string(kSwitch);
  EXPECT_TRUE(c.get<CcConfig>().register_cc.empty());
  EXPECT_EQ(c.get<CcConfig>().dctcp_name, "sluice_dctcp");
  EXPECT_EQ(c.get<CcConfig>().pulser_cwnd_safe, 4u);
  EXPECT_EQ(c.get<CcConfig>().dctcp_shift_g, 4u);
  EXPECT_EQ(c.get<EinConfig>().field, SLUICE_EIN_FIELD_TOS);
  EXPECT_EQ(c.get<EinConfig>().mask, 0x04);
  EXPECT_TRUE(c.get<AqmConfig>().k_in_packets());
  EXPECT_EQ(c.get<AqmConfig>().k(), 20u);
  EXPECT_EQ(c.get<AqmConfig>().high_water(), 20u) << "HighWaterMark defaults to K";
  EXPECT_EQ(c.get<AqmConfig>().ein_samples, 50u);
  EXPECT_DOUBLE_EQ(c.get<AqmConfig>().ein_threshold, 0.25);
  EXPECT_EQ(c.get<AqmConfig>().queue_source, AqmQueueSource::Auto);
}

TEST(PulserConfig, ValidCombinations) {
  Config c = parse_config_string(kSwitch +
                                 "[aqm]\necn_threshold_bytes = 30000\nein_high_water = 45000\n"
                                 "[ein]\nbit = \"ipv4-reserved\"\n");
  EXPECT_FALSE(c.get<AqmConfig>().k_in_packets());
  EXPECT_EQ(c.get<AqmConfig>().k(), 30000u);
  EXPECT_EQ(c.get<AqmConfig>().high_water(), 45000u);
  EXPECT_EQ(c.get<EinConfig>().field, SLUICE_EIN_FIELD_IPV4_RSV);
  EXPECT_EQ(c.get<EinConfig>().mask, SLUICE_EIN_IPV4_RSV_FLAG);
  // An agent that only registers the congestion controls needs no interface.
  Config cc = parse_config_string("[cc]\nregister = [\"dctcp\", \"pulser\"]\n");
  EXPECT_EQ(cc.get<CcConfig>().register_cc.size(), 2u);
  EXPECT_TRUE(cc.interfaces.empty());
  Config t = parse_config_string(kSwitch + "[ein]\nbit = \"tos:0x80\"\n");
  EXPECT_EQ(t.get<EinConfig>().mask, 0x80);
  EXPECT_EQ(parse_config_string(kSwitch + "[aqm]\nqueue_source = \"tracepoint\"\n").get<AqmConfig>().queue_source,
            AqmQueueSource::Tracepoint);
  EXPECT_EQ(parse_config_string(kSwitch + "[aqm]\nqueue_source = \"kern-ctx\"\n").get<AqmConfig>().queue_source,
            AqmQueueSource::KernCtx);
}

TEST(PulserConfig, InvalidCombinationsAreRefused) {
  EXPECT_TRUE(rejects(kSwitch + "[aqm]\necn_threshold_bytes = 30000\necn_threshold_packets = 20\n",
                      "aqm.ecn_threshold_packets", "not both"));
  EXPECT_TRUE(rejects(kSwitch + "[aqm]\necn = false\nein = false\n", "aqm.ein", "mark nothing"));
  EXPECT_TRUE(rejects(kSwitch + "[aqm]\nein_samples = 0\n", "aqm.ein_samples", "out of range"));
  EXPECT_TRUE(rejects(kSwitch + "[aqm]\nqueue_source = \"qdisc\"\n", "aqm.queue_source", "one of"));
  EXPECT_TRUE(rejects(kSwitch + "[aqm]\nein_samples = 256\n", "aqm.ein_samples", "out of range"));
  EXPECT_TRUE(rejects(kSwitch + "[aqm]\nein_threshold = 0\n", "aqm.ein_threshold", "out of range"));
  EXPECT_TRUE(rejects(kSwitch + "[aqm]\nein_threshold = \"fast\"\n", "aqm.ein_threshold", "expected a number"));
  EXPECT_TRUE(rejects(kSwitch + "[aqm]\nk = 3\n", "aqm.k", "unknown key"));
  for (const char* bad : {"tos:0x02", "tos:0x01", "tos:0x0c", "tos:", "dscp", "tos:0x100"})
    EXPECT_TRUE(rejects(kSwitch + "[ein]\nbit = \"" + bad + "\"\n", "ein.bit", "one DSCP bit")) << bad;
  EXPECT_TRUE(rejects("[[interface]]\nname = \"sw0\"\nrole = \"switch-port\"\nmechanisms = [\"aqm\"]\n",
                      "interface[0].line_rate_mbps", "does not guess"));
  EXPECT_TRUE(rejects("[[interface]]\nname = \"h0\"\nmechanisms = [\"aqm\"]\n", "interface[0].mechanisms[0]",
                      "cannot run on a host"));
  EXPECT_TRUE(rejects(kSwitch + "[cc]\nregister = [\"bbr\"]\n", "cc.register[0]", "must be"));
  EXPECT_TRUE(rejects(kSwitch + "[cc]\nregister = [\"dctcp\", \"dctcp\"]\n", "cc.register[1]", "listed twice"));
  EXPECT_TRUE(rejects(kSwitch + "[cc]\ndctcp_name = \"a_name_far_too_long\"\n", "cc.dctcp_name", "15"));
  EXPECT_TRUE(rejects(kSwitch + "[cc]\ndctcp_name = \"Sluice-DCTCP\"\n", "cc.dctcp_name", "a-z"));
  EXPECT_TRUE(rejects(kSwitch + "[cc]\ndctcp_name = \"x\"\npulser_name = \"x\"\n", "cc.pulser_name", "same"));
  EXPECT_TRUE(rejects(kSwitch + "[cc]\npulser_cwnd_safe = 0\n", "cc.pulser_cwnd_safe", "out of range"));
  EXPECT_TRUE(rejects(kSwitch + "[cc]\ndctcp_shift_g = 11\n", "cc.dctcp_shift_g", "out of range"));
}

// ein_mark = "departure" needs the far end of every aqm port's link; a far
// end is refused where nothing would use it, and malformed ones name why.
TEST(PulserConfig, DepartureMarkingNeedsTheLinksFarEnd) {
  Config d = parse_config_string(kSwitch + "link_far_end = \"rx-ns:veth1\"\n[aqm]\nein_mark = \"departure\"\n");
  EXPECT_TRUE(d.get<AqmConfig>().ein_at_departure);
  EXPECT_EQ(d.interfaces[0].far_end(), std::make_pair(std::string("rx-ns"), std::string("veth1")));
  Config same = parse_config_string(kSwitch + "link_far_end = \"veth1\"\n[aqm]\nein_mark = \"departure\"\n");
  EXPECT_EQ(same.interfaces[0].far_end(), std::make_pair(std::string(""), std::string("veth1")));
  EXPECT_FALSE(parse_config_string(kSwitch).get<AqmConfig>().ein_at_departure) << "arrival is the default";
  EXPECT_TRUE(rejects(kSwitch + "[aqm]\nein_mark = \"departure\"\n", "interface[0].link_far_end", "required"));
  EXPECT_TRUE(rejects(kSwitch + "[aqm]\nein_mark = \"dequeue\"\n", "aqm.ein_mark", "one of"));
  EXPECT_TRUE(rejects(kSwitch + "link_far_end = \"ns:veth1\"\n", "interface[0].link_far_end", "only used"));
  EXPECT_TRUE(rejects(kSwitch + "link_far_end = \"ns:veth1\"\n[aqm]\nein = false\nein_mark = \"departure\"\n",
                      "interface[0].link_far_end", "only used"));
  for (const char* bad : {"", "ns:", ":veth1", "ns/x:veth1", "ns:a_name_far_too_long", "ns:ve th"})
    EXPECT_TRUE(rejects(kSwitch + "link_far_end = \"" + bad + "\"\n[aqm]\nein_mark = \"departure\"\n",
                        "interface[0].link_far_end", ""))
        << bad;
  EXPECT_TRUE(rejects(kSwitch + "link_far_end = 3\n[aqm]\nein_mark = \"departure\"\n", "interface[0].link_far_end",
                      "expected a string"));
}

}  // namespace
