// PAC on real kernel TCP: a star (4 sender hosts -> switch -> receiver) with
// a 100 Mbit/s TBF bottleneck and a 32 KB buffer, MTU frames, 32 synchronized
// cubic connections. The same incast runs without and with sluiced/PAC on
// the receiver's interface; PAC must keep it from collapsing, and the agent
// failing (kill -9, SIGSTOP) must never stall a connection.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/bpf_util.h"
#include "core/features.h"
#include "sluice/pac.h"
#include "lib/drill.h"
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

  // `rounds` of new connections under an agent started with `config`; its
  // PAC stats in *stats. A client that failed or stopped early is a failure.
  IncastResult fresh_incast(int rounds, const std::string& config, const std::string& tag, nlohmann::json* stats) {
    Process agent = start_agent(config);
    IncastResult r = incast(rounds, tag, true);
    *stats = pac_stats();
    agent.stop();
    EXPECT_EQ(r.exit_status, 0) << r.log << agent.log();
    EXPECT_EQ(r.rounds_done, rounds) << r.log;
    return r;
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

  Process start_agent(const std::string& extra = "", const std::string& agent_extra = "") {
    std::string dir = lab_->tmpdir();
    std::string cfg = dir + "/pac.toml";
    sock_ = dir + "/state/sock";
    std::ofstream(cfg) << "[agent]\n"
                       << agent_extra << "\npin_root = \"" << lab_->bpffs() << "/sluice\"\nstate_dir = \"" << dir
                       << "/state\"\ncontrol_socket = \"" << dir
                       << "/state/sock\"\n[metrics]\nenabled = false\n[pac]\nbuffer_bytes = 32768\n"
                       << extra << "\n[[interface]]\nname = \"" << lab_->name("r0") << "\"\nmechanisms = [\"pac\"]\n";
    // A log of its own per start: a restart polling the previous agent's
    // log (not yet truncated by the new child) would see it started.
    Process a = lab_->spawn(r_, {build_path("agent/sluiced"), "--config", cfg}, "sluiced-" + std::to_string(++agents_));
    bool up = eventually([&] { return a.log().find("PAC_STARTED") != std::string::npos; }, 10s);
    EXPECT_TRUE(up) << a.log();
    return a;
  }

  // Path of a pinned map of the pac program.
  std::string pin(const std::string& map) { return lab_->bpffs() + "/sluice/" + lab_->name("r0") + "/pac/" + map; }

  // Id of the map pinned at pin(map), 0 when none.
  uint32_t pinned_map_id(const std::string& map) {
    int fd = bpf_obj_get(pin(map).c_str());
    if (fd < 0) return 0;
    bpf_map_info info{};
    __u32 len = sizeof(info);
    uint32_t id = bpf_obj_get_info_by_fd(fd, &info, &len) == 0 ? info.id : 0;
    close(fd);
    return id;
  }

  // Entries in the pinned PAC flow table.
  size_t pinned_flows() {
    int fd = bpf_obj_get(pin("sl_pac_flows_v2").c_str());
    if (fd < 0) return 0;
    size_t n = 0;
    sluice_pac_flow_key k{}, next{};
    for (void* prev = nullptr; bpf_map_get_next_key(fd, prev, &next) == 0; prev = &k) {
      k = next;
      ++n;
    }
    close(fd);
    return n;
  }

  // How many programs named `prog` (or starting so) are on r0's hooks:
  // clsact filters (tc names the program) and tcx links (named here from
  // their ids; Debian 12's bpftool does not list tcx).
  int pac_programs_attached(const std::string& prog) {
    int n = 0;
    for (const char* hook : {"ingress", "egress"}) {
      // One line per filter, naming its program twice.
      std::istringstream o(lab_->out("ip netns exec " + r_ + " tc filter show dev " + lab_->name("r0") + " " + hook));
      for (std::string line; std::getline(o, line);)
        if (line.find(" name " + prog) != std::string::npos) ++n;
    }
    InNetns in(r_);
    int ifindex = int(if_nametoindex(lab_->name("r0").c_str()));
    for (bool ingress : {true, false})
      for (uint32_t id : tcx_prog_ids(ifindex, ingress)) {
        int fd = bpf_prog_get_fd_by_id(id);
        if (fd < 0) continue;
        bpf_prog_info info{};
        __u32 len = sizeof(info);
        if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && std::string(info.name).rfind(prog, 0) == 0) ++n;
        close(fd);
      }
    return n;
  }

  // Verdict counters of the pinned pac program (readable with the agent
  // stopped or dead).
  ReasonCounters pac_counters() {
    std::string path = pin("sl_counters");
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
  int agents_ = 0;  // sluiced started so far
};

