#include "sock.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netdb.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace sluice::tg {

Endpoint parse_endpoint(const std::string& text, uint16_t default_port) {
  Endpoint ep;
  std::string host = text, port;
  if (!text.empty() && text[0] == '[') {
    auto close = text.find(']');
    if (close == std::string::npos) throw Error("bad endpoint '" + text + "': missing ']'");
    host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') throw Error("bad endpoint '" + text + "'");
      port = text.substr(close + 2);
    }
  } else if (auto c = text.rfind(':'); c != std::string::npos && text.find(':') == c) {
    host = text.substr(0, c);
    port = text.substr(c + 1);
  }
  ep.host = host;
  ep.port = default_port;
  if (!port.empty()) {
    char* end = nullptr;
    long p = std::strtol(port.c_str(), &end, 10);
    if (*end || p <= 0 || p > 65535) throw Error("bad port in endpoint '" + text + "'");
    ep.port = static_cast<uint16_t>(p);
  }
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ep.addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ep.addr);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(ep.port);
    ep.len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(ep.port);
    ep.len = sizeof(sockaddr_in6);
  } else {
    throw Error("bad endpoint '" + text + "': '" + host + "' is not an IPv4/IPv6 address");
  }
  return ep;
}

std::vector<Endpoint> parse_endpoints(const std::string& text, uint16_t default_port) {
  std::vector<Endpoint> out;
  size_t start = 0;
  while (start <= text.size()) {
    auto comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(parse_endpoint(item, default_port));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (out.empty()) throw Error("no endpoint given");
  return out;
}

void set_congestion(int fd, const std::string& cc) {
  if (cc.empty()) return;
  if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc.data(), cc.size()) != 0) {
    int e = errno;
    std::string avail;
    std::ifstream f("/proc/sys/net/ipv4/tcp_available_congestion_control");
    std::getline(f, avail);
    throw SysError("set TCP_CONGESTION '" + cc + "' (available here: " + avail + ")", e);
  }
}

std::string get_congestion(int fd) {
  char buf[32] = {};
  socklen_t len = sizeof(buf);
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, buf, &len) != 0) return "";
  return std::string(buf, strnlen(buf, sizeof(buf)));
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void set_nonblocking(int fd, bool on) {
  int fl = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
}

void prepare_client(int fd, const std::string& cc, uint32_t window_clamp) {
  set_congestion(fd, cc);
  set_nodelay(fd);
  if (!window_clamp) return;
  // SO_RCVBUF first: it stops receive-buffer autotuning, which would raise
  // the clamp again with the buffer (the kernel doubles the value, so the
  // buffer itself never caps the window below the clamp).
  int v = int(window_clamp);
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v)) != 0)
    throw SysError("set SO_RCVBUF " + std::to_string(window_clamp), errno);
  if (setsockopt(fd, IPPROTO_TCP, TCP_WINDOW_CLAMP, &v, sizeof(v)) != 0)
    throw SysError("set TCP_WINDOW_CLAMP " + std::to_string(window_clamp), errno);
}

int connect_tcp(const Endpoint& ep, const std::string& cc, uint32_t window_clamp) {
  int fd = socket(ep.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw SysError("socket", errno);
  try {
    prepare_client(fd, cc, window_clamp);
    if (connect(fd, reinterpret_cast<const sockaddr*>(&ep.addr), ep.len) != 0)
      throw SysError("connect to " + ep.str(), errno);
  } catch (...) {
    close(fd);
    throw;
  }
  return fd;
}

TcpCounters tcp_counters(int fd) {
  // Read into a buffer larger than this build's struct tcp_info: kernels
  // newer than the headers append fields, and optlen says how many we got.
  // Offsets of the 6.7+ fields follow tcpi_snd_wnd: tcpi_rcv_wnd (u32),
  // tcpi_rehash (u32), tcpi_total_rto (u16).
  alignas(8) uint8_t buf[512] = {};
  socklen_t len = sizeof(buf);
  TcpCounters c;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, buf, &len) != 0) return c;
  tcp_info ti{};
  std::memcpy(&ti, buf, std::min<size_t>(len, sizeof(ti)));
  c.total_retrans = ti.tcpi_total_retrans;
  c.bytes_retrans = ti.tcpi_bytes_retrans;
  c.unacked = ti.tcpi_unacked;
  c.snd_cwnd = ti.tcpi_snd_cwnd;
  c.rtt_us = ti.tcpi_rtt;
  c.min_rtt_us = ti.tcpi_min_rtt;
  c.ca_state = ti.tcpi_ca_state;
  const size_t rto_off = offsetof(tcp_info, tcpi_snd_wnd) + 4 + 4 + 4;
  if (len >= rto_off + 2) {
    uint16_t v;
    std::memcpy(&v, buf + rto_off, 2);
    c.total_rto = v;
    c.has_total_rto = true;
  }
  return c;
}

int unacked_bytes(int fd) {
  int v = 0;
  if (ioctl(fd, SIOCOUTQ, &v) != 0) return -1;
  return v;
}

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

bool read_full(int fd, void* buf, size_t n) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

bool write_full(int fd, const void* buf, size_t n) {
  auto* p = static_cast<const uint8_t*>(buf);
  while (n) {
    ssize_t r = ::send(fd, p, n, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

}  // namespace sluice::tg
