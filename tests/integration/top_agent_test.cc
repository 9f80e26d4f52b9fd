// TOP's host side inside a real sluiced (top-tpds20 §4.3, R2): sluiced with
// mechanisms = ["top"] on both ends of a veth, sluice-top as the transport
// (without its own XDP). The sender's agent drops tokens older than T and
// counts them per priority; valid tokens pass; a correction from the config
// makes the same skewed tokens valid; with no PTP state to read the clock
// manager widens T by the bound and says so; `sluicectl top` shows tokens
// sent (receiver's agent) and valid/expired (sender's agent) per priority,
// the flows and the clock state; a killed agent leaves no XDP program behind;
// a stopped one (SIGSTOP: the link stays) no longer drops expired tokens.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/features.h"

#include "lib/netns_fixture.h"
#include "lib/top_lab.h"
#include "lib/prog_test.h"

using namespace sluice::test;
using nlohmann::json;

namespace {

class TopAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    require_root();
    lab_ = std::make_unique<Lab>("qt");
    TopPair p = add_top_pair(*lab_, "10.78.0");
    snd_ = p.snd, rcv_ = p.rcv, sif_ = p.sif, rif_ = p.rif;
  }
  void TearDown() override {
    agents_.clear();
    lab_.reset();
  }

  // Starts sluiced in `ns` on `ifname` with [top] `top_keys`; returns its
  // control socket.
  std::string agent(const std::string& ns, const std::string& ifname, const std::string& top_keys,
                    const std::string& tag) {
    std::string dir = lab_->tmpdir() + "/" + tag;
    std::string cfg = dir + ".toml", sock = dir + "/sock";
    std::ofstream(cfg) << "[agent]\npin_root = \"" << lab_->bpffs() << "/" << tag << "\"\nstate_dir = \"" << dir
                       << "\"\ncontrol_socket = \"" << sock << "\"\n[metrics]\nenabled = false\n[top]\n"
                       << top_keys << "\n[[interface]]\nname = \"" << lab_->name(ifname)
                       << "\"\nmechanisms = [\"top\"]\n";
    agents_.push_back(lab_->spawn(ns, {build_path("agent/sluiced"), "--config", cfg}, "sluiced-" + tag));
    Process& a = agents_.back();
    bool up = eventually([&] { return a.log().find("TOP_STARTED") != std::string::npos; }, std::chrono::seconds(20));
    EXPECT_TRUE(up) << a.log();
    return sock;
  }

  json top(const std::string& sock) {
    int st = -1;
    std::string o = lab_->out(build_path("agent/sluicectl") + " -s " + sock + " top --json", &st);
    EXPECT_EQ(st, 0) << o;
    try {
      json v = json::parse(o);
      if (v["interfaces"].size() == 1) return v["interfaces"][0]["top"];
    } catch (...) {
    }
    ADD_FAILURE() << "sluicectl top: " << o;
    return json::object();
  }

  Process recv(const std::vector<std::string>& extra, const std::string& log) {
    return top_recv(*lab_, rcv_, "10.78.0.2", extra, log);
  }
  // Runs a sender to completion; returns its summary line (the last one).
  json send(const std::vector<std::string>& extra, const std::string& log, int* exit_code) {
    return top_send(*lab_, snd_, "10.78.0.1", "10.78.0.2", extra, log, exit_code);
  }

  std::unique_ptr<Lab> lab_;
  std::vector<Process> agents_;
  std::string snd_, rcv_, sif_, rif_;
};

