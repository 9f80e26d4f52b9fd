// Building blocks of the switch integration tests (switch mode, BFC and
// Floodgate chains): paced UDP flows and their receivers in lab namespaces,
// and sluiced in switch mode in one namespace, configured, started and read
// through sluicectl.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "lib/netns_fixture.h"

namespace sluice::test {

// Receives UDP datagrams on `ports` inside a namespace and counts them per
// port (index = position in `ports`).
class UdpSink {
 public:
  UdpSink() = default;
  UdpSink(const UdpSink&) = delete;
  UdpSink& operator=(const UdpSink&) = delete;
  ~UdpSink();
  // Fails the test (ADD_FAILURE) when a port cannot be bound.
  void start(const std::string& ns, const std::vector<uint16_t>& ports);
  uint64_t got(size_t i = 0) const { return i < n_ ? got_[i].load() : 0; }

 private:
  static constexpr size_t kMax = 8;
  std::atomic<uint64_t> got_[kMax]{};
  std::atomic<bool> stop_{false};
  std::vector<int> fds_;
  size_t n_ = 0;
  std::thread t_;
};

// One paced UDP flow: `per_ms` datagrams of `bytes` every millisecond to
// dst:dport, from sport (0: any port).
struct UdpFlow {
  std::string dst;
  uint16_t dport = 0;
  uint16_t sport = 0;
  int per_ms = 1;
  int bytes = 1000;
};

// Sends the flows from one thread inside a namespace until halt().
class UdpSource {
 public:
  UdpSource() = default;
  UdpSource(const UdpSource&) = delete;
  UdpSource& operator=(const UdpSource&) = delete;
  ~UdpSource();
  void start(const std::string& ns, const std::vector<UdpFlow>& flows);
  void halt();
  uint64_t sent(size_t i = 0) const { return i < flows_.size() ? sent_[i].load() : 0; }

 private:
  static constexpr size_t kMax = 8;
  std::atomic<uint64_t> sent_[kMax]{};
  std::atomic<bool> stop_{false};
  std::vector<UdpFlow> flows_;
  std::vector<int> fds_;
  std::thread t_;
};

// A TCP socket listening on addr:port inside namespace `ns` (backlog 1,
// SO_REUSEADDR), or -1 with errno set.
int tcp_listen(const std::string& ns, const std::string& addr, uint16_t port);

// Sends one PAUSE (pause = true) or RESUME control frame for `queue` out of
// `ifname` in namespace `ns`, as the neighbour on that link would.
void send_pause_frame(const std::string& ns, const std::string& ifname, bool pause, uint16_t queue, uint32_t seq);

// The queue the switch's flow hash picks for a UDP flow out of `queues`.
uint16_t udp_queue(const std::string& src, const std::string& dst, uint16_t sport, uint16_t dport, int queues);

// h1 -- sw -- h2 in `lab`: sw an IPv4 router between 10.<net>.1.0/24 (h1
// .2, sw's port swa .1) and 10.<net>.2.0/24 (sw's port swb .1, h2 .2), with
// default routes and forwarding on. Fails the test (ADD_FAILURE) on error.
struct RouterLab {
  std::string h1, sw, h2;  // namespaces
  std::string swa, swb;    // sw's ports toward h1 and h2
  std::string h1if, h2if;  // the hosts' interfaces
  std::string h1_addr, h2_addr;
};
RouterLab make_router_lab(Lab& lab, int net);

// MTU-sized frames through interfaces `ifs` (short names) of namespace
// `ns`: GRO, GSO and TSO off, so switch windows, credits and queue limits
// count wire frames (as the lab's 100m-mtu profile).
void mtu_frames(Lab& lab, const std::string& ns, const std::vector<std::string>& ifs);

struct SwitchPort {
  std::string name;   // full interface name
  std::string role;   // "host-facing" | "switch-facing"
  int rate_mbit = 0;  // 0: the [switch] default
};

// sluiced in switch mode in namespace `ns` of a Lab; files under the lab's
// temp dir named after `tag`.
class SwitchAgent {
 public:
  SwitchAgent(Lab& lab, std::string ns, std::string tag);
  // Writes the config: [agent] (pins, state, socket, then `agent_extra`
  // lines), [metrics] off, [switch] with `switch_keys` (TOML lines), ports.
  void configure(const std::string& switch_keys, const std::vector<SwitchPort>& ports,
                 const std::string& agent_extra = "");
  // Starts sluiced and waits until sluicectl switch answers; fails the test
  // (ADD_FAILURE, with the log) and returns false when it does not.
  bool start(std::chrono::milliseconds timeout = std::chrono::seconds(15));
  int stop() { return proc_.stop(); }
  Process& proc() { return proc_; }
  const std::string& sock() const { return sock_; }
  const std::string& cfg() const { return cfg_; }
  bool answers();
  // sluicectl switch --json; with `must`, a failure to answer or parse fails
  // the test; an empty object either way.
  nlohmann::json state(bool must = true);
  // The port named `name` in a state; an empty object (and, with `must`, a
  // test failure) when missing.
  static nlohmann::json port(const nlohmann::json& state, const std::string& name, bool must = true);

 private:
  Lab& lab_;
  std::string ns_, tag_, sock_, cfg_;
  Process proc_;
};

}  // namespace sluice::test
