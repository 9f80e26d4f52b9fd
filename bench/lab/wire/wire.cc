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
// qdisc bypassed. Frames that arrive with an 802.1Q/802.1ad tag (the
// upstreamQ tag of sluice/bfc.h, a site VLAN) are read by a tap socket
// instead and leave with their tag (see Tap below). Each
// frame keeps its virtio-net header (PACKET_VNET_HDR): a checksum the
// sender left to offload, or a GSO super-frame, crosses the wire as it
// arrived, as between two veth ends. The counters at exit (SIGINT/SIGTERM
// or --duration) go to --json.
#include <CLI/CLI.hpp>
#include <arpa/inet.h>
#include <endian.h>
#include <linux/filter.h>
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
#include <cstring>
#include <deque>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
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
constexpr uint8_t kVnetNeedsCsum = 1;  // VIRTIO_NET_HDR_F_NEEDS_CSUM
constexpr size_t kVlanHdr = 4;
// A GSO super-frame (64 KB plus headers) after its virtio-net header; the
// slack above 64 KB covers the headers and a re-inserted tag.
constexpr size_t kMaxFrame = kVnetHdr + 65536 + 256;
constexpr size_t kBatch = 64;

uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

struct Frame {
  uint64_t due_ns;
  size_t proto;  // index into an End's fds: the socket it came in on and leaves by
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

// Tap: tagged frames. The receive path moves an 802.1Q/802.1ad tag out of
// the frame into the skb's metadata before any packet socket sees it, and
// clears it (no VLAN device claims it) before the per-protocol sockets
// above are served, so they read the frame untagged. The tap socket
// (ETH_P_ALL, before tc ingress) sees the tag in PACKET_AUXDATA; a socket
// filter in the kernel passes it only frames that arrived with a tag, so
// untagged traffic still goes the per-protocol way, after tc ingress. The
// wire puts the tag back where it was (after the MAC addresses, TPID from
// the metadata) and sends the frame out of the other end's tap socket, as
// it entered. The same frame also reaches a per-protocol socket, untagged,
// after the tap (the kernel serves the ETH_P_ALL sockets first): the wire
// remembers a hash of each tagged frame's untagged bytes until that copy
// arrives and drops the copy. A program at a wire end's tc ingress
// therefore does not act on a tagged frame (it is taken before tc).
constexpr size_t kTap = kNumProtocols;
constexpr size_t kNumSockets = kNumProtocols + 1;

// Accept a frame that arrived with a tag (not one this host sends).
sock_filter kTapFilter[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, uint32_t(SKF_AD_OFF + SKF_AD_VLAN_TAG_PRESENT)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 3, 0),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, uint32_t(SKF_AD_OFF + SKF_AD_PKTTYPE)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PACKET_OUTGOING, 1, 0),
    BPF_STMT(BPF_RET | BPF_K, 0xffffffffu),
    BPF_STMT(BPF_RET | BPF_K, 0),
};

// One end of the wire: packet sockets bound to an interface, one per
// protocol, and the tap.
struct End {
  std::string ifname;
  int ifindex = 0;
  int fds[kNumSockets];

  explicit End(const std::string& name) : ifname(name) {
    for (int& fd : fds) fd = -1;
    ifindex = int(if_nametoindex(name.c_str()));
    if (!ifindex) throw SysError("interface " + name, errno);
    for (size_t i = 0; i < kNumProtocols; ++i) fds[i] = open_socket(kProtocols[i], false);
    fds[kTap] = open_socket(ETH_P_ALL, true);
  }
  End(const End&) = delete;
  ~End() {
    for (int fd : fds)
      if (fd >= 0) close(fd);
  }

