// Per-packet BFC (bfc-nsdi22 §3.3) on sluice switches with [switch]
// datapath = "hold", upstreamQ carried on the wire as sluice/bfc.h's tag:
//
//   h1 [N] -- A -- B -- h2   (B -> h2 at 10 Mbit/s: the congested egress)
//                   \-- h3   (B -> h3 at 100 Mbit/s)
//
// N is h1's NIC: sluiced in h1's namespace with one switch-facing port (its
// uplink), as the port model's host is a one-port switch. A and B are
// routers running sluiced. Every hop runs logic "bfc" per packet: N tags
// what it sends with the queue it left from, A pops that tag (into
// PacketMeta::upstream_q), tags again toward B, B pops; B's host-facing
// ports send no tag, so h2 and h3 see plain frames.
//
// A heavy UDP burst h1 -> h2 (1514-byte frames, ~120 Mbit/s, a fixed count)
// into B's 10 Mbit/s port: B's queue goes above Th, B's pause counter for
// (port toward A, A's queue of the flow) pauses that queue of A, A's queue
// in turn pauses N's queue, so the burst waits in the sender's NIC and
// nothing is lost on the way (every datagram arrives). A light flow h1 ->
// h3 in other queues is not blocked. Frames with a tag that is not an
// upstreamQ tag are counted and left alone. The same with the link A -- B
// made 250 us long by sluice-wire: the tags and the pauses cross it.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "lib/netns_fixture.h"
#include "lib/switch_lab.h"
#include "lib/tag_watch.h"

using namespace sluice;
using namespace sluice::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

constexpr uint16_t kDport = 7200;
constexpr int kQueues = 8;
constexpr uint64_t kHeavy = 2500;  // datagrams in the burst

// One IPv4/UDP frame to `dst_mac` with an 802.1Q tag of VID `vid`, sent raw
// out of `ifname` in `ns` (as a neighbour with a site VLAN would).
void send_tagged(const std::string& ns, const std::string& ifname, const std::string& peer_if, uint16_t vid) {
  InNetns in(ns);
  int fd = socket(AF_PACKET, SOCK_RAW, 0);
  ASSERT_GE(fd, 0) << strerror(errno);
  std::vector<uint8_t> f(64, 0);
  // dst: the peer's MAC is not needed for the count (the tag is looked at
  // before any address check): broadcast.
  std::fill(f.begin(), f.begin() + 6, 0xff);
  f[6] = 0x02;
  f[11] = 0x42;
  f[12] = 0x81;
  f[13] = 0x00;
  f[14] = uint8_t(vid >> 8);
  f[15] = uint8_t(vid);
  f[16] = 0x08;
  f[17] = 0x00;
  f[18] = 0x45;
  sockaddr_ll to{};
  to.sll_family = AF_PACKET;
  to.sll_ifindex = int(if_nametoindex(ifname.c_str()));
  to.sll_halen = 6;
  std::fill(to.sll_addr, to.sll_addr + 6, 0xff);
  EXPECT_EQ(sendto(fd, f.data(), f.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)), ssize_t(f.size()))
      << strerror(errno) << " (toward " << peer_if << ")";
  close(fd);
}

uint64_t u(const json& j, const char* k) { return j.value(k, uint64_t(0)); }

