// BFC's switch logic (agent/mechanisms/bfc) against the deterministic port
// model: queue assignment (§3.3.1), pause counters and frames (§3.3.2), the
// pause threshold, the upstream's reaction to PAUSE/RESUME/bitmaps, and the
// ablation variants.
#include <gtest/gtest.h>

#include <set>

#include "lib/switch_model_util.h"
#include "mechanisms/bfc/bfc_logic.h"
#include "switch/port_model.h"

using namespace sluice::sw;
using sluice::bfc::BfcLogic;
using sluice::bfc::Config;

namespace {

constexpr uint64_t k10G = 10'000'000'000ull;

PortConfig port(std::string name, size_t queues, PortRole role = PortRole::kSwitchFacing, uint64_t rate = k10G) {
  return sluice::test::model_port(std::move(name), queues, role, rate);
}

PacketMeta pkt(PortId in, PortId out, uint32_t bytes, uint32_t hash, uint16_t upq = kNoQueue) {
  return sluice::test::model_pkt(in, out, bytes, hash, upq);
}

Config cfg(std::string_view variant = "bfc") {
  Config c = Config::variant_named(variant);
  c.hrtt_ns = 10'000;  // 10 µs: BDP at 10 Gbit/s = 12500 bytes
  return c;
}

// The frames the switch sent on `port`; periodic bitmaps only if asked.
std::vector<ControlFrame> sent(const SwitchModel& sw, PortId port, bool bitmaps = false) {
  std::vector<ControlFrame> out;
  for (const auto& s : sw.sent_control()) {
    if (s.port != port) continue;
    ControlFrame f;
    EXPECT_EQ(decode(s.payload.data(), s.payload.size(), &f), SL_CTRL_R_OK);
    if (f.type == CtrlType::kPauseBitmap && !bitmaps) continue;
    out.push_back(f);
  }
  return out;
}

std::vector<uint8_t> queue_frame(CtrlType t, QueueId q, uint32_t seq) {
  ControlFrame f{t};
  f.queues = {{q, seq}};
  return encode(f);
}

std::vector<uint8_t> bitmap_frame(uint64_t bits, uint32_t seq, uint16_t first = 0) {
  ControlFrame f{CtrlType::kPauseBitmap};
  BitmapRec r;
  r.first_queue = first;
  r.seq = seq;
  r.paused = bits;
  f.bitmaps = {r};
  return encode(f);
}

// Queue each departure of flow `hash` left from.
std::vector<QueueId> queues_of(const SwitchModel& sw, const std::map<uint64_t, uint32_t>& hash_of, uint32_t hash) {
  std::vector<QueueId> q;
  for (const auto& d : sw.departures())
    if (hash_of.at(d.id) == hash) q.push_back(d.queue);
  return q;
}

}  // namespace

class BfcQueues : public ::testing::TestWithParam<int> {};