  int open_socket(uint16_t proto, bool tap) {
    // Protocol 0: the socket receives nothing until it is bound, so the
    // tap's filter is in place before the first frame.
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) throw SysError("AF_PACKET socket", errno);
    auto fail = [&](const std::string& what) {
      int e = errno;
      close(fd);
      throw SysError(what + " on " + ifname, e);
    };
    int one = 1;
    if (tap) {
      sock_fprog prog{uint16_t(sizeof(kTapFilter) / sizeof(kTapFilter[0])), kTapFilter};
      if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) != 0) fail("tap filter");
      // The tag is in the skb's metadata, not in the frame.
      if (setsockopt(fd, SOL_PACKET, PACKET_AUXDATA, &one, sizeof one) != 0) fail("PACKET_AUXDATA");
      // What the wire sends out of this end is not seen again (the filter
      // refuses it too; this saves the kernel the clone).
      (void)setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
    }
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(proto);
    sll.sll_ifindex = ifindex;
    if (bind(fd, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) fail("bind");
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

// The untagged copies of tagged frames still to come through a
// per-protocol socket: hash of the frame -> how many, last seen.
struct Copies {
  struct Entry {
    uint64_t count;
    uint64_t last_ns;
  };
  std::unordered_map<size_t, Entry> pending;
  uint64_t next_sweep_ns = 0;

  static size_t key(const uint8_t* frame, size_t len) {
    return std::hash<std::string_view>{}(std::string_view(reinterpret_cast<const char*>(frame), len));
  }
  void expect(const uint8_t* frame, size_t len, uint64_t now) {
    Entry& e = pending[key(frame, len)];
    ++e.count;
    e.last_ns = now;
  }
  // True (and forgotten) if this is the copy of a tagged frame.
  bool take(const uint8_t* frame, size_t len) {
    auto it = pending.find(key(frame, len));
    if (it == pending.end()) return false;
    if (--it->second.count == 0) pending.erase(it);
    return true;
  }
  // Copies that never came (a tc program at the wire end dropped or
  // changed the frame, the per-protocol socket was full, an ethertype the
  // wire has no socket for) are forgotten after a second; returns how many.
  uint64_t sweep(uint64_t now) {
    uint64_t n = 0;
    if (now < next_sweep_ns) return 0;
    next_sweep_ns = now + 100000000ull;
    for (auto it = pending.begin(); it != pending.end();) {
      if (now - it->second.last_ns > 1000000000ull) {
        n += it->second.count;
        it = pending.erase(it);
      } else {
        ++it;
      }
    }
    return n;
  }
  // At exit: every copy still expected is missing.
  uint64_t forget_all() {
    uint64_t n = 0;
    for (const auto& kv : pending) n += kv.second.count;
    pending.clear();
    return n;
  }
};

struct Direction {
  End* in;
  End* out;
  std::deque<Frame> queue;
  Copies copies;
  uint64_t frames = 0, bytes = 0, oversize = 0, send_errors = 0, kernel_drops = 0, far_end_drops = 0;
  uint64_t tagged = 0, copies_dropped = 0, copies_missing = 0;
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
            {"tagged", tagged},
            {"tagged_copies_dropped", copies_dropped},
            {"tagged_copies_missing", copies_missing},
            {"socket_drops", kernel_drops},
            {"max_frames_in_flight", max_queued},
            {"late_us_max", double(max_late_ns) / 1e3},
            {"late_us_mean", frames ? double(late_sum_ns) / double(frames) / 1e3 : 0.0}};
  }
};

// One recvmmsg batch: buffers, and control space for PACKET_AUXDATA.
struct Batch {
  std::vector<uint8_t> buf[kBatch];
  alignas(cmsghdr) uint8_t ctl[kBatch][CMSG_SPACE(sizeof(tpacket_auxdata))];
  mmsghdr msgs[kBatch];
  iovec iov[kBatch];

  int read(int fd, bool aux) {
    for (size_t i = 0; i < kBatch; ++i) {
      if (buf[i].empty()) buf[i].resize(kMaxFrame);
      iov[i] = {buf[i].data(), buf[i].size()};
      msgs[i] = {};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      if (aux) {
        msgs[i].msg_hdr.msg_control = ctl[i];
        msgs[i].msg_hdr.msg_controllen = sizeof ctl[i];
      }
    }
    return recvmmsg(fd, msgs, kBatch, MSG_DONTWAIT | MSG_TRUNC, nullptr);
  }
  bool whole(int i) const { return msgs[i].msg_len <= kMaxFrame && !(msgs[i].msg_hdr.msg_flags & MSG_TRUNC); }
  // The tag the frame arrived with, from PACKET_AUXDATA; false if none.
  bool tag(int i, uint16_t* tpid, uint16_t* tci) {
    for (cmsghdr* c = CMSG_FIRSTHDR(&msgs[i].msg_hdr); c; c = CMSG_NXTHDR(&msgs[i].msg_hdr, c)) {
      if (c->cmsg_level != SOL_PACKET || c->cmsg_type != PACKET_AUXDATA) continue;
      tpacket_auxdata aux;
      std::memcpy(&aux, CMSG_DATA(c), sizeof aux);
      if (!(aux.tp_status & TP_STATUS_VLAN_VALID)) return false;
      *tpid = (aux.tp_status & TP_STATUS_VLAN_TPID_VALID) ? aux.tp_vlan_tpid : uint16_t(ETH_P_8021Q);
      *tci = aux.tp_vlan_tci;
      return true;
    }
    return false;
  }
};

