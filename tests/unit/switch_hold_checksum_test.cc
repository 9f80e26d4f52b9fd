// The held data path completes a TCP/UDP checksum the device was to fill
// (a frame taken at tc egress as CHECKSUM_PARTIAL) before re-injecting it
// (complete_l4_checksum, agent/core/checksum.h): a checksum that verifies
// is left alone; any other value is replaced by the complete one (what a
// NIC would write); IPv4 UDP without a checksum and fragments are left.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "lib/packet.h"
#include "core/checksum.h"
#include "switch/hold_path.h"
#include "switch/ecn.h"
#include "sluice/switch.h"

using namespace sluice;
using namespace sluice::test;

namespace {

struct Case {
  bool ipv6;
  uint8_t proto;
  size_t payload;
  int vlan;
};

TEST(HoldChecksum, CompletesWhatDoesNotVerifyAndLeavesTheRest) {
  for (const Case& c : std::vector<Case>{{false, 17, 100, -1},
                                         {false, 17, 1401, -1},
                                         {false, 6, 1448, -1},
                                         {false, 6, 0, 5},
                                         {true, 17, 999, -1},
                                         {true, 6, 1428, -1},
                                         {true, 6, 1, 7}}) {
    SCOPED_TRACE(std::string(c.ipv6 ? "v6 " : "v4 ") + (c.proto == 6 ? "tcp " : "udp ") + std::to_string(c.payload) +
                 (c.vlan >= 0 ? " vlan" : ""));
    PacketSpec s;
    s.ipv6 = c.ipv6;
    if (c.ipv6) {
      s.src = "2001:db8::1";
      s.dst = "2001:db8::2";
    }
    s.proto = c.proto;
    s.payload = c.payload;
    s.vlan = c.vlan;
    const Bytes good = build(s);
    const size_t l3 = c.vlan >= 0 ? 18 : 14, l4 = l3 + (c.ipv6 ? 40 : 20);
    const size_t field = l4 + (c.proto == 6 ? 16 : 6);
    const int family = c.ipv6 ? 6 : 4;

    Bytes f = good;
    EXPECT_FALSE(complete_l4_checksum(f.data(), f.size(), l3, l4, family, c.proto)) << "it verifies";
    EXPECT_EQ(f, good);
    for (uint16_t partial : {0x0001, 0x1234, 0xfffe, 0x8000}) {
      f = good;
      f[field] = uint8_t(partial >> 8);
      f[field + 1] = uint8_t(partial);
      if (f == good) continue;
      EXPECT_TRUE(complete_l4_checksum(f.data(), f.size(), l3, l4, family, c.proto)) << partial;
      EXPECT_EQ(f, good) << "field " << partial;
    }
  }
}

TEST(HoldChecksum, LeavesUdpWithoutChecksumFragmentsAndOtherProtocols) {
  PacketSpec s;
  s.proto = 17;
  s.payload = 64;
  Bytes f = build(s);
  f[14 + 20 + 6] = f[14 + 20 + 7] = 0;  // IPv4 UDP: no checksum
  Bytes before = f;
  EXPECT_FALSE(complete_l4_checksum(f.data(), f.size(), 14, 34, 4, 17));
  EXPECT_EQ(f, before);

  s.frag_off = 0x2000;  // more fragments
  f = build(s);
  f[14 + 20 + 6] ^= 0xff;
  before = f;
  EXPECT_FALSE(complete_l4_checksum(f.data(), f.size(), 14, 34, 4, 17));
  EXPECT_EQ(f, before);

  s.frag_off = 0;
  s.proto = 1;
  f = build(s);
  before = f;
  EXPECT_FALSE(complete_l4_checksum(f.data(), f.size(), 14, 34, 4, 1));
  EXPECT_EQ(f, before);
  // Truncated: the IP length says more than the frame holds.
  s.proto = 6;
  f = build(s);
  f.resize(f.size() - 10);
  before = f;
  EXPECT_FALSE(complete_l4_checksum(f.data(), f.size(), 14, 34, 4, 6));
  EXPECT_EQ(f, before);
}

// A TCP packet of 100 payload bytes with DSCP 46 and the ECN bits `ecn`.
PacketSpec ecn_tcp(bool v6, uint8_t ecn) {
  PacketSpec s;
  s.ipv6 = v6;
  if (v6) {
    s.src = "2001:db8::1";
    s.dst = "2001:db8::2";
  }
  s.proto = 6;
  s.payload = 100;
  s.tos = uint8_t(0xb8 | ecn);
  return s;
}

}  // namespace

