// sluice-wire: a lab link with propagation delay. This kernel has no netem,
// so a link's length is made here: two interfaces of one namespace are
// joined by this process, and every frame that arrives on one leaves the
// other `--delay-us` later, unchanged, in order. Queues stay where they are
// (a switch port's qdisc before the wire); the wire only adds time, as a
// cable does, so the bandwidth-delay product of a lab path can match a real
// one. Run it in the wire's namespace:
//
//   ip netns exec NS sluice-wire --a wA --b wB --delay-us 2000
//
// Frames (IPv4, ARP, IPv6, and the switch substrate's control frames:
// credits, pauses) are read with AF_PACKET sockets bound to each
// protocol, after tc ingress (promiscuous; the interfaces' own
// transmissions are not seen by such sockets), and written back with the
// qdisc bypassed. Each
// frame keeps its virtio-net header (PACKET_VNET_HDR): a checksum the
// sender left to offload, or a GSO super-frame, crosses the wire as it
// arrived, as between two veth ends. The counters at exit (SIGINT/SIGTERM
// or --duration) go to --json.
#include <CLI/CLI.hpp>
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <deque>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json_file.h"
#include "sluice/wire.h"

using namespace sluice;

namespace {
std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

// struct virtio_net_hdr (linux/virtio_net.h, which does not build as C++):
// the wire carries it, it never reads it.
constexpr size_t kVnetHdr = 10;
// A GSO super-frame (64 KB plus headers) after its virtio-net header.
constexpr size_t kMaxFrame = kVnetHdr + 65536 + 256;
constexpr size_t kBatch = 64;

uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

struct Frame {
  uint64_t due_ns;
  size_t proto;  // index into kProtocols: the socket it came in on and leaves by
  std::vector<uint8_t> bytes;
};

// The ethertypes the wire carries. A packet socket bound to one protocol
// reads a frame after tc ingress has run on it (an ETH_P_ALL tap reads it
// before), so a program at a wire end (the far end of a switch port, where
// aqm writes EIN as packets leave the port's queue) acts on what crosses.
// Control frames (docs/switch.md) cross too: a delayed link between two
// sluice switches carries their credits and pauses.
constexpr uint16_t kProtocols[] = {ETH_P_IP, ETH_P_ARP, ETH_P_IPV6, SLUICE_CTRL_ETHERTYPE};
constexpr size_t kNumProtocols = sizeof(kProtocols) / sizeof(kProtocols[0]);

// One end of the wire: packet sockets bound to an interface, one per
// protocol.
struct End {
  std::string ifname;
  int ifindex = 0;
  int fds[kNumProtocols];

  explicit End(const std::string& name) : ifname(name) {
    for (int& fd : fds) fd = -1;
    ifindex = int(if_nametoindex(name.c_str()));
    if (!ifindex) throw SysError("interface " + name, errno);
    for (size_t i = 0; i < kNumProtocols; ++i) fds[i] = open_socket(kProtocols[i]);
  }
  End(const End&) = delete;
  ~End() {
    for (int fd : fds)
      if (fd >= 0) close(fd);
  }

  int open_socket(uint16_t proto) {
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(proto));
    if (fd < 0) throw SysError("AF_PACKET socket", errno);
    auto fail = [&](const std::string& what) {
      int e = errno;
      close(fd);
      throw SysError(what + " on " + ifname, e);
    };
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(proto);
    sll.sll_ifindex = ifindex;
    if (bind(fd, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) fail("bind");
    int one = 1;
    // Checksum-offload and GSO state travels with the frame.
    if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) != 0) fail("PACKET_VNET_HDR");
    // The wire forwards; the interface's qdisc is not a second queue.
    if (setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one) != 0) fail("PACKET_QDISC_BYPASS");
    // Frames are addressed to the host beyond the wire, not to this end.
    packet_mreq mr{};
    mr.mr_ifindex = ifindex;
    mr.mr_type = PACKET_MR_PROMISC;
    if (setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr) != 0) fail("promiscuous mode");
    // A burst of a bottleneck's whole buffer must not overflow the socket.
    int rcv = 16 << 20;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof rcv) != 0)
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
    return fd;
  }

  // Frames the kernel dropped because one of these sockets was full.
  uint64_t socket_drops() const {
    uint64_t n = 0;
    for (int fd : fds) {
      tpacket_stats st{};
      socklen_t len = sizeof st;
      if (getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0) n += st.tp_drops;
    }
    return n;
  }
};

struct Direction {
  End* in;
  End* out;
  std::deque<Frame> queue;
  uint64_t frames = 0, bytes = 0, oversize = 0, send_errors = 0, kernel_drops = 0, far_end_drops = 0;
  size_t max_queued = 0;
  uint64_t max_late_ns = 0;  // how far past its due time a frame left (worst)
  uint64_t late_sum_ns = 0;

  nlohmann::json json() const {
    return {{"from", in->ifname},
            {"to", out->ifname},
            {"frames", frames},
            {"bytes", bytes},
            {"oversize_dropped", oversize},
            {"send_errors", send_errors},
            {"far_end_drops", far_end_drops},
            {"socket_drops", kernel_drops},
            {"max_frames_in_flight", max_queued},
            {"late_us_max", double(max_late_ns) / 1e3},
            {"late_us_mean", frames ? double(late_sum_ns) / double(frames) / 1e3 : 0.0}};
  }
};