// Sends `bytes` over one TCP connection from `src_ns` to dst:port in
// `dst_ns`; returns the bytes the receiver got within `limit`.
uint64_t tcp_transfer(const std::string& src_ns, const std::string& dst_ns, const std::string& dst, uint16_t port,
                      uint64_t bytes, std::chrono::seconds limit) {
  int ls = tcp_listen(dst_ns, "0.0.0.0", port);
  if (ls < 0) {
    ADD_FAILURE() << "listen: " << strerror(errno);
    return 0;
  }
  std::atomic<uint64_t> got{0};
  std::thread rx([&] {
    timeval tv{int(limit.count()), 0};
    setsockopt(ls, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    int c = accept(ls, nullptr, nullptr);
    if (c < 0) return;
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[65536];
    ssize_t n;
    while ((n = recv(c, buf, sizeof(buf), 0)) > 0) got += uint64_t(n);
    close(c);
  });
  int s = -1;
  {
    InNetns in(src_ns);
    s = socket(AF_INET, SOCK_STREAM, 0);
  }
  sockaddr_in d{};
  d.sin_family = AF_INET;
  d.sin_port = htons(port);
  inet_pton(AF_INET, dst.c_str(), &d.sin_addr);
  timeval tv{int(limit.count()), 0};
  setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (connect(s, reinterpret_cast<sockaddr*>(&d), sizeof(d)) == 0) {
    std::vector<char> buf(65536, 'b');
    uint64_t left = bytes;
    while (left) {
      ssize_t n = send(s, buf.data(), std::min<uint64_t>(left, buf.size()), 0);
      if (n <= 0) break;
      left -= uint64_t(n);
    }
  }
  close(s);
  rx.join();
  close(ls);
  return got;
}

class BfcHold : public ::testing::Test {
 protected:
  void SetUp() override {
    lab_ = std::make_unique<Lab>("bh");
    h1_ = lab_->add_ns("h1");
    a_ = lab_->add_ns("a");
    b_ = lab_->add_ns("b");
    h2_ = lab_->add_ns("h2");
    h3_ = lab_->add_ns("h3");
    h1if_ = lab_->name("h1");
    a1_ = lab_->name("a1");
    a2_ = lab_->name("a2");
    b1_ = lab_->name("b1");
    b2_ = lab_->name("b2");
    b3_ = lab_->name("b3");
    h2if_ = lab_->name("h2");
    lab_->add_veth(h1_, "h1", "10.74.1.2/24", a_, "a1", "10.74.1.1/24");
    if (wire_delay_us_ > 0) {
      // A -- B through a wire namespace: the link is wire_delay_us_ long.
      w_ = lab_->add_ns("w");
      lab_->add_veth(a_, "a2", "10.74.9.1/24", w_, "wa", "");
      lab_->add_veth(w_, "wb", "", b_, "b1", "10.74.9.2/24");
      wire_json_ = lab_->tmpdir() + "/wire.json";
      wire_ = std::make_unique<Process>(
          lab_->spawn(w_,
                      {build_path("bench/lab/wire/sluice-wire"), "--a", lab_->name("wa"), "--b", lab_->name("wb"),
                       "--delay-us", std::to_string(wire_delay_us_), "--json", wire_json_},
                      "wire"));
      ASSERT_TRUE(eventually([&] { return wire_->log().find("<->") != std::string::npos; }, 5s)) << wire_->log();
    } else {
      lab_->add_veth(a_, "a2", "10.74.9.1/24", b_, "b1", "10.74.9.2/24");
    }
    lab_->add_veth(b_, "b2", "10.74.2.1/24", h2_, "h2", "10.74.2.2/24");
    lab_->add_veth(b_, "b3", "10.74.3.1/24", h3_, "h3", "10.74.3.2/24");
    ASSERT_EQ(lab_->nsh(h1_, "ip route add default via 10.74.1.1"), 0);
    ASSERT_EQ(lab_->nsh(h2_, "ip route add default via 10.74.2.1"), 0);
    ASSERT_EQ(lab_->nsh(h3_, "ip route add default via 10.74.3.1"), 0);
    ASSERT_EQ(lab_->nsh(a_, "ip route add default via 10.74.9.2"), 0);
    ASSERT_EQ(lab_->nsh(b_, "ip route add 10.74.1.0/24 via 10.74.9.1"), 0);
    ASSERT_EQ(lab_->nsh(a_, "sysctl -qw net.ipv4.ip_forward=1"), 0);
    ASSERT_EQ(lab_->nsh(b_, "sysctl -qw net.ipv4.ip_forward=1"), 0);
    const std::string keys = "logic = \"bfc\"\ndatapath = \"hold\"\nqueues = " + std::to_string(kQueues) +
                             "\nrate_mbit = 100\nfail_open_ms = 1000\n";
    N_ = std::make_unique<SwitchAgent>(*lab_, h1_, "n");
    A_ = std::make_unique<SwitchAgent>(*lab_, a_, "a");
    B_ = std::make_unique<SwitchAgent>(*lab_, b_, "b");
    // The NIC holds what its paused queues cannot send (a host's memory,
    // not a switch buffer).
    // clsact: the taken frames are "stolen" (sent, to the host's TCP);
    // under tcx a held segment is a failed send (docs/bfc.md).
    N_->configure(keys + "buffer_bytes = 16777216\n", {{h1if_, "switch-facing"}}, "attach_mode = \"clsact\"\n");
    // A 1 MB port buffer: headroom for the pauses' round trip through the
    // agents in every build type. With 256 KB (21 ms at 100 Mbit/s) the
    // Debug and ASan builds' agents, ~3x slower, paused too late and
    // dropped 10-263 frames per run (docs/testing.md). Without pauses the
    // burst (several MB into B's 10 Mbit/s port) would still overflow it.
    A_->configure(keys + "buffer_bytes = 1048576\n", {{a1_, "switch-facing"}, {a2_, "switch-facing"}});
    B_->configure(keys + "buffer_bytes = 1048576\n",
                  {{b1_, "switch-facing"}, {b2_, "host-facing", 10}, {b3_, "host-facing"}});
  }
  void TearDown() override {
    for (auto* s : {&N_, &A_, &B_})
      if (*s) (*s)->stop();
    if (wire_) wire_->stop(SIGTERM);
    lab_.reset();
  }

  void burst_through_the_chain();

  int wire_delay_us_ = 0;
  std::unique_ptr<Lab> lab_;
  std::string h1_, a_, b_, h2_, h3_, h1if_, a1_, a2_, b1_, b2_, b3_, h2if_, w_, wire_json_;
  std::unique_ptr<SwitchAgent> N_, A_, B_;
  std::unique_ptr<Process> wire_;
};

// The link A -- B 250 us long (one way), the bench's default switch link.
class BfcHoldWire : public BfcHold {
 protected:
  BfcHoldWire() { wire_delay_us_ = 250; }
};

TEST_F(BfcHold, TaggedHopByHopPausesReachTheSourceNothingLostLightFlowFlows) { burst_through_the_chain(); }

// upstreamQ crosses a delayed link: sluice-wire carries A's tags to B (B
// pops them: its pause counters name A's queues) and B's pauses to A.
TEST_F(BfcHoldWire, UpstreamQAndPausesCrossADelayedLink) {
  burst_through_the_chain();
  if (HasFatalFailure()) return;
  wire_->stop(SIGTERM);
  std::ifstream f(wire_json_);
  ASSERT_TRUE(f.good()) << wire_->log();
  json j;
  f >> j;
  std::printf("wire A->B: %lu frames, %lu tagged, %lu untagged copies dropped, %lu missing; B->A: %lu frames\n",
              (unsigned long)u(j["a_to_b"], "frames"), (unsigned long)u(j["a_to_b"], "tagged"),
              (unsigned long)u(j["a_to_b"], "tagged_copies_dropped"),
              (unsigned long)u(j["a_to_b"], "tagged_copies_missing"), (unsigned long)u(j["b_to_a"], "frames"));
  // Every data frame A sent toward B was tagged, and left the wire tagged
  // (B popped at least as many: checked above); no untagged copy crossed.
  EXPECT_GE(u(j["a_to_b"], "tagged"), kHeavy);
  EXPECT_EQ(u(j["a_to_b"], "tagged_copies_dropped") + u(j["a_to_b"], "tagged_copies_missing"),
            u(j["a_to_b"], "tagged"));
  EXPECT_EQ(u(j["a_to_b"], "send_errors"), 0u);
  EXPECT_EQ(u(j["a_to_b"], "oversize_dropped"), 0u);
}

void BfcHold::burst_through_the_chain() {
  ASSERT_EQ(geteuid(), 0u);
  ASSERT_TRUE(N_->start());
  ASSERT_TRUE(A_->start());
  ASSERT_TRUE(B_->start());

  TagWatch h2tags;
  h2tags.start(h2_, h2if_);
  UdpSink heavy_rx, light_rx;
  heavy_rx.start(h2_, {kDport});
  light_rx.start(h3_, {kDport});
  UdpSource heavy, light;
  light.start(h1_, {{"10.74.3.2", kDport, 43001, 1, 1000}});  // ~8 Mbit/s, uncongested path
  // 1514-byte frames at ~120 Mbit/s, above N's 100 Mbit/s link: N's queue for the
  // burst never runs empty, so the burst keeps one queue there (sticky).
  heavy.start(h1_, {{"10.74.2.2", kDport, 43000, 10, 1472}});
  if (HasFatalFailure()) return;

  // While the burst is sent and drains: which queues are paused at A (by B)
  // and at N (by A), and which upstream queues B's counters name.
  std::set<uint16_t> paused_a, paused_n;
  std::set<std::pair<std::string, uint16_t>> counted_a, counted_b;
  bool heavy_stopped = false;
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t l0 = light_rx.got(), ls0 = light.sent();
  while (std::chrono::steady_clock::now() - t0 < 15s) {
    if (!heavy_stopped && heavy.sent() >= kHeavy) {
      heavy.halt();
      heavy_stopped = true;
    }
    json sa = A_->state(false), sn = N_->state(false), sb = B_->state(false);
    for (const auto& q : SwitchAgent::port(sa, a2_, false).value("queues", json::array()))
      if (q.value("paused", false)) paused_a.insert(q["queue"].get<uint16_t>());
    for (const auto& q : SwitchAgent::port(sn, h1if_, false).value("queues", json::array()))
      if (q.value("paused", false)) paused_n.insert(q["queue"].get<uint16_t>());
    // Non-zero pause counters: (ingress port, upstreamQ) at A and B.
    for (auto [st, out] : {std::pair{&sa, &counted_a}, std::pair{&sb, &counted_b}})
      if (st->contains("logic_state"))
        for (const auto& p : (*st)["logic_state"]["ports"])
          for (const auto& c : p["pause_counters"])
            out->insert({p["name"].get<std::string>(), c["upstream_q"].get<uint16_t>()});
    if (heavy_stopped && heavy_rx.got() >= heavy.sent()) break;
    std::this_thread::sleep_for(20ms);
  }
  const uint64_t light_got = light_rx.got() - l0, light_sent = light.sent() - ls0;
  light.halt();
  ASSERT_TRUE(heavy_stopped) << "the source sent only " << heavy.sent() << " datagrams";
  const uint64_t sent = heavy.sent();
  EXPECT_TRUE(eventually([&] { return heavy_rx.got() >= sent; }, 10s));

  json sn = N_->state(), sa = A_->state(), sb = B_->state();
  const json& cn = sn["logic_state"]["counters"];
  const json& ca = sa["logic_state"]["counters"];
  const json& cb = sb["logic_state"]["counters"];
  const json pn = SwitchAgent::port(sn, h1if_), pa1 = SwitchAgent::port(sa, a1_), pa2 = SwitchAgent::port(sa, a2_),
             pb1 = SwitchAgent::port(sb, b1_), pb2 = SwitchAgent::port(sb, b2_);
  auto ids = [](const std::set<uint16_t>& s) {
    std::string o;
    for (auto q : s) o += (o.empty() ? "" : ",") + std::to_string(q);
    return o;
  };
  auto pairs = [](const std::set<std::pair<std::string, uint16_t>>& s) {
    std::string o;
    for (const auto& pq : s) o += (o.empty() ? "" : ",") + pq.first + ":" + std::to_string(pq.second);
    return o;
  };
  std::printf(
      "heavy: %lu of %lu datagrams arrived; light: %lu of %lu\n"
      "pauses sent B %lu A %lu; received A %lu N %lu; collisions N %lu A %lu B %lu\n"
      "tags: N pushed %lu, A popped %lu pushed %lu, B popped %lu, B host-facing pushed %lu; h2 saw %lu tagged of %lu "
      "frames\nqueues paused at A (by B): {%s}; at N (by A): {%s}; counters (port:upstreamQ) A {%s} B {%s}\n",
      (unsigned long)heavy_rx.got(), (unsigned long)sent, (unsigned long)light_got, (unsigned long)light_sent,
      (unsigned long)u(cb, "pauses_sent"), (unsigned long)u(ca, "pauses_sent"), (unsigned long)u(ca, "pauses_rx"),
      (unsigned long)u(cn, "pauses_rx"), (unsigned long)u(cn, "collisions"), (unsigned long)u(ca, "collisions"),
      (unsigned long)u(cb, "collisions"), (unsigned long)u(pn["hold"], "uq_tagged"),
      (unsigned long)u(pa1["hold"], "uq_popped"), (unsigned long)u(pa2["hold"], "uq_tagged"),
      (unsigned long)u(pb1["hold"], "uq_popped"), (unsigned long)u(pb2["hold"], "uq_tagged"),
      (unsigned long)h2tags.tagged(), (unsigned long)h2tags.frames(), ids(paused_a).c_str(), ids(paused_n).c_str(),
      pairs(counted_a).c_str(), pairs(counted_b).c_str());

  // Tags: pushed toward switches (1514-byte frames + the tag went through
  // AF_PACKET and veth: no send error), popped by the next hop, never sent
  // toward a host.
  EXPECT_GE(u(pn["hold"], "uq_tagged"), sent);
  EXPECT_GE(u(pa1["hold"], "uq_popped"), sent);
  EXPECT_GE(u(pa2["hold"], "uq_tagged"), sent);
  EXPECT_GE(u(pb1["hold"], "uq_popped"), sent);
  EXPECT_EQ(u(pb2["hold"], "uq_tagged"), 0u);
  for (const json* p : {&pn, &pa1, &pa2, &pb1, &pb2}) EXPECT_EQ(u((*p)["hold"], "send_errors"), 0u);
  EXPECT_GT(h2tags.frames(), sent / 2);
  EXPECT_EQ(h2tags.tagged(), 0u) << "a host-facing port sent an upstreamQ tag";

  // Backpressure hop by hop: B paused A, A paused N.
  EXPECT_GT(u(cb, "pauses_sent"), 0u);
  EXPECT_GT(u(ca, "pauses_rx"), 0u);
  EXPECT_GT(u(ca, "pauses_sent"), 0u);
  EXPECT_GT(u(cn, "pauses_rx"), 0u);
  // ... counted per (ingress port, upstreamQ): at A only on its port toward
  // N, naming queues N sent from, among them the queue that carried most of
  // the burst at N; at B only on its port toward A (the host-facing ports
  // receive no tag and count nothing). Which of A's queues B names changes
  // over the run: A's queue for the burst runs empty while N is paused and
  // the flow takes a new queue after 2 HRTT idle (sticky, §3.3.2); a light
  // packet that finds every queue of A busy shares one above Th and
  // counts against the light flow's queue at N (A's collisions).
  uint16_t qn = 0;
  uint64_t most = 0;
  std::set<uint16_t> used_n;
  for (const auto& q : pn["queues"]) {
    if (u(q, "pkts_out") > 0) used_n.insert(q["queue"].get<uint16_t>());
    if (u(q, "pkts_out") > most) {
      most = u(q, "pkts_out");
      qn = q["queue"].get<uint16_t>();
    }
  }
  EXPECT_TRUE(counted_a.count({a1_, qn})) << "A never counted against the burst's queue at N (" << qn << ")";
  EXPECT_TRUE(paused_n.count(qn));
  for (const auto& pq : counted_a) {
    EXPECT_EQ(pq.first, a1_);
    EXPECT_TRUE(used_n.count(pq.second)) << "A counted against queue " << pq.second << ", which N never sent from";
  }
  EXPECT_FALSE(counted_b.empty());
  for (const auto& pq : counted_b) EXPECT_EQ(pq.first, b1_);
  EXPECT_FALSE(paused_a.empty());

  // Nothing lost: every datagram of the burst arrived, no queue dropped.
  EXPECT_EQ(heavy_rx.got(), sent);
  for (const json* p : {&pn, &pa1, &pa2, &pb1, &pb2})
    for (const auto& q : (*p)["queues"]) EXPECT_EQ(u(q, "dropped"), 0u) << (*p)["name"];
  // The light flow, in other queues at every hop, was not blocked.
  EXPECT_GE(light_got, light_sent * 95 / 100) << "the light flow waited behind the paused queue";

  // TCP through the sender's NIC: a segment the NIC's agent takes counts as
  // sent (clsact's stolen verdict), so the transfer completes, with the
  // tags and pauses on the way.
  EXPECT_EQ(tcp_transfer(h1_, h2_, "10.74.2.2", 7300, 4 << 20, 30s), uint64_t(4 << 20));

  // Afterwards nothing stays paused.
  EXPECT_TRUE(eventually(
      [&] {
        for (auto* ag : {N_.get(), A_.get()}) {
          // A named copy: the range of a for over state()["ports"] would
          // refer into a temporary already destroyed (ASan: use after free).
          const json st = ag->state();
          for (const auto& p : st["ports"])
            for (const auto& q : p.value("queues", json::array()))
              if (q.value("paused", false)) return false;
        }
        return true;
      },
      5s));
}

TEST_F(BfcHold, ForeignTagsAreCountedAndLeftAlone) {
  ASSERT_EQ(geteuid(), 0u);
  ASSERT_TRUE(A_->start());
  // A site VLAN (VID 5) and a VID just past the upstreamQ range.
  send_tagged(h1_, h1if_, a1_, 5);
  send_tagged(h1_, h1if_, a1_, 0xF00 + 128);
  // An upstreamQ tag on a frame that is not IP (truncated IPv4 header): the
  // tag is popped, the frame goes on to the stack, which drops it.
  send_tagged(h1_, h1if_, a1_, 0xF00 + 3);
  EXPECT_TRUE(eventually(
      [&] {
        json p = SwitchAgent::port(A_->state(), a1_);
        return u(p["hold"], "uq_foreign") >= 2 && u(p["hold"], "uq_popped") >= 1;
      },
      5s))
      << SwitchAgent::port(A_->state(), a1_).dump(2);
  // The switch still forwards.
  EXPECT_TRUE(A_->answers());
  json p = SwitchAgent::port(A_->state(), a1_);
  EXPECT_EQ(u(p["hold"], "uq_failed"), 0u);
}

}  // namespace
