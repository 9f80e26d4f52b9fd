// ein (bpf/host/ein.bpf.c) through BPF_PROG_TEST_RUN against real TCP
// sockets on loopback (in a private network namespace): the receiver half
// remembers EIN and sets the echo bit on ACKs while the mark is fresh, with
// checksums that a full recomputation confirms; the sender half counts
// echoes per socket; flows Pulser does not manage are ignored and counted.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sluice/pulser.h"
#include "ein.skel.h"
#include "core/bpf_util.h"
#include "lib/packet.h"
#include "lib/prog_test.h"

SLUICE_SKELETON(ein);

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr int kNext = -1;
// Long enough that no scheduling delay (a loaded host, a 1-vCPU TCG guest)
// ages a mark between two test runs; the stale case ages its mark by
// rewriting the entry's arrival time instead of sleeping.
constexpr uint64_t kFreshNs = 10'000'000'000;

// A connected pair on loopback: client (the data sender) and the accepted
// server socket (the receiver).
struct Conn {
  int client = -1, server = -1;
  uint16_t cport = 0, sport = 0;
  bool v6 = false;
  ~Conn() {
    if (client >= 0) close(client);
    if (server >= 0) close(server);
  }
};

std::unique_ptr<Conn> connect_pair(bool v6) {
  auto c = std::make_unique<Conn>();
  c->v6 = v6;
  int af = v6 ? AF_INET6 : AF_INET;
  int ls = socket(af, SOCK_STREAM, 0);
  sockaddr_storage ss{};
  socklen_t len;
  if (v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
    len = sizeof(*a);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof(*a);
  }
  EXPECT_EQ(bind(ls, reinterpret_cast<sockaddr*>(&ss), len), 0) << strerror(errno);
  EXPECT_EQ(listen(ls, 4), 0);
  socklen_t l2 = sizeof(ss);
  getsockname(ls, reinterpret_cast<sockaddr*>(&ss), &l2);
  c->client = socket(af, SOCK_STREAM, 0);
  EXPECT_EQ(connect(c->client, reinterpret_cast<sockaddr*>(&ss), l2), 0) << strerror(errno);
  c->server = accept(ls, nullptr, nullptr);
  close(ls);
  sockaddr_storage cs{};
  socklen_t l3 = sizeof(cs);
  getsockname(c->client, reinterpret_cast<sockaddr*>(&cs), &l3);
  c->sport =
      ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  c->cport =
      ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&cs)->sin6_port : reinterpret_cast<sockaddr_in*>(&cs)->sin_port);
  return c;
}

class EinTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Sockets and lookups in a network namespace of our own.
    ASSERT_EQ(geteuid(), 0u) << "BPF tests need root";
    ASSERT_EQ(unshare(CLONE_NEWNET), 0) << strerror(errno);
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    ifreq ifr{};
    std::strcpy(ifr.ifr_name, "lo");
    ioctl(s, SIOCGIFFLAGS, &ifr);
    ifr.ifr_flags |= IFF_UP;
    ASSERT_EQ(ioctl(s, SIOCSIFFLAGS, &ifr), 0);
    close(s);
  }
  void SetUp() override {
    require_root();
    skel_ = std::make_unique<Skeleton<ein>>();
    (*skel_)->rodata->echo_fresh_ns = kFreshNs;
    skel_->load();
  }
  int map() const { return bpf_map__fd((*skel_)->maps.sl_ein_sk_v1); }
  // What sluice_pulser's init does: give the socket an sl_ein_sk_v1 entry.
  void manage(int fd) {
    sluice_ein_sk v{};
    ASSERT_EQ(bpf_map_update_elem(map(), &fd, &v, BPF_NOEXIST), 0) << strerror(errno);
  }
  bool entry(int fd, sluice_ein_sk* out) const { return bpf_map_lookup_elem(map(), &fd, out) == 0; }
  uint64_t reason(uint32_t r) const { return read_reason_counters(bpf_map__fd((*skel_)->maps.sl_counters))[r].packets; }
  Bytes ingress(const Bytes& p) {
    RunResult r = run_tc(bpf_program__fd((*skel_)->progs.ein_ingress), p);
    EXPECT_EQ(r.retval, kNext);
    return r.out;
  }
  Bytes egress(const Bytes& p) {
    RunResult r = run_tc(bpf_program__fd((*skel_)->progs.ein_egress), p);
    EXPECT_EQ(r.retval, kNext);
    std::string why;
    EXPECT_TRUE(checksums_ok(r.out, &why)) << why;
    return r.out;
  }
  // Data client -> server; ACK server -> client.
  static PacketSpec data(const Conn& c, uint32_t seq, bool ein) {
    PacketSpec s;
    s.ipv6 = c.v6;
    s.src = c.v6 ? "::1" : "127.0.0.1";
    s.dst = s.src;
    s.sport = c.cport;
    s.dport = c.sport;
    s.seq = seq;
    s.payload = 1000;
    s.flags = 0x18;
    s.tos = uint8_t(0x02 | (ein ? 0x04 : 0));
    return s;
  }
  static PacketSpec ack(const Conn& c, uint32_t ackno, uint8_t res = 0) {
    PacketSpec s;
    s.ipv6 = c.v6;
    s.src = c.v6 ? "::1" : "127.0.0.1";
    s.dst = s.src;
    s.sport = c.sport;
    s.dport = c.cport;
    s.ack = ackno;
    s.flags = 0x10;
    s.tcp_res = res;
    return s;
  }
  static uint8_t byte12(const Bytes& f) { return f[l4_offset(f) + 12]; }
  std::unique_ptr<Skeleton<ein>> skel_;
};

TEST_F(EinTest, ReceiverEchoesWhileTheMarkIsFresh) {
  for (bool v6 : {false, true}) {
    SCOPED_TRACE(v6 ? "IPv6" : "IPv4");
    auto c = connect_pair(v6);
    manage(c->server);
    sluice_ein_sk st{};

    Bytes a0 = build(ack(*c, 1000));
    EXPECT_EQ(egress(a0), a0) << "no EIN seen: ACK unchanged";

    ingress(build(data(*c, 1000, true)));
    ASSERT_TRUE(entry(c->server, &st));
    EXPECT_EQ(st.ein_pending, 1u);
    EXPECT_EQ(st.ein_end_seq, 2000u);
    EXPECT_EQ(st.ein_data, 1u);

    Bytes a1 = egress(build(ack(*c, 1500)));
    EXPECT_EQ(byte12(a1) & SLUICE_EIN_ECHO_BIT, SLUICE_EIN_ECHO_BIT) << "echo on an ACK before the marked segment";
    EXPECT_EQ(byte12(a1) >> 4, 5) << "data offset untouched";
    Bytes a2 = egress(build(ack(*c, 2000)));
    EXPECT_EQ(byte12(a2) & SLUICE_EIN_ECHO_BIT, SLUICE_EIN_ECHO_BIT) << "echo on the ACK covering it";
    Bytes a3 = build(ack(*c, 3000));
    EXPECT_EQ(egress(a3), a3) << "mark echoed: next ACK clean";
    ASSERT_TRUE(entry(c->server, &st));
    EXPECT_EQ(st.echo_sent, 2u);
    EXPECT_EQ(st.ein_pending, 0u);

    // Unmarked data does not start an echo.
    ingress(build(data(*c, 3000, false)));
    Bytes a4 = build(ack(*c, 4000));
    EXPECT_EQ(egress(a4), a4);

    // AccECN's AE bit (0x01) next to ours is kept.
    ingress(build(data(*c, 4000, true)));
    Bytes a5 = egress(build(ack(*c, 5000, 0x01)));
    EXPECT_EQ(byte12(a5) & 0x03, 0x03);

    // A mark older than echo_fresh is dropped, not echoed.
    ingress(build(data(*c, 5000, true)));
    ASSERT_TRUE(entry(c->server, &st));
    ASSERT_EQ(st.ein_pending, 1u);
    st.ein_ns -= kFreshNs + 1'000'000;  // arrived just over echo_fresh ago
    ASSERT_EQ(bpf_map_update_elem(map(), &c->server, &st, BPF_EXIST), 0) << strerror(errno);
    Bytes a6 = build(ack(*c, 6000));
    EXPECT_EQ(egress(a6), a6) << "stale mark";
    ASSERT_TRUE(entry(c->server, &st));
    EXPECT_EQ(st.ein_pending, 0u);
  }
  EXPECT_EQ(reason(SLUICE_R_EIN_ECHO_SET), 6u);
  EXPECT_EQ(reason(SLUICE_R_EIN_ECHO_STALE), 2u);
  EXPECT_EQ(reason(SLUICE_R_EIN_MARK_RECORDED), 6u);
}

