// flowstat through BPF_PROG_TEST_RUN: verdicts, reason codes, flow entries.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include "flowstat.skel.h"
#include "core/bpf_util.h"
#include "lib/packet.h"
#include "lib/prog_test.h"
#include "sluice/flow.h"

SLUICE_SKELETON(flowstat);

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr int kNext = -1;  // TC_ACT_UNSPEC: the neutral verdict

class FlowstatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    require_root();
    skel_ = std::make_unique<Skeleton<flowstat>>();
    skel_->load();
  }
  int prog(bool egress = false) const {
    return bpf_program__fd(egress ? (*skel_)->progs.flowstat_out : (*skel_)->progs.flowstat_in);
  }
  uint64_t reason(uint32_t r) const { return read_reason_counters(bpf_map__fd((*skel_)->maps.sl_counters))[r].packets; }
  // The flow entry of a packet built from spec, seen at `dir`.
  bool flow(const PacketSpec& s, uint8_t dir, sluice_flow_stats* out) const {
    sluice_flow_key k{};
    k.family = s.ipv6 ? 6 : 4;
    inet_pton(s.ipv6 ? AF_INET6 : AF_INET, s.src.c_str(), k.saddr);
    inet_pton(s.ipv6 ? AF_INET6 : AF_INET, s.dst.c_str(), k.daddr);
    k.sport = htons(s.sport);
    k.dport = htons(s.dport);
    k.proto = s.proto;
    k.dir = dir;
    return bpf_map_lookup_elem(bpf_map__fd((*skel_)->maps.sl_fs_flows_v1), &k, out) == 0;
  }
  std::unique_ptr<Skeleton<flowstat>> skel_;
};

TEST_F(FlowstatTest, VerdictsAndFlowEntries) {
  PacketSpec data;
  data.payload = 1000;
  data.seq = 5000;
  PacketSpec data_ce = data;
  data_ce.tos = 0x03;  // CE
  data_ce.seq = 6000;
  PacketSpec retrans = data;  // same seq again
  PacketSpec udp;
  udp.proto = 17;
  udp.payload = 100;
  PacketSpec v6;
  v6.ipv6 = true;
  v6.src = "fd00::1";
  v6.dst = "fd00::2";
  v6.payload = 10;
  PacketSpec icmp;
  icmp.proto = 1;
  icmp.payload = 8;
  PacketSpec frag = udp;
  frag.frag_off = 100;  // non-first fragment
  PacketSpec arp;
  arp.ethertype = 0x0806;
  PacketSpec vlan = data;
  vlan.vlan = 7;
  vlan.sport = 41000;

  std::vector<BpfCase> cases = {
      {"TCP data creates a flow entry", build(data), kNext,
       [&](const RunResult&) {
         sluice_flow_stats st{};
         ASSERT_TRUE(flow(data, SLUICE_DIR_INGRESS, &st));
         EXPECT_EQ(st.packets, 1u);
         EXPECT_EQ(st.payload_bytes, 1000u);
         EXPECT_EQ(st.bytes, build(data).size());
         EXPECT_EQ(st.highest_seq_end, 6000u);
         EXPECT_EQ(st.retrans_hints, 0u);
       }},
      {"CE-marked data counts ce_packets", build(data_ce), kNext,
       [&](const RunResult&) {
         sluice_flow_stats st{};
         ASSERT_TRUE(flow(data, SLUICE_DIR_INGRESS, &st));
         EXPECT_EQ(st.packets, 2u);
         EXPECT_EQ(st.ce_packets, 1u);
         EXPECT_EQ(st.highest_seq_end, 7000u);
       }},
      {"a segment below the highest sequence is a retransmission hint", build(retrans), kNext,
       [&](const RunResult&) {
         sluice_flow_stats st{};
         ASSERT_TRUE(flow(data, SLUICE_DIR_INGRESS, &st));
         EXPECT_EQ(st.retrans_hints, 1u);
         EXPECT_EQ(st.highest_seq_end, 7000u);
       }},
      {"UDP is counted", build(udp), kNext,
       [&](const RunResult&) {
         sluice_flow_stats st{};
         ASSERT_TRUE(flow(udp, SLUICE_DIR_INGRESS, &st));
         EXPECT_EQ(st.payload_bytes, 100u);
       }},
      {"IPv6 TCP is counted", build(v6), kNext,
       [&](const RunResult&) {
         sluice_flow_stats st{};
         ASSERT_TRUE(flow(v6, SLUICE_DIR_INGRESS, &st));
         EXPECT_EQ(st.payload_bytes, 10u);
       }},
      {"802.1Q-tagged TCP is parsed through the tag", build(vlan), kNext,
       [&](const RunResult&) {
         sluice_flow_stats st{};
         ASSERT_TRUE(flow(vlan, SLUICE_DIR_INGRESS, &st));
       }},
      {"ICMP passes as other L4", build(icmp), kNext, nullptr},
      {"a non-first fragment passes without L4 parsing", build(frag), kNext, nullptr},
      {"ARP passes as not IP", build(arp), kNext, nullptr},
      {"a TCP header cut short passes as malformed", truncate(build(data), 14 + 20 + 10), kNext, nullptr},
  };
  run_table(prog(), cases);

  EXPECT_EQ(reason(SLUICE_R_PASS_COUNTED), 6u);
  EXPECT_EQ(reason(SLUICE_R_PASS_OTHER_L4), 1u);
  EXPECT_EQ(reason(SLUICE_R_PASS_IP_FRAGMENT), 1u);
  EXPECT_EQ(reason(SLUICE_R_PASS_NOT_IP), 1u);
  EXPECT_EQ(reason(SLUICE_R_PASS_MALFORMED), 1u);
}

TEST_F(FlowstatTest, EgressKeysByDirection) {
  PacketSpec ack;
  ack.flags = 0x10;
  RunResult r = run_tc(prog(true), build(ack));
  EXPECT_EQ(r.retval, kNext);
  sluice_flow_stats st{};
  EXPECT_TRUE(flow(ack, SLUICE_DIR_EGRESS, &st));
  EXPECT_FALSE(flow(ack, SLUICE_DIR_INGRESS, &st));
}

TEST_F(FlowstatTest, NeverRewritesThePacket) {
  PacketSpec s;
  s.payload = 64;
  s.tos = 0x02;
  Bytes in = build(s);
  RunResult r = run_tc(prog(), in);
  EXPECT_EQ(r.out, in);
}

TEST_F(FlowstatTest, GsoSegmentsCountAsWirePackets) {
  // A GSO skb of 10 MSS-sized segments counts as 10 packets.
  PacketSpec s;
  s.payload = 1448;
  Bytes in = build(s);
  __sk_buff ctx{};
  ctx.gso_segs = 10;
  ctx.gso_size = 1448;
  RunResult r = run_tc(prog(), in, &ctx, sizeof(ctx));
  EXPECT_EQ(r.retval, kNext);
  sluice_flow_stats st{};
  ASSERT_TRUE(flow(s, SLUICE_DIR_INGRESS, &st));
  EXPECT_EQ(st.packets, 10u);
}

}  // namespace