void receive(Direction& d, size_t proto, uint64_t delay_ns) {
  static std::vector<uint8_t> buf[kBatch];
  static mmsghdr msgs[kBatch];
  static iovec iov[kBatch];
  for (size_t i = 0; i < kBatch; ++i) {
    if (buf[i].empty()) buf[i].resize(kMaxFrame);
    iov[i] = {buf[i].data(), buf[i].size()};
    msgs[i] = {};
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  for (;;) {
    int n = recvmmsg(d.in->fds[proto], msgs, kBatch, MSG_DONTWAIT | MSG_TRUNC, nullptr);
    if (n <= 0) return;
    uint64_t due = now_ns() + delay_ns;
    for (int i = 0; i < n; ++i) {
      size_t len = msgs[i].msg_len;
      if (len > kMaxFrame || (msgs[i].msg_hdr.msg_flags & MSG_TRUNC)) {
        ++d.oversize;
        continue;
      }
      d.queue.push_back({due, proto, std::vector<uint8_t>(buf[i].begin(), buf[i].begin() + long(len))});
    }
    d.max_queued = std::max(d.max_queued, d.queue.size());
    if (size_t(n) < kBatch) return;
  }
}

// Sends every frame that is due; true when the socket would block.
bool transmit(Direction& d) {
  uint64_t t = now_ns();
  while (!d.queue.empty() && d.queue.front().due_ns <= t) {
    Frame& f = d.queue.front();
    ssize_t w = send(d.out->fds[f.proto], f.bytes.data(), f.bytes.size(), 0);
    if (w < 0 && errno == EAGAIN) {
      // Our socket's send buffer is full: the frame waits (retried shortly)
      // rather than being lost on the wire.
      return true;
    }
    if (w < 0 && errno == ENOBUFS) {
      // The far end's backlog dropped it, as it would have between two
      // directly joined veth ends.
      ++d.far_end_drops;
    } else if (w < 0) {
      ++d.send_errors;
    } else {
      ++d.frames;
      d.bytes += f.bytes.size() - std::min(f.bytes.size(), kVnetHdr);  // the frame, not its header
      uint64_t late = t - f.due_ns;
      d.late_sum_ns += late;
      if (late > d.max_late_ns) d.max_late_ns = late;
    }
    d.queue.pop_front();
  }
  return false;
}

void arm(int tfd, const Direction& ab, const Direction& ba, bool blocked) {
  uint64_t next = 0;
  for (const Direction* d : {&ab, &ba})
    if (!d->queue.empty() && (!next || d->queue.front().due_ns < next)) next = d->queue.front().due_ns;
  // A blocked socket is retried in 50 us, not in a busy loop.
  if (blocked) next = std::max(next, now_ns() + 50000);
  itimerspec its{};
  if (next) {
    its.it_value.tv_sec = time_t(next / 1000000000ull);
    its.it_value.tv_nsec = long(next % 1000000000ull);
  }
  timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, nullptr);
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sluice-wire: join two interfaces with a fixed propagation delay (a lab link's length)"};
  std::string a_if, b_if, json_out = "-";
  double delay_us = 0, duration = 0;
  app.add_option("--a", a_if, "one end (an interface in the current network namespace)")->required();
  app.add_option("--b", b_if, "the other end")->required();
  app.add_option("--delay-us", delay_us, "one-way delay in microseconds (each direction)")->required();
  app.add_option("--duration", duration, "seconds to run (0 = until SIGINT/SIGTERM)");
  app.add_option("--json", json_out, "counters at exit ('-' = stdout)");
  CLI11_PARSE(app, argc, argv);

  try {
    if (!(delay_us >= 0 && delay_us <= 10e6)) throw Error("--delay-us must be in [0, 10000000]");
    if (a_if == b_if) throw Error("--a and --b must be two interfaces");
    uint64_t delay_ns = uint64_t(delay_us * 1e3);
    // Timer slack would add up to 50 us to every wake-up.
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    End a(a_if), b(b_if);
    Direction ab{&a, &b}, ba{&b, &a};  // a_to_b, b_to_a in the JSON
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (tfd < 0) throw SysError("timerfd_create", errno);

    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    std::fprintf(stderr, "sluice-wire: %s <-> %s, %.0f us each way\n", a_if.c_str(), b_if.c_str(), delay_us);

    uint64_t end = duration > 0 ? now_ns() + uint64_t(duration * 1e9) : 0;
    // One pollfd per socket of each end, then the timer.
    constexpr size_t kFds = 2 * kNumProtocols + 1;
    pollfd pfd[kFds];
    for (size_t i = 0; i < kNumProtocols; ++i) {
      pfd[i] = {a.fds[i], POLLIN, 0};
      pfd[kNumProtocols + i] = {b.fds[i], POLLIN, 0};
    }
    pfd[kFds - 1] = {tfd, POLLIN, 0};
    while (!g_stop && (!end || now_ns() < end)) {
      int n = poll(pfd, kFds, 100);
      if (n < 0 && errno != EINTR) throw SysError("poll", errno);
      for (size_t i = 0; i < kNumProtocols; ++i) {
        if (pfd[i].revents & POLLIN) receive(ab, i, delay_ns);
        if (pfd[kNumProtocols + i].revents & POLLIN) receive(ba, i, delay_ns);
      }
      if (pfd[kFds - 1].revents & POLLIN) {
        uint64_t ticks;
        (void)!read(tfd, &ticks, sizeof ticks);
      }
      bool blocked = transmit(ab);
      blocked = transmit(ba) || blocked;
      arm(tfd, ab, ba, blocked);
    }
    ab.kernel_drops = a.socket_drops();
    ba.kernel_drops = b.socket_drops();
    close(tfd);
    nlohmann::json out = {{"delay_us", delay_us}, {"a_to_b", ab.json()}, {"b_to_a", ba.json()}};
    write_json_file(json_out, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice-wire: %s\n", e.what());
    return 1;
  }
  return 0;
}