TEST_F(TopAgentTest, ValidTokensPassAndBothEndsCountThem) {
  std::string ss = agent(snd_, sif_, "clock_source = \"shared\"\nthreshold_us = 2000\n", "snd");
  std::string rs = agent(rcv_, rif_, "clock_source = \"shared\"\nthreshold_us = 2000\n", "rcv");
  Process r = recv({"--exit-after", "2"}, "recv");
  int rc = 0;
  json s = send({"--size", "150000", "--count", "2", "--interval-us", "3000", "--prio-class", "2"}, "send", &rc);
  EXPECT_EQ(rc, 0) << s.dump();
  EXPECT_EQ(s["flows_done"], 2);
  json st = top(ss), rt = top(rs);
  uint64_t data_pkts = 2 * top_data_packets(150000);
  EXPECT_LE(json_sum(st["tokens"]["expired"]), late_token_allowance(data_pkts)) << st.dump();
  EXPECT_EQ(st["tokens"]["valid"][2].get<uint64_t>(), json_sum(s["tokens_received"]))
      << "every token reached the transport";
  EXPECT_EQ(json_sum(st["tokens"]["valid"]), st["tokens"]["valid"][2].get<uint64_t>()) << "all in class 2";
  EXPECT_GE(json_sum(st["tokens"]["valid"]), data_pkts);
  // The receiver's agent saw its tokens leave, all of class 2.
  EXPECT_GE(rt["tokens"]["sent"][2].get<uint64_t>(), st["tokens"]["valid"][2].get<uint64_t>());
  EXPECT_EQ(json_sum(rt["tokens"]["sent"]), rt["tokens"]["sent"][2].get<uint64_t>());
  EXPECT_EQ(st["clock"]["state"], "shared");
  EXPECT_EQ(st["clock"]["widen_ns"], 0);
  EXPECT_EQ(st["threshold_ns"], 2'000'000);
  // Flows: the sender sees tokens in and data out, the receiver the reverse.
  ASSERT_EQ(st["flows"]["total"], 2) << st.dump();
  for (const auto& f : st["flows"]["flows"]) {
    EXPECT_EQ(f["peer"], "10.78.0.2");
    EXPECT_EQ(f["priority"], 2);
    EXPECT_GE(f["data_sent"].get<uint64_t>(), data_pkts / 2);
    EXPECT_GE(f["tokens_valid"].get<uint64_t>(), f["data_sent"].get<uint64_t>());
  }
  ASSERT_EQ(rt["flows"]["total"], 2) << rt.dump();
  for (const auto& f : rt["flows"]["flows"]) {
    EXPECT_EQ(f["peer"], "10.78.0.1");
    EXPECT_GE(f["data_received"].get<uint64_t>(), data_pkts / 2);
    EXPECT_GE(f["tokens_sent"].get<uint64_t>(), f["data_received"].get<uint64_t>());
  }
  // The text view says the same.
  std::string text = lab_->out(build_path("agent/sluicectl") + " -s " + ss + " top");
  EXPECT_NE(text.find("clock shared"), std::string::npos) << text;
  EXPECT_NE(text.find("flows: 2"), std::string::npos) << text;
  int w = r.wait(std::chrono::seconds(10));
  EXPECT_TRUE(WIFEXITED(w) && WEXITSTATUS(w) == 0) << r.log();
}

