#include "server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "core/error.h"
#include "proto.h"
#include "sock.h"

namespace sluice::tg {

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

// Payload source: zeros, large enough that one send() call can fill a socket
// buffer.
const std::vector<uint8_t>& payload() {
  static const std::vector<uint8_t> buf(1 << 20, 0);
  return buf;
}

bool send_bytes(int fd, uint64_t n) {
  const auto& p = payload();
  while (n) {
    size_t chunk = n < p.size() ? size_t(n) : p.size();
    ssize_t r = ::send(fd, p.data(), chunk, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    n -= uint64_t(r);
  }
  return true;
}

// Waits until the peer has acknowledged every byte we sent. Polls SIOCOUTQ
// with a growing sleep: the common case (no loss) is over within an RTT or
// two; a retransmission timeout can take hundreds of ms.
bool wait_all_acked(int fd) {
  int sleep_us = 20;
  for (;;) {
    int q = unacked_bytes(fd);
    if (q < 0) return false;
    if (q == 0) return true;
    // A reset peer or error: stop waiting.
    pollfd p{fd, POLLRDHUP, 0};
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLHUP | POLLRDHUP))) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    if (sleep_us < 2000) sleep_us *= 2;
  }
}

void serve_conn(int fd, std::string cc, bool verbose) {
  try {
    set_congestion(fd, cc);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice-tg server: %s\n", e.what());
    close(fd);
    return;
  }
  set_nodelay(fd);
  uint8_t rb[kRequestSize];
  for (;;) {
    if (!read_full(fd, rb, sizeof(rb))) break;
    Request req;
    if (!decode(rb, &req)) {
      std::fprintf(stderr, "sluice-tg server: bad request magic, closing connection\n");
      break;
    }
    if (req.type == uint32_t(ReqType::Stream)) {
      // Until the client closes (send fails).
      while (send_bytes(fd, payload().size())) {
      }
      break;
    }
    if (req.type != uint32_t(ReqType::Data)) {
      std::fprintf(stderr, "sluice-tg server: unknown request type %u, closing connection\n", req.type);
      break;
    }
    uint64_t t0 = now_ns();
    TcpCounters before = tcp_counters(fd);
    if (!send_bytes(fd, req.bytes)) break;
    if (!wait_all_acked(fd)) break;
    TcpCounters after = tcp_counters(fd);
    Trailer t;
    t.id = req.id;
    t.retrans_segs = after.total_retrans - before.total_retrans;
    t.bytes_retrans = after.bytes_retrans - before.bytes_retrans;
    t.rto = after.has_total_rto ? uint32_t(uint16_t(after.total_rto - before.total_rto)) : kUnknown;
    t.send_us = (now_ns() - t0) / 1000;
    uint8_t tb[kTrailerSize];
    encode(t, tb);
    if (!write_full(fd, tb, sizeof(tb))) break;
    if (verbose)
      std::fprintf(stderr, "request %llu: %llu bytes, %u retrans, rto %d, %llu us\n", (unsigned long long)req.id,
                   (unsigned long long)req.bytes, t.retrans_segs, t.rto == kUnknown ? -1 : int(t.rto),
                   (unsigned long long)t.send_us);
  }
  close(fd);
}

}  // namespace

int run_server(const ServerOptions& o) {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Endpoint ep = parse_endpoint(o.bind.find(':') != std::string::npos ? "[" + o.bind + "]" : o.bind, o.port);
  int ls = socket(ep.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (ls < 0) throw SysError("socket", errno);
  int one = 1, zero = 0;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (ep.addr.ss_family == AF_INET6) setsockopt(ls, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  // On the listener too: ECN is negotiated in the SYN-ACK, before accept().
  set_congestion(ls, o.cc);
  if (bind(ls, reinterpret_cast<const sockaddr*>(&ep.addr), ep.len) != 0) throw SysError("bind " + ep.str(), errno);
  if (listen(ls, 1024) != 0) throw SysError("listen", errno);
  // The payload's first use zero-fills 1 MB (page faults): done here, not
  // in the first response, whose latency an experiment would measure.
  (void)payload();
  std::printf("sluice-tg server listening on %s cc=%s\n", ep.str().c_str(), get_congestion(ls).c_str());
  std::fflush(stdout);

  while (!g_stop) {
    pollfd p{ls, POLLIN, 0};
    int r = poll(&p, 1, 200);
    if (r <= 0) continue;
    int fd = accept4(ls, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::thread(serve_conn, fd, o.cc, o.verbose).detach();
  }
  close(ls);
  return 0;
}

}  // namespace sluice::tg