// `frame` (virtio-net header, then the untagged frame) with the tag put
// back after the MAC addresses. Offsets in the header that count from the
// frame's start move with the bytes behind the tag.
std::vector<uint8_t> with_tag(const uint8_t* frame, size_t len, uint16_t tpid, uint16_t tci) {
  constexpr size_t at = kVnetHdr + 2 * ETH_ALEN;
  std::vector<uint8_t> out(len + kVlanHdr);
  std::memcpy(out.data(), frame, at);
  out[at] = uint8_t(tpid >> 8);
  out[at + 1] = uint8_t(tpid);
  out[at + 2] = uint8_t(tci >> 8);
  out[at + 3] = uint8_t(tci);
  std::memcpy(out.data() + at + kVlanHdr, frame + at, len - at);
  auto shift = [&](size_t off) {
    uint16_t v;
    std::memcpy(&v, out.data() + off, 2);
    v = htole16(uint16_t(le16toh(v) + kVlanHdr));
    std::memcpy(out.data() + off, &v, 2);
  };
  if (out[1] != 0 && (out[2] | out[3])) shift(2);  // hdr_len of a GSO frame
  if (out[0] & kVnetNeedsCsum) shift(6);           // csum_start
  return out;
}

Batch g_batch, g_tap_batch;

// Tagged frames of `d` waiting in its tap socket, into the queue.
void receive_tagged(Direction& d, uint64_t delay_ns) {
  Batch& b = g_tap_batch;
  for (;;) {
    int n = b.read(d.in->fds[kTap], true);
    if (n <= 0) return;
    uint64_t now = now_ns(), due = now + delay_ns;
    for (int i = 0; i < n; ++i) {
      size_t len = b.msgs[i].msg_len;
      uint16_t tpid = 0, tci = 0;
      if (!b.whole(i) || len + kVlanHdr > kMaxFrame) {
        ++d.oversize;
        continue;
      }
      if (len < kVnetHdr + ETH_HLEN || !b.tag(i, &tpid, &tci)) continue;  // not for the tap (cannot pass its filter)
      d.copies.expect(b.buf[i].data() + kVnetHdr, len - kVnetHdr, now);
      d.queue.push_back({due, kTap, with_tag(b.buf[i].data(), len, tpid, tci)});
    }
    d.max_queued = std::max(d.max_queued, d.queue.size());
    if (size_t(n) < kBatch) return;
  }
}

void receive(Direction& d, size_t proto, uint64_t delay_ns) {
  Batch& b = g_batch;
  for (;;) {
    int n = b.read(d.in->fds[proto], false);
    if (n <= 0) return;
    // The tap copy of every tagged frame in this batch is in the tap's
    // queue by now (the kernel served the tap first): read it, so that
    // the untagged copies here are recognised.
    receive_tagged(d, delay_ns);
    uint64_t due = now_ns() + delay_ns;
    for (int i = 0; i < n; ++i) {
      size_t len = b.msgs[i].msg_len;
      if (!b.whole(i)) {
        ++d.oversize;
        continue;
      }
      if (!d.copies.pending.empty() && len >= kVnetHdr && d.copies.take(b.buf[i].data() + kVnetHdr, len - kVnetHdr)) {
        ++d.copies_dropped;
        continue;
      }
      d.queue.push_back({due, proto, std::vector<uint8_t>(b.buf[i].begin(), b.buf[i].begin() + long(len))});
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
      if (f.proto == kTap) ++d.tagged;
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
    constexpr size_t kFds = 2 * kNumSockets + 1;
    pollfd pfd[kFds];
    for (size_t i = 0; i < kNumSockets; ++i) {
      pfd[i] = {a.fds[i], POLLIN, 0};
      pfd[kNumSockets + i] = {b.fds[i], POLLIN, 0};
    }
    pfd[kFds - 1] = {tfd, POLLIN, 0};
    while (!g_stop && (!end || now_ns() < end)) {
      int n = poll(pfd, kFds, 100);
      if (n < 0 && errno != EINTR) throw SysError("poll", errno);
      if (pfd[kTap].revents & POLLIN) receive_tagged(ab, delay_ns);
      if (pfd[kNumSockets + kTap].revents & POLLIN) receive_tagged(ba, delay_ns);
      for (size_t i = 0; i < kNumProtocols; ++i) {
        if (pfd[i].revents & POLLIN) receive(ab, i, delay_ns);
        if (pfd[kNumSockets + i].revents & POLLIN) receive(ba, i, delay_ns);
      }
      for (Direction* d : {&ab, &ba}) d->copies_missing += d->copies.sweep(now_ns());
      if (pfd[kFds - 1].revents & POLLIN) {
        uint64_t ticks;
        (void)!read(tfd, &ticks, sizeof ticks);
      }
      bool blocked = transmit(ab);
      blocked = transmit(ba) || blocked;
      arm(tfd, ab, ba, blocked);
    }
    for (Direction* d : {&ab, &ba}) d->copies_missing += d->copies.forget_all();
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
