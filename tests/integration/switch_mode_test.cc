// sluiced in switch mode in a lab: h1 -- sw -- h2, sw a router whose two
// ports are sluice switch ports (logic pfc, 2 queues each): swa faces the
// host h1 (host-facing), swb faces h2, which plays the downstream switch
// (switch-facing). Two UDP flows h1 -> h2 hash to different queues of swb.
//  - A PAUSE frame for flow A's queue, sent by h2 from a raw AF_PACKET
//    socket, stops A at the receiver while B keeps flowing; RESUME restarts
//    A. sluicectl switch shows the pause, the control frames and the queues.
//  - The same frame sent by h1 into the host-facing port is rejected,
//    counted by reason, and pauses nothing.
//  - Fail open: sluiced killed with A's queue paused, new packets of A
//    still reach h2 (HTB's default class; the classifier detached with the
//    process under tcx, or stops steering on a stale heartbeat under
//    clsact). Stopped cleanly: the tree is gone.
//  - ARP leaves through a paused queue 0 (frames that are not IP take the
//    never-paused fallback class), so a flow of the other queue is not
//    blackholed by a failed neighbour entry.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "lib/netns_fixture.h"
#include "lib/prog_test.h"
#include "lib/switch_lab.h"
#include "sluice/switch.h"
#include "switch/control.h"

using namespace sluice;
using namespace sluice::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

constexpr uint16_t kDport = 7000;

// Sends one control frame out of `ifname` in `ns` (the neighbour's side).
void send_frame(const std::string& ns, const std::string& ifname, sw::CtrlType type, uint16_t queue, uint32_t seq) {
  send_pause_frame(ns, ifname, type == sw::CtrlType::kPause, queue, seq);
}

class SwitchMode : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    // The clsact case runs everywhere; tcx only where the kernel has it
    // (sluiced refuses attach_mode = "tcx" without it).
    if (GetParam() == "tcx") SLUICE_REQUIRE_KERNEL(6, 6, "tcx");
    lab_ = std::make_unique<Lab>("sm");
    r_ = make_router_lab(*lab_, 71);
    if (HasFailure()) return;
    agent_ = std::make_unique<SwitchAgent>(*lab_, r_.sw, "sw");
    agent_->configure("logic = \"pfc\"\nqueues = 2\nrate_mbit = 100\nfail_open_ms = 1000\n",
                      {{r_.swa, "host-facing"}, {r_.swb, "switch-facing"}}, "attach_mode = \"" + GetParam() + "\"\n");
  }
  void TearDown() override {
    if (agent_) agent_->stop();
    lab_.reset();
  }

  void start_agent() { ASSERT_TRUE(agent_->start()); }
  json sw_state() { return agent_->state(); }
  // Paced flows h1 -> h2: flow i from sports_[i] to kDport + i, ~8 Mbit/s each.
  void start_flows() {
    sink_.start(r_.h2, {kDport, uint16_t(kDport + 1)});
    src_.start(r_.h1, {{"10.71.2.2", kDport, sports_[0], 1}, {"10.71.2.2", uint16_t(kDport + 1), sports_[1], 1}});
  }
  // Datagrams flow i got during `d`.
  uint64_t got_during(int i, std::chrono::milliseconds d) {
    uint64_t a = sink_.got(size_t(i));
    std::this_thread::sleep_for(d);
    return sink_.got(size_t(i)) - a;
  }

  std::unique_ptr<Lab> lab_;
  RouterLab r_;  // h1 -- sw -- h2
  std::unique_ptr<SwitchAgent> agent_;
  UdpSink sink_;
  UdpSource src_;
  uint16_t sports_[2] = {0, 0};
  uint16_t qa_ = 0, qb_ = 1;
};

