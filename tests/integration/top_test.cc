// TOP end to end over real veths: sluice-top recv in one namespace paces
// tokens, sluice-top send in another answers them, with the token-expiry XDP
// program attached to the sender's veth (top-tpds20 §4.3-4.4). Flows
// complete and every token is counted valid; a receiver clock 20 ms behind
// makes the XDP program drop every token (no data goes out) until the
// per-host correction covers the offset; with expiry off the same tokens are
// counted expired but passed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "lib/netns_fixture.h"
#include "lib/prog_test.h"

using namespace sluice::test;
using nlohmann::json;

namespace {

class TopLabTest : public ::testing::Test {
 protected:
  void SetUp() override {
    require_root();
    lab_ = std::make_unique<Lab>("tp");
    snd_ = lab_->add_ns("s");
    rcv_ = lab_->add_ns("r");
    lab_->add_veth(snd_, "s0", "10.77.0.1/24", rcv_, "r0", "10.77.0.2/24");
  }
  Process recv(const std::vector<std::string>& extra, const std::string& log) {
    std::vector<std::string> argv = {build_path("agent/mechanisms/top/sluice-top"), "recv", "--bind", "10.77.0.2",
                                     "--link-mbit", "100", "--rtt-us", "500"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return lab_->spawn(rcv_, argv, log);
  }
  // Runs a sender to completion; returns its summary line (the last one).
  json send(const std::vector<std::string>& extra, const std::string& log, int* exit_code) {
    std::vector<std::string> argv = {build_path("agent/mechanisms/top/sluice-top"), "send", "--bind", "10.77.0.1",
                                     "--to", "10.77.0.2", "--rtt-us", "500", "--xdp", lab_->name("s0"),
                                     "--expiry-us", "2000"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    Process p = lab_->spawn(snd_, argv, log);
    int st = p.wait(std::chrono::seconds(60));
    *exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    std::istringstream in(p.log());
    std::string line, last;
    while (std::getline(in, line))
      if (!line.empty() && line[0] == '{') last = line;
    if (last.empty()) {
      ADD_FAILURE() << "no summary from sluice-top send:\n" << p.log();
      return json::object();
    }
    return json::parse(last);
  }
  static uint64_t sum(const json& a) {
    uint64_t n = 0;
    for (auto& v : a) n += v.get<uint64_t>();
    return n;
  }
  std::unique_ptr<Lab> lab_;
  std::string snd_, rcv_;
};

TEST_F(TopLabTest, FlowsCompleteAndEveryTokenIsCountedValid) {
  Process r = recv({"--exit-after", "4"}, "recv");
  int rc = 0;
  json s = send({"--size", "150000", "--count", "4", "--interval-us", "3000"}, "send", &rc);
  EXPECT_EQ(rc, 0) << s.dump();
  EXPECT_EQ(s["flows_done"], 4);
  uint64_t data_pkts = 4 * ((150000 + 1439) / 1440);
  EXPECT_EQ(s["data_sent"].get<uint64_t>(), data_pkts) << "one data packet per token, nothing lost on a veth";
  EXPECT_EQ(s["data_resent"], 0);
  EXPECT_EQ(sum(s["xdp"]["expired"]), 0u);
  EXPECT_EQ(sum(s["xdp"]["valid"]), sum(s["tokens_received"])) << "every token the sender saw passed the XDP program";
  EXPECT_GE(sum(s["xdp"]["valid"]), data_pkts);
  int st = r.wait(std::chrono::seconds(10));
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << r.log();
}

TEST_F(TopLabTest, SkewedReceiverClockExpiresTokensUntilCorrected) {
  // The receiver's clock runs 20 ms behind: its tokens look 20 ms old, ten
  // times T.
  Process r = recv({"--clock-offset-ns", "-20000000"}, "recv-skewed");
  int rc = 0;
  json bad = send({"--size", "50000", "--timeout-s", "2"}, "send-uncorrected", &rc);
  EXPECT_EQ(rc, 3) << "the flow cannot finish: " << bad.dump();
  EXPECT_GT(sum(bad["xdp"]["expired"]), 5u);
  EXPECT_EQ(sum(bad["xdp"]["valid"]), 0u);
  EXPECT_EQ(bad["data_sent"], 0) << "no data answers an expired token";

  json off = send({"--size", "50000", "--expiry-off"}, "send-noexpiry", &rc);
  EXPECT_EQ(rc, 0) << off.dump();
  EXPECT_GT(sum(off["xdp"]["expired"]), 0u) << "counted as expired, passed";

  json good = send({"--size", "50000", "--correction", "10.77.0.2=-20000000"}, "send-corrected", &rc);
  EXPECT_EQ(rc, 0) << good.dump();
  EXPECT_EQ(sum(good["xdp"]["expired"]), 0u);
  EXPECT_GT(sum(good["xdp"]["valid"]), 0u);
}

}  // namespace
