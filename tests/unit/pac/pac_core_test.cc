// PAC agent logic against hand-computed cases from the paper's equations
// (pac-icnp14 §III): eq. (2), (3), (6), MLFQ order, Algorithm 1's release
// rule, stale ACK handling and the bad-input rules.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <map>

#include "core/checksum.h"
#include "core/config.h"
#include "mechanisms/mechanisms.h"
#include "mechanisms/pac/pac_config.h"
#include "mechanisms/pac/pac_core.h"
#include "mechanisms/pac/reinject.h"
#include "lib/packet.h"
#include "sluice/pac.h"

using namespace sluice;
using namespace sluice::pac;

namespace {

constexpr uint32_t kMss = 1448;

// ---- eq. (3) -------------------------------------------------------------

TEST(PacTrigger, SlowStartAddsTheAckedSegments) {
  // One MSS acked in slow start: delta + MSS (the paper's Reno case).
  EXPECT_EQ(sluice_pac_trigger(1000, 1, 1000 + kMss, kMss, 0, 0, 0), 2 * kMss);
  // Delayed ACK covering two segments: Linux slow start grows cwnd by two
  // segments, so the ACK lets 2 + 2 segments out.
  EXPECT_EQ(sluice_pac_trigger(1000, 1, 1000 + 2 * kMss, kMss, 0, 0, 0), 4 * kMss);
  // A partial ACK smaller than an MSS still grows cwnd by one segment.
  EXPECT_EQ(sluice_pac_trigger(1000, 1, 1100, kMss, 0, 0, 0), 100 + kMss);
}

TEST(PacTrigger, CongestionAvoidanceAddsMssSquaredOverWindow) {
  // delta 2896 + 1448*1448/14480 = 2896 + 144 (integer division).
  EXPECT_EQ(sluice_pac_trigger(0, 1, 2 * kMss, kMss, 10 * kMss, 1, 0), 2 * kMss + 144);
  // Unknown window (0) counts as one MSS: increment = MSS.
  EXPECT_EQ(sluice_pac_trigger(0, 1, kMss, kMss, 0, 1, 0), 2 * kMss);
  // Huge window: the increment never rounds to nothing.
  EXPECT_EQ(sluice_pac_trigger(0, 1, kMss, kMss, 0xffffffffu, 1, 0), kMss + 1);
}

TEST(PacTrigger, EceCountsOnlyTheAckedBytes) {
  EXPECT_EQ(sluice_pac_trigger(5000, 1, 5000 + 3 * kMss, kMss, 0, 0, 1), 3 * kMss);
  EXPECT_EQ(sluice_pac_trigger(5000, 1, 5000 + 3 * kMss, kMss, 20000, 1, 1), 3 * kMss);
}

TEST(PacTrigger, DuplicateStaleAndFirstAcks) {
  EXPECT_EQ(sluice_pac_trigger(7000, 1, 7000, kMss, 0, 0, 0), kMss) << "dupack clocks one segment";
  EXPECT_EQ(sluice_pac_trigger(7000, 1, 6000, kMss, 0, 0, 0), 0u) << "an ACK behind ACK_prev triggers nothing";
  EXPECT_EQ(sluice_pac_trigger(0, 0, 123456, kMss, 0, 0, 0), 2 * kMss) << "no ACK_prev: delta = one MSS";
  EXPECT_EQ(sluice_pac_trigger(0, 1, 1000, 0, 0, 0, 0), 1000u + SLUICE_PAC_DEFAULT_MSS)
      << "mss 0 falls back to the default";
}

TEST(PacTrigger, SequenceNumbersWrap) {
  // 0xffffff00 -> 0x100 is 512 bytes forward, not 4 GB backward.
  EXPECT_EQ(sluice_pac_trigger(0xffffff00u, 1, 0x100u, kMss, 0, 0, 0), 512 + kMss);
  EXPECT_EQ(sluice_pac_trigger(0x100u, 1, 0xffffff00u, kMss, 0, 0, 0), 0u);
  EXPECT_EQ(sluice_pac_seq_delta(0xfffffff0u, 0x10u), 0x20);
}

// ---- eq. (2) -------------------------------------------------------------

// Algorithm 1 line 11 (shared by the kernel's admission and wake-up and the
// agent's release): in_flight + trigger <= threshold, an empty pipe admits
// anything, a trigger of 0 always fits.
TEST(PacFits, Algorithm1Line11) {
  EXPECT_TRUE(sluice_pac_fits(100000, 31072, 131072));   // exactly at the threshold
  EXPECT_FALSE(sluice_pac_fits(100000, 31073, 131072));  // one byte over
  EXPECT_TRUE(sluice_pac_fits(0, 1 << 20, 131072));      // empty pipe: any single ACK
  EXPECT_TRUE(sluice_pac_fits(-5000, 1 << 20, 131072));  // over-corrected estimate counts as empty
  EXPECT_TRUE(sluice_pac_fits(500000, 0, 131072));       // triggers nothing
  EXPECT_FALSE(sluice_pac_fits(131073, 1, 131072));
}

TEST(PacThreshold, Equation2) {
  EXPECT_EQ(adapt_threshold(100000, 0.5, 131072, 2896), 75000u);   // ×(1 − 0.25)
  EXPECT_EQ(adapt_threshold(100000, 1.0, 131072, 2896), 50000u);   // ×(1 − 0.5)
  EXPECT_EQ(adapt_threshold(100000, 0.0, 131072, 2896), 131072u);  // min(200000, buffer)
  EXPECT_EQ(adapt_threshold(40000, 0.0, 131072, 2896), 80000u);    // doubles
  EXPECT_EQ(adapt_threshold(3000, 1.0, 131072, 2896), 2896u);      // floor
}

// ---- eq. (6) -------------------------------------------------------------

TEST(PacCorrection, Equation6) {
  DeviationCorrector c(0.8, 0.125);
  EXPECT_FALSE(c.on_interval(1e8, 100000, 0));  // primes BW_S = 1e8, in_flight_S = 1e5
  EXPECT_DOUBLE_EQ(c.bw_s(), 1e8);
  EXPECT_DOUBLE_EQ(c.in_flight_s(), 1e5);
  // BW_T = 0.5·BW_S <= λ·BW_S: in_flight = min(200000, 1e5·5e7/1e8) = 50000.
  auto r = c.on_interval(5e7, 200000, 0);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, 50000);
  // Filters moved by the gain: BW_S = 1e8 + (5e7−1e8)/8, in_flight_S from the corrected value.
  EXPECT_DOUBLE_EQ(c.bw_s(), 1e8 - 5e7 / 8);
  EXPECT_DOUBLE_EQ(c.in_flight_s(), 1e5 + (50000 - 1e5) / 8);
}