TEST_P(SwitchMode, ControlFramePausesAndResumesAQueueHostFacingPortRejectsIt) {
  start_agent();
  if (HasFatalFailure()) return;
  // Two source ports whose flows land in different queues of swb (pfc:
  // flow hash % 2, as the classifier computes it).
  sports_[0] = 40000;
  qa_ = udp_queue("10.71.1.2", "10.71.2.2", sports_[0], kDport, 2);
  for (uint16_t p = 40001; p < 40100; ++p)
    if (udp_queue("10.71.1.2", "10.71.2.2", p, uint16_t(kDport + 1), 2) != qa_) {
      sports_[1] = p;
      break;
    }
  ASSERT_NE(sports_[1], 0);
  qb_ = uint16_t(1 - qa_);

  start_flows();
  ASSERT_TRUE(eventually([&] { return sink_.got(0) > 50 && sink_.got(1) > 50; }, 5s))
      << "traffic does not cross the switch: " << sink_.got(0) << " / " << sink_.got(1);

  // The neighbour behind swb pauses flow A's queue.
  send_frame(r_.h2, r_.h2if, sw::CtrlType::kPause, qa_, 1);
  ASSERT_TRUE(eventually([&] { return SwitchAgent::port(sw_state(), r_.swb)["queues"][qa_]["paused"] == true; }, 3s))
      << sw_state().dump(2) << "\n"
      << agent_->proc().log();
  std::this_thread::sleep_for(200ms);  // what was already on the wire arrives
  uint64_t a_paused = got_during(0, 1000ms);
  // A paused TBF leaks 1000 B/s: at most ~1 datagram of 1042 B per second.
  EXPECT_LE(a_paused, 2u) << "flow A kept flowing through a paused queue";
  EXPECT_GT(got_during(1, 500ms), 100u) << "flow B (the other queue) stopped too";
  json s = sw_state();
  const json pb = SwitchAgent::port(s, r_.swb);
  EXPECT_EQ(pb["control"]["in"], 1) << s.dump(2);
  EXPECT_EQ(pb["queues"][qb_]["paused"], false);
  EXPECT_GT(pb["queues"][qa_]["depth_pkts"].get<uint64_t>(), 0u) << "the paused queue holds A's packets";
  EXPECT_EQ(s["logic_state"]["pauses_applied"], 1);

  // RESUME: A flows again, the held packets first.
  send_frame(r_.h2, r_.h2if, sw::CtrlType::kResume, qa_, 2);
  EXPECT_TRUE(eventually([&] { return got_during(0, 100ms) > 20; }, 3s)) << "flow A did not resume";
  s = sw_state();
  EXPECT_EQ(SwitchAgent::port(s, r_.swb)["queues"][qa_]["paused"], false);
  EXPECT_EQ(SwitchAgent::port(s, r_.swb)["control"]["in"], 2);
  EXPECT_GT(SwitchAgent::port(s, r_.swb)["queues"][qa_]["pkts_out"].get<uint64_t>(), 100u);

  // The same PAUSE arriving from the host on the host-facing port: rejected
  // by the gate, counted, and nothing is paused anywhere.
  send_frame(r_.h1, r_.h1if, sw::CtrlType::kPause, qb_, 3);
  send_frame(r_.h1, r_.h1if, sw::CtrlType::kPause, qa_, 4);
  ASSERT_TRUE(eventually([&] { return SwitchAgent::port(sw_state(), r_.swa)["control"]["rejected"] == 2; }, 3s))
      << sw_state().dump(2);
  s = sw_state();
  const json pa = SwitchAgent::port(s, r_.swa);
  EXPECT_EQ(pa["control"]["rejected_by_reason"]["WRONG_PORT"], 2) << pa.dump(2);
  EXPECT_EQ(pa["control"]["in"], 0);
  for (const auto& p : s["ports"])
    for (const auto& q : p["queues"]) EXPECT_EQ(q["paused"], false) << p["name"] << " queue " << q["queue"];
  EXPECT_EQ(s["logic_state"]["pauses_applied"], 1);
  EXPECT_GT(got_during(0, 300ms), 50u);
  EXPECT_GT(got_during(1, 300ms), 50u);

  // Stopped cleanly: programs and tree gone, traffic still forwarded.
  EXPECT_EQ(agent_->stop(), 0) << agent_->proc().log();
  EXPECT_EQ(lab_->out("tc -n " + r_.sw + " qdisc show dev " + r_.swb + " | grep -c 'qdisc tbf 51: root'"), "0\n");
  EXPECT_GT(got_during(0, 300ms), 50u) << "the port does not forward after sluiced stopped";
}

