// PAC on real kernel TCP: a star (4 sender hosts -> switch -> receiver) with
// a 100 Mbit/s TBF bottleneck and a 32 KB buffer, MTU frames, 32 synchronized
// cubic connections. The same incast runs without and with sluiced/PAC on
// the receiver's interface; PAC must keep it from collapsing, and the agent
// failing (kill -9, SIGSTOP) must never stall a connection.
#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/bpf_util.h"
#include "core/features.h"
#include "sluice/pac.h"
#include "lib/netns_fixture.h"
#include "sluice/reasons.h"

using namespace sluice;
using namespace sluice::test;
using namespace std::chrono_literals;

namespace {

constexpr int kHosts = 4;
constexpr int kConns = 32;
constexpr int kBytes = 65536;
constexpr double kLinkMbps = 100;

struct IncastResult {
  int exit_status = -1;
  double goodput_mbps = 0;
  int rounds_done = 0;
  long timeouts = 0;  // TcpExt.TCPTimeouts of the sender namespaces
  std::string log;
};

class PacIncast : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "needs root (namespaces, qdiscs, BPF)";
    lab_ = std::make_unique<Lab>("k");
    r_ = lab_->add_ns("r");
    w_ = lab_->add_ns("w");
    lab_->add_veth(r_, "r0", "10.77.0.2/24", w_, "wr", "10.77.0.1/24");
    lab_->nsh(r_, "ip route add default via 10.77.0.1");
    lab_->nsh(w_, "sysctl -qw net.ipv4.ip_forward=1");
    for (int i = 0; i < kHosts; ++i) {
      std::string s = lab_->add_ns("s" + std::to_string(i));
      senders_.push_back(s);
      std::string net = "10.78." + std::to_string(i);
      lab_->add_veth(s, "s" + std::to_string(i), net + ".2/24", w_, "w" + std::to_string(i), net + ".1/24");
      lab_->nsh(s, "ip route add default via " + net + ".1");
      // Sender uplinks shaped to the link rate (veth is otherwise infinitely
      // fast); MTU frames: no TSO/GSO toward the switch, no GRO on it.
      lab_->nsh(
          s, "tc qdisc add dev " + lab_->name("s" + std::to_string(i)) + " root tbf rate 100mbit burst 16kb limit 4mb");
      lab_->nsh(s, "ethtool -K " + lab_->name("s" + std::to_string(i)) + " tso off gso off >/dev/null 2>&1");
      lab_->nsh(w_, "ethtool -K " + lab_->name("w" + std::to_string(i)) + " gro off >/dev/null 2>&1");
    }
    lab_->nsh(w_, "ethtool -K " + lab_->name("wr") + " tso off gso off >/dev/null 2>&1");
    ASSERT_EQ(lab_->nsh(w_, "tc qdisc add dev " + lab_->name("wr") + " root tbf rate 100mbit burst 3kb limit 32kb"), 0);
    for (const auto& s : senders_)
      servers_.push_back(
          lab_->spawn(s, {build_path("tests/integration/incast_tool"), "server", "7000", "cubic"}, "server-" + s));
    std::this_thread::sleep_for(300ms);
  }

  long sender_timeouts() {
    long n = 0;
    for (const auto& s : senders_) {
      std::string o = lab_->out("ip netns exec " + s + " nstat -az TcpExtTCPTimeouts");
      std::istringstream is(o);
      std::string name;
      long v;
      while (is >> name)
        if (name == "TcpExtTCPTimeouts" && (is >> v)) n += v;
    }
    return n;
  }

  Process start_client(int rounds, const std::string& tag, bool fresh = false) {
    std::vector<std::string> argv = {build_path("tests/integration/incast_tool"),
                                     fresh ? "client-fresh" : "client",
                                     std::to_string(kConns),
                                     std::to_string(kBytes),
                                     std::to_string(rounds),
                                     "cubic"};
    for (int i = 0; i < kHosts; ++i) argv.push_back("10.78." + std::to_string(i) + ".2:7000");
    return lab_->spawn(r_, argv, "client-" + tag);
  }

  IncastResult finish(Process& c, long to0) {
    IncastResult r;
    r.exit_status = c.wait(120s);
    r.log = c.log();
    r.timeouts = sender_timeouts() - to0;
    std::istringstream is(r.log);
    std::string line;
    while (std::getline(is, line)) {
      if (line.find("\"round\"") != std::string::npos) ++r.rounds_done;
      auto p = line.find("\"goodput_mbps\":");
      if (p != std::string::npos) r.goodput_mbps = std::stod(line.substr(p + 15));
    }
    return r;
  }

  IncastResult incast(int rounds, const std::string& tag, bool fresh = false) {
    long to0 = sender_timeouts();
    Process c = start_client(rounds, tag, fresh);
    return finish(c, to0);
  }

  // The PAC module's stats through the agent's control socket.
  nlohmann::json pac_stats() {
    int st = -1;
    std::string o = lab_->out(build_path("agent/sluicectl") + " -s " + sock_ + " stats --json", &st);
    EXPECT_EQ(st, 0) << o;
    std::string why = "no pac module";
    try {
      nlohmann::json j = nlohmann::json::parse(o.substr(std::min(o.find('{'), o.size())));
      for (const auto& i : j.at("interfaces"))
        for (const auto& m : i.at("modules"))
          if (m.at("name") == "pac") return m.at("stats");
    } catch (const std::exception& e) {
      why = e.what();
    }
    ADD_FAILURE() << "no PAC stats (" << why << ") in: " << o;
    return nlohmann::json::object();
  }

  Process start_agent(const std::string& extra = "") {
    std::string dir = lab_->tmpdir();
    std::string cfg = dir + "/pac.toml";
    sock_ = dir + "/state/sock";
    std::ofstream(cfg) << "[agent]\npin_root = \"" << lab_->bpffs() << "/sluice\"\nstate_dir = \"" << dir
                       << "/state\"\ncontrol_socket = \"" << dir
                       << "/state/sock\"\n[metrics]\nenabled = false\n[pac]\nbuffer_bytes = 32768\n"
                       << extra << "\n[[interface]]\nname = \"" << lab_->name("r0") << "\"\nmechanisms = [\"pac\"]\n";
    Process a = lab_->spawn(r_, {build_path("agent/sluiced"), "--config", cfg}, "sluiced");
    bool up = eventually([&] { return a.log().find("PAC_STARTED") != std::string::npos; }, 10s);
    EXPECT_TRUE(up) << a.log();
    return a;
  }

  // Verdict counters of the pinned pac program (readable with the agent
  // stopped or dead).
  ReasonCounters pac_counters() {
    std::string path = lab_->bpffs() + "/sluice/" + lab_->name("r0") + "/pac/sl_counters";
    int fd = bpf_obj_get(path.c_str());
    if (fd < 0) {
      ADD_FAILURE() << "no pinned counters at " << path;
      return {};
    }
    ReasonCounters c = read_reason_counters(fd);
    close(fd);
    return c;
  }

  std::unique_ptr<Lab> lab_;
  std::string r_, w_;
  std::vector<std::string> senders_;
  std::vector<Process> servers_;
  std::string sock_;
};