// §3.3.1: as long as there are fewer active flows than queues, every new
// flow gets a queue of its own; the first flow beyond that shares the
// least-loaded queue and is counted as a collision.
TEST_P(BfcQueues, NewFlowsTakeEmptyQueuesThenTheLeastLoaded) {
  const int nq = GetParam();
  BfcLogic bfc(cfg());
  SwitchModel sw({port("in", 1), port("out", nq)}, bfc);
  EXPECT_EQ(bfc.table_entries(1), 100u * nq);  // §3.3.1: 100× the queues
  // Flows whose flow-table slots differ (two flows in one slot share a
  // queue by design: an index collision, see FlowsSharingATableSlot...).
  std::vector<uint32_t> flows;
  std::set<uint32_t> slots;
  for (uint32_t h = 1000; flows.size() < size_t(nq); ++h)
    if (slots.insert(bfc.table_index(1, h)).second) flows.push_back(h);
  for (int f = 0; f < nq; ++f)
    for (int i = 0; i < 2 + f % 5; ++i) sw.arrive(0, pkt(0, 1, 1000, flows[f]));
  sw.run_until(0);
  std::set<QueueId> used;
  for (int f = 0; f < nq; ++f) used.insert(bfc.entry_queue(1, flows[f]));
  EXPECT_EQ(used.size(), size_t(nq));
  EXPECT_EQ(bfc.counters().collisions, 0u);
  EXPECT_EQ(bfc.counters().assignments, uint64_t(nq));
  EXPECT_EQ(bfc.active_queues(1), uint32_t(nq));

  // Every queue holds data now; the link is busy with the first packet.
  uint64_t least = UINT64_MAX;
  for (QueueId q = 0; q < nq; ++q) least = std::min(least, sw.depth(1, q).bytes);
  uint32_t extra = flows.back() + 1;
  while (slots.count(bfc.table_index(1, extra))) ++extra;
  sw.arrive(1, pkt(0, 1, 1000, extra));
  sw.run_until(1);
  QueueId q = bfc.entry_queue(1, extra);
  ASSERT_LT(q, nq);
  EXPECT_EQ(sw.depth(1, q).bytes, least + 1000);
  EXPECT_EQ(bfc.counters().collisions, 1u);
  EXPECT_EQ(bfc.flows_in_queue(1, q), 2u);
  sw.run_idle(1'000'000'000);
  EXPECT_EQ(bfc.live_entries(1), 0u);
  EXPECT_EQ(bfc.active_queues(1), 0u);
  for (QueueId i = 0; i < nq; ++i) EXPECT_EQ(bfc.flows_in_queue(1, i), 0u);
}

INSTANTIATE_TEST_SUITE_P(Sizes, BfcQueues, ::testing::Values(16, 32, 128));

// §3.3.1: two flows whose hashes land in one flow-table slot are one entry
// and so share a queue (why the table is 100× the queues); counted.
TEST(Bfc, FlowsSharingATableSlotShareAQueue) {
  BfcLogic bfc(cfg());
  SwitchModel sw({port("in", 1), port("out", 32)}, bfc);
  uint32_t a = 1, b = 2;
  while (bfc.table_index(1, b) != bfc.table_index(1, a)) ++b;
  for (int i = 0; i < 3; ++i) sw.arrive(0, pkt(0, 1, 1000, a));
  for (int i = 0; i < 3; ++i) sw.arrive(0, pkt(0, 1, 1000, b));
  sw.run_until(0);
  EXPECT_EQ(bfc.counters().table_index_shared, 3u);
  EXPECT_EQ(bfc.live_entries(1), 1u);
  EXPECT_EQ(bfc.active_queues(1), 1u);
}

// A flow with packets in the switch keeps its queue even when others are
// empty (consistent assignment keeps packet order, §3.1).
TEST(Bfc, BackloggedFlowKeepsItsQueue) {
  BfcLogic bfc(cfg());
  SwitchModel sw({port("in", 1), port("out", 32)}, bfc);
  std::map<uint64_t, uint32_t> hash_of;
  uint64_t id = 1;
  for (int i = 0; i < 20; ++i) {
    auto p = pkt(0, 1, 1500, 42);
    p.id = id++;
    hash_of[p.id] = 42;
    sw.arrive(uint64_t(i) * 600, p);    // arrives twice as fast as 10G drains
    auto o = pkt(0, 1, 200, 1000 + i);  // a new short flow every time
    o.id = id++;
    hash_of[o.id] = 1000 + i;
    sw.arrive(uint64_t(i) * 600, o);
  }
  sw.run_idle(1'000'000'000);
  auto qs = queues_of(sw, hash_of, 42);
  ASSERT_EQ(qs.size(), 20u);
  for (auto q : qs) EXPECT_EQ(q, qs[0]);
  // Every departure came out in arrival order within the flow.
  uint64_t last = 0;
  for (const auto& d : sw.departures())
    if (hash_of[d.id] == 42) {
      EXPECT_GT(d.id, last);
      last = d.id;
    }
}

// §3.3.2 sticky assignment: an entry with size 0 keeps its queue until it
// has been idle for the sticky threshold (2·HRTT); bfc-nosticky reassigns
// at once. The dynamic search starts at a rotating position, so a
// reassignment lands on a different empty queue.
TEST(Bfc, StickyKeepsAnIdleFlowsQueueForTwoHrtt) {
  for (bool sticky : {true, false}) {
    SCOPED_TRACE(sticky ? "bfc" : "bfc-nosticky");
    BfcLogic bfc(cfg(sticky ? "bfc" : "bfc-nosticky"));
    EXPECT_EQ(bfc.config().sticky_threshold_ns(), 20'000u);
    SwitchModel sw({port("in", 1), port("out", 32)}, bfc);
    sw.arrive(0, pkt(0, 1, 1500, 5));
    sw.run_until(2'000);
    const QueueId first = bfc.entry_queue(1, 5);
    ASSERT_EQ(sw.departures().size(), 1u);
    const uint64_t left = sw.departures().back().start_ns;  // size 0 from here
    sw.arrive(left + 5'000, pkt(0, 1, 1500, 5));            // idle 5 µs < 20 µs
    sw.run_until(10'000);
    const QueueId second = bfc.entry_queue(1, 5);
    if (sticky) {
      EXPECT_EQ(second, first);
    } else {
      EXPECT_NE(second, first);
    }
    ASSERT_EQ(sw.departures().size(), 2u);
    const uint64_t left2 = sw.departures().back().start_ns;
    sw.arrive(left2 + 25'000, pkt(0, 1, 1500, 5));  // idle 25 µs > 20 µs
    sw.run_until(40'000);
    EXPECT_NE(bfc.entry_queue(1, 5), second);
    EXPECT_EQ(bfc.counters().assignments, sticky ? 2u : 3u);
  }
}

// bfc-stochastic hashes flows onto queues (the §3.2 strawman): flows
// collide although queues are free. Dynamic assignment has no collision
// for the same flows.
TEST(Bfc, StochasticCollidesWhereDynamicDoesNot) {
  uint64_t coll[2];
  int i = 0;
  for (auto v : {"bfc", "bfc-stochastic"}) {
    BfcLogic bfc(cfg(v));
    SwitchModel sw({port("in", 1), port("out", 32)}, bfc);
    for (uint32_t f = 0; f < 20; ++f) sw.arrive(0, pkt(0, 1, 1500, 0xabc000 + f * 7919));
    sw.run_until(0);
    coll[i++] = bfc.counters().collisions;
  }
  EXPECT_EQ(coll[0], 0u);
  // 20 flows in 32 queues by hash: P(no collision) < 0.3 % (birthday).
  EXPECT_GT(coll[1], 0u);
}

TEST(Bfc, StochasticQueueIsAFunctionOfTheFlowOnly) {
  BfcLogic bfc(cfg("bfc-stochastic"));
  SwitchModel sw({port("in", 1), port("out", 32)}, bfc);
  sw.arrive(0, pkt(0, 1, 1500, 99));
  sw.run_idle(1'000'000);
  QueueId q = bfc.entry_queue(1, 99);
  for (int k = 1; k < 5; ++k) {
    sw.arrive(uint64_t(k) * 1'000'000, pkt(0, 1, 1500, 1000 + k));  // moves the cursor, if any
    sw.arrive(uint64_t(k) * 1'000'000 + 100'000, pkt(0, 1, 1500, 99));
    sw.run_idle(uint64_t(k + 1) * 1'000'000);
    EXPECT_EQ(bfc.entry_queue(1, 99), q);
  }
}

TEST(Bfc, SinglePutsEveryFlowInQueueZero) {
  BfcLogic bfc(cfg("bfc-single"));
  SwitchModel sw({port("in", 1), port("out", 32)}, bfc);
  for (uint32_t f = 0; f < 10; ++f) sw.arrive(0, pkt(0, 1, 1500, f * 31 + 1));
  sw.run_idle(1'000'000'000);
  for (const auto& d : sw.departures()) EXPECT_EQ(d.queue, 0);
  EXPECT_EQ(bfc.counters().collisions, 9u);
}

// §3.3.2: Th = HRTT·μ/N_active, recomputed as queues become active or not;
// a fixed Th (Fig. 7b) and a floor override it.
TEST(Bfc, ThresholdIsHopBdpOverActiveQueues) {
  BfcLogic bfc(cfg());
  SwitchModel sw({port("in", 1), port("out", 32)}, bfc);
  EXPECT_EQ(bfc.threshold_bytes(1), 12'500u);  // 10 µs · 10 Gbit/s, N_active 0 → 1
  for (uint32_t f = 0; f < 4; ++f)
    for (int i = 0; i < 3; ++i) sw.arrive(0, pkt(0, 1, 1000, 500 + f));
  sw.run_until(0);
  EXPECT_EQ(bfc.active_queues(1), 4u);
  EXPECT_EQ(bfc.threshold_bytes(1), 3'125u);
  // Pausing one of them (as the downstream would) takes it out of N_active.
  QueueId q = bfc.entry_queue(1, 500);
  sw.arrive_control(1, 1, queue_frame(CtrlType::kPause, q, 1));
  sw.run_until(1);
  EXPECT_TRUE(sw.paused(1, q));
  EXPECT_EQ(bfc.active_queues(1), 3u);
  EXPECT_EQ(bfc.threshold_bytes(1), 4'166u);
  sw.arrive_control(2, 1, queue_frame(CtrlType::kResume, q, 2));
  sw.run_idle(1'000'000'000);
  EXPECT_EQ(bfc.active_queues(1), 0u);

  Config fixed = cfg();
  fixed.th_fixed_bytes = 3000;
  EXPECT_EQ(BfcLogic(fixed).threshold_bytes(0), 3000u);
  Config floor = cfg();
  floor.th_min_bytes = 20'000;
  BfcLogic fl(floor);
  SwitchModel sw2({port("in", 1), port("out", 32)}, fl);
  EXPECT_EQ(fl.threshold_bytes(1), 20'000u);
}

// §3.3.2 pause counter: packets arriving above Th increment the counter of
// (ingress port, upstreamQ); PAUSE goes out on 0→1 only, RESUME when the
// last of those packets leaves; packets below Th or without an upstreamQ
// do not count.
TEST(Bfc, PausesTheUpstreamQueueAboveThAndResumesWhenItsPacketsLeave) {
  Config c = cfg();
  c.th_fixed_bytes = 3000;
  BfcLogic bfc(c);
  SwitchModel sw({port("up", 1), port("out", 32, PortRole::kHostFacing)}, bfc);
  for (int i = 0; i < 10; ++i) sw.arrive(0, pkt(0, 1, 1000, 77, 5));
  for (int i = 0; i < 10; ++i) sw.arrive(0, pkt(0, 1, 1000, 77));  // untagged: never counted
  sw.run_until(0);
  // Packet k met k·1000 queued bytes: k = 4..9 were above 3000.
  EXPECT_EQ(bfc.pause_counter(0, 5), 6u);
  EXPECT_EQ(bfc.counters().above_th, 6u);
  auto f = sent(sw, 0);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].type, CtrlType::kPause);
  ASSERT_EQ(f[0].queues.size(), 1u);
  EXPECT_EQ(f[0].queues[0].queue, 5);
  EXPECT_EQ(f[0].queues[0].seq, 1u);
  EXPECT_TRUE(bfc.upstream_paused(0, 5));
  EXPECT_EQ(bfc.pause_counter(0, 4), 0u);

  sw.run_idle(1'000'000'000);
  f = sent(sw, 0);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[1].type, CtrlType::kResume);
  EXPECT_EQ(f[1].queues[0].queue, 5);
  EXPECT_EQ(f[1].queues[0].seq, 2u);
  EXPECT_EQ(bfc.pause_counter(0, 5), 0u);
  // RESUME left when the last counted packet (the 10th tagged) started leaving.
  ASSERT_GE(sw.sent_control().size(), 2u);
  EXPECT_EQ(sw.sent_control()[1].at_ns, sw.departures()[9].start_ns);
  EXPECT_EQ(bfc.counters().pauses_sent, 1u);
  EXPECT_EQ(bfc.counters().resumes_sent, 1u);
  EXPECT_TRUE(sent(sw, 1).empty());
}

// One counter per (ingress port, upstreamQ): the same upstream queue number
// on two ingress ports is two queues at two upstreams.
TEST(Bfc, PauseCountersAreKeptPerIngressPortAndUpstreamQueue) {
  Config c = cfg();
  c.th_fixed_bytes = 1;
  BfcLogic bfc(c);
  SwitchModel sw({port("upA", 1), port("out", 32), port("upB", 1)}, bfc);
  for (int i = 0; i < 3; ++i) sw.arrive(0, pkt(0, 1, 1000, 1, 3));
  for (int i = 0; i < 4; ++i) sw.arrive(0, pkt(2, 1, 1000, 2, 3));
  for (int i = 0; i < 2; ++i) sw.arrive(0, pkt(2, 1, 1000, 2, 9));
  sw.run_until(0);
  EXPECT_EQ(bfc.pause_counter(0, 3), 2u);
  EXPECT_EQ(bfc.pause_counter(2, 3), 3u);
  EXPECT_EQ(bfc.pause_counter(2, 9), 2u);
  EXPECT_EQ(sent(sw, 0).size(), 1u);
  EXPECT_EQ(sent(sw, 2).size(), 2u);
  sw.run_idle(1'000'000'000);
  EXPECT_EQ(sent(sw, 0).size(), 2u);
  EXPECT_EQ(sent(sw, 2).size(), 4u);
}

// The upstream side: PAUSE for a queue stops it (DRR serves the others),
// RESUME restarts it; an older sequence number is ignored (wire.h).
TEST(Bfc, UpstreamStopsServingAPausedQueue) {
  BfcLogic bfc(cfg());
  SwitchModel sw({port("in", 1), port("down", 32)}, bfc);
  std::map<uint64_t, uint32_t> hash_of;
  uint64_t id = 1;
  for (uint32_t f : {10u, 11u})
    for (int i = 0; i < 5; ++i) {
      auto p = pkt(0, 1, 1500, f);
      p.id = id++;
      hash_of[p.id] = f;
      sw.arrive(0, p);
    }
  sw.run_until(0);
  QueueId q10 = bfc.entry_queue(1, 10);
  sw.arrive_control(1, 1, queue_frame(CtrlType::kPause, q10, 7));
  sw.run_until(100'000);
  EXPECT_TRUE(sw.paused(1, q10));
  // Flow 11 drained, flow 10 holds at most the packet that had started.
  EXPECT_EQ(sw.depth(1, bfc.entry_queue(1, 11)).pkts, 0u);
  EXPECT_GE(sw.depth(1, q10).pkts, 4u);
  sw.arrive_control(100'000, 1, queue_frame(CtrlType::kResume, q10, 6));  // stale
  sw.run_until(200'000);
  EXPECT_TRUE(sw.paused(1, q10));
  EXPECT_EQ(bfc.counters().stale_rx, 1u);
  sw.arrive_control(200'000, 1, queue_frame(CtrlType::kResume, q10, 8));
  sw.run_idle(1'000'000'000);
  EXPECT_FALSE(sw.paused(1, q10));
  EXPECT_EQ(sw.depth(1, q10).pkts, 0u);
  for (const auto& d : sw.departures())
    if (hash_of[d.id] == 10 && d.start_ns > 1) {
      EXPECT_GE(d.start_ns, 200'000u);
    }
  // A frame naming a queue the port does not have changes nothing.
  sw.arrive_control(sw.now_ns(), 1, queue_frame(CtrlType::kPause, 40, 9));
  sw.run_until(sw.now_ns() + 1);
  EXPECT_EQ(bfc.counters().bad_queue_rx, 1u);
}

// §3.3.2 "For reliability against pause/resume packets being dropped, we
// also periodically send a bitmap": a bitmap repairs a lost RESUME and a
// lost PAUSE, but never undoes a newer change.
TEST(Bfc, BitmapRepairsLostPauseAndResume) {
  BfcLogic bfc(cfg());
  SwitchModel sw({port("in", 1), port("down", 32)}, bfc);
  sw.arrive_control(0, 1, queue_frame(CtrlType::kPause, 3, 1));
  sw.run_until(0);
  EXPECT_TRUE(sw.paused(1, 3));
  // RESUME seq 2 lost; the bitmap taken after it says "not paused".
  sw.arrive_control(10, 1, bitmap_frame(0, 2));
  sw.run_until(10);
  EXPECT_FALSE(sw.paused(1, 3));
  EXPECT_EQ(bfc.counters().bitmap_repairs, 1u);
  // PAUSE seq 3 lost; the next bitmap has the bit.
  sw.arrive_control(20, 1, bitmap_frame(uint64_t(1) << 3, 3));
  sw.run_until(20);
  EXPECT_TRUE(sw.paused(1, 3));
  // A RESUME (seq 4) overtaken by an older bitmap (seq 3, bit set): stays resumed.
  sw.arrive_control(30, 1, queue_frame(CtrlType::kResume, 3, 4));
  sw.arrive_control(31, 1, bitmap_frame(uint64_t(1) << 3, 3));
  sw.run_until(31);
  EXPECT_FALSE(sw.paused(1, 3));
  EXPECT_EQ(bfc.counters().stale_rx, 1u);
  // Bits for queues a 32-queue port does not have are counted, not applied.
  sw.arrive_control(40, 1, bitmap_frame(uint64_t(1) << 40, 5));
  sw.run_until(40);
  EXPECT_EQ(bfc.counters().bad_queue_rx, 1u);
}

// The downstream sends its bitmap every bitmap_interval_ns while a counter
// is non-zero, and for a few intervals after (so a lost RESUME is repaired),
// then stops.
TEST(Bfc, DownstreamSendsPeriodicBitmapsWhileAnythingIsPaused) {
  Config c = cfg();
  c.th_fixed_bytes = 1;
  c.bitmap_interval_ns = 100'000;
  c.pause_expiry_ns = 0;
  BfcLogic bfc(c);
  SwitchModel sw({port("up", 1), port("down", 32)}, bfc);
  for (int i = 0; i < 5; ++i) sw.arrive(0, pkt(0, 1, 1500, 8, 7));
  sw.run_until(0);
  QueueId q = bfc.entry_queue(1, 8);
  // Our own downstream holds that queue, so the marked packets stay.
  sw.arrive_control(1, 1, queue_frame(CtrlType::kPause, q, 1));
  sw.run_until(450'000);
  auto f = sent(sw, 0, true);
  ASSERT_EQ(f.size(), 5u);  // PAUSE + bitmaps at 100, 200, 300, 400 µs
  EXPECT_EQ(f[0].type, CtrlType::kPause);
  for (size_t i = 1; i < f.size(); ++i) {
    ASSERT_EQ(f[i].type, CtrlType::kPauseBitmap);
    ASSERT_EQ(f[i].bitmaps.size(), 2u);  // queues 0-63 and 64-127
    EXPECT_EQ(f[i].bitmaps[0].paused, uint64_t(1) << 7);
    EXPECT_EQ(f[i].bitmaps[0].seq, 1u);
    EXPECT_EQ(f[i].bitmaps[1].paused, 0u);
  }
  sw.arrive_control(450'000, 1, queue_frame(CtrlType::kResume, q, 2));
  sw.run_until(2'000'000);
  f = sent(sw, 0, true);
  size_t resume_at = 0;
  for (size_t i = 0; i < f.size(); ++i)
    if (f[i].type == CtrlType::kResume) resume_at = i;
  ASSERT_GT(resume_at, 0u);
  // After RESUME: bitmaps with no bit for three intervals, then silence.
  size_t after = f.size() - resume_at - 1;
  EXPECT_GE(after, 3u);
  EXPECT_LE(after, 4u);
  for (size_t i = resume_at + 1; i < f.size(); ++i) EXPECT_EQ(f[i].bitmaps[0].paused, 0u);
}

// Fail open: a paused egress queue that hears nothing for pause_expiry_ns
// (downstream dead or restarted) is resumed.
TEST(Bfc, UnrefreshedPauseExpires) {
  Config c = cfg();
  c.bitmap_interval_ns = 100'000;
  c.pause_expiry_ns = 500'000;
  BfcLogic bfc(c);
  SwitchModel sw({port("in", 1), port("down", 32)}, bfc);
  sw.arrive_control(0, 1, queue_frame(CtrlType::kPause, 2, 1));
  sw.run_until(300'000);
  EXPECT_TRUE(sw.paused(1, 2));
  sw.arrive_control(300'000, 1, bitmap_frame(uint64_t(1) << 2, 1));  // refresh
  sw.run_until(700'000);
  EXPECT_TRUE(sw.paused(1, 2));
  sw.run_until(900'000);
  EXPECT_FALSE(sw.paused(1, 2));
  EXPECT_EQ(bfc.counters().expired, 1u);
}

// A tail drop by the substrate after on_enqueue undoes the packet's counts:
// no pause is left behind (the upstream would otherwise stay paused).
TEST(Bfc, DroppedPacketsDoNotLeakPauseCounts) {
  Config c = cfg();
  c.th_fixed_bytes = 1000;
  BfcLogic bfc(c);
  auto out = port("out", 32);
  for (auto& q : out.queues) q.limit_bytes = 4000;
  SwitchModel sw({port("up", 1), out}, bfc);
  for (int i = 0; i < 10; ++i) sw.arrive(0, pkt(0, 1, 1000, 3, 1));
  sw.run_until(0);
  EXPECT_EQ(bfc.counters().drops_undone, 6u);
  EXPECT_EQ(bfc.pause_counter(0, 1), 2u);  // the 3rd and 4th packets, queued above 1000
  sw.run_idle(1'000'000'000);
  EXPECT_EQ(bfc.pause_counter(0, 1), 0u);
  EXPECT_EQ(bfc.live_entries(1), 0u);
  auto f = sent(sw, 0);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[1].type, CtrlType::kResume);
}

TEST(Bfc, ConfigRejectsNonsense) {
  EXPECT_THROW(Config::variant_named("bfc-magic"), std::invalid_argument);
  for (auto v : {"bfc", "bfc-stochastic", "bfc-single", "bfc-nosticky"})
    EXPECT_EQ(Config::variant_named(v).check(), "") << v;
  Config c = cfg();
  c.flow_table_factor = 0;
  EXPECT_NE(c.check(), "");
  EXPECT_THROW(BfcLogic{c}, std::invalid_argument);
  c = cfg();
  c.hrtt_ns = 0;
  EXPECT_NE(c.check(), "");
  c.th_fixed_bytes = 1000;
  EXPECT_EQ(c.check(), "");
  c = cfg();
  c.pause_expiry_ns = c.bitmap_interval_ns;
  EXPECT_NE(c.check(), "");
  c = cfg();
  c.bitmap_interval_ns = 0;
  EXPECT_NE(c.check(), "");
}
