// bpf/switch/floodgate.bpf.c fg_egress through BPF_PROG_TEST_RUN, with the
// VOQs in the agent ([floodgate] voq = "agent", docs/floodgate.md "VOQs in
// the agent"): a frame with window passes and is counted as direct; out of
// window it is copied to the ring and stolen; while the destination has
// stolen bytes the agent has not finished it is stolen even with window
// (order); the agent's re-sent frames, frames in the fallback class (stale
// heartbeat) and frames too big to copy pass; other destinations keep their
// own window. The agent's KeySlots learns every key fg_egress adds, from
// the key ring or, after the ring lost some, by one walk of the tables.
#include <gtest/gtest.h>
#include <bpf/libbpf.h>
#include <linux/pkt_cls.h>

#include <cstring>

#include "core/bpf_util.h"
#include "mechanisms/floodgate/switch_keys.h"
#include "lib/packet.h"
#include "lib/prog_test.h"
#include "sluice/dstpause.h"
#include "sluice/floodgate_sw.h"
#include "sluice/switch.h"
#include "switch/control.h"
#include "floodgate_sw.skel.h"

SLUICE_SKELETON(floodgate_sw);

using namespace sluice;
using namespace sluice::test;
using sluice::floodgate::KeySlots;
using sluice::floodgate::SwKey;

namespace {

constexpr int kNext = -1;
constexpr uint32_t kMark = 0x5e1f;
constexpr uint32_t kLo = 1;  // BPF_PROG_TEST_RUN runs skbs on the loopback device
constexpr uint64_t kWindow = 3000;

class FloodgateSwTest : public ::testing::Test {
 protected:
  void SetUp() override {
    require_root();
    skel_ = std::make_unique<Skeleton<floodgate_sw>>();
    (*skel_)->rodata->reinject_mark = kMark;
    (*skel_)->rodata->divert_verdict = TC_ACT_STOLEN;
    skel_->load();
    ring_ = ring_buffer__new(bpf_map__fd((*skel_)->maps.sl_fg_voq_v1), &collect_record<sl_dp_frame>, &frames_, nullptr);
    ASSERT_NE(ring_, nullptr);
    set_port(true);
  }
  void TearDown() override {
    if (ring_) ring_buffer__free(ring_);
  }
  void set_port(bool agent) {
    sl_fg_port p{};
    p.port_id = 0;
    p.windowed = 1;
    p.htb_major = 1;
    p.voq_agent = agent;
    p.init_window = kWindow;
    ASSERT_EQ(bpf_map_update_elem(bpf_map__fd((*skel_)->maps.sl_fg_port_v1), &kLo, &p, BPF_ANY), 0);
  }
  static sl_fg_key key(const std::string& dst) {
    sl_fg_key k{};
    auto a = sw::addr_parse(dst);
    std::memcpy(k.dst, a.data(), 16);
    return k;
  }
  // The dst's counters: its slot in sl_fg_tx_v1, the counters in .bss.
  sl_fg_tx tx(const std::string& dst) {
    uint32_t slot = 0;
    sl_fg_key k = key(dst);
    if (bpf_map_lookup_elem(bpf_map__fd((*skel_)->maps.sl_fg_tx_v1), &k, &slot) != 0 || slot >= SL_FG_SW_TABLE)
      return sl_fg_tx{};
    return (*skel_)->bss->fg_tx[slot];
  }
  void ag(const std::string& dst, sl_fg_ag a) {
    sl_fg_key k = key(dst);
    ASSERT_EQ(bpf_map_update_elem(bpf_map__fd((*skel_)->maps.sl_fg_ag_v1), &k, &a, BPF_ANY), 0);
  }
  int run(const Bytes& p, uint32_t mark = 0, uint32_t priority = 0, uint32_t ingress = 0) {
    struct __sk_buff in {
    }, out{};
    in.mark = mark;
    in.priority = priority;
    in.ingress_ifindex = ingress;
    LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = p.data(), .data_size_in = uint32_t(p.size()), .ctx_in = &in,
                .ctx_out = &out, .ctx_size_in = sizeof(in), .ctx_size_out = sizeof(out));
    EXPECT_EQ(bpf_prog_test_run_opts(bpf_program__fd((*skel_)->progs.fg_egress), &o), 0);
    return int(o.retval);
  }
  size_t stolen_frames() {
    frames_.clear();
    ring_buffer__consume(ring_);
    return frames_.size();
  }
  const sl_fg_voq_cnt& cnt() const { return (*skel_)->bss->fg_voq_cnt[0]; }