TEST_F(PacIncast, KeepsTheIncastFromCollapsing) {
  IncastResult base = incast(8, "baseline");
  ASSERT_EQ(base.exit_status, 0) << base.log;
  // The setup must really be an incast that collapses, or the comparison
  // below proves nothing.
  ASSERT_GT(base.timeouts, 0) << "the baseline saw no retransmission timeout: not an incast collapse\n" << base.log;

  Process agent = start_agent();
  IncastResult pac = incast(8, "pac");
  ReasonCounters c = pac_counters();
  agent.stop();
  ASSERT_EQ(pac.exit_status, 0) << pac.log << agent.log();
  std::printf("baseline: %.1f Mbit/s, %ld timeouts; pac: %.1f Mbit/s, %ld timeouts; held %llu, admitted %llu\n",
              base.goodput_mbps, base.timeouts, pac.goodput_mbps, pac.timeouts,
              (unsigned long long)c[SLUICE_R_PAC_DIVERT].packets, (unsigned long long)c[SLUICE_R_PAC_ADMIT].packets);
  EXPECT_GT(c[SLUICE_R_PAC_DIVERT].packets, 0u) << "PAC never held an ACK";
  EXPECT_GT(c[SLUICE_R_PAC_REINJECTED].packets, 0u);
  // Same run, same machine: ratios, not absolute numbers. What PAC changes
  // reliably on this profile (100 Mbit/s, 32 KB, plain pac) is the number of
  // retransmission timeouts: 0.35-0.46x the baseline's in every run measured.
  // Goodput gains vary with the machine's load (1.13-1.7x measured; the
  // baseline itself moves ~20%), so the test only asks PAC not to lose
  // goodput; the gains are measured by bench/run (docs/pac.md, Results).
  EXPECT_LT(pac.timeouts * 4, base.timeouts * 3) << "PAC did not cut the retransmission timeouts";
  EXPECT_GE(pac.goodput_mbps, base.goodput_mbps);
  EXPECT_LE(pac.goodput_mbps, kLinkMbps * 1.05) << "goodput above the link rate: measurement broken";
}

