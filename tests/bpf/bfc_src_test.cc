// bpf/host/bfc_src.bpf.c through BPF_PROG_TEST_RUN, table-driven: each IP
// flow gets a queue (round robin over the queues the switch has not
// paused), keeps it while active, is steered to that queue's HTB class and
// tagged with VID 0xF00 + queue (recorded per flow; the tag itself is an
// skb VLAN tag the test run does not copy out); tagged frames, non-IP and
// fragments pass untouched and are counted.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <bpf/libbpf.h>

#include <cstring>

#include "bfc_src.skel.h"
#include "core/bpf_util.h"
#include "lib/packet.h"
#include "lib/prog_test.h"
#include "sluice/bfc.h"

SLUICE_SKELETON(bfc_src);

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr int kNext = -1;
constexpr uint32_t kMajor = 0x10;

class BfcSrcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    require_root();
    skel_ = std::make_unique<Skeleton<bfc_src>>();
    (*skel_)->rodata->num_queues = 4;
    (*skel_)->rodata->htb_major = kMajor;
    (*skel_)->rodata->sticky_ns = 60'000'000'000ull;  // no flow goes idle during the test
    skel_->load();
    prog_ = bpf_program__fd((*skel_)->progs.bfc_src_egress);
    flows_ = bpf_map__fd((*skel_)->maps.sl_bfc_flows_v1);
    paused_ = bpf_map__fd((*skel_)->maps.sl_bfc_pause_v1);
    counters_ = bpf_map__fd((*skel_)->maps.sl_bfc_cnt_v1);
  }
  uint64_t counter(uint32_t slot) { return percpu_packets<sl_bfc_counter>(counters_, slot); }
  void pause(uint32_t q, bool on) {
    uint32_t v = on;
    ASSERT_EQ(bpf_map_update_elem(paused_, &q, &v, BPF_ANY), 0);
  }
  static sl_sw_flow_tuple key(const PacketSpec& s) {
    sl_sw_flow_tuple k{};
    if (s.ipv6) {
      inet_pton(AF_INET6, s.src.c_str(), k.src);
      inet_pton(AF_INET6, s.dst.c_str(), k.dst);
    } else {
      k.src[10] = k.src[11] = k.dst[10] = k.dst[11] = 0xff;
      inet_pton(AF_INET, s.src.c_str(), &k.src[12]);
      inet_pton(AF_INET, s.dst.c_str(), &k.dst[12]);
    }
    k.sport = htons(s.sport);
    k.dport = htons(s.dport);
    k.proto = s.proto;
    return k;
  }
  // The flow's entry, or nullopt.
  std::optional<sl_bfc_flow> flow(const PacketSpec& s) {
    sl_sw_flow_tuple k = key(s);
    sl_bfc_flow f{};
    if (bpf_map_lookup_elem(flows_, &k, &f)) return std::nullopt;
    return f;
  }
  // Runs the program; returns the verdict, the frame after it and
  // skb->priority after it.
  struct Out {
    int verdict = -1000;
    Bytes frame;
    uint32_t priority = 0;
  };
  Out run(const Bytes& pkt) {
    Out r;
    struct __sk_buff in {
    }, out{};
    r.frame.assign(pkt.size() + 64, 0);
    LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = pkt.data(), .data_out = r.frame.data(),
                .data_size_in = uint32_t(pkt.size()), .data_size_out = uint32_t(r.frame.size()), .ctx_in = &in,
                .ctx_out = &out, .ctx_size_in = sizeof(in), .ctx_size_out = sizeof(out));
    EXPECT_EQ(bpf_prog_test_run_opts(prog_, &o), 0) << strerror(errno);
    r.verdict = int(o.retval);
    r.frame.resize(o.data_size_out);
    r.priority = out.priority;
    return r;
  }

  std::unique_ptr<Skeleton<bfc_src>> skel_;
  int prog_ = -1, flows_ = -1, paused_ = -1, counters_ = -1;
};

PacketSpec tcp(uint16_t sport) {
  PacketSpec s;
  s.sport = sport;
  s.payload = 100;
  return s;
}

}  // namespace

