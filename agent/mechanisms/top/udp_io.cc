#include "mechanisms/top/udp_io.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/ip.h>
#include <poll.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>

#include <stdexcept>

namespace sluice::top {

uint64_t tai_now_ns(int64_t offset_ns) {
  timespec ts;
  clock_gettime(CLOCK_TAI, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec) +
         static_cast<uint64_t>(offset_ns);
}

uint8_t dscp_of(const Packet& p) {
  switch (p.type) {
    case Type::kToken: return static_cast<uint8_t>(SLUICE_TOP_DSCP_TOKEN0 + std::min<int>(p.priority, kPriorities - 1));
    case Type::kData: return SLUICE_TOP_DSCP_DATA;
    default: return SLUICE_TOP_DSCP_SIGNAL;
  }
}

Addr parse_addr(const std::string& s, uint16_t default_port) {
  Addr a;
  std::string host = s;
  uint16_t port = default_port;
  auto parse_port = [&](const std::string& p) {
    char* end = nullptr;
    unsigned long v = std::strtoul(p.c_str(), &end, 10);
    if (p.empty() || *end || v == 0 || v > 65535) throw std::runtime_error("bad port in address '" + s + "'");
    port = static_cast<uint16_t>(v);
  };
  if (!s.empty() && s[0] == '[') {
    auto close = s.find(']');
    if (close == std::string::npos) throw std::runtime_error("bad address '" + s + "'");
    host = s.substr(1, close - 1);
    if (close + 1 < s.size()) {
      if (s[close + 1] != ':') throw std::runtime_error("bad address '" + s + "'");
      parse_port(s.substr(close + 2));
    }
  } else if (std::count(s.begin(), s.end(), ':') == 1) {
    host = s.substr(0, s.find(':'));
    parse_port(s.substr(s.find(':') + 1));
  }
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a.ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.ss);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    a.len = sizeof(*v4);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    a.len = sizeof(*v6);
  } else {
    throw std::runtime_error("bad address '" + s + "' (want IPv4 or [IPv6], optional :port)");
  }
  return a;
}

std::string format_addr(const Addr& a) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (a.ss.ss_family == AF_INET) {
    auto* v4 = reinterpret_cast<const sockaddr_in*>(&a.ss);
    inet_ntop(AF_INET, &v4->sin_addr, buf, sizeof(buf));
    return std::string(buf) + ":" + std::to_string(ntohs(v4->sin_port));
  }
  auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a.ss);
  inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof(buf));
  return "[" + std::string(buf) + "]:" + std::to_string(ntohs(v6->sin6_port));
}

UdpEndpoint::UdpEndpoint(const Addr& bind) : family_(bind.ss.ss_family), buf_(65536) {
  fd_ = socket(family_, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw std::runtime_error(std::string("TOP socket: ") + std::strerror(errno));
  int one = 1;
  setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int buf = 4 << 20;
  setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
  setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  if (::bind(fd_, reinterpret_cast<const sockaddr*>(&bind.ss), bind.len) < 0) {
    int e = errno;
    close(fd_);
    throw std::runtime_error("bind TOP socket to " + format_addr(bind) + ": " + std::strerror(e));
  }
}

UdpEndpoint::~UdpEndpoint() {
  if (fd_ >= 0) close(fd_);
}

bool UdpEndpoint::send(const Packet& p, const Addr& to) {
  size_t n = encode(p, buf_.data(), buf_.size());
  if (!n) return false;
  size_t total = n;
  if (p.type == Type::kData) {
    std::memset(buf_.data() + n, 0, p.len);
    total += p.len;
  }
  iovec iov{buf_.data(), total};
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  m.msg_name = const_cast<sockaddr_storage*>(&to.ss);
  m.msg_namelen = to.len;
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctrl;
  m.msg_controllen = sizeof(ctrl);
  cmsghdr* c = CMSG_FIRSTHDR(&m);
  int tos = dscp_of(p) << 2;
  if (family_ == AF_INET) {
    c->cmsg_level = IPPROTO_IP;
    c->cmsg_type = IP_TOS;
  } else {
    c->cmsg_level = IPPROTO_IPV6;
    c->cmsg_type = IPV6_TCLASS;
  }
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &tos, sizeof(tos));
  if (sendmsg(fd_, &m, 0) < 0) {
    send_err_++;
    return false;
  }
  return true;
}