TEST_F(EinTest, SenderCountsEchoesForPulserSockets) {
  auto c = connect_pair(false);
  manage(c->client);
  Bytes e = build(ack(*c, 2000, SLUICE_EIN_ECHO_BIT));
  EXPECT_EQ(ingress(e), e) << "the sender half never changes the ACK";
  ingress(e);
  ingress(build(ack(*c, 3000)));
  sluice_ein_sk st{};
  ASSERT_TRUE(entry(c->client, &st));
  EXPECT_EQ(st.echo_acks, 2u) << "two echoed ACKs, one clean";
  EXPECT_EQ(reason(SLUICE_R_EIN_ECHO_RECEIVED), 2u);
}

TEST_F(EinTest, UnmanagedFlowsAreIgnoredAndCounted) {
  auto c = connect_pair(false);  // no sl_ein_sk_v1 entry on either socket
  ingress(build(data(*c, 1000, true)));
  Bytes a = build(ack(*c, 2000));
  EXPECT_EQ(egress(a), a) << "EIN on an unmanaged flow is not echoed";
  Bytes e = build(ack(*c, 2000, SLUICE_EIN_ECHO_BIT));
  EXPECT_EQ(ingress(e), e);
  sluice_ein_sk st{};
  EXPECT_FALSE(entry(c->server, &st)) << "the tc programs never create entries";
  EXPECT_FALSE(entry(c->client, &st));
  EXPECT_EQ(reason(SLUICE_R_EIN_MARK_UNMANAGED), 1u);
  EXPECT_EQ(reason(SLUICE_R_EIN_ECHO_UNMANAGED), 1u);

  // No socket at all for the 4-tuple.
  PacketSpec ghost = ack(*c, 1, SLUICE_EIN_ECHO_BIT);
  ghost.dport = 9;
  ingress(build(ghost));
  EXPECT_EQ(reason(SLUICE_R_EIN_ECHO_UNMANAGED), 2u);
}

TEST_F(EinTest, BadAndForeignInputPassesUntouched) {
  PacketSpec udp;
  udp.proto = 17;
  udp.payload = 64;
  udp.tos = 0x04;
  Bytes u = build(udp);
  EXPECT_EQ(ingress(u), u);
  EXPECT_EQ(egress(u), u);
  PacketSpec arp;
  arp.ethertype = 0x0806;
  Bytes a = build(arp);
  EXPECT_EQ(ingress(a), a);
  Bytes trunc = truncate(build(PacketSpec{}), 14 + 20 + 10);
  RunResult r = run_tc(bpf_program__fd((*skel_)->progs.ein_ingress), trunc);
  EXPECT_EQ(r.retval, kNext);
  r = run_tc(bpf_program__fd((*skel_)->progs.ein_egress), trunc);
  EXPECT_EQ(r.retval, kNext);
  EXPECT_EQ(reason(SLUICE_R_PASS_OTHER_L4), 2u);
  EXPECT_EQ(reason(SLUICE_R_PASS_NOT_IP), 1u);
  EXPECT_EQ(reason(SLUICE_R_PASS_MALFORMED), 2u);
}

}  // namespace
