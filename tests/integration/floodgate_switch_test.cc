// Floodgate on two sluice switches in a chain (docs/floodgate.md "In
// sluiced"): h1 -- sa -- sb -- {h3, h4}. sa and sb are routers running
// sluiced in switch mode with [switch] logic = "floodgate"; sa's port toward
// sb and sb's port toward sa are switch-facing (sa keeps windows toward sb,
// sb returns credits), sb's ports toward the hosts run at 10 Mbit/s (the
// last hop, the bottleneck). h1 sends UDP at ~40 Mbit/s to h3 (the incast
// destination D) and a light flow to h4 (E).
//  - credits flow: sb sends credit frames, sa receives them (sluicectl
//    switch, logic_state);
//  - sa's VOQ for D engages once the window runs out and holds the excess,
//    while the queue at sb's last hop stays within about one window;
//  - E gets what it is sent (not blocked behind D), and D keeps receiving at
//    the bottleneck rate (no deadlock);
//  - once h1 stops, sa's VOQ drains through credits to nothing.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "lib/netns_fixture.h"

using namespace sluice;
using namespace sluice::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

constexpr uint16_t kPort = 7100;

struct Sink {
  std::atomic<uint64_t> got{0};
  std::atomic<bool> stop{false};
  std::thread t;
  int fd = -1;
  void start(const std::string& ns) {
    InNetns in(ns);
    fd = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(kPort);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << strerror(errno);
    t = std::thread([this] {
      char buf[2048];
      while (!stop) {
        pollfd pf{fd, POLLIN, 0};
        poll(&pf, 1, 20);
        while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) ++got;
      }
    });
  }
  ~Sink() {
    stop = true;
    if (t.joinable()) t.join();
    if (fd >= 0) close(fd);
  }
};

