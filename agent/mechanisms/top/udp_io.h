// TOP over UDP on the normal stack: one socket per host on the TOP port,
// the synced clock (CLOCK_TAI, which the XDP expiry program also reads, plus
// an injected lab offset), and a single-threaded loop that paces the
// receiver's slots and runs the sender's timers. The protocol decisions stay
// in Receiver/Sender; this file only moves bytes and keeps time.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "mechanisms/top/receiver.h"
#include "mechanisms/top/sender.h"
#include "mechanisms/top/wire.h"

namespace sluice::top {

// CLOCK_TAI in ns plus `offset_ns` (the lab's injected skew).
uint64_t tai_now_ns(int64_t offset_ns = 0);

// DSCP a switch classifies on (include/sluice/top.h).
uint8_t dscp_of(const Packet& p);

struct Addr {
  sockaddr_storage ss{};
  socklen_t len = 0;
};
// "10.0.0.2", "10.0.0.2:7217", "[fd00::2]:7217". Throws std::runtime_error.
Addr parse_addr(const std::string& s, uint16_t default_port);
std::string format_addr(const Addr& a);

class UdpEndpoint {
 public:
  explicit UdpEndpoint(const Addr& bind);
  ~UdpEndpoint();
  UdpEndpoint(const UdpEndpoint&) = delete;
  UdpEndpoint& operator=(const UdpEndpoint&) = delete;

  int fd() const { return fd_; }
  // Sends the packet (a DATA payload is zero-filled) with its DSCP.
  bool send(const Packet& p, const Addr& to);
  // One datagram if there is one; malformed ones are counted and skipped.
  std::optional<std::pair<Packet, Addr>> recv();
  uint64_t bad_packets() const { return bad_; }
  uint64_t send_errors() const { return send_err_; }

 private:
  int fd_ = -1;
  int family_ = AF_INET;
  uint64_t bad_ = 0, send_err_ = 0;
  std::vector<uint8_t> buf_;
};

// One host: optional receiver and sender sharing the endpoint. Peers are
// learned per flow (the receiver answers where a SYNC came from).
class Node {
 public:
  Node(UdpEndpoint& ep, Receiver* r, Sender* s, int64_t clock_offset_ns);

  uint64_t now() const { return tai_now_ns(offset_); }
  // Opens a flow to `to` now.
  uint64_t open(const FlowSpec& f, const Addr& to);
  // Wake no later than t (the caller's own schedule) on the next run pass.
  void wake_at(uint64_t t) { extra_wake_ = std::min(extra_wake_, t); }
  // Runs until stop() returns true or `until` (clock of this node) passes.
  // `tick` runs after every wake-up (schedules, stats).
  void run(const std::function<bool()>& stop, uint64_t until, const std::function<void()>& tick = nullptr);
  // Receiver slots given up after a wake-up later than the catch-up allows.
  uint64_t slots_missed() const { return pacer_.missed(); }
  // Slots a late wake-up may still use back to back.
  static constexpr uint32_t kCatchUpSlots = 4;

 private:
  void emit_from_receiver(std::vector<Packet>& out);
  void emit_from_sender(std::vector<Packet>& out);

  UdpEndpoint& ep_;
  Receiver* r_;
  Sender* s_;
  int64_t offset_;
  std::unordered_map<uint64_t, Addr> peer_;  // flow -> far end
  SlotPacer pacer_;
  uint64_t next_timer_ = 0;
  uint64_t extra_wake_ = UINT64_MAX;
};

}  // namespace sluice::top