  std::unique_ptr<Skeleton<floodgate_sw>> skel_;
  ring_buffer* ring_ = nullptr;
  std::vector<sl_dp_frame> frames_;
};

}  // namespace

TEST_F(FloodgateSwTest, AgentVoqStealsOutOfWindowAndKeepsTheOrder) {
  PacketSpec d, e, big;
  d.dst = "10.0.9.1";
  d.payload = 1000;
  e.dst = "10.0.9.2";
  e.payload = 1000;
  big.dst = "10.0.9.1";
  big.payload = 2000;  // larger than a copy
  const Bytes fd = build(d), fe = build(e), fbig = build(big);
  const uint64_t len = fd.size();
  // The window (3000 B) lets frames pass while some of it is left (the
  // last may take it below zero): three of ~1054 B.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(run(fd), kNext) << i;
  EXPECT_EQ(tx("10.0.9.1").direct_bytes, 3 * len);
  EXPECT_EQ(stolen_frames(), 0u);
  // Exhausted: copied to the ring and stolen.
  EXPECT_EQ(run(fd), TC_ACT_STOLEN);
  ASSERT_EQ(stolen_frames(), 1u);
  EXPECT_EQ(frames_[0].len, len);
  EXPECT_TRUE(std::equal(fd.begin(), fd.end(), frames_[0].frame)) << "the copy is the frame";
  EXPECT_EQ(frames_[0].ifindex, kLo);
  EXPECT_EQ(std::memcmp(frames_[0].dst.addr, key("10.0.9.1").dst, 16), 0);
  EXPECT_EQ(tx("10.0.9.1").voq_bytes, len);
  EXPECT_EQ(cnt().stolen, 1u);
  // Another destination has its own window.
  EXPECT_EQ(run(fe), kNext);
  EXPECT_EQ(stolen_frames(), 0u);
  // A credit reopens the window, but a stolen frame is not sent yet: the
  // next frame follows it into the VOQ.
  ag("10.0.9.1", sl_fg_ag{3 * len, 0, 1, 0, 0});
  EXPECT_EQ(run(fd), TC_ACT_STOLEN);
  EXPECT_EQ(stolen_frames(), 1u);
  EXPECT_EQ(tx("10.0.9.1").voq_bytes, 2 * len);
  // The agent's re-sent frames pass, counted as such, never stolen again.
  EXPECT_EQ(run(fd, kMark), kNext);
  EXPECT_EQ(run(fd, kMark), kNext);
  EXPECT_EQ(stolen_frames(), 0u);
  EXPECT_EQ(cnt().reinjected, 2u);
  // Another mark is not ours.
  EXPECT_EQ(run(fd, kMark + 1), TC_ACT_STOLEN);
  EXPECT_EQ(stolen_frames(), 1u);
  // Fail open: the classifier's fallback class (stale heartbeat) passes.
  EXPECT_EQ(run(fd, 0, (1u << 16) | SL_SW_FALLBACK_MINOR), kNext);
  EXPECT_EQ(stolen_frames(), 0u);
  // Too big to copy: passes, counted as sent with the window.
  const uint64_t direct = tx("10.0.9.1").direct_bytes;
  EXPECT_EQ(run(fbig), kNext);
  EXPECT_EQ(cnt().too_big, 1u);
  EXPECT_EQ(tx("10.0.9.1").direct_bytes, direct + fbig.size());
  EXPECT_EQ(tx("10.0.9.1").voq_bytes, 3 * len) << "a frame that passed is not in the VOQ";
  // The agent finished every stolen byte and the window is open: passes.
  ag("10.0.9.1", sl_fg_ag{direct + fbig.size() + 3 * len, 3 * len, 0, 0, 3 * len});
  EXPECT_EQ(run(fd), kNext);
  EXPECT_EQ(stolen_frames(), 0u);
}

