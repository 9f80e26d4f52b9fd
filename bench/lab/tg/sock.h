// Socket helpers shared by the sluice-tg client and server.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::tg {

struct Endpoint {
  std::string host;
  uint16_t port = 0;
  sockaddr_storage addr{};
  socklen_t len = 0;
  std::string str() const { return host + ":" + std::to_string(port); }
};

// "10.0.0.2:5001", "[fd00::2]:5001" or "10.0.0.2" (default port). Throws
// sluice::Error naming the bad text.
Endpoint parse_endpoint(const std::string& text, uint16_t default_port);
// Comma-separated list of endpoints.
std::vector<Endpoint> parse_endpoints(const std::string& text, uint16_t default_port);

// Sets TCP_CONGESTION (empty name: leave the namespace default). Throws with
// the list of available algorithms when the kernel refuses.
void set_congestion(int fd, const std::string& cc);
std::string get_congestion(int fd);
void set_nodelay(int fd);
void set_nonblocking(int fd, bool on);

// Blocking connect with TCP_NODELAY and the congestion control set before
// the SYN (so an ECN-needing algorithm negotiates ECN). Returns the fd.
// A client socket's options before connect: TCP_CONGESTION (empty = the
// namespace's), TCP_NODELAY, and with window_clamp > 0 TCP_WINDOW_CLAMP (the
// most this socket advertises, so the most its peer has in flight: a
// per-flow sending window).
void prepare_client(int fd, const std::string& cc, uint32_t window_clamp);
int connect_tcp(const Endpoint& ep, const std::string& cc, uint32_t window_clamp = 0);

// What the sender's TCP reports about one socket (TCP_INFO). total_rto is
// only reported by Linux 6.7+; has_total_rto says whether it was.
struct TcpCounters {
  uint32_t total_retrans = 0;
  uint64_t bytes_retrans = 0;
  uint32_t total_rto = 0;
  bool has_total_rto = false;
  uint32_t unacked = 0;
  uint32_t snd_cwnd = 0;
  uint32_t rtt_us = 0;
  uint32_t min_rtt_us = 0;
  uint8_t ca_state = 0;
};
TcpCounters tcp_counters(int fd);

// Bytes in the send queue not yet acknowledged by the peer (SIOCOUTQ).
int unacked_bytes(int fd);

// Monotonic clock in ns (CLOCK_MONOTONIC).
uint64_t now_ns();

// Reads/writes exactly n bytes on a blocking socket; false on EOF/error.
bool read_full(int fd, void* buf, size_t n);
bool write_full(int fd, const void* buf, size_t n);

}  // namespace sluice::tg
