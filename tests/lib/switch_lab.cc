#include "lib/switch_lab.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "switch/control.h"

namespace sluice::test {

int tcp_listen(const std::string& ns, const std::string& addr, uint16_t port) {
  InNetns in(ns);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, addr.c_str(), &a.sin_addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) || listen(fd, 1)) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

using namespace std::chrono_literals;
using nlohmann::json;

UdpSink::~UdpSink() {
  stop_ = true;
  if (t_.joinable()) t_.join();
  for (int fd : fds_) close(fd);
}

void UdpSink::start(const std::string& ns, const std::vector<uint16_t>& ports) {
  ASSERT_LE(ports.size(), kMax);
  {
    InNetns in(ns);
    for (uint16_t port : ports) {
      int fd = socket(AF_INET, SOCK_DGRAM, 0);
      ASSERT_GE(fd, 0) << strerror(errno);
      fds_.push_back(fd);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(port);
      ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << "port " << port << ": " << strerror(errno);
      // Room for a resumed queue's burst at the link rate while this thread
      // is not scheduled (tests count every datagram).
      int rcv = 8 << 20;
      setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof(rcv));
    }
  }
  n_ = fds_.size();
  t_ = std::thread([this] {
    char buf[2048];
    std::vector<pollfd> pf(n_);
    while (!stop_) {
      for (size_t i = 0; i < n_; ++i) pf[i] = {fds_[i], POLLIN, 0};
      poll(pf.data(), pf.size(), 20);
      for (size_t i = 0; i < n_; ++i)
        while (recv(fds_[i], buf, sizeof(buf), MSG_DONTWAIT) > 0) ++got_[i];
    }
  });
}

UdpSource::~UdpSource() {
  halt();
  for (int fd : fds_) close(fd);
}

void UdpSource::halt() {
  stop_ = true;
  if (t_.joinable()) t_.join();
}

void UdpSource::start(const std::string& ns, const std::vector<UdpFlow>& flows) {
  ASSERT_LE(flows.size(), kMax);
  flows_ = flows;
  {
    InNetns in(ns);
    for (const auto& f : flows) {
      int fd = socket(AF_INET, SOCK_DGRAM, 0);
      ASSERT_GE(fd, 0) << strerror(errno);
      fds_.push_back(fd);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      if (f.sport) {
        a.sin_port = htons(f.sport);
        ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0)
            << "port " << f.sport << ": " << strerror(errno);
      }
      a.sin_port = htons(f.dport);
      ASSERT_EQ(inet_pton(AF_INET, f.dst.c_str(), &a.sin_addr), 1) << f.dst;
      ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << strerror(errno);
    }
  }
  t_ = std::thread([this] {
    std::vector<char> buf(65536);
    auto next = std::chrono::steady_clock::now();
    while (!stop_) {
      for (size_t i = 0; i < flows_.size(); ++i)
        for (int k = 0; k < flows_[i].per_ms; ++k)
          if (send(fds_[i], buf.data(), size_t(flows_[i].bytes), MSG_DONTWAIT) > 0) ++sent_[i];
      // Paced on a 1 ms grid; after a stall (a loaded machine) start a new
      // grid instead of sending the missed milliseconds in one burst.
      next += 1ms;
      auto now = std::chrono::steady_clock::now();
      if (next < now - 10ms) next = now;
      std::this_thread::sleep_until(next);
    }
  });
}

uint16_t udp_queue(const std::string& src, const std::string& dst, uint16_t sport, uint16_t dport, int queues) {
  return uint16_t(sw::flow_hash(src, dst, sport, dport, IPPROTO_UDP) % uint32_t(queues));
}

SwitchAgent::SwitchAgent(Lab& lab, std::string ns, std::string tag)
    : lab_(lab), ns_(std::move(ns)), tag_(std::move(tag)) {
  sock_ = lab_.tmpdir() + "/" + tag_ + ".sock";
  cfg_ = lab_.tmpdir() + "/" + tag_ + ".toml";
}

void mtu_frames(Lab& lab, const std::string& ns, const std::vector<std::string>& ifs) {
  for (const auto& i : ifs) lab.nsh(ns, "ethtool -K " + lab.name(i) + " gro off gso off tso off >/dev/null 2>&1");
}

void SwitchAgent::configure(const std::string& switch_keys, const std::vector<SwitchPort>& ports,
                            const std::string& agent_extra) {
  std::ofstream f(cfg_);
  f << "[agent]\npin_root = \"" << lab_.bpffs() << "/sl" << tag_ << "\"\nstate_dir = \"" << lab_.tmpdir() << "/state"
    << tag_ << "\"\ncontrol_socket = \"" << sock_ << "\"\n"
    << agent_extra << "[metrics]\nenabled = false\n[switch]\n"
    << switch_keys;
  for (const auto& p : ports) {
    f << "[[switch.ports]]\nname = \"" << p.name << "\"\nrole = \"" << p.role << "\"\n";
    if (p.rate_mbit) f << "rate_mbit = " << p.rate_mbit << "\n";
  }
}

bool SwitchAgent::answers() {
  int st = -1;
  lab_.out(build_path("agent/sluicectl") + " -s " + sock_ + " switch --json >/dev/null 2>&1", &st);
  return st == 0;
}