TEST_F(FloodgateSwTest, WithoutAgentVoqsOrWindowsNothingIsStolen) {
  PacketSpec d;
  d.dst = "10.0.9.1";
  d.payload = 1000;
  const Bytes fd = build(d);
  // Design A's TBF VOQs with none configured (nvoq 0): no window here.
  set_port(false);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(run(fd), kNext);
  EXPECT_EQ(stolen_frames(), 0u);
  EXPECT_EQ(tx("10.0.9.1").direct_bytes, 0u);
  // An unconfigured port: nothing at all.
  ASSERT_EQ(bpf_map_delete_elem(bpf_map__fd((*skel_)->maps.sl_fg_port_v1), &kLo), 0);
  EXPECT_EQ(run(fd), kNext);
  EXPECT_EQ(stolen_frames(), 0u);
}

// Every key fg_egress adds to sl_fg_tx_v1 or sl_fg_rx_v1 is announced once on
// sl_fg_keys_v1 with its slot, and its counters are in that slot of the .bss
// arrays fg_tx / fg_rx, so the agent reads them every T without a syscall
// instead of walking the tables' 16 384 buckets (docs/floodgate.md "Why the
// Poisson flows were slow").
TEST_F(FloodgateSwTest, NewKeysAreAnnouncedOnce) {
  RingRecords<sl_fg_new_key> keys(bpf_map__fd((*skel_)->maps.sl_fg_keys_v1));
  ASSERT_TRUE(keys.ok());
  PacketSpec d, e;
  d.dst = "10.0.9.1";
  d.payload = 100;
  e.dst = "10.0.9.2";
  e.payload = 100;
  const Bytes fd = build(d), fe = build(e);
  // In and out on the one test port (loopback): a receive key and a send key.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(run(fd, 0, 0, kLo), kNext);
  EXPECT_EQ(run(fe, 0, 0, kLo), kNext);
  keys.consume();
  ASSERT_EQ(keys.events.size(), 4u) << "two keys per destination, each once";
  const sl_fg_key kd = key("10.0.9.1"), ke = key("10.0.9.2");
  const uint32_t want_table[] = {SL_FG_KEY_RX, SL_FG_KEY_TX, SL_FG_KEY_RX, SL_FG_KEY_TX};
  const sl_fg_key* want_key[] = {&kd, &kd, &ke, &ke};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(keys.events[i].table, want_table[i]) << i;
    EXPECT_EQ(std::memcmp(&keys.events[i].key, want_key[i], sizeof(sl_fg_key)), 0) << i;
    // The announced key finds the entry, and it holds the announced slot.
    const int map = want_table[i] == SL_FG_KEY_TX ? bpf_map__fd((*skel_)->maps.sl_fg_tx_v1)
                                                  : bpf_map__fd((*skel_)->maps.sl_fg_rx_v1);
    uint32_t slot = ~0u;
    EXPECT_EQ(bpf_map_lookup_elem(map, &keys.events[i].key, &slot), 0) << i;
    EXPECT_EQ(slot, keys.events[i].slot) << i;
  }
  EXPECT_EQ((*skel_)->bss->fg_keys_lost, 0u);
  // The counters are in the slots: D's three frames, E's one, in and out.
  const auto& b = *(*skel_)->bss;
  EXPECT_EQ(b.fg_rx[keys.events[0].slot].pkts, 3u);
  EXPECT_EQ(b.fg_tx[keys.events[1].slot].direct_bytes, 3 * fd.size());
  EXPECT_EQ(b.fg_rx[keys.events[2].slot].bytes, fe.size());
  EXPECT_EQ(b.fg_tx[keys.events[3].slot].direct_pkts, 1u);
}