TEST_F(BfcSrcTest, FlowsTakeQueuesRoundRobinAndKeepThem) {
  ASSERT_TRUE(kernel_at_least(5, 10));
  struct Row {
    const char* desc;
    PacketSpec spec;
    std::function<void()> before;
    uint32_t queue;  // expected queue of the flow after the packet
    bool new_flow;
  };
  PacketSpec v6 = tcp(7000);
  v6.ipv6 = true;
  v6.src = "fd00::1";
  v6.dst = "fd00::2";
  PacketSpec udp = tcp(8000);
  udp.proto = 17;
  std::vector<Row> rows = {
      {"first flow takes queue 0", tcp(1000), nullptr, 0, true},
      {"its next packet stays in queue 0", tcp(1000), nullptr, 0, false},
      {"second flow takes queue 1", tcp(1001), nullptr, 1, true},
      {"queue 2 paused: third flow skips to queue 3", tcp(1002), [&] { pause(2, true); }, 3, true},
      {"IPv6 flow wraps around to queue 0 (2 still paused)", v6, nullptr, 0, true},
      {"UDP flow takes queue 1", udp, nullptr, 1, true},
      {"queue 2 resumed: next flow takes it", tcp(1003), [&] { pause(2, false); }, 2, true},
      {"a flow in a paused queue keeps it (sticky, §3.3.2) and is counted", tcp(1001), [&] { pause(1, true); }, 1,
       false},
  };
  for (const auto& row : rows) {
    SCOPED_TRACE(row.desc);
    if (row.before) row.before();
    uint64_t tagged = counter(SL_BFC_SRC_TAGGED), fresh = counter(SL_BFC_SRC_NEW_FLOW);
    uint64_t to_paused = counter(SL_BFC_SRC_TO_PAUSED);
    Out r = run(build(row.spec));
    EXPECT_EQ(r.verdict, kNext);
    const uint32_t prio = r.priority;
    auto f = flow(row.spec);
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->queue, row.queue);
    EXPECT_EQ(f->tci, SLUICE_BFC_VID_BASE + row.queue);
    EXPECT_EQ(sl_bfc_tci_queue(f->tci), int(row.queue));
    EXPECT_EQ(prio, (kMajor << 16) | (row.queue + 1)) << "HTB class major:(queue + 1)";
    EXPECT_EQ(counter(SL_BFC_SRC_TAGGED) - tagged, 1u);
    EXPECT_EQ(counter(SL_BFC_SRC_NEW_FLOW) - fresh, row.new_flow ? 1u : 0u);
    EXPECT_EQ(counter(SL_BFC_SRC_TO_PAUSED) - to_paused, row.queue == 1 && !row.new_flow ? 1u : 0u);
  }
}

TEST_F(BfcSrcTest, WhatIsNotOursPassesUntouched) {
  PacketSpec arp;
  arp.ethertype = 0x0806;
  PacketSpec tagged = tcp(2000);
  tagged.vlan = 100;
  PacketSpec frag = tcp(2001);
  frag.frag_off = 0x0010;  // a later fragment: no ports to name a flow by
  struct Row {
    const char* desc;
    Bytes pkt;
    uint32_t slot;
  };
  std::vector<Row> rows = {
      {"ARP", build(arp), SL_BFC_SRC_PASS_NOT_IP},
      {"already VLAN tagged (a site VLAN, or tagged twice)", build(tagged), SL_BFC_SRC_PASS_TAGGED},
      {"IPv4 fragment", build(frag), SL_BFC_SRC_PASS_NOT_IP},
  };
  for (const auto& row : rows) {
    SCOPED_TRACE(row.desc);
    uint64_t before = counter(row.slot), tagged_before = counter(SL_BFC_SRC_TAGGED);
    Out r = run(row.pkt);
    EXPECT_EQ(r.verdict, kNext);
    EXPECT_EQ(r.frame, row.pkt) << "the frame must not change";
    EXPECT_EQ(r.priority, 0u);
    EXPECT_EQ(counter(row.slot) - before, 1u);
    EXPECT_EQ(counter(SL_BFC_SRC_TAGGED), tagged_before);
  }
  EXPECT_FALSE(flow(tagged).has_value());
}

TEST(BfcTag, VidNamesTheQueue) {
  for (uint32_t q : {0u, 1u, 31u, 127u}) {
    EXPECT_EQ(sl_bfc_queue_tci(q), SLUICE_BFC_VID_BASE + q);
    EXPECT_EQ(sl_bfc_tci_queue(sl_bfc_queue_tci(q)), int(q));
    EXPECT_EQ(sl_bfc_tci_queue(uint16_t(0xE000 | sl_bfc_queue_tci(q))), int(q)) << "PCP/DEI ignored";
  }
  EXPECT_EQ(sl_bfc_tci_queue(100), -1) << "a site VLAN is not an upstreamQ";
  EXPECT_EQ(sl_bfc_tci_queue(SLUICE_BFC_VID_BASE + 128), -1);
  EXPECT_EQ(sl_bfc_tci_queue(SLUICE_BFC_VID_BASE - 1), -1);
}