// [switch] hold_backlog_us as frames in the root qdisc: that much link time
// of full-size frames, at least one.
TEST(HoldBacklog, IsTheConfiguredTimeOfFullFramesAtTheRateAndAtLeastOne) {
  EXPECT_EQ(sw::HoldPath::backlog_target(100'000'000), 1u);    // 121 us per frame
  EXPECT_EQ(sw::HoldPath::backlog_target(1'000'000'000), 8u);  // 100 us / 12.1 us
  EXPECT_EQ(sw::HoldPath::backlog_target(1'000'000'000, 150), 12u);
  EXPECT_EQ(sw::HoldPath::backlog_target(1'000'000'000, 1), 1u);  // never 0
  EXPECT_EQ(sw::HoldPath::backlog_target(100'000'000, 1000), 8u);
}

// [switch] ecn_threshold_packets: the held data path's CE mark (mark_ce).
// ECT(0)/ECT(1) become CE, the IPv4 header checksum still verifies (and is
// what building the packet with CE gives); CE stays; Not-ECT is left alone.
TEST(HoldEcn, MarksEctPacketsAndKeepsTheHeaderChecksum) {
  for (bool v6 : {false, true}) {
    for (uint8_t ecn : {0, 1, 2, 3}) {
      SCOPED_TRACE(std::string(v6 ? "v6" : "v4") + " ecn " + std::to_string(ecn));
      Bytes f = build(ecn_tcp(v6, ecn));
      const Bytes want = ecn ? build(ecn_tcp(v6, 3)) : f;  // DSCP 46 kept
      const int r = sw::mark_ce(f.data(), f.size(), 14, v6 ? 6 : 4);
      EXPECT_EQ(r, ecn == 0 ? -1 : ecn == 3 ? 0 : 1);
      EXPECT_EQ(f, want);
    }
  }
}

// mark_ce_frame (the agent's Floodgate VOQs): the same mark found from the
// Ethernet header, behind one 802.1Q tag too; not IP or cut short: -1,
// the frame unchanged.
TEST(HoldEcn, MarksAWholeFrameTaggedOrNot) {
  for (bool tagged : {false, true}) {
    for (bool v6 : {false, true}) {
      SCOPED_TRACE(std::string(tagged ? "802.1Q " : "") + (v6 ? "v6" : "v4"));
      Bytes f = build(ecn_tcp(v6, 2)), want = build(ecn_tcp(v6, 3));
      if (tagged) {
        const uint8_t tag[4] = {0x81, 0x00, 0x00, 0x07};
        f.insert(f.begin() + 12, tag, tag + 4);
        want.insert(want.begin() + 12, tag, tag + 4);
      }
      EXPECT_EQ(sw::mark_ce_frame(f.data(), f.size()), 1);
      EXPECT_EQ(f, want);
      EXPECT_EQ(sw::mark_ce_frame(f.data(), f.size()), 0) << "already CE";
    }
  }
  PacketSpec s;
  s.proto = 6;
  s.tos = 2;
  Bytes f = build(s);
  f[12] = 0x08;
  f[13] = 0x06;  // ARP
  const Bytes arp = f;
  EXPECT_EQ(sw::mark_ce_frame(f.data(), f.size()), -1);
  EXPECT_EQ(f, arp);
  Bytes cut = build(s);
  cut.resize(14 + 10);  // the IPv4 header cut short
  const Bytes cut0 = cut;
  EXPECT_EQ(sw::mark_ce_frame(cut.data(), cut.size()), -1);
  EXPECT_EQ(cut, cut0);
}

// The held path sends the network's own control plane past the logic and
// the queues: frames that are not IP and IPv6 neighbour discovery (ICMPv6
// 133-137), read from the diverted frame; every other IP frame, ICMPv6
// echo included, is data.
TEST(HoldNetworkControl, NotIpAndNeighbourDiscoveryOnly) {
  auto event = [](const Bytes& frame, bool is_ip, uint8_t family, uint8_t proto, uint16_t l4_off) {
    auto ev = std::make_unique<sl_sw_hold_event>();
    std::memset(ev.get(), 0, sizeof(*ev));
    std::memcpy(ev->frame, frame.data(), std::min(frame.size(), sizeof(ev->frame)));
    ev->len = uint32_t(frame.size());
    ev->is_ip = is_ip;
    ev->family = family;
    ev->tuple.proto = proto;
    ev->l4_off = l4_off;
    return ev;
  };
  PacketSpec arp;
  arp.ethertype = 0x0806;
  EXPECT_TRUE(sw::HoldPath::network_control(*event(build(arp), false, 0, 0, 0)));
  for (int type = 0; type < 256; ++type)
    EXPECT_EQ(sw::HoldPath::network_control(*event(icmpv6_frame(uint8_t(type)), true, 6, 58, 54)),
              type >= 133 && type <= 137)
        << type;
  const Bytes ns = icmpv6_frame(135);
  EXPECT_FALSE(sw::HoldPath::network_control(*event(ns, true, 4, 58, 54))) << "IPv4 has no ND";
  EXPECT_FALSE(sw::HoldPath::network_control(*event(ns, true, 6, 17, 54))) << "UDP";
  EXPECT_FALSE(sw::HoldPath::network_control(*event(ns, true, 6, 58, uint16_t(ns.size())))) << "type past the end";
  PacketSpec udp;
  EXPECT_FALSE(sw::HoldPath::network_control(*event(build(udp), true, 4, 17, 34)));
}