// Sends `per_ms` datagrams of 1000 B every millisecond to dst:kPort.
struct Source {
  std::atomic<uint64_t> sent{0};
  std::atomic<bool> stop{false};
  std::thread t;
  int fd = -1;
  void start(const std::string& ns, const std::string& dst, int per_ms) {
    InNetns in(ns);
    fd = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(kPort);
    inet_pton(AF_INET, dst.c_str(), &a.sin_addr);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    t = std::thread([this, per_ms] {
      char buf[1000] = {};
      while (!stop) {
        for (int i = 0; i < per_ms; ++i)
          if (send(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) ++sent;
        std::this_thread::sleep_for(1ms);
      }
    });
  }
  void halt() {
    stop = true;
    if (t.joinable()) t.join();
  }
  ~Source() {
    halt();
    if (fd >= 0) close(fd);
  }
};

class FloodgateSwitch : public ::testing::Test {
 protected:
  void SetUp() override {
    lab_ = std::make_unique<Lab>("fs");
    h1_ = lab_->add_ns("h1");
    sa_ = lab_->add_ns("sa");
    sb_ = lab_->add_ns("sb");
    h3_ = lab_->add_ns("h3");
    h4_ = lab_->add_ns("h4");
    lab_->add_veth(h1_, "h1", "10.72.1.2/24", sa_, "sah", "10.72.1.1/24");
    lab_->add_veth(sa_, "sab", "10.72.2.1/24", sb_, "sba", "10.72.2.2/24");
    lab_->add_veth(sb_, "sb3", "10.72.3.1/24", h3_, "h3", "10.72.3.2/24");
    lab_->add_veth(sb_, "sb4", "10.72.4.1/24", h4_, "h4", "10.72.4.2/24");
    ASSERT_EQ(lab_->nsh(h1_, "ip route add default via 10.72.1.1"), 0);
    ASSERT_EQ(lab_->nsh(h3_, "ip route add default via 10.72.3.1"), 0);
    ASSERT_EQ(lab_->nsh(h4_, "ip route add default via 10.72.4.1"), 0);
    ASSERT_EQ(lab_->nsh(sa_, "ip route add 10.72.3.0/24 via 10.72.2.2 && ip route add 10.72.4.0/24 via 10.72.2.2"), 0);
    ASSERT_EQ(lab_->nsh(sb_, "ip route add 10.72.1.0/24 via 10.72.2.1"), 0);
    for (const auto& ns : {sa_, sb_}) {
      ASSERT_EQ(lab_->nsh(ns, "sysctl -qw net.ipv4.ip_forward=1"), 0);
    }
    // MTU-sized frames on the switch ports (windows and credits in bytes
    // of wire frames, as the lab's 100m-mtu profile).
    for (const auto& [ns, ifs] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {sa_, {"sah", "sab"}}, {sb_, {"sba", "sb3", "sb4"}}})
      for (const auto& i : ifs) lab_->nsh(ns, "ethtool -K " + lab_->name(i) + " gro off gso off tso off >/dev/null 2>&1");
    write_cfg("a", {{"sah", "host-facing", 100}, {"sab", "switch-facing", 100}});
    write_cfg("b", {{"sba", "switch-facing", 100}, {"sb3", "host-facing", 10}, {"sb4", "host-facing", 10}});
  }
  void TearDown() override {
    agent_a_.stop();
    agent_b_.stop();
    lab_.reset();
  }
  struct P {
    std::string name, role;
    int mbit;
  };
  void write_cfg(const std::string& s, const std::vector<P>& ports) {
    std::ofstream f(lab_->tmpdir() + "/" + s + ".toml");
    f << "[agent]\npin_root = \"" << lab_->bpffs() << "/sl" << s << "\"\nstate_dir = \"" << lab_->tmpdir()
      << "/state" << s << "\"\ncontrol_socket = \"" << sock(s) << "\"\n[metrics]\nenabled = false\n"
      << "[switch]\nlogic = \"floodgate\"\nqueues = 4\nrate_mbit = 100\nfail_open_ms = 500\n";
    for (const auto& p : ports)
      f << "[[switch.ports]]\nname = \"" << lab_->name(p.name) << "\"\nrole = \"" << p.role << "\"\nrate_mbit = " << p.mbit
        << "\n";
  }
  std::string sock(const std::string& s) { return lab_->tmpdir() + "/" + s + ".sock"; }
  Process start(const std::string& ns, const std::string& s) {
    Process p = lab_->spawn(ns, {build_path("agent/sluiced"), "-c", lab_->tmpdir() + "/" + s + ".toml"}, "sluiced-" + s);
    bool up = eventually([&] { return !state(s, false).empty(); }, 15s);
    EXPECT_TRUE(up) << "sluiced " << s << " did not come up; log:\n" << p.log();
    return p;
  }
  json state(const std::string& s, bool must = true) {
    int st = -1;
    std::string o = lab_->out(build_path("agent/sluicectl") + " -s " + sock(s) + " switch --json 2>/dev/null", &st);
    if (st != 0) {
      if (must) ADD_FAILURE() << "sluicectl switch failed: " << o;
      return json::object();
    }
    try {
      return json::parse(o);
    } catch (...) {
      if (must) ADD_FAILURE() << "no JSON: " << o;
      return json::object();
    }
  }
  static json port_of(const json& s, const std::string& name) {
    for (const auto& p : s.value("ports", json::array()))
      if (p["name"] == name) return p;
    return json::object();
  }
  static json window_of(const json& s, const std::string& dst) {
    for (const auto& w : s["logic_state"].value("windows", json::array()))
      if (w["dst"] == dst) return w;
    return json::object();
  }

  std::unique_ptr<Lab> lab_;
  std::string h1_, sa_, sb_, h3_, h4_;
  Process agent_a_, agent_b_;
};