std::optional<std::pair<Packet, Addr>> UdpEndpoint::recv() {
  for (;;) {
    Addr from;
    from.len = sizeof(from.ss);
    ssize_t n = recvfrom(fd_, buf_.data(), buf_.size(), 0, reinterpret_cast<sockaddr*>(&from.ss), &from.len);
    if (n < 0) return std::nullopt;
    auto p = decode(buf_.data(), static_cast<size_t>(n));
    if (!p) {
      bad_++;
      continue;
    }
    return std::make_pair(*p, from);
  }
}

Node::Node(UdpEndpoint& ep, Receiver* r, Sender* s, int64_t clock_offset_ns)
    : ep_(ep),
      r_(r),
      s_(s),
      offset_(clock_offset_ns),
      pacer_(r ? r->config().slot_ns : 1, kCatchUpSlots, r ? r->config().jitter : 0,
             r && r->config().jitter_seed ? r->config().jitter_seed : std::random_device{}()) {
  // Slots of tens of microseconds: ask the kernel not to stretch our sleeps.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
}

uint64_t Node::open(const FlowSpec& f, const Addr& to) {
  std::vector<Packet> out;
  uint64_t id = s_->open_flow(f, now(), out);
  peer_[id] = to;
  emit_from_sender(out);
  return id;
}

void Node::emit_from_receiver(std::vector<Packet>& out) {
  for (const Packet& p : out) {
    auto it = peer_.find(p.flow);
    if (it != peer_.end()) ep_.send(p, it->second);
    if (p.type == Type::kDone) peer_.erase(p.flow);
  }
  out.clear();
}

void Node::emit_from_sender(std::vector<Packet>& out) {
  for (const Packet& p : out) {
    auto it = peer_.find(p.flow);
    if (it != peer_.end()) ep_.send(p, it->second);
  }
  out.clear();
}

void Node::run(const std::function<bool()>& stop, uint64_t until, const std::function<void()>& tick) {
  std::vector<Packet> out;
  uint64_t period = s_ ? std::max<uint64_t>(s_->config().rtt_ns, 100'000) : 0;
  while (!stop()) {
    uint64_t t = now();
    if (t >= until) return;
    // Wake for the next slot while the receiver has flows, else for packets.
    uint64_t wake = until;
    if (r_ && !r_->idle()) wake = std::min(wake, pacer_.next());
    if (s_ && s_->open_flows()) wake = std::min(wake, next_timer_);
    wake = std::min({wake, t + 10'000'000, extra_wake_});
    extra_wake_ = UINT64_MAX;
    timespec ts{};
    if (wake > t) {
      ts.tv_sec = static_cast<time_t>((wake - t) / 1'000'000'000ull);
      ts.tv_nsec = static_cast<long>((wake - t) % 1'000'000'000ull);
    }
    pollfd pfd{ep_.fd(), POLLIN, 0};
    ppoll(&pfd, 1, &ts, nullptr);
    while (auto got = ep_.recv()) {
      auto& [p, from] = *got;
      uint64_t n = now();
      switch (p.type) {
        case Type::kToken:
        case Type::kNack:
        case Type::kDone:
          if (!s_) break;
          s_->on_packet(p, n, out);
          emit_from_sender(out);
          if (p.type == Type::kDone) peer_.erase(p.flow);
          break;
        default:
          if (!r_) break;
          if (p.type == Type::kSync) peer_.emplace(p.flow, from);
          bool was_idle = r_->idle();
          r_->on_packet(p, n, out);
          emit_from_receiver(out);
          if (was_idle && !r_->idle()) pacer_.start(n);
      }
    }
    t = now();
    if (r_ && !r_->idle() && pacer_.due(t)) {
      r_->on_slot(t, out);
      emit_from_receiver(out);
      pacer_.fired(t);
    }
    if (s_ && s_->open_flows() && t >= next_timer_) {
      s_->on_timer(t, out);
      emit_from_sender(out);
      next_timer_ = t + period;
    }
    if (tick) tick();
  }
}

}  // namespace sluice::top