TEST_F(TopAgentTest, OldTokensAreDroppedPerPriorityUntilCorrected) {
  // The receiver's clock runs 20 ms behind: its tokens look 20 ms old, ten
  // times T.
  Process r = recv({"--clock-offset-ns", "-20000000"}, "recv-skewed");
  std::string ss = agent(snd_, sif_, "clock_source = \"shared\"\nthreshold_us = 2000\n", "snd");
  int rc = 0;
  json bad = send({"--size", "50000", "--timeout-s", "2", "--prio-class", "4"}, "send-uncorrected", &rc);
  EXPECT_EQ(rc, 3) << "the flow cannot finish: " << bad.dump();
  EXPECT_EQ(bad["data_sent"], 0) << "no data answers an expired token";
  EXPECT_EQ(json_sum(bad["tokens_received"]), 0u) << "the transport never saw one";
  json st = top(ss);
  EXPECT_GT(st["tokens"]["expired"][4].get<uint64_t>(), 5u) << st.dump();
  EXPECT_EQ(json_sum(st["tokens"]["expired"]), st["tokens"]["expired"][4].get<uint64_t>()) << "counted in class 4";
  EXPECT_EQ(json_sum(st["tokens"]["valid"]), 0u);
  ASSERT_GE(st["flows"]["total"].get<int>(), 1);
  EXPECT_GT(st["flows"]["flows"][0]["tokens_expired"].get<uint64_t>(), 0u);
  EXPECT_EQ(st["flows"]["flows"][0]["data_sent"], 0);
  agents_.clear();

  // The same skew, known to the sender's agent: corrected, nothing expires
  // (but the odd really late token).
  ss = agent(snd_, sif_,
             "clock_source = \"shared\"\nthreshold_us = 2000\npeer_clock_offset_ns = { \"10.78.0.2\" = -20000000 }\n",
             "snd2");
  json good = send({"--size", "50000", "--prio-class", "4"}, "send-corrected", &rc);
  EXPECT_EQ(rc, 0) << good.dump();
  st = top(ss);
  EXPECT_LE(json_sum(st["tokens"]["expired"]), late_token_allowance(top_data_packets(50000))) << st.dump();
  EXPECT_GT(st["tokens"]["valid"][4].get<uint64_t>(), 0u);
  agents_.clear();

  // expire = false (top-noexpiry): counted as expired, passed.
  ss = agent(snd_, sif_, "clock_source = \"shared\"\nthreshold_us = 2000\nexpire = false\n", "snd3");
  json off = send({"--size", "50000", "--prio-class", "4"}, "send-noexpiry", &rc);
  EXPECT_EQ(rc, 0) << off.dump();
  st = top(ss);
  EXPECT_GT(st["tokens"]["expired"][4].get<uint64_t>(), 0u) << st.dump();
  // Every token the transport took was counted expired (and tokens the
  // receiver still paced for the abandoned first flow, too).
  EXPECT_GE(st["tokens"]["expired"][4].get<uint64_t>(), json_sum(off["tokens_received"]));
}

// With no PTP state to read (ptp4l not running) the clock manager widens T by
// the bound: a receiver 20 ms behind loses no token (R2: never drop valid
// tokens because of a bad clock), and the agent says so.
TEST_F(TopAgentTest, UnsyncedClockWidensTheThreshold) {
  Process r = recv({"--clock-offset-ns", "-20000000"}, "recv-skewed");
  std::string ss = agent(snd_, sif_,
                         "clock_source = \"ptp4l\"\nptp_uds = \"" + lab_->tmpdir() +
                             "/no-ptp4l\"\nthreshold_us = 2000\noffset_bound_us = 30000\nclock_poll_ms = 100\n",
                         "snd");
  int rc = 0;
  json s = send({"--size", "50000"}, "send-widened", &rc);
  EXPECT_EQ(rc, 0) << s.dump();
  json st = top(ss);
  EXPECT_LE(json_sum(st["tokens"]["expired"]), late_token_allowance(top_data_packets(50000))) << st.dump();
  EXPECT_GT(json_sum(st["tokens"]["valid"]), 0u);
  EXPECT_EQ(st["clock"]["state"], "unsynced");
  EXPECT_EQ(st["clock"]["ptp"], false);
  EXPECT_EQ(st["clock"]["widen_ns"], 30'000'000);
  EXPECT_NE(st["clock"]["widened_because"].get<std::string>().find("not answering"), std::string::npos);
  EXPECT_NE(agents_.back().log().find("TOP_CLOCK"), std::string::npos) << agents_.back().log();
  std::string text = lab_->out(build_path("agent/sluicectl") + " -s " + ss + " top");
  EXPECT_NE(text.find("T WIDENED by 30000.0 us"), std::string::npos) << text;
}

// The agent failing never blackholes: the XDP program is held by the agent's
// link, so a killed agent leaves none behind and skewed tokens pass again.
TEST_F(TopAgentTest, KilledAgentLeavesNoExpiryBehind) {
  Process r = recv({"--clock-offset-ns", "-20000000"}, "recv-skewed");
  agent(snd_, sif_, "clock_source = \"shared\"\nthreshold_us = 2000\n", "snd");
  std::string link = lab_->out("ip -n " + snd_ + " -d link show " + lab_->name(sif_));
  EXPECT_NE(link.find("xdp"), std::string::npos) << link;
  agents_.back().kill9();
  EXPECT_TRUE(eventually(
      [&] {
        return lab_->out("ip -n " + snd_ + " -d link show " + lab_->name(sif_)).find("prog/xdp") == std::string::npos;
      },
      std::chrono::seconds(5)));
  int rc = 0;
  json s = send({"--size", "50000"}, "send-after-kill", &rc);
  EXPECT_EQ(rc, 0) << s.dump();
}

