// sluicectl's views of a reply (agent/ctl/print.h): a well-formed reply
// prints what it holds; a reply from something that is not sluiced (missing
// keys, wrong types, numbers out of range) throws a std::exception that
// sluicectl reports, and never reads past the reply.
#include <gtest/gtest.h>

#include <cstdio>
#include <stdexcept>
#include <string>

#include "ctl/print.h"
#include "switch/view.h"

namespace {

using nlohmann::json;

// The view's output as a string. The stream and its buffer are released
// also when the view throws (the tests of bad input expect it to).
template <typename F>
std::string printed(F view, const json& j) {
  struct Stream {
    char* buf = nullptr;
    size_t len = 0;
    std::FILE* f = open_memstream(&buf, &len);
    ~Stream() {
      if (f) std::fclose(f);
      std::free(buf);
    }
  } m;
  view(m.f, j);
  std::fclose(m.f);
  m.f = nullptr;
  return std::string(m.buf, m.len);
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
  EXPECT_THROW(printed(sluice::ctl::print_stats, json::parse(R"({"interfaces":[{"name":"eth0"}]})")), std::exception);
  EXPECT_THROW(printed(sluice::ctl::print_status, json::parse(R"({"version":"0.1.0"})")), std::exception);
  EXPECT_THROW(printed(sluice::ctl::print_flows, json::parse(R"({})")), std::exception);
}

TEST(CtlPrint, WrongTypesAndRangesThrow) {
  // A float count or port out of range would be a float-to-integer
  // conversion with undefined behaviour.
  EXPECT_THROW(
      printed(sluice::ctl::print_flows, json::parse(R"({"interfaces":[{"name":"x","total":1e30,"flows":[]}]})")),
      std::out_of_range);
  EXPECT_THROW(printed(sluice::ctl::print_flows, json::parse(R"({"interfaces":[{"name":"x","total":-1,"flows":[]}]})")),
               std::out_of_range);
  EXPECT_THROW(
      printed(sluice::ctl::print_status, json::parse(R"({"version":"v","pid":1e300,"uptime_s":1,"kernel":"k"})")),
      std::out_of_range);
  EXPECT_THROW(printed(sluice::ctl::print_flows, json::parse(R"({"interfaces":[{"name":7,"total":1,"flows":[]}]})")),
               std::exception);
  EXPECT_THROW(
      printed(
          sluice::ctl::print_stats,
          json::parse(
              R"({"interfaces":[{"name":"eth0","modules":[{"name":"m","stats":{},"programs":[{"program":"p","verdicts":[{"verdict":"pass","reason":"r","packets":"12","bytes":1}]}]}]}]})")),
      std::exception);
}

TEST(CtlPrint, HumanBytes) {
  EXPECT_EQ(sluice::ctl::human_bytes(0), "0 B");
  EXPECT_EQ(sluice::ctl::human_bytes(1536), "1.5 KiB");
  EXPECT_FALSE(sluice::ctl::human_bytes(1e308).empty());
}

// `sluicectl switch`'s text view of the same untrusted reply: missing
// members, counters that are not counts (negative, 1e30, strings) print as 0
// and never read past the reply; a well-formed reply prints its numbers.
TEST(CtlPrint, SwitchViewToleratesHostileReplies) {
  json good = json::parse(R"({"logic":"fifo","fail_open_ms":1000,"ports":[{"name":"p0","role":"switch-facing",
      "port_id":1,"rate_bps":1e8,"control":{"in":3,"out":4,"rejected":2,"rejected_by_reason":{"WRONG_PORT":2}},
      "queues":[{"queue":0,"depth_bytes":1514,"paused":true,"pkts_in":7}]}]})");
  std::string t = sluice::sw::render_switch_text(good);
  EXPECT_NE(t.find("control in 3 out 4 rejected 2"), std::string::npos) << t;
  EXPECT_NE(t.find("WRONG_PORT=2"), std::string::npos) << t;
  EXPECT_NE(t.find("1514"), std::string::npos) << t;

  json hostile = json::parse(R"({"fail_open_ms":-5,"ports":[{"port_id":1e30,
      "control":{"in":-1,"rejected_by_reason":{"X":"many","Y":-3.5,"Z":1e300}},
      "queues":[{"queue":"zero","depth_bytes":-1e30}],"fallback":[]},{"name":"p1"}],"logic_state":"\u00ff"})");
  std::string h;
  ASSERT_NO_THROW(h = sluice::sw::render_switch_text(hostile));
  EXPECT_NE(h.find("fail-open after 0 ms"), std::string::npos) << h;
  EXPECT_NE(h.find("X=0 Y=0 Z=0"), std::string::npos) << h;
  EXPECT_NE(h.find("port p1 (?)"), std::string::npos) << h;
}

}  // namespace