// A key the ring could not take (sl_fg_keys_v1 full) is counted in
// fg_keys_lost, and the agent's KeySlots (switch_keys.h) then walks both
// tables once: it still learns every key with its slot, and goes back to
// the ring afterwards (no walk without a new loss).
TEST_F(FloodgateSwTest, KeysTheRingLostAreFoundByAWalk) {
  KeySlots ks(bpf_map__fd((*skel_)->maps.sl_fg_keys_v1), bpf_map__fd((*skel_)->maps.sl_fg_tx_v1),
              bpf_map__fd((*skel_)->maps.sl_fg_rx_v1), &(*skel_)->bss->fg_keys_lost);
  // Two keys per destination (in and out on the test port), 40 B a record
  // in the ring: 1 200 destinations are more than its 64 KB hold.
  constexpr uint32_t kDsts = 1200;
  auto dst = [](uint32_t i) { return "10.2." + std::to_string(i / 200) + "." + std::to_string(1 + i % 200); };
  for (uint32_t i = 0; i < kDsts; ++i) {
    PacketSpec d;
    d.dst = dst(i);
    d.payload = 100;
    ASSERT_EQ(run(build(d), 0, 0, kLo), kNext) << i;
  }
  const uint64_t lost = (*skel_)->bss->fg_keys_lost;
  ASSERT_GT(lost, 0u) << "the ring must have overflowed for this test";
  ASSERT_LT(lost, 2u * kDsts);
  ks.learn();
  EXPECT_EQ(ks.walks(), 1u);
  EXPECT_EQ(ks.lost(), lost);
  ASSERT_EQ(ks.tx().size(), size_t(kDsts));
  ASSERT_EQ(ks.rx().size(), size_t(kDsts));
  const auto& b = *(*skel_)->bss;
  for (uint32_t i = 0; i < kDsts; ++i) {
    const sl_fg_key bk = key(dst(i));
    SwKey k{0, {}};
    std::memcpy(k.second.data(), bk.dst, 16);
    uint32_t tx_slot = ~0u, rx_slot = ~0u;
    ASSERT_EQ(bpf_map_lookup_elem(bpf_map__fd((*skel_)->maps.sl_fg_tx_v1), &bk, &tx_slot), 0) << i;
    ASSERT_EQ(bpf_map_lookup_elem(bpf_map__fd((*skel_)->maps.sl_fg_rx_v1), &bk, &rx_slot), 0) << i;
    ASSERT_TRUE(ks.tx_slot(k)) << i;
    EXPECT_EQ(*ks.tx_slot(k), tx_slot) << i;
    EXPECT_EQ(ks.rx().at(k), rx_slot) << i;
    // The slot the agent reads holds this destination's one frame.
    EXPECT_EQ(b.fg_tx[tx_slot].direct_pkts, 1u) << i;
    EXPECT_EQ(b.fg_rx[rx_slot].pkts, 1u) << i;
  }
  // The ring has room again: a new key comes by it, without another walk.
  PacketSpec e;
  e.dst = "10.3.0.1";
  e.payload = 100;
  ASSERT_EQ(run(build(e), 0, 0, kLo), kNext);
  EXPECT_EQ((*skel_)->bss->fg_keys_lost, lost);
  ks.learn();
  EXPECT_EQ(ks.walks(), 1u);
  EXPECT_EQ(ks.tx().size(), size_t(kDsts) + 1);
  EXPECT_EQ(ks.rx().size(), size_t(kDsts) + 1);
}