TEST(PacCorrection, AlphaWidensTheBoundAndHighAlphaKeepsTheEstimate) {
  DeviationCorrector a(0.8, 0.125);
  a.on_interval(1e8, 100000, 0);
  // α = 0.5: 1e5·5e7 / (1e8·0.75) = 66666.
  auto r = a.on_interval(5e7, 200000, 0.5);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, 66666);
  DeviationCorrector b(0.8, 0.125);
  b.on_interval(1e8, 100000, 0);
  // α = 1: BW_T/(BW_S·0.5) = 1.4 > 1: cannot tell congestion from
  // over-estimation, keep in_flight.
  EXPECT_FALSE(b.on_interval(7e7, 100000, 1.0));
  // No reduction of throughput (BW_T > λ·BW_S): no correction.
  DeviationCorrector d(0.8, 0.125);
  d.on_interval(1e8, 100000, 0);
  EXPECT_FALSE(d.on_interval(0.81e8, 500000, 0));
}

TEST(PacCorrection, ADropWhileNothingIsHeldIsNotBlamedOnTheEstimate) {
  DeviationCorrector c(0.8, 0.125);
  c.on_interval(1e8, 100000, 0);
  // BW_T halves, but no ACK was held in the interval: PAC slowed nothing
  // (the sender paused), the estimate stays; the filters still move.
  EXPECT_FALSE(c.on_interval(5e7, 200000, 0, /*holding=*/false));
  EXPECT_DOUBLE_EQ(c.bw_s(), 1e8 - 5e7 / 8);
  EXPECT_DOUBLE_EQ(c.in_flight_s(), 1e5 + (200000 - 1e5) / 8.0);
  // The same drop while ACKs are held is corrected by eq. (6):
  // in_flight_S·BW_T/BW_S = 112500 · 5e7 / 9.375e7 = 60000.
  auto r = c.on_interval(5e7, 200000, 0, /*holding=*/true);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, 60000);
}

// ---- §III-C phase inference -----------------------------------------------

TEST(PacPhase, TwoConsecutiveShortfallsMeanCongestionAvoidance) {
  PhaseTracker t;
  EXPECT_FALSE(t.on_interval(0, 10000, 0.8));      // nothing released before
  EXPECT_FALSE(t.on_interval(10000, 10000, 0.8));  // arrived as slow start predicts
  EXPECT_FALSE(t.on_interval(7000, 10000, 0.8));   // one shortfall (7000 <= 8000)
  EXPECT_FALSE(t.on_interval(9000, 10000, 0.8));   // recovered: the count restarts
  EXPECT_FALSE(t.on_interval(5000, 10000, 0.8));
  EXPECT_TRUE(t.on_interval(5000, 10000, 0.8));  // second in a row
  EXPECT_TRUE(t.ca());
  t.reset_slow_start();
  EXPECT_FALSE(t.ca());
}

// ---- engine --------------------------------------------------------------

// A datapath that accounts like the BPF egress program does for a
// re-injected ACK: in_flight += eq. (3) trigger of the flow.
struct FakeDatapath : Datapath {
  int64_t inflight = 0;
  uint64_t thr = 10 * kMss;
  bool fail = false;
  std::vector<std::pair<sluice_pac_flow_key, uint32_t>> sent;
  std::map<uint16_t, sluice_pac_flow_ctl> ctl;
  uint64_t wake_held = 0, wake_room = 0, ack_room = 0;
  std::map<uint16_t, std::pair<uint32_t, bool>> last;  // per flow (rport): ACK_prev

  int64_t in_flight() override { return inflight; }
  uint64_t threshold() override { return thr; }
  bool send(const sluice_pac_flow_key& k, const HeldAck& a) override {
    if (fail) return false;
    auto& l = last[k.rport];
    inflight += sluice_pac_trigger(l.first, l.second, a.ack, kMss, 0, 0, (a.flags & SLUICE_PAC_EVF_ECE) ? 1 : 0);
    if (!l.second || sluice_pac_seq_delta(l.first, a.ack) > 0) l.first = a.ack;
    l.second = true;
    sent.push_back({k, a.ack});
    return true;
  }
  void write_ctl(const sluice_pac_flow_key& k, const sluice_pac_flow_ctl& c) override { ctl[k.rport] = c; }
  void set_wake(uint64_t held, uint64_t room, uint64_t ack) override {
    ack_room = ack;
    wake_held = held;
    wake_room = room;
  }
};