TEST_F(FloodgateSwitch, CreditsFlowVoqHoldsTheIncastOtherDestinationPasses) {
  agent_b_ = start(sb_, "b");
  agent_a_ = start(sa_, "a");
  if (HasFailure()) return;
  Sink d, e;
  d.start(h3_);
  e.start(h4_);
  Source to_d, to_e;
  to_d.start(h1_, "10.72.3.2", 5);  // ~40 Mbit/s into a 10 Mbit/s last hop
  to_e.start(h1_, "10.72.4.2", 1);  // ~8 Mbit/s, below its 10 Mbit/s port
  ASSERT_TRUE(eventually([&] { return d.got > 100 && e.got > 100; }, 10s))
      << "traffic does not cross the switches: " << d.got << " / " << e.got << "\n"
      << agent_a_.log() << agent_b_.log();

  // Sample both switches for 3 s.
  uint64_t sb3_max = 0, voq_held_max = 0;
  uint64_t d0 = d.got, e0 = e.got, es0 = to_e.sent;
  auto t0 = std::chrono::steady_clock::now();
  json sa, sb;
  while (std::chrono::steady_clock::now() - t0 < 3s) {
    sb = state("b");
    sa = state("a");
    sb3_max = std::max<uint64_t>(sb3_max, port_of(sb, lab_->name("sb3"))["queues"][0].value("depth_bytes", 0));
    voq_held_max = std::max<uint64_t>(voq_held_max, window_of(sa, "10.72.3.2").value("voq_held_bytes", 0));
    std::this_thread::sleep_for(50ms);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uint64_t d_rate = uint64_t((d.got - d0) / secs), e_got = e.got - e0, e_sent = to_e.sent - es0;
  const json& lb = sb["logic_state"];
  const json& la = sa["logic_state"];
  json wd = window_of(sa, "10.72.3.2");
  uint64_t init = wd.value("init_window_bytes", 0);
  RecordProperty("sb3_queue_max_bytes", std::to_string(sb3_max));
  RecordProperty("sa_voq_held_max_bytes", std::to_string(voq_held_max));
  std::cout << "floodgate chain: sb last-hop queue max " << sb3_max << " B, sa VOQ held max " << voq_held_max
            << " B, init window " << init << " B, D " << d_rate << " pkt/s, E " << e_got << "/" << e_sent << "\n"
            << "sa: " << la.dump() << "\nsb: " << lb.dump() << "\n";

  // Credits flow from sb to sa.
  EXPECT_GT(lb["credits_sent"]["frames"].get<uint64_t>(), 100u) << lb.dump(2);
  EXPECT_GT(la["credits_received"]["frames"].get<uint64_t>(), 100u) << la.dump(2);
  EXPECT_GT(la["credits_received"]["bytes"].get<uint64_t>(), 1'000'000u);
  // sa's VOQ for D engaged and held the incast's excess; sa released it by credits.
  EXPECT_GE(la["voq"]["engaged"].get<uint64_t>(), 1u);
  EXPECT_GT(voq_held_max, 2 * init) << "the upstream VOQ never held the incast";
  EXPECT_GT(la["voq"]["releases"].get<uint64_t>(), 10u);
  // The last hop's queue stays near one window (a FIFO port would fill its
  // 128 KB buffer at 4x overload).
  ASSERT_GT(init, 0u);
  EXPECT_LE(sb3_max, 3 * init) << "last-hop queue not bounded by the upstream window";
  // D keeps flowing at the bottleneck (10 Mbit/s = ~1200 datagrams/s): no deadlock.
  EXPECT_GT(d_rate, 600u);
  // E is not held behind D.
  EXPECT_GE(e_got * 10, e_sent * 9) << "E got " << e_got << " of " << e_sent;

  // Stopped: the VOQ drains through credits.
  to_d.halt();
  to_e.halt();
  EXPECT_TRUE(eventually([&] { return state("a")["logic_state"].value("voqs_in_use", 1) == 0; }, 10s))
      << state("a")["logic_state"].dump(2);
  json s = state("a");
  EXPECT_EQ(window_of(s, "10.72.3.2").value("voq_held_bytes", 1), 0) << s.dump(2);
  EXPECT_EQ(agent_a_.stop(), 0) << agent_a_.log();
  EXPECT_EQ(agent_b_.stop(), 0) << agent_b_.log();
}

}  // namespace