TEST_P(SwitchMode, KilledWithAQueuePausedThePortStillForwards) {
  start_agent();
  if (HasFatalFailure()) return;
  sports_[0] = 41000;
  sports_[1] = 41001;
  qa_ = udp_queue("10.71.1.2", "10.71.2.2", sports_[0], kDport, 2);
  start_flows();
  ASSERT_TRUE(eventually([&] { return sink_.got(0) > 50; }, 5s));
  send_frame(r_.h2, r_.h2if, sw::CtrlType::kPause, qa_, 1);
  ASSERT_TRUE(eventually([&] { return SwitchAgent::port(sw_state(), r_.swb)["queues"][qa_]["paused"] == true; }, 3s));
  std::this_thread::sleep_for(200ms);
  EXPECT_LE(got_during(0, 500ms), 2u);
  agent_->proc().kill9();
  // The tree stays (the paused TBF too); new packets of A take HTB's
  // default class once the classifier is gone or stops steering.
  EXPECT_NE(lab_->out("tc -n " + r_.sw + " qdisc show dev " + r_.swb + " | grep -c 'qdisc tbf 51: root'"), "0\n");
  // Under clsact that takes fail_open_ms (1 s here: a heartbeat late by
  // less on a loaded machine must not fail open).
  EXPECT_TRUE(eventually([&] { return got_during(0, 100ms) > 20; }, 5s))
      << "flow A blackholed after sluiced died with its queue paused ("
      << lab_->out("tc -n " + r_.sw + " -s class show dev " + r_.swb) << ")";
}

// swb's queue 0 (where a frame without a flow hash would land) paused with
// a backlog, and the router's neighbour entry for h2 removed: sw must
// resolve h2 by ARP through swb to go on forwarding flow B of queue 1. The
// classifier sends frames that are not IP to the never-paused fallback
// class. Steered into paused queue 0, the ARP request would wait behind
// the backlog (a paused queue leaks 1000 B/s: 20 s for 20 datagrams), the
// entry would fail after its 3 probes and B, whose queue runs, would be
// blackholed (the held datapath's case, switch_hold_test).
TEST_P(SwitchMode, ArpLeavesThroughAPausedQueue) {
  start_agent();
  if (HasFatalFailure()) return;
  for (uint16_t p = 42000; p < 42200 && !(sports_[0] && sports_[1]); ++p) {
    if (!sports_[0] && udp_queue("10.71.1.2", "10.71.2.2", p, kDport, 2) == 0) sports_[0] = p;
    if (!sports_[1] && udp_queue("10.71.1.2", "10.71.2.2", uint16_t(p + 1000), uint16_t(kDport + 1), 2) == 1)
      sports_[1] = uint16_t(p + 1000);
  }
  ASSERT_TRUE(sports_[0] && sports_[1]);
  start_flows();
  ASSERT_TRUE(eventually([&] { return sink_.got(0) > 50 && sink_.got(1) > 50; }, 5s));
  send_frame(r_.h2, r_.h2if, sw::CtrlType::kPause, 0, 1);
  auto q0 = [&] { return SwitchAgent::port(sw_state(), r_.swb)["queues"][0]; };
  ASSERT_TRUE(eventually([&] { return q0()["paused"] == true && q0()["depth_pkts"].get<uint64_t>() >= 20; }, 5s))
      << sw_state().dump(2);
  ASSERT_EQ(lab_->nsh(r_.sw, "ip neigh del " + r_.h2_addr + " dev " + r_.swb), 0);
  const uint64_t b0 = sink_.got(1);
  EXPECT_TRUE(eventually([&] { return sink_.got(1) > b0 + 500; }, 10s))
      << "flow B of the running queue 1 is blackholed: sw's ARP request for h2 waits in paused queue 0 ("
      << sink_.got(1) - b0 << " datagrams since the entry was removed)\n"
      << lab_->out("ip -n " + r_.sw + " neigh show") << SwitchAgent::port(sw_state(), r_.swb).dump(2);
  const json pb = SwitchAgent::port(sw_state(), r_.swb);
  EXPECT_GE(pb["net_control_pkts"].get<uint64_t>(), 1u) << pb.dump(2);
  EXPECT_EQ(q0()["paused"], true);
}