sluice_pac_flow_key key(uint16_t rport) {
  sluice_pac_flow_key k{};
  k.family = 4;
  k.raddr[0] = htonl(0x0a000001);
  k.laddr[0] = htonl(0x0a000002);
  k.rport = rport;
  k.lport = 5201;
  return k;
}

sluice_pac_event held(uint16_t rport, uint32_t ack, uint64_t bytes, uint32_t last_ack = 0, uint8_t flags = 0,
                      uint32_t retrans = 0) {
  sluice_pac_event ev{};
  ev.type = SLUICE_PAC_EV_HELD;
  ev.key = key(rport);
  ev.ack = ack;
  ev.bytes_rcvd = bytes;
  ev.last_ack = last_ack;
  ev.ack_valid = 1;
  ev.mss = kMss;
  ev.flags = flags;
  ev.retrans_segs = retrans;
  ev.frame_len = 66;
  return ev;
}

std::vector<uint32_t> acks_of(const std::vector<std::pair<sluice_pac_flow_key, uint32_t>>& v) {
  std::vector<uint32_t> out;
  for (const auto& [k, a] : v) out.push_back(a);
  return out;
}

// A segment of ours that the program let pass (not held), carrying ACK
// `ack`: it supersedes the flow's held ACKs before it; 0x04 is a reset.
sluice_pac_event own_segment(uint16_t rport, uint32_t ack, uint8_t tcp_flags = 0x10) {
  sluice_pac_event ev{};
  ev.type = SLUICE_PAC_EV_SEGMENT;
  ev.key = key(rport);
  ev.ack = ack;
  ev.tcp_flags = tcp_flags;
  return ev;
}

// A held request of flow `rport` whose response is `bytes` (its trigger).
sluice_pac_event request(uint16_t rport, uint64_t bytes) {
  auto req = held(rport, 1000, 1000, 1000);
  req.req_bytes = bytes;
  return req;
}

// requests_yield (the pac-req setting), a threshold of 10 MSS with
// `inflight` in flight.
struct Yielding {
  FakeDatapath dp;
  Engine e;
  static Params params() {
    Params p;
    p.requests_yield = true;
    return p;
  }
  explicit Yielding(int64_t inflight) : e(params(), dp) {
    dp.inflight = inflight;
    dp.thr = 10 * kMss;
  }
  // Flow `rport` holds a request whose response is `bytes`.
  void hold_request(uint16_t rport, uint64_t bytes) { e.on_event(request(rport, bytes), 0); }
};

TEST(PacEngine, MlfqStrictPriorityAcrossLevelsRoundRobinWithin) {
  FakeDatapath dp;
  Params p;  // 2 levels at 20 KB
  Engine e(p, dp);
  // Flows 1 and 3 have received little (level 0), flow 2 is large (level 1).
  e.on_event(held(1, 1000 + kMss, 1000, 1000), 0);
  e.on_event(held(1, 1000 + 2 * kMss, 1000 + kMss, 1000), 0);
  e.on_event(held(2, 500000, 500000, 400000), 0);
  e.on_event(held(3, 9000 + kMss, 9000, 9000), 0);
  e.on_event(held(3, 9000 + 2 * kMss, 9000 + kMss, 9000), 0);
  EXPECT_EQ(e.held(), 5u);
  EXPECT_EQ(e.held_at_level(0), 4u);
  EXPECT_EQ(e.held_at_level(1), 1u);
  std::vector<uint32_t> want = {1000 + kMss, 9000 + kMss, 1000 + 2 * kMss, 9000 + 2 * kMss, 500000};
  EXPECT_EQ(acks_of(e.order()), want);
  // Everything fits: release follows the same order.
  dp.thr = 1 << 30;
  EXPECT_EQ(e.release(1000), 5u);
  EXPECT_EQ(acks_of(dp.sent), want);
  EXPECT_EQ(e.held(), 0u);
  EXPECT_EQ(dp.wake_held, 0u);
}

TEST(PacEngine, FlowSinksALevelAsItsBytesGrow) {
  FakeDatapath dp;
  Engine e(Params{}, dp);
  e.on_event(held(1, 2000, 1000, 1000), 0);
  EXPECT_EQ(e.held_at_level(0), 1u);
  e.on_event(held(1, 3000, 30000, 1000), 0);  // crossed 20 KB: the flow (with its queue) moves
  EXPECT_EQ(e.held_at_level(0), 0u);
  EXPECT_EQ(e.held_at_level(1), 2u);
  EXPECT_EQ(e.queued_acks(key(1)), (std::vector<uint32_t>{2000, 3000}));
}