TEST_F(PacIncast, KeepsTheIncastFromCollapsing) {
  // Baseline and PAC interleaved, twice each (B P B P): the machine's load
  // drifts, and one 8-round baseline alone moves ~20% (a run with a single
  // unlucky RTO more or less); the sums of two compare like with like.
  constexpr int kPairs = 2;
  long base_to = 0, pac_to = 0;
  double base_mbps = 0, pac_mbps = 0;
  uint64_t held = 0;
  for (int i = 0; i < kPairs; ++i) {
    IncastResult base = incast(8, "baseline-" + std::to_string(i));
    ASSERT_EQ(base.exit_status, 0) << base.log;
    Process agent = start_agent();
    IncastResult pac = incast(8, "pac-" + std::to_string(i));
    ReasonCounters c = pac_counters();
    agent.stop();
    ASSERT_EQ(pac.exit_status, 0) << pac.log << agent.log();
    std::printf("pair %d: baseline %.1f Mbit/s, %ld timeouts; pac %.1f Mbit/s, %ld timeouts\n", i, base.goodput_mbps,
                base.timeouts, pac.goodput_mbps, pac.timeouts);
    EXPECT_LE(pac.goodput_mbps, kLinkMbps * 1.05) << "goodput above the link rate: measurement broken";
    EXPECT_GT(c[SLUICE_R_PAC_DIVERT].packets, 0u) << "PAC never held an ACK";
    EXPECT_GT(c[SLUICE_R_PAC_REINJECTED].packets, 0u);
    base_to += base.timeouts;
    pac_to += pac.timeouts;
    base_mbps += base.goodput_mbps / kPairs;
    pac_mbps += pac.goodput_mbps / kPairs;
    held += c[SLUICE_R_PAC_DIVERT].packets;
  }
  std::printf("baseline: %.1f Mbit/s, %ld timeouts; pac: %.1f Mbit/s, %ld timeouts; held %llu\n", base_mbps, base_to,
              pac_mbps, pac_to, (unsigned long long)held);
  // The setup must really be an incast that collapses, or the comparison
  // below proves nothing.
  ASSERT_GT(base_to, 0) << "the baseline saw no retransmission timeout: not an incast collapse";
  // Same runs, same machine: ratios, not absolute numbers. What PAC changes
  // reliably on this profile (100 Mbit/s, 32 KB, plain pac) is the number of
  // retransmission timeouts: 0.35-0.46x the baseline's in every run measured.
  // Goodput gains vary with the machine's load (1.13-1.7x measured), so the
  // test only asks PAC not to lose goodput, with 10% for what two pairs
  // leave of the noise; the gains are measured by bench/run (docs/pac.md,
  // Results).
  EXPECT_LT(pac_to * 4, base_to * 3) << "PAC did not cut the retransmission timeouts";
  EXPECT_GE(pac_mbps, base_mbps * 0.9) << "PAC lost goodput";
}