// A stopped agent keeps its link, so top_expiry stays attached with a clock
// state nobody updates: it must fail open (bpf/lib/liveness.h). Tokens from
// a receiver 20 ms behind are all expired (T = 2 ms); with sluiced alive no
// data answers them, with sluiced stopped past fail_open_ms they pass and the
// flow completes, counted expired and failed open; back, it drops again.
TEST_F(TopAgentTest, StoppedAgentPassesExpiredTokens) {
  using namespace std::chrono_literals;
  Process r = recv({"--clock-offset-ns", "-20000000"}, "recv-skewed");
  std::string ss = agent(snd_, sif_, "clock_source = \"shared\"\nthreshold_us = 2000\nfail_open_ms = 100\n", "snd");
  json st = top(ss);
  EXPECT_EQ(st["object"], sluice::task_from_pid_xdp_feature().ok ? "top_expiry" : "top_expiry_compat") << st.dump();
  EXPECT_EQ(st["fail_open_ms"], 100);
  int rc = 0;
  json alive = send({"--size", "50000", "--timeout-s", "1", "--prio-class", "3"}, "send-alive", &rc);
  EXPECT_EQ(rc, 3) << "the agent alive drops every token: " << alive.dump();
  EXPECT_EQ(alive["data_sent"], 0);
  st = top(ss);
  EXPECT_EQ(st["fail_open"], 0) << st.dump();
  const uint64_t expired0 = json_sum(st["tokens"]["expired"]);
  EXPECT_GT(expired0, 0u);

  pid_t pid = agents_.back().pid();
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  struct Cont {
    pid_t pid;
    ~Cont() { ::kill(pid, SIGCONT); }
  } cont{pid};
  std::this_thread::sleep_for(300ms);
  json stopped = send({"--size", "50000", "--timeout-s", "10", "--prio-class", "3"}, "send-stopped", &rc);
  EXPECT_EQ(rc, 0) << "a stopped agent stalled the flow: " << stopped.dump();
  EXPECT_GT(stopped["data_sent"].get<uint64_t>(), 0u);
  ::kill(pid, SIGCONT);

  st = top(ss);
  std::printf("agent stopped: flow rc %d, %llu data packets sent on %llu tokens; fail_open %llu, expired %llu\n", rc,
              (unsigned long long)stopped["data_sent"].get<uint64_t>(),
              (unsigned long long)json_sum(stopped["tokens_received"]),
              (unsigned long long)st["fail_open"].get<uint64_t>(),
              (unsigned long long)(json_sum(st["tokens"]["expired"]) - expired0));
  EXPECT_GE(st["fail_open"].get<uint64_t>(), json_sum(stopped["tokens_received"])) << st.dump();
  EXPECT_GE(json_sum(st["tokens"]["expired"]) - expired0, json_sum(stopped["tokens_received"]))
      << "tokens passed by fail open are still counted expired";
  EXPECT_EQ(json_sum(st["tokens"]["valid"]), 0u);
  std::string text = lab_->out(build_path("agent/sluicectl") + " -s " + ss + " top");
  EXPECT_NE(text.find("expired tokens passed"), std::string::npos) << text;

  // Back: the heartbeat is fresh again within a period, and tokens drop.
  std::this_thread::sleep_for(500ms);
  const uint64_t fo = top(ss)["fail_open"].get<uint64_t>();
  json back = send({"--size", "50000", "--timeout-s", "1", "--prio-class", "3"}, "send-back", &rc);
  EXPECT_EQ(rc, 3) << back.dump();
  EXPECT_EQ(back["data_sent"], 0);
  EXPECT_EQ(top(ss)["fail_open"].get<uint64_t>(), fo) << "failed open with the agent back";
}

}  // namespace