TEST(PacEngine, Algorithm1ReleasesOnlyWhatFits) {
  FakeDatapath dp;
  dp.thr = 10 * kMss;
  dp.inflight = 7 * kMss;
  Engine e(Params{}, dp);
  // Each ACK acks one MSS in slow start: trigger 2 MSS.
  for (uint32_t i = 1; i <= 3; ++i) e.on_event(held(1, i * kMss, i * kMss, 0), 0);
  EXPECT_EQ(e.head_trigger(), 2 * kMss);
  // 7 + 2 <= 10: one goes; 9 + 2 > 10: the rest waits.
  EXPECT_EQ(e.release(10), 1u);
  EXPECT_EQ(dp.inflight, int64_t(9 * kMss));
  EXPECT_EQ(dp.wake_held, 2u);
  EXPECT_EQ(dp.wake_room, uint64_t(2 * kMss)) << "the ingress wake-up needs the head's trigger";
  // Data arrives (eq. 5): room for exactly one more.
  dp.inflight -= kMss;
  EXPECT_EQ(e.release(20), 1u);
  // An empty pipe releases even an ACK bigger than the threshold.
  dp.thr = kMss;
  dp.inflight = 0;
  EXPECT_EQ(e.release(30), 1u);
  EXPECT_EQ(e.held(), 0u);
  EXPECT_EQ(e.stats().released, 3u);
}

TEST(PacEngine, DuplicateAcksAreNeverCoalesced) {
  FakeDatapath dp;
  dp.thr = 1 << 30;
  dp.inflight = 1 << 30;  // nothing fits: all held
  Engine e(Params{}, dp);
  e.on_event(held(1, 5000, 5000, 4000), 0);
  for (int i = 0; i < 3; ++i) e.on_event(held(1, 5000, 5000 + i, 4000, SLUICE_PAC_EVF_SACK), 0);
  EXPECT_EQ(e.queued_acks(key(1)), (std::vector<uint32_t>{5000, 5000, 5000, 5000}));
  dp.inflight = 0;
  EXPECT_EQ(e.release(1), 4u);
  EXPECT_EQ(acks_of(dp.sent), (std::vector<uint32_t>{5000, 5000, 5000, 5000}));
}

TEST(PacEngine, StaleAckDropsOutOfOrderAcksBoostsAndResetsSlowStart) {
  FakeDatapath dp;
  dp.inflight = 1 << 30;
  Engine e(Params{}, dp);
  e.on_event(held(1, 100000, 100000, 90000), 0);  // level 1 (> 20 KB)
  e.on_event(held(1, 110000, 110000, 90000), 0);
  e.on_event(held(2, 3000, 3000, 2000), 0);  // level 0
  // Mark the flow CA first, so the reset is visible.
  e.on_flow_sample(key(1), 10, 10000, false);
  e.on_flow_sample(key(1), 10, 10000, false);
  e.on_flow_sample(key(1), 10, 10000, false);
  ASSERT_TRUE(e.flow_ca(key(1)));
  // A duplicate arrived (retrans_segs 1): the new ACK 120000 makes the held
  // 100000 and 110000 out of order: dropped; the flow goes to the top level.
  e.on_event(held(1, 120000, 120000, 90000, 0, 1), 0);
  EXPECT_EQ(e.queued_acks(key(1)), (std::vector<uint32_t>{120000}));
  EXPECT_EQ(e.stats().dropped_stale, 2u);
  EXPECT_EQ(e.stats().stale_events, 1u);
  EXPECT_EQ(e.held_at_level(0), 2u);
  EXPECT_FALSE(e.flow_ca(key(1)));
  ASSERT_TRUE(dp.ctl.count(1));
  EXPECT_EQ(dp.ctl[1].dropped, 2u) << "BPF learns the drops, so its held count returns to 0";
  EXPECT_EQ(dp.ctl[1].ca, 0);
}

TEST(PacEngine, NonHeldSegmentSupersedesOlderAcksButKeepsEqualOnes) {
  FakeDatapath dp;
  dp.inflight = 1 << 30;
  Engine e(Params{}, dp);
  for (uint32_t a : {1000u, 2000u, 2000u, 3000u}) e.on_event(held(1, a, a, 500), 0);
  e.on_event(own_segment(1, 2000, 0x18), 0);  // PSH|ACK: a request with data
  EXPECT_EQ(e.queued_acks(key(1)), (std::vector<uint32_t>{2000, 2000, 3000}));
  EXPECT_EQ(e.stats().dropped_superseded, 1u);
}

TEST(PacEngine, TeardownWhileHeldIsCountedNotSilent) {
  FakeDatapath dp;
  dp.inflight = 1 << 30;
  Engine e(Params{}, dp);
  e.on_event(held(1, 1000, 1000, 500), 0);
  e.on_event(held(1, 2000, 2000, 500), 0);
  sluice_pac_event rst{};
  rst.type = SLUICE_PAC_EV_SEGMENT;
  rst.key = key(1);
  rst.tcp_flags = 0x04;
  rst.flags = SLUICE_PAC_EVF_INGRESS;
  e.on_event(rst, 0);
  EXPECT_EQ(e.held(), 0u);
  EXPECT_EQ(e.stats().dropped_teardown, 2u);
  EXPECT_EQ(dp.ctl[1].dropped, 2u);
  // FIN does not drop: the ACKs still acknowledge data the sender waits for.
  e.on_event(held(2, 1000, 1000, 500), 0);
  sluice_pac_event fin = rst;
  fin.key = key(2);
  fin.tcp_flags = 0x11;
  e.on_event(fin, 0);
  EXPECT_EQ(e.held(), 1u);
}

TEST(PacEngine, FullQueueReleasesRatherThanDrops) {
  FakeDatapath dp;
  dp.inflight = 1 << 30;
  Params p;
  p.max_held = 2;
  Engine e(p, dp);
  for (uint32_t a : {1000u, 2000u, 3000u}) e.on_event(held(1, a, a, 500), 0);
  EXPECT_EQ(e.release(1), 1u);
  EXPECT_EQ(e.stats().released_queue_full, 1u);
  EXPECT_EQ(acks_of(dp.sent), (std::vector<uint32_t>{1000}));
  EXPECT_EQ(e.held(), 2u);
}