INSTANTIATE_TEST_SUITE_P(AttachModes, SwitchMode, ::testing::Values("tcx", "clsact"));

// The lab's three topologies with sluice switches (tc-scripts/lab/topo up
// --switch sluice): every switch namespace runs sluiced, each switch port
// has sluiced's tree instead of the lab's shaper, and hosts reach each
// other across them (bridges on star and dumbbell, routers on leaf-spine).
TEST(LabTopologies, RunSluiceSwitchesEndToEnd) {
  ASSERT_EQ(geteuid(), 0u);
  Lab lab("sm");  // temp dir, and reaping
  struct Case {
    std::string args, from, recv, to, sw;
  };
  for (const Case& c : std::vector<Case>{
           {"star --senders 2 --mode mtu --rate 100", "h1", "r1", "10.0.0.3", "sw"},
           {"dumbbell --left 1 --right 1 --rate 100", "l1", "r1", "10.0.0.2", "swl"},
           {"leaf-spine --tors 2 --spines 1 --hosts-per-tor 1 --rate 100", "t1h1", "t2h1", "10.2.1.2", "s1"},
       }) {
    SCOPED_TRACE(c.args);
    std::string out = lab.tmpdir() + "/topo.out";
    std::string script = lab.tmpdir() + "/topo.sh";
    {
      std::ofstream f(script);
      f << "set -e\nP=$LAB_PREFIX\n"
        // TCP across the switches (no ping on these machines).
        << "ip netns exec ${P}" << c.recv << " python3 -c \"import socket,sys; s=socket.socket(); "
        << "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('', 5555)); s.listen(); "
        << "s.settimeout(10); c,_=s.accept(); n=0\nwhile True:\n  b=c.recv(65536)\n  if not b: break\n  n+=len(b)\n"
        << "open('" << out << ".got','w').write(str(n))\" &\n"
        << "sleep 0.5\n"
        << "ip netns exec ${P}" << c.from << " python3 -c \"import socket; s=socket.create_connection(('" << c.to
        << "', 5555), timeout=10); s.sendall(b'x' * 1000000); s.close()\"\n"
        << "wait\n"
        << "for d in $(ip -n ${P}" << c.sw << " -o link show | awk -F': ' '{print $2}' | cut -d@ -f1); do\n"
        << "  tc -n ${P}" << c.sw << " class show dev $d\n"
        << "done | grep -c 'class htb 52:1 ' > " << out << ".sw\n";
    }
    int st = std::system((std::string(SLUICE_SOURCE_DIR) + "/tc-scripts/lab/topo up " + c.args +
                          " --switch sluice --sluiced " + build_path("agent/sluiced") + " --run 'sh " + script +
                          "' > " + out + " 2>&1")
                             .c_str());
    std::ifstream lf(out);
    std::stringstream log;
    log << lf.rdbuf();
    EXPECT_EQ(st, 0) << log.str();
    EXPECT_NE(log.str().find("sluice"), std::string::npos) << log.str();
    std::ifstream sf(out + ".sw"), gf(out + ".got");
    int classes = 0;
    uint64_t got = 0;
    sf >> classes;
    gf >> got;
    EXPECT_GE(classes, 1) << "no sluice queue class on the switch; " << log.str();
    EXPECT_EQ(got, 1000000u) << "the transfer did not cross the sluice switches; " << log.str();
  }
}

}  // namespace