// New connections before every round (docs/pac.md "New connections"): each
// connection's one response used to be counted as its first window only,
// the rest arriving uncounted (78% of the data at 64 senders). Now the first
// response the agent ever sees is counted that way, and every later one
// whole: its request's initial window, then eq. (3) up to the size measured
// at the previous connections' FIN.
// The eq. (4)/(5) estimate is what this tests: no window cap (held requests
// with cap_to_response cap windows at a third of the buffer by default).
TEST_F(PacIncast, NewConnectionsResponsesAreCounted) {
  constexpr int kRounds = 6;
  nlohmann::json s;
  IncastResult r =
      fresh_incast(kRounds, "hold_requests = true\ncap_to_response = true\nrwnd_cap_bytes = 0", "fresh", &s);
  if (HasFailure()) return;
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

// The default with held requests and cap_to_response: every window capped
// at a third of the buffer, and each flow counted from sequence numbers (the
// in-flight bound), new connections from their request on: nothing of any
// response arrives uncounted, the first round included.
TEST_F(PacIncast, NewConnectionsUnderTheDefaultWindowCapAreAllCounted) {
  nlohmann::json s;
  IncastResult r = fresh_incast(6, "hold_requests = true\ncap_to_response = true", "fresh-cap", &s);
  if (HasFailure()) return;
  uint64_t clamped = s.value("rwnd_clamped", uint64_t(0)), uncounted = s.value("uncounted_bytes", uint64_t(0));
  std::printf("fresh, default cap: %.1f Mbit/s, %ld timeouts; windows clamped %llu, uncounted %llu B\n", r.goodput_mbps,
              r.timeouts, (unsigned long long)clamped, (unsigned long long)uncounted);
  EXPECT_GT(clamped, 0u) << "the default caps the windows of held-request flows";
  EXPECT_EQ(uncounted, 0u) << "a response arrived while the estimate said nothing was in flight";
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
  EXPECT_EQ(pac_programs_attached("pac_"), 0) << hook_snapshot(r_, lab_->name("r0"));
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
  // sluicectl against the stopped agent gives up after its --timeout.
  int st = -1;
  std::string o = lab_->out(build_path("agent/sluicectl") + " -t 300 -s " + sock_ + " stats 2>&1", &st);
  EXPECT_EQ(st, 2) << o;
  EXPECT_NE(o.find("did not answer within 300 ms"), std::string::npos) << o;
  ::kill(agent.pid(), SIGCONT);
  IncastResult r = finish(client, to0);
  EXPECT_EQ(r.exit_status, 0) << r.log;
  EXPECT_EQ(r.rounds_done, 40);
  // Back from the stall the agent released what it held (counted) and holds again.
  agent.stop();
  EXPECT_NE(agent.log().find("PAC_STALL"), std::string::npos) << agent.log();
}

// kill -9 with PAC attached, flows tracked and ACKs held, then a new
// sluiced on the same pins (docs/operations.md "Drills"), in both attach
// modes. Under clsact the killed agent's filters stay (failing open, the
// heartbeat thread being gone) and the new agent must replace them, not add
// to them; under tcx its links died with it.
TEST_F(PacIncast, RestartAfterKill9ReadoptsThePinnedMaps) {
  const char* maps[] = {"sl_pac_flows_v2", "sl_pac_ctl_v2", "sl_pac_evt_v1", "sl_counters"};
  for (std::string mode : {"tcx", "clsact"}) {
    SCOPED_TRACE("attach_mode " + mode);
    const std::string agent_cfg = "attach_mode = \"" + mode + "\"";
    long to0 = sender_timeouts();
    Process client = start_client(40, "restart-" + mode);
    Process agent = start_agent("", agent_cfg);
    // The pinned counters go on across the iterations: this agent's holds
    // are those beyond what the counter had when it started.
    const uint64_t held_before = pac_counters()[SLUICE_R_PAC_DIVERT].packets;
    ASSERT_TRUE(eventually([&] { return pac_counters()[SLUICE_R_PAC_DIVERT].packets > held_before; }, 20s))
        << "PAC never held an ACK\n"
        << agent.log();
    ASSERT_TRUE(eventually([&] { return pinned_flows() > 0; }, 20s)) << "no flow tracked";
    std::vector<uint32_t> ids;
    for (const char* m : maps) ids.push_back(pinned_map_id(m));
    agent.kill9();
    ReasonCounters at_kill = pac_counters();
    // The pins outlive the process, flows included.
    size_t flows_after_kill = pinned_flows();
    EXPECT_GT(flows_after_kill, 0u) << "the pinned flow table lost its flows with the process";

    Process again = start_agent("", agent_cfg);
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_NE(ids[i], 0u) << maps[i] << " was not pinned";
      EXPECT_EQ(pinned_map_id(maps[i]), ids[i]) << maps[i] << ": the restart made a new map instead of re-adopting";
    }
    // The new agent found the previous run's flows in the pinned table (and
    // says what it did with them).
    EXPECT_NE(again.log().find("PAC_READOPTED"), std::string::npos) << again.log();
    // One pac program per hook: the restart replaced the killed agent's
    // filters (clsact) instead of adding a second set.
    std::this_thread::sleep_for(1s);
    if (!again.running()) {
      int st = again.stop();
      FAIL() << "the restarted sluiced exited, status " << st << "\n" << again.log();
    }
    EXPECT_EQ(pac_programs_attached("pac_ingress"), 1) << hook_snapshot(r_, lab_->name("r0"));
    EXPECT_EQ(pac_programs_attached("pac_egress"), 1) << hook_snapshot(r_, lab_->name("r0"));
    // The running connections are known again, the counters go on from
    // where they were (same map), and the new agent holds ACKs again.
    EXPECT_TRUE(eventually([&] { return pac_stats().value("flows", 0) >= kConns; }, 20s)) << pac_stats().dump() << "\n"
                                                                                          << again.log();
    EXPECT_TRUE(eventually(
        [&] { return pac_counters()[SLUICE_R_PAC_DIVERT].packets > at_kill[SLUICE_R_PAC_DIVERT].packets; }, 20s))
        << "the restarted agent never held an ACK";
    ReasonCounters later = pac_counters();
    EXPECT_GT(later[SLUICE_R_PAC_DATA].packets, at_kill[SLUICE_R_PAC_DATA].packets);
    EXPECT_GE(later[SLUICE_R_PAC_ADMIT].packets, at_kill[SLUICE_R_PAC_ADMIT].packets);
    IncastResult r = finish(client, to0);
    EXPECT_EQ(r.exit_status, 0) << r.log;
    EXPECT_EQ(r.rounds_done, 40) << r.log;
    std::printf("restart (%s): %zu flows pinned at the kill; %s\n", mode.c_str(), flows_after_kill,
                again.log().substr(std::min(again.log().find("PAC_READOPTED"), again.log().size()), 160).c_str());
    again.stop();
    EXPECT_EQ(pac_programs_attached("pac_"), 0) << "a stopped agent left PAC attached\n"
                                                << hook_snapshot(r_, lab_->name("r0"));
  }
}