// New connections before every round (docs/pac.md "New connections"): each
// connection's one response used to be counted as its first window only,
// the rest arriving uncounted (78% of the data at 64 senders). Now the first
// response the agent ever sees is counted that way, and every later one
// whole: its request's initial window, then eq. (3) up to the size measured
// at the previous connections' FIN.
TEST_F(PacIncast, NewConnectionsResponsesAreCounted) {
  constexpr int kRounds = 6;
  Process agent = start_agent("hold_requests = true\ncap_to_response = true");
  IncastResult r = incast(kRounds, "fresh", true);
  nlohmann::json s = pac_stats();
  agent.stop();
  ASSERT_EQ(r.exit_status, 0) << r.log << agent.log();
  ASSERT_EQ(r.rounds_done, kRounds) << r.log;
  const uint64_t data = uint64_t(kRounds) * kConns * kBytes;
  const uint64_t iw = uint64_t(SLUICE_PAC_IW_SEGS) * SLUICE_PAC_DEFAULT_MSS;
  uint64_t flows = s.value("new_flows", uint64_t(0)), first = s.value("first_window_bytes", uint64_t(0));
  uint64_t uncounted = s.value("uncounted_bytes", uint64_t(0));
  std::printf("fresh: %.1f Mbit/s, %ld timeouts; new flows %llu, first windows %llu B, uncounted %llu of %llu B\n",
              r.goodput_mbps, r.timeouts, (unsigned long long)flows, (unsigned long long)first,
              (unsigned long long)uncounted, (unsigned long long)data);
  // Every connection started a flow at its request, which counted one
  // initial window (the responses are larger).
  EXPECT_EQ(flows, uint64_t(kRounds) * kConns);
  EXPECT_EQ(first, flows * iw);
  // Counted only up to the first window, (kBytes - iw) / kBytes = 78% of the
  // data would arrive uncounted; with the fix that is round 0 only (1/6 of
  // the data times 78% = 13%), plus what eq. (6)/the trigger age write off
  // early. Half of the old figure separates the two.
  EXPECT_LT(uncounted * 100, data * 39) << "new connections' responses arrive uncounted";
}

TEST_F(PacIncast, Kill9MidIncastStallsNoConnection) {
  Process agent = start_agent();
  long to0 = sender_timeouts();
  Process client = start_client(10, "kill9");
  // Kill once PAC has held ACKs (the incast is under way).
  bool holding = eventually([&] { return pac_counters()[SLUICE_R_PAC_DIVERT].packets > 0; }, 20s);
  EXPECT_TRUE(holding);
  agent.kill9();
  // Held ACKs died with the process; later cumulative ACKs (or, at worst, an
  // RTO) recover every connection: all rounds finish.
  IncastResult r = finish(client, to0);
  EXPECT_EQ(r.exit_status, 0) << r.log;
  EXPECT_EQ(r.rounds_done, 10) << r.log;
  // tcx links die with the process: nothing of PAC stays attached.
  std::string tcx = lab_->out("ip netns exec " + r_ + " bpftool net show dev " + lab_->name("r0") + " 2>&1");
  EXPECT_EQ(tcx.find("pac_"), std::string::npos) << tcx;
}

TEST_F(PacIncast, StalledAgentFailsOpenWithin100ms) {
  Process agent = start_agent("max_hold_ms = 50");
  long to0 = sender_timeouts();
  Process client = start_client(40, "stop");
  bool holding = eventually([&] { return pac_counters()[SLUICE_R_PAC_DIVERT].packets > 0; }, 20s);
  ASSERT_TRUE(holding);
  // With bpf-task-from-pid the programs look at the agent's heartbeat
  // thread (bpf/lib/liveness.h): a stale heartbeat alone no longer fails
  // open, the stopped thread does.
  EXPECT_EQ(pac_stats().value("object", std::string()), task_from_pid_feature().ok ? "pac_tc" : "pac_tc_compat");
  ASSERT_EQ(::kill(agent.pid(), SIGSTOP), 0);
  std::this_thread::sleep_for(100ms);
  uint64_t diverted = pac_counters()[SLUICE_R_PAC_DIVERT].packets;
  uint64_t open0 = pac_counters()[SLUICE_R_PAC_FAIL_OPEN].packets;
  std::this_thread::sleep_for(1s);
  ReasonCounters c = pac_counters();
  EXPECT_EQ(c[SLUICE_R_PAC_DIVERT].packets, diverted) << "ACKs still diverted 100 ms after the agent stopped";
  EXPECT_GT(c[SLUICE_R_PAC_FAIL_OPEN].packets, open0) << "ACKs did not pass while the agent was stopped";
  ::kill(agent.pid(), SIGCONT);
  IncastResult r = finish(client, to0);
  EXPECT_EQ(r.exit_status, 0) << r.log;
  EXPECT_EQ(r.rounds_done, 40);
  // Back from the stall the agent released what it held (counted) and holds again.
  agent.stop();
  EXPECT_NE(agent.log().find("PAC_STALL"), std::string::npos) << agent.log();
}

}  // namespace