bool SwitchAgent::start(std::chrono::milliseconds timeout) {
  proc_ = lab_.spawn(ns_, {build_path("agent/sluiced"), "-c", cfg_}, "sluiced-" + tag_);
  if (eventually([&] { return answers(); }, timeout)) return true;
  // Start-up time is not what these tests check: a sluiced that is still
  // running has not failed, it is slow (loading and verifying its objects
  // under software emulation in the VM suite, on a loaded host, took over
  // 15 s). Give it up to 6x the timeout more while it lives.
  if (eventually([&] { return !proc_.running() || answers(); }, 6 * timeout) && answers()) return true;
  ADD_FAILURE() << "sluiced " << tag_ << " did not come up; log:\n"
                << proc_.log()
                << "\nsluicectl: " << lab_.out(build_path("agent/sluicectl") + " -s " + sock_ + " switch --json 2>&1");
  return false;
}

json SwitchAgent::state(bool must) {
  int st = -1;
  // A held data path under software emulation on a loaded host can keep
  // the agent's loop busy for seconds: wait up to 30 s for its answer.
  std::string o = lab_.out(build_path("agent/sluicectl") + " -t 30000 -s " + sock_ + " switch --json 2>/dev/null", &st);
  if (st != 0) {
    if (must)
      ADD_FAILURE() << "sluicectl switch (" << tag_ << ") failed with exit status " << st
                    << " (2: sluiced unreachable or no answer within 30 s): " << o;
    return json::object();
  }
  try {
    return json::parse(o);
  } catch (const std::exception&) {
    if (must) ADD_FAILURE() << "sluicectl switch (" << tag_ << "): no JSON: " << o;
    return json::object();
  }
}

json SwitchAgent::port(const json& state, const std::string& name, bool must) {
  if (state.contains("ports"))
    for (const auto& p : state["ports"])
      if (p.value("name", "") == name) return p;
  if (must) ADD_FAILURE() << "no port " << name << " in " << state.dump();
  return json::object();
}

void send_pause_frame(const std::string& ns, const std::string& ifname, bool pause, uint16_t queue, uint32_t seq) {
  InNetns in(ns);
  int fd = socket(AF_PACKET, SOCK_RAW, 0);
  ASSERT_GE(fd, 0) << strerror(errno);
  sw::ControlFrame f;
  f.type = pause ? sw::CtrlType::kPause : sw::CtrlType::kResume;
  f.queues.push_back({queue, seq});
  auto eth = sw::ethernet_frame({0x02, 0, 0, 0, 0, 0x42}, sw::encode(f));
  sockaddr_ll to{};
  to.sll_family = AF_PACKET;
  to.sll_ifindex = int(if_nametoindex(ifname.c_str()));
  to.sll_halen = 6;
  std::copy(sw::kCtrlGroupMac.begin(), sw::kCtrlGroupMac.end(), to.sll_addr);
  EXPECT_NE(to.sll_ifindex, 0) << ifname;
  EXPECT_EQ(sendto(fd, eth.data(), eth.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)), ssize_t(eth.size()))
      << strerror(errno);
  close(fd);
}

RouterLab make_router_lab(Lab& lab, int net) {
  RouterLab r;
  const std::string p = "10." + std::to_string(net) + ".";
  r.h1 = lab.add_ns("h1");
  r.sw = lab.add_ns("sw");
  r.h2 = lab.add_ns("h2");
  r.swa = lab.name("swa");
  r.swb = lab.name("swb");
  r.h1if = lab.name("h1");
  r.h2if = lab.name("h2");
  r.h1_addr = p + "1.2";
  r.h2_addr = p + "2.2";
  lab.add_veth(r.h1, "h1", r.h1_addr + "/24", r.sw, "swa", p + "1.1/24");
  lab.add_veth(r.sw, "swb", p + "2.1/24", r.h2, "h2", r.h2_addr + "/24");
  EXPECT_EQ(lab.nsh(r.h1, "ip route add default via " + p + "1.1"), 0);
  EXPECT_EQ(lab.nsh(r.h2, "ip route add default via " + p + "2.1"), 0);
  EXPECT_EQ(lab.nsh(r.sw, "sysctl -qw net.ipv4.ip_forward=1"), 0);
  // Permanent neighbours on both links: the tests count every datagram,
  // and on a starved machine (the emulated guest) an ARP entry that fails
  // its probes drops what waits on it without a counter to show for it.
  // The switch under test is sluiced, not the neighbour table (a test of
  // ARP through a held port removes its entry: ArpLeavesThroughAPausedQueue).
  auto mac = [&](const std::string& ns, const std::string& dev) {
    std::string m = lab.out("ip -n " + ns + " -br link show dev " + dev + " | awk '{ print $3 }'");
    return m.substr(0, m.find('\n'));
  };
  auto pin = [&](const std::string& ns, const std::string& dev, const std::string& addr, const std::string& lladdr) {
    EXPECT_EQ(lab.nsh(ns, "ip neigh replace " + addr + " lladdr " + lladdr + " dev " + dev + " nud permanent"), 0)
        << ns << ": " << addr << " at " << lladdr;
  };
  pin(r.h1, r.h1if, p + "1.1", mac(r.sw, r.swa));
  pin(r.sw, r.swa, r.h1_addr, mac(r.h1, r.h1if));
  pin(r.sw, r.swb, r.h2_addr, mac(r.h2, r.h2if));
  pin(r.h2, r.h2if, p + "2.1", mac(r.sw, r.swb));
  return r;
}

}  // namespace sluice::test