// A full flow table (docs/operations.md "100,000 flows"): the pinned PAC
// table is filled to its size with flows that send nothing, then an incast
// runs through it. The incast's connections are new flows in a full LRU
// table: they evict (counted) and are controlled as usual, and the agent's
// scan reads the table in bounded slices. Printed, not asserted: the scan's
// cost per control tick and per pass, and how long `sluicectl stats` takes
// to answer with the table empty and full (same run).
TEST_F(PacIncast, AFullFlowTableEvictsCountedAndStallsNothing) {
  Process agent = start_agent();
  auto ctl_ms = [&](std::vector<double>* out) {
    for (int i = 0; i < 20; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      int st = -1;
      lab_->out(build_path("agent/sluicectl") + " -s " + sock_ + " stats --json >/dev/null", &st);
      EXPECT_EQ(st, 0);
      out->push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      std::this_thread::sleep_for(50ms);
    }
    std::sort(out->begin(), out->end());
  };
  // Empty table, the incast running.
  std::vector<double> empty_ms, full_ms;
  long to0 = sender_timeouts();
  Process c1 = start_client(30, "table-empty", true);  // the same workload
  ctl_ms(&empty_ms);
  IncastResult r1 = finish(c1, to0);
  ASSERT_EQ(r1.exit_status, 0) << r1.log;
  nlohmann::json s1 = pac_stats();

  // Fill the table with flows that send nothing (their last packet now,
  // so the idle expiry leaves them), from a far prefix.
  int fd = bpf_obj_get(pin("sl_pac_flows_v2").c_str());
  ASSERT_GE(fd, 0);
  const uint32_t kFill = SLUICE_PAC_FLOW_TABLE_SIZE;
  std::vector<sluice_pac_flow_key> keys(kFill);
  std::vector<sluice_pac_flow> vals(kFill);
  uint64_t now = monotonic_ns();
  for (uint32_t i = 0; i < kFill; ++i) {
    auto& k = keys[i];
    k.family = 4;
    k.raddr[0] = htonl(0x0afa0000u | i);  // 10.250.x.y
    k.laddr[0] = htonl(0x0a4d0002u);      // 10.77.0.2
    k.rport = htons(9);
    k.lport = htons(9);
    vals[i].first_ns = vals[i].last_ns = now;
    vals[i].bytes_rcvd = 1;
  }
  __u32 n = kFill;
  ASSERT_EQ(bpf_map_update_batch(fd, keys.data(), vals.data(), &n, nullptr), 0) << strerror(errno);
  close(fd);
  ASSERT_TRUE(eventually([&] { return pac_stats().value("flows", 0) >= int(kFill) * 9 / 10; }, 20s))
      << pac_stats().dump();
  nlohmann::json s_full = pac_stats();
  uint64_t inserts0 = s_full.value("flow_inserts", uint64_t(0)), divert0 = pac_counters()[SLUICE_R_PAC_DIVERT].packets;

  to0 = sender_timeouts();
  Process c2 = start_client(30, "table-full", true);  // new connections every round: new flows
  ctl_ms(&full_ms);
  IncastResult r2 = finish(c2, to0);
  ASSERT_TRUE(
      eventually([&] { return pac_stats().value("scan_passes", 0) >= s_full.value("scan_passes", 0) + 2; }, 20s));
  nlohmann::json s2 = pac_stats();
  agent.stop();
  EXPECT_EQ(r2.exit_status, 0) << r2.log;
  EXPECT_EQ(r2.rounds_done, 30) << r2.log;
  uint64_t inserts = s2.value("flow_inserts", uint64_t(0)) - inserts0;
  EXPECT_GE(inserts, uint64_t(30) * kConns) << "every new connection is a new flow: " << s2.dump();
  // Evicted: everything that went into the table (the fill, the programs'
  // inserts) less what is left and what the agent removed. The table was
  // full, so the incast's new flows evicted; the agent counts what it saw
  // go (the fill is no insert of the programs, so its other count,
  // inserts - entries - removed, is 0 here).
  const uint64_t entries = pinned_flows(),
                 expired = s2.value("expired_flows", uint64_t(0)) - s_full.value("expired_flows", uint64_t(0));
  const int64_t evicted = int64_t(n) + int64_t(inserts) - int64_t(entries) - int64_t(expired);
  EXPECT_GT(evicted, 0) << "inserts into a full LRU table evicted nothing";
  EXPECT_GT(s2.value("flows_evicted", uint64_t(0)), 0u) << s2.dump();
  EXPECT_LE(s2.value("flows", 0), int(SLUICE_PAC_FLOW_TABLE_SIZE));
  EXPECT_GT(s2.value("scan_pass_ticks_last", 0), 1) << "the full table was read in one control tick";
  EXPECT_GT(pac_counters()[SLUICE_R_PAC_DIVERT].packets, divert0) << "PAC held no ACK with a full table";
  auto med = [](const std::vector<double>& v) { return v[v.size() / 2]; };
  std::printf(
      "full table: %d flows seen, %llu inserted by the incast, %lld evicted (%llu counted by the agent); scan per tick "
      "mean %.1f us, max %llu us (whole run); last pass %.1f ms over %d ticks; empty table: last pass %.3f ms, "
      "%d tick(s); sluicectl stats: empty table median %.1f ms max %.1f ms, full table median %.1f ms max %.1f ms "
      "(20 calls each); goodput empty %.1f, full %.1f Mbit/s; PAC_STALL (loop or heartbeat late > fail_open, ACKs "
      "passed) empty %d, full %d\n",
      s2.value("flows", 0), (unsigned long long)inserts, (long long)evicted,
      (unsigned long long)s2.value("flows_evicted", uint64_t(0)), s2.value("scan_tick_us_mean", 0.0),
      (unsigned long long)s2.value("scan_tick_us_max", uint64_t(0)), s2.value("scan_pass_ms_last", 0.0),
      s2.value("scan_pass_ticks_last", 0), s1.value("scan_pass_ms_last", 0.0), s1.value("scan_pass_ticks_last", 0),
      med(empty_ms), empty_ms.back(), med(full_ms), full_ms.back(), r1.goodput_mbps, r2.goodput_mbps,
      s1.value("stalls", 0), s2.value("stalls", 0) - s1.value("stalls", 0));
}

}  // namespace