TEST(PacEngine, NothingIsHeldLongerThanMaxHold) {
  FakeDatapath dp;
  dp.inflight = 1 << 30;
  Params p;
  p.max_hold_ns = 1'000'000;
  Engine e(p, dp);
  e.on_event(held(1, 1000, 1000, 500), 0);
  e.on_event(held(1, 2000, 2000, 500), 900'000);
  EXPECT_EQ(e.release(999'999), 0u);
  EXPECT_EQ(e.release(1'000'001), 1u);
  EXPECT_EQ(e.release(1'900'001), 1u);
  EXPECT_EQ(e.stats().released_max_hold, 2u);
  EXPECT_EQ(acks_of(dp.sent), (std::vector<uint32_t>{1000, 2000}));
}

// max_hold of 1 ms for ACKs and 5 ms for requests; flow 1 holds a request
// (its trigger is the response it sets going) from t = 0; nothing fits.
struct HeldRequest {
  FakeDatapath dp;
  Engine e;
  static Params params() {
    Params p;
    p.max_hold_ns = 1'000'000;
    p.max_hold_request_ns = 5'000'000;
    return p;
  }
  HeldRequest() : e(params(), dp) {
    dp.inflight = 1 << 30;
    e.on_event(request(1, 65536), 0);
  }
};

TEST(PacEngine, HeldRequestsWaitLongerThanAcks) {
  HeldRequest c;
  EXPECT_EQ(c.e.head_trigger(), 65536u);
  EXPECT_EQ(c.e.release(2'000'000), 0u) << "an ACK would have gone by now, a request waits";
  EXPECT_EQ(c.e.release(5'000'001), 1u);
  EXPECT_EQ(c.e.stats().released_max_hold, 1u);
}

// A head that appears after a release() call (a new flow's ACK, an ACK
// uncovered behind a superseded request) still leaves at its own max_hold.
TEST(PacEngine, AHeadArrivingLaterStillLeavesAtMaxHold) {
  HeldRequest c;
  EXPECT_EQ(c.e.release(500'000), 0u);                 // nothing due: the request's limit is 5 ms
  c.e.on_event(held(2, 2000, 2000, 1000), 1'000'000);  // an ACK, due at 2 ms
  EXPECT_EQ(c.e.release(1'999'999), 0u);
  EXPECT_EQ(c.e.release(2'000'001), 1u);
  EXPECT_EQ(acks_of(c.dp.sent), (std::vector<uint32_t>{2000}));
  EXPECT_EQ(c.e.release(5'000'001), 1u);
  EXPECT_EQ(c.e.stats().released_max_hold, 2u);
}

TEST(PacEngine, AnAckUncoveredBehindASupersededRequestLeavesAtMaxHold) {
  HeldRequest c;
  c.e.on_event(held(1, 3000, 3000, 1000), 100'000);  // behind the request, due at 1.1 ms
  EXPECT_EQ(c.e.release(500'000), 0u);               // nothing due: the head (the request) has 5 ms
  c.e.on_event(own_segment(1, 2000), 600'000);       // the request is superseded
  EXPECT_EQ(c.e.stats().dropped_superseded, 1u);
  EXPECT_EQ(c.e.release(1'099'999), 0u);
  EXPECT_EQ(c.e.release(1'100'001), 1u);
  EXPECT_EQ(acks_of(c.dp.sent), (std::vector<uint32_t>{3000}));
  EXPECT_EQ(c.e.stats().released_max_hold, 1u);
}

TEST(PacEngine, HeldAcksGoBeforeARequestThatFitsAndTheKernelIsToldTheirRoom) {
  Yielding c(10 * kMss);        // nothing fits yet
  c.hold_request(1, 4 * kMss);  // fits by itself once there is room
  auto& [dp, e] = c;
  EXPECT_EQ(e.release(0), 0u);
  EXPECT_EQ(dp.ack_room, 0u) << "only a request is held: the kernel keeps nothing back";
  e.on_event(held(2, 5000 + 2 * kMss, 1000, 5000), 0);
  EXPECT_EQ(e.release(0), 0u);
  EXPECT_EQ(dp.ack_room, 2 * kMss) << "a held ACK: its trigger is kept free in the kernel";
  EXPECT_EQ(e.head_trigger(), 2 * kMss);
  // Room for the request or the ACK, not both: the ACK goes first, though
  // the request is ahead in the MLFQ and fits.
  dp.inflight = 6 * kMss;
  EXPECT_EQ(e.release(1), 1u);
  ASSERT_EQ(dp.sent.size(), 1u);
  EXPECT_EQ(dp.sent[0].first.rport, 2);
  EXPECT_EQ(dp.ack_room, 0u);
  EXPECT_EQ(e.head_trigger(), 4 * kMss) << "then the request";
}

// requests_yield: the kernel keeps room for the first ACK head, wherever it
// is and however it appeared or went.
TEST(PacEngine, TheKernelKeepsRoomForAnAckHeadBehindRequestsAndLevels) {
  Yielding c(10 * kMss);  // nothing fits
  for (uint16_t f = 1; f <= 3; ++f) c.hold_request(f, 4 * kMss);
  c.e.on_event(held(4, 5000 + 2 * kMss, 500000, 5000), 0);  // level 1: a flow far along
  EXPECT_EQ(c.e.held_at_level(1), 1u);
  EXPECT_EQ(c.e.release(0), 0u);
  EXPECT_EQ(c.dp.ack_room, 2 * kMss) << "the ACK at level 1, behind three requests at level 0";
  c.e.on_event(own_segment(4, 5000 + 3 * kMss), 0);  // our own segment acknowledged past it
  EXPECT_EQ(c.e.release(0), 0u);
  EXPECT_EQ(c.dp.ack_room, 0u) << "that ACK is gone: only requests are held";
}

TEST(PacEngine, AFlowFirstSeenInAMapScanThenHoldsLikeAnyOther) {
  Yielding c(10 * kMss);
  c.e.on_flow_sample(key(1), 4 * kMss, 4 * kMss, false);  // the agent's first sight of any flow
  c.e.on_event(held(1, 5000 + 2 * kMss, 1000, 5000), 0);
  EXPECT_EQ(c.e.release(0), 0u);
  EXPECT_EQ(c.dp.ack_room, 2 * kMss);
  c.dp.inflight = 0;
  EXPECT_EQ(c.e.release(1), 1u);
  EXPECT_EQ(c.e.held(), 0u);
}

TEST(PacEngine, AnAckUncoveredBehindASupersededRequestGetsTheKernelsRoom) {
  Yielding c(10 * kMss);
  c.hold_request(1, 4 * kMss);
  c.e.on_event(held(1, 3000 + 2 * kMss, 1000, 1000), 0);  // behind the request
  EXPECT_EQ(c.e.release(0), 0u);
  EXPECT_EQ(c.dp.ack_room, 0u) << "the flow's head is a request";
  c.e.on_event(own_segment(1, 2000), 0);  // the request is superseded, the ACK becomes the head
  EXPECT_EQ(c.e.release(0), 0u);
  EXPECT_GT(c.dp.ack_room, 0u) << "the uncovered ACK's trigger is kept free";
  EXPECT_EQ(c.e.head_trigger(), c.dp.ack_room);
}

TEST(PacEngine, UnderACappedWindowARequestThatDoesNotFitYieldsToAcksThatDo) {
  Yielding c(6 * kMss);
  c.hold_request(1, 8 * kMss);  // its response does not fit yet
  auto& [dp, e] = c;
  // An ACK of a response in progress (flow 2, a later level-0 arrival):
  // eq. (3) in slow start says 2 x 2 MSS; under a capped window it moves
  // the window's edge by the 2 MSS it acknowledges, no more.
  e.on_event(held(2, 5000 + 2 * kMss, 1000, 5000), 0);
  EXPECT_EQ(e.head_trigger(), 2 * kMss) << "the agent is woken for the ACK that can go";
  EXPECT_EQ(e.release(1), 1u);
  ASSERT_EQ(dp.sent.size(), 1u);
  EXPECT_EQ(dp.sent[0].first.rport, 2) << "the ACK went, the request still waits";
  dp.inflight = 0;
  EXPECT_EQ(e.release(2), 1u);
  EXPECT_EQ(dp.sent[1].first.rport, 1);
  // Without requests_yield (the paper's Algorithm 1) the head blocks.
  FakeDatapath dp2;
  dp2.inflight = 6 * kMss;
  Engine e2(Params{}, dp2);
  e2.on_event(request(1, 8 * kMss), 0);
  e2.on_event(held(2, 5000 + 2 * kMss, 1000, 5000), 0);
  EXPECT_EQ(e2.release(1), 0u);
}

TEST(PacEngine, AnAckThatTriggersNothingIsNeverHeldBack) {
  FakeDatapath dp;
  dp.inflight = 100 * kMss;  // far above the threshold
  dp.thr = 10 * kMss;
  Engine e(Params{}, dp);
  // ACK behind ACK_prev (reordered): trigger 0 per eq. (3): it cannot
  // overfill anything, so Algorithm 1 lets it go.
  e.on_event(held(1, 500, 500, 1000), 0);
  EXPECT_EQ(e.head_trigger(), 0u);
  EXPECT_EQ(e.release(1), 1u);
}

TEST(PacEngine, SendFailureIsCountedAndTheKernelToldOfTheLoss) {
  FakeDatapath dp;
  dp.fail = true;
  Engine e(Params{}, dp);
  e.on_event(held(1, 1000, 1000, 500), 0);
  EXPECT_EQ(e.flush(1), 1u);
  EXPECT_EQ(e.stats().send_failures, 1u);
  EXPECT_EQ(dp.ctl[1].dropped, 1u);
}

TEST(PacEngine, AckOfAFlowTheAgentNeverSawUsesTheKernelsAckPrev) {
  FakeDatapath dp;
  dp.inflight = 0;
  dp.thr = 100 * kMss;
  Engine e(Params{}, dp);
  // First event for this flow: ACK_prev comes from the event (kernel state).
  e.on_event(held(9, 50000 + kMss, 50000, 50000), 0);
  EXPECT_EQ(e.head_trigger(), 2 * kMss);
  dp.last[9] = {50000, true};
  EXPECT_EQ(e.release(1), 1u);
  EXPECT_EQ(dp.inflight, int64_t(2 * kMss));
}

// release() keeps a bound on the next max_hold deadline, each listed flow's
// place, and (requests_yield) the flows whose head is an ACK, instead of
// walking every holding flow per call. A random workload (holds, requests,
// our own segments, resets, stale ACKs, forgets, sends that fail, releases
// early and late) keeps that bookkeeping equal to what the queues say; a
// release past every deadline empties the queue.
TEST(PacEngine, BookkeepingSurvivesARandomWorkload) {
  for (bool yield : {false, true})
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      uint64_t x = seed * 0x9e3779b97f4a7c15ull;
      auto rnd = [&](uint64_t n) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return x % n;
      };
      FakeDatapath dp;
      Params p;
      p.requests_yield = yield;
      p.max_held = 64;
      p.level_bytes = {4 * kMss, 16 * kMss};
      p.max_hold_ns = 200'000;
      p.max_hold_request_ns = 1'000'000;
      Engine e(p, dp);
      std::map<uint16_t, uint32_t> acked;
      uint64_t now = 1'000'000;
      for (int step = 0; step < 3000; ++step) {
        now += rnd(20'000);
        auto f = uint16_t(1 + rnd(40));
        switch (rnd(10)) {
          case 0:
          case 1:
          case 2: {
            uint32_t prev = acked[f];
            acked[f] += uint32_t(kMss * rnd(3));
            auto ev = held(f, acked[f], acked[f], prev, 0, rnd(50) == 0 ? uint32_t(1 + step) : 0);
            if (rnd(4) == 0) ev.req_bytes = uint32_t(kMss * (1 + rnd(20)));
            e.on_event(ev, now);
            break;
          }
          case 3: e.on_event(own_segment(f, acked[f], rnd(10) == 0 ? 0x04 : 0x10), now); break;
          case 4: e.forget(key(f)); break;
          case 5: dp.fail = rnd(8) == 0; break;
          default:
            dp.inflight = int64_t(rnd(20 * kMss));
            e.release(now);
            break;
        }
        ASSERT_EQ(e.check(), "") << "seed " << seed << " step " << step << " yield " << yield;
      }
      e.release(now + p.max_hold_request_ns + 1);
      EXPECT_EQ(e.held(), 0u) << "everything is past max_hold";
      EXPECT_EQ(e.check(), "");
    }
}

// ---- re-injection checksum -------------------------------------------------

TEST(PacReinject, CompletesPartialChecksums) {
  for (bool v6 : {false, true}) {
    for (int vlan : {-1, 5}) {
      test::PacketSpec s;
      s.ipv6 = v6;
      if (v6) {
        s.src = "fd00::1";
        s.dst = "fd00::2";
      }
      s.vlan = vlan;
      s.ack = 123456;
      s.tcp_options = test::tcp_opt_timestamps(1, 2);
      test::Bytes f = test::build(s);
      ASSERT_TRUE(test::checksums_ok(f));
      // What tc egress sees for CHECKSUM_PARTIAL: some other value in the
      // TCP checksum field (here: garbage).
      size_t l4 = 14 + (vlan >= 0 ? 4 : 0) + (v6 ? 40 : 20);
      f[l4 + 16] = 0x12;
      f[l4 + 17] = 0x34;
      std::string why;
      EXPECT_FALSE(test::checksums_ok(f, &why));
      ASSERT_TRUE(complete_frame_checksum(f.data(), f.size()));
      EXPECT_TRUE(test::checksums_ok(f, &why)) << why << " v6=" << v6 << " vlan=" << vlan;
    }
  }
}

// A held UDP datagram (Floodgate's dstPause holds every frame to a paused
// destination) gets its checksum completed the same way; other protocols
// pass unchanged; a truncated frame is refused.
TEST(PacReinject, CompletesUdpLeavesOtherProtocolsRefusesTruncated) {
  for (bool v6 : {false, true}) {
    test::PacketSpec udp;
    udp.proto = 17;
    udp.ipv6 = v6;
    if (v6) {
      udp.src = "fd00::1";
      udp.dst = "fd00::2";
    }
    udp.payload = 333;
    test::Bytes f = test::build(udp);
    ASSERT_TRUE(test::checksums_ok(f));
    test::Bytes good = f;
    size_t l4 = 14 + (v6 ? 40 : 20);
    f[l4 + 6] = 0x12;
    f[l4 + 7] = 0x34;
    std::string why;
    EXPECT_FALSE(test::checksums_ok(f, &why));
    ASSERT_TRUE(complete_frame_checksum(f.data(), f.size()));
    EXPECT_TRUE(test::checksums_ok(f, &why)) << why << " v6=" << v6;
    EXPECT_EQ(f, good) << "a complete checksum comes out the same";
  }
  test::PacketSpec icmp;
  icmp.proto = 1;
  test::Bytes f = test::build(icmp);
  test::Bytes orig = f;
  EXPECT_TRUE(complete_frame_checksum(f.data(), f.size()));
  EXPECT_EQ(f, orig);
  // An IPv4 fragment (MF set) is never CHECKSUM_PARTIAL; past its first
  // bytes it carries no UDP header: left alone, whatever its bytes 6-7 hold.
  test::PacketSpec frag;
  frag.proto = 17;
  frag.payload = 200;
  test::Bytes g = test::build(frag);
  g[14 + 6] |= 0x20;
  g[14 + 20 + 6] = 0x12;
  test::Bytes gorig = g;
  EXPECT_TRUE(complete_frame_checksum(g.data(), g.size()));
  EXPECT_EQ(g, gorig);
  test::Bytes shortf = test::truncate(test::build(test::PacketSpec{}), 30);
  EXPECT_FALSE(complete_frame_checksum(shortf.data(), shortf.size()));
}

// ---- [pac] configuration ----------------------------------------------------

TEST(PacConfig, ParsesEveryKey) {
  Config c = parse_config_string(R"(
[pac]
buffer_bytes = 65536
mlfq_level_bytes = [10000, 100000]
lambda = 0.7
ecn = false
max_held = 100
max_hold_ms = 20
fail_open_ms = 50
reinject_mark = 0x1234
idle_timeout_s = 60
control_interval_min_us = 500
busy_poll_us = 50
rwnd_cap_bytes = 12288
local_ports = [5201, "9000-9100"]
remote_ports = ["7000"]
remote_prefixes = ["10.0.0.0/8", "fd00::/16"]
[[interface]]
name = "eth0"
mechanisms = ["pac"]
)");
  EXPECT_EQ(c.get<PacConfig>().buffer_bytes, 65536u);
  EXPECT_EQ(c.get<PacConfig>().mlfq_level_bytes, (std::vector<uint64_t>{10000, 100000}));
  EXPECT_DOUBLE_EQ(c.get<PacConfig>().lambda, 0.7);
  EXPECT_FALSE(c.get<PacConfig>().ecn);
  EXPECT_EQ(c.get<PacConfig>().reinject_mark, 0x1234u);
  EXPECT_EQ(c.get<PacConfig>().busy_poll_us, 50u);
  EXPECT_EQ(c.get<PacConfig>().rwnd_cap_bytes, 12288u);
  ASSERT_EQ(c.get<PacConfig>().local_ports.size(), 2u);
  EXPECT_EQ(c.get<PacConfig>().local_ports[1].lo, 9000);
  EXPECT_EQ(c.get<PacConfig>().local_ports[1].hi, 9100);
  ASSERT_EQ(c.get<PacConfig>().remote_prefixes.size(), 2u);
  EXPECT_EQ(c.get<PacConfig>().remote_prefixes[1].family, 6);
  EXPECT_EQ(c.get<PacConfig>().remote_prefixes[1].len, 16);
}

TEST(PacConfig, TheReceiveWindowCapDefaultsToTheThresholdOrAThirdOfTheBufferWithHeldRequests) {
  auto parse = [](const std::string& lines) {
    return parse_config_string("[pac]\n" + lines + "\n[[interface]]\nname = \"eth0\"\nmechanisms = [\"pac\"]\n")
        .get<PacConfig>();
  };
  EXPECT_EQ(parse("").rwnd_cap_bytes, sluice_pac_payload_capacity(131072)) << "the buffer's payload";
  EXPECT_EQ(parse("").rwnd_cap_bytes, 125358u);
  EXPECT_EQ(parse("buffer_bytes = 32768\nrwnd_cap_bytes = \"auto\"").rwnd_cap_bytes, 31339u);
  EXPECT_EQ(parse("hold_requests = true").rwnd_cap_bytes, 0u) << "held requests without the response cap: off";
  EXPECT_EQ(parse("hold_requests = true\ncap_to_response = true").rwnd_cap_bytes, 131072u / 3)
      << "held requests with the response cap: a third of the buffer, three responses under way";
  EXPECT_EQ(parse("buffer_bytes = 98304\nhold_requests = true\ncap_to_response = true").rwnd_cap_bytes, 32768u);
  EXPECT_EQ(parse("buffer_bytes = 6000\nhold_requests = true\ncap_to_response = true").rwnd_cap_bytes, 4096u)
      << "never below 4096";
  EXPECT_EQ(parse("hold_requests = true\nrwnd_cap_bytes = 8192").rwnd_cap_bytes, 8192u);
  EXPECT_EQ(parse("rwnd_cap_bytes = 0").rwnd_cap_bytes, 0u) << "0 turns it off";
}

TEST(PacConfig, BadValuesNameTheKey) {
  auto bad = [](const std::string& line, const std::string& key) {
    try {
      parse_config_string("[pac]\n" + line + "\n[[interface]]\nname = \"eth0\"\nmechanisms = [\"pac\"]\n");
      ADD_FAILURE() << line << " was accepted";
    } catch (const ConfigError& e) {
      ASSERT_FALSE(e.problems().empty());
      EXPECT_EQ(e.problems()[0].key, key) << line;
    }
  };
  bad("lambda = 1.5", "pac.lambda");
  bad("mlfq_level_bytes = [20000, 10000]", "pac.mlfq_level_bytes");
  bad("local_ports = [\"9100-9000\"]", "pac.local_ports[0]");
  bad("remote_prefixes = [\"10.0.0.0/33\"]", "pac.remote_prefixes[0]");
  bad("fail_open_ms = 500", "pac.fail_open_ms");
  bad("busy_poll_us = 20000", "pac.busy_poll_us");
  bad("busy_poll_us = -1", "pac.busy_poll_us");
  bad("rwnd_cap_bytes = 1000", "pac.rwnd_cap_bytes");
  bad("rwnd_cap_bytes = \"12K\"", "pac.rwnd_cap_bytes");
  bad("rwnd_cap_bytes = \"off\"", "pac.rwnd_cap_bytes");
  bad("buffer = 1", "pac.buffer");
  // PAC runs on hosts only.
  try {
    parse_config_string("[[interface]]\nname = \"eth0\"\nrole = \"switch-port\"\nmechanisms = [\"pac\"]\n");
    ADD_FAILURE() << "pac on a switch port was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.problems()[0].key, "interface[0].mechanisms[0]");
  }
}

}  // namespace
