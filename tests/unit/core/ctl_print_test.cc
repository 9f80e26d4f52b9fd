// sluicectl's views of a reply (agent/ctl/print.h): a well-formed reply
// prints what it holds; a reply from something that is not sluiced (missing
// keys, wrong types, numbers out of range) throws a std::exception that
// sluicectl reports, and never reads past the reply.
#include <gtest/gtest.h>

#include <cstdio>
#include <stdexcept>
#include <string>

#include "ctl/print.h"

namespace {

using nlohmann::json;

template <typename F>
std::string printed(F view, const json& j) {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  view(f, j);
  std::fclose(f);
  std::string s(buf, len);
  std::free(buf);
  return s;
}

TEST(CtlPrint, FlowsPrintsEachFlow) {
  json j = json::parse(R"({"interfaces":[{"name":"eth0","total":1,"flows":[
    {"dir":"ingress","proto":"tcp","src":"10.0.0.1","sport":5201,"dst":"10.0.0.2","dport":40000,
     "packets":100,"bytes":153600,"ce_packets":3,"retrans_hints":1}]}]})");
  std::string out = printed(sluice::ctl::print_flows, j);
  EXPECT_NE(out.find("interface eth0: 1 flows"), std::string::npos) << out;
  EXPECT_NE(out.find("10.0.0.1:5201 > 10.0.0.2:40000"), std::string::npos) << out;
  EXPECT_NE(out.find("150.0 KiB"), std::string::npos) << out;
}

TEST(CtlPrint, StatsPrintsVerdictsAndFlattenedStats) {
  json j = json::parse(R"({"interfaces":[{"name":"eth0","modules":[{"name":"flowstat",
    "stats":{"ingress":{"packets":12,"bytes":2048}},
    "programs":[{"program":"flowstat_in","verdicts":[{"verdict":"pass","reason":"counted","packets":12,"bytes":2048}]}]}]}]})");
  std::string out = printed(sluice::ctl::print_stats, j);
  EXPECT_NE(out.find("ingress.bytes=2.0 KiB  ingress.packets=12"), std::string::npos) << out;
  EXPECT_NE(out.find("flowstat_in"), std::string::npos) << out;
}

TEST(CtlPrint, MissingKeyThrows) {
  // The const operator[] the views once used reads past the object for a
  // missing key (undefined behaviour in a release build).
  EXPECT_THROW(printed(sluice::ctl::print_stats, json::parse(R"({"interfaces":[{"name":"eth0"}]})")),
               std::exception);
  EXPECT_THROW(printed(sluice::ctl::print_status, json::parse(R"({"version":"0.1.0"})")), std::exception);
  EXPECT_THROW(printed(sluice::ctl::print_flows, json::parse(R"({})")), std::exception);
}

TEST(CtlPrint, WrongTypesAndRangesThrow) {
  // A float count or port out of range would be a float-to-integer
  // conversion with undefined behaviour.
  EXPECT_THROW(printed(sluice::ctl::print_flows, json::parse(R"({"interfaces":[{"name":"x","total":1e30,"flows":[]}]})")),
               std::out_of_range);
  EXPECT_THROW(printed(sluice::ctl::print_flows, json::parse(R"({"interfaces":[{"name":"x","total":-1,"flows":[]}]})")),
               std::out_of_range);
  EXPECT_THROW(printed(sluice::ctl::print_status,
                       json::parse(R"({"version":"v","pid":1e300,"uptime_s":1,"kernel":"k"})")),
               std::out_of_range);
  EXPECT_THROW(printed(sluice::ctl::print_flows, json::parse(R"({"interfaces":[{"name":7,"total":1,"flows":[]}]})")),
               std::exception);
  EXPECT_THROW(printed(sluice::ctl::print_stats, json::parse(R"({"interfaces":[{"name":"eth0","modules":[{"name":"m","stats":{},"programs":[{"program":"p","verdicts":[{"verdict":"pass","reason":"r","packets":"12","bytes":1}]}]}]}]})")),
               std::exception);
}

TEST(CtlPrint, HumanBytes) {
  EXPECT_EQ(sluice::ctl::human_bytes(0), "0 B");
  EXPECT_EQ(sluice::ctl::human_bytes(1536), "1.5 KiB");
  EXPECT_FALSE(sluice::ctl::human_bytes(1e308).empty());
}

}  // namespace
