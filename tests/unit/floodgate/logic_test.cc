// Floodgate's switch logic (agent/mechanisms/floodgate/logic.h) against the
// deterministic port model: windows, VOQs, credits, delayCredit, PSN loss
// recovery and switchSYN, VOQ hashing and grouping, dstPause/dstResume.
// Numbers: 1514-byte frames, T = 500 us, hop RTT 200 us; a 200 Mbit/s port
// has BDP_nextHop = 5000 B and window 5000 + 12500 = 17500 B, so 12 frames
// pass on a fresh window (the 12th takes it to -668).
#include <gtest/gtest.h>

#include "mechanisms/floodgate/logic.h"
#include "switch/port_model.h"

using namespace sluice::sw;
using sluice::floodgate::Config;
using sluice::floodgate::FloodgateLogic;

namespace {

constexpr uint64_t k100M = 100'000'000, k200M = 200'000'000;
constexpr uint32_t kMtu = 1514;
constexpr uint64_t kT = 500'000;
constexpr int64_t kW0 = 17500;

const Addr kD = addr_parse("10.0.9.1");
const Addr kE = addr_parse("10.0.9.2");
const Addr kF = addr_parse("10.0.9.3");

PortConfig host_port(std::string name, uint64_t rate = k100M) {
  PortConfig c;
  c.name = std::move(name);
  c.role = PortRole::kHostFacing;
  c.rate_bps = rate;
  return c;
}
// A switch-facing port: queue 0 default (priority 0), VOQs priority 1.
PortConfig sw_port(std::string name, uint32_t voqs = 8, uint64_t rate = k200M) {
  PortConfig c;
  c.name = std::move(name);
  c.role = PortRole::kSwitchFacing;
  c.rate_bps = rate;
  c.queues.assign(1 + voqs, QueueConfig{1, 1514, 0, -1});
  c.queues[0].priority = 0;
  return c;
}

Config cfg() {
  Config c;
  c.credit_interval_ns = kT;
  c.hop_rtt_ns = 200'000;
  return c;
}

PacketMeta pkt(PortId in, PortId out, const Addr& dst, uint32_t bytes = kMtu) {
  PacketMeta p;
  p.in_port = in;
  p.out_port = out;
  p.dst = dst;
  p.src = addr_parse("10.0.1.1");
  p.proto = 6;
  p.wire_bytes = bytes;
  return p;
}

std::vector<uint8_t> credit(const Addr& dst, uint32_t bytes, uint32_t psn) {
  ControlFrame f{CtrlType::kCredit};
  f.credits = {{dst, bytes, psn, uint16_t(bytes / kMtu)}};
  return encode(f);
}

ControlFrame decoded(const SwitchModel::SentControl& s) {
  ControlFrame f;
  EXPECT_EQ(decode(s.payload.data(), s.payload.size(), &f), SL_CTRL_R_OK);
  return f;
}

size_t departed(const SwitchModel& sw, PortId port, QueueId q) {
  size_t n = 0;
  for (const auto& d : sw.departures()) n += d.port == port && d.queue == q;
  return n;
}

// Everything sent on `port` of `type`.
std::vector<std::pair<uint64_t, ControlFrame>> frames(const SwitchModel& sw, PortId port, CtrlType type) {
  std::vector<std::pair<uint64_t, ControlFrame>> out;
  for (const auto& s : sw.sent_control()) {
    if (s.port != port) continue;
    auto f = decoded(s);
    if (f.type == type) out.push_back({s.at_ns, f});
  }
  return out;
}

}  // namespace

TEST(FloodgateLogic, WindowStartsAtBdpPlusRateTimesT) {
  FloodgateLogic fg(cfg());
  SwitchModel sw({host_port("h0"), sw_port("up")}, fg);
  EXPECT_EQ(fg.initial_window(1), kW0);  // 200M x 200us / 8 + 200M x 500us / 8
  EXPECT_FALSE(fg.has_window(0));        // a host port is the last hop: no window
  EXPECT_EQ(fg.window(1, kD), kW0);
  for (int i = 0; i < 20; ++i) sw.arrive(0, pkt(0, 1, kD));
  sw.run_until(0);
  EXPECT_EQ(fg.stats().forwarded, 12u);
  EXPECT_EQ(fg.stats().voq_enqueued, 8u);
  EXPECT_EQ(fg.window(1, kD), kW0 - 12 * int64_t(kMtu));
  EXPECT_EQ(fg.inflight(1, kD), 12 * int64_t(kMtu));
  ASSERT_EQ(fg.voq_of(kD), 0);
  EXPECT_EQ(fg.voq_bytes(0), 8u * kMtu);
  EXPECT_TRUE(sw.paused(1, 1));
  sw.run_until(50'000'000);
  // Only the windowed 12 left; the VOQ waits for credits.
  EXPECT_EQ(departed(sw, 1, 0), 12u);
  EXPECT_EQ(departed(sw, 1, 1), 0u);
  EXPECT_EQ(sw.depth(1, 1).pkts, 8u);
}

TEST(FloodgateLogic, CreditReleasesExactlyWhatItCovers) {
  FloodgateLogic fg(cfg());
  SwitchModel sw({host_port("h0"), sw_port("up")}, fg);
  for (int i = 0; i < 20; ++i) sw.arrive(0, pkt(0, 1, kD));
  sw.run_until(2'000'000);
  // Two frames' worth of credit: window -668 + 3028 = 2360 -> one frame
  // (846 left) -> a second (-668): two released, then paused again.
  sw.arrive_control(3'000'000, 1, credit(kD, 2 * kMtu, 2 * kMtu));
  sw.run_until(4'000'000);
  EXPECT_EQ(departed(sw, 1, 1), 2u);
  EXPECT_EQ(fg.window(1, kD), kW0 - 14 * int64_t(kMtu) + 2 * int64_t(kMtu));
  EXPECT_TRUE(sw.paused(1, 1));
  EXPECT_EQ(fg.stats().voq_released, 2u);
  EXPECT_EQ(fg.stats().credit_frames_in, 1u);
  // A credit for the whole in-flight: the window is whole again and the
  // VOQ drains (6 left x 1514 < 17500).
  sw.arrive_control(5'000'000, 1, credit(kD, 12 * kMtu, 14 * kMtu));
  sw.run_until(10'000'000);
  EXPECT_EQ(departed(sw, 1, 1), 8u);
  EXPECT_EQ(fg.voq_of(kD), -1);  // empty VOQ: no longer D's
  EXPECT_EQ(fg.stats().voqs_in_use, 0u);
  EXPECT_EQ(fg.window(1, kD), kW0 - 6 * int64_t(kMtu));
}

TEST(FloodgateLogic, OtherDestinationsPassWhileOneIsHeld) {
  FloodgateLogic fg(cfg());
  SwitchModel sw({host_port("h0"), host_port("h1"), sw_port("up")}, fg);
  for (int i = 0; i < 40; ++i) sw.arrive(0, pkt(0, 2, kD));
  sw.run_until(1'000'000);
  for (int i = 0; i < 5; ++i) sw.arrive(1'000'000, pkt(1, 2, kE));
  sw.run_until(2'000'000);
  // E's window is its own: all five pass in queue 0 while D's 28 wait.
  EXPECT_EQ(departed(sw, 2, 0), 12u + 5u);
  EXPECT_EQ(fg.window(2, kE), kW0 - 5 * int64_t(kMtu));
  EXPECT_EQ(sw.depth(2, 1).pkts, 28u);
  EXPECT_EQ(fg.voq_of(kE), -1);
}

TEST(FloodgateLogic, DestinationWithAVoqKeepsUsingIt) {
  FloodgateLogic fg(cfg());
  SwitchModel sw({host_port("h0"), sw_port("up")}, fg);
  for (int i = 0; i < 20; ++i) sw.arrive(0, pkt(0, 1, kD));
  sw.run_until(1'000'000);
  // A credit that restores a full window while 8 frames wait...
  sw.arrive_control(1'000'000, 1, credit(kD, 12 * kMtu, 12 * kMtu));
  // ...and a new frame for D at the same instant: it must queue behind the
  // VOQ, not jump ahead through queue 0 (§4.2).
  auto late = pkt(0, 1, kD);
  late.id = 999;
  sw.arrive(1'000'000, late);
  sw.run_until(10'000'000);
  const auto& deps = sw.departures();
  ASSERT_EQ(deps.size(), 21u);
  EXPECT_EQ(deps.back().id, 999u);
  EXPECT_EQ(deps.back().queue, 1);
}

TEST(FloodgateLogic, LastHopKeepsNoWindow) {
  FloodgateLogic fg(cfg());
  SwitchModel sw({sw_port("from-core"), host_port("h0"), host_port("h1")}, fg);
  for (int i = 0; i < 100; ++i) sw.arrive(0, pkt(0, 1, kD));
  sw.run_until(0);
  EXPECT_EQ(sw.depth(1, 0).pkts, 99u);  // all in the default queue, one on the wire
  EXPECT_EQ(fg.stats().no_window, 100u);
  EXPECT_EQ(fg.stats().voq_enqueued, 0u);
  EXPECT_TRUE(fg.windows().empty());
}

TEST(FloodgateLogic, VoqsUsedUpAreSharedByHash) {
  Config c = cfg();
  c.max_voqs = 2;
  FloodgateLogic fg(c);
  SwitchModel sw({host_port("h0"), sw_port("up", 4)}, fg);
  EXPECT_EQ(fg.num_voqs(), 2u);
  for (const Addr* d : {&kD, &kE, &kF})
    for (int i = 0; i < 14; ++i) sw.arrive(0, pkt(0, 1, *d));
  sw.run_until(0);
  EXPECT_EQ(fg.voq_of(kD), 0);
  EXPECT_EQ(fg.voq_of(kE), 1);
  const int f = fg.voq_of(kF);
  ASSERT_GE(f, 0);
  ASSERT_LE(f, 1);
  EXPECT_EQ(fg.stats().voq_hashed, 1u);
  EXPECT_EQ(fg.stats().voqs_in_use_max, 2u);
  EXPECT_EQ(fg.voq_bytes(f), 4u * kMtu);  // 2 of its own + 2 of F
  // A port with fewer queues than max_voqs caps the VOQs.
  FloodgateLogic fg2(cfg());
  SwitchModel sw2({host_port("h0"), sw_port("up", 4)}, fg2);
  EXPECT_EQ(fg2.num_voqs(), 4u);
}

TEST(FloodgateLogic, SharedVoqKeepsOrderAndBlocksOnItsHead) {
  // One VOQ for D and E: E's frames behind D's head wait even with E's
  // window open, until D's credit arrives (the HOL a shared VOQ has).
  Config c = cfg();
  c.max_voqs = 1;
  FloodgateLogic fg(c);
  SwitchModel sw({host_port("h0"), sw_port("up", 1)}, fg);
  for (int i = 0; i < 14; ++i) sw.arrive(0, pkt(0, 1, kD));  // 2 into the VOQ
  for (int i = 0; i < 14; ++i) sw.arrive(0, pkt(0, 1, kE));  // 2 into the same VOQ
  sw.run_until(5'000'000);
  EXPECT_EQ(fg.voq_of(kE), 0);
  EXPECT_EQ(sw.depth(1, 1).pkts, 4u);
  sw.arrive_control(5'000'000, 1, credit(kE, 12 * kMtu, 12 * kMtu));
  sw.run_until(6'000'000);
  EXPECT_EQ(sw.depth(1, 1).pkts, 4u) << "E's credit cannot pass D's head";
  sw.arrive_control(6'000'000, 1, credit(kD, 12 * kMtu, 12 * kMtu));
  sw.run_until(8'000'000);
  EXPECT_EQ(sw.depth(1, 1).pkts, 0u);
}

TEST(FloodgateLogic, CreditTimerAggregatesPerIngressPortAndSkipsWhenIdle) {
  FloodgateLogic fg(cfg());
  // Last-hop ToR: port 0 from the core, ports 1 and 2 to hosts, port 3 a
  // host that sends too (hosts get no credits).
  SwitchModel sw({sw_port("core"), host_port("d"), host_port("e"), host_port("h3")}, fg);
  for (int i = 0; i < 10; ++i) sw.arrive(0, pkt(0, 1, kD));
  for (int i = 0; i < 3; ++i) sw.arrive(0, pkt(0, 2, kE));
  for (int i = 0; i < 3; ++i) sw.arrive(0, pkt(3, 1, kD));
  sw.run_until(5 * kT);
  auto cr = frames(sw, 0, CtrlType::kCredit);
  EXPECT_TRUE(frames(sw, 3, CtrlType::kCredit).empty()) << "hosts keep no window";
  // What left in (t-T, t] from port 0, per tick: credits are for what left.
  std::map<uint64_t, std::map<Addr, uint64_t>> expect;
  for (const auto& d : sw.departures()) {
    if (d.id > 13) continue;  // ids 14..16 came from the host port
    // The timer runs before the link at equal times: a frame leaving at
    // exactly k T is in the next tick.
    uint64_t tick = (d.start_ns / kT + 1) * kT;
    expect[tick][d.port == 1 ? kD : kE] += d.wire_bytes;
  }
  ASSERT_EQ(cr.size(), expect.size());
  std::map<Addr, uint32_t> psn;
  for (const auto& [at, f] : cr) {
    ASSERT_TRUE(expect.count(at)) << at;
    ASSERT_EQ(f.credits.size(), expect[at].size()) << at;
    for (const auto& r : f.credits) {
      EXPECT_EQ(r.credit_bytes, expect[at][r.dst]);
      EXPECT_EQ(r.credit_pkts, r.credit_bytes / kMtu);
      psn[r.dst] += r.credit_bytes;
      EXPECT_EQ(r.psn, psn[r.dst]);
    }
  }
  // 10 + 3 frames from the core port, all credited; later ticks sent nothing.
  EXPECT_EQ(psn[kD], 10u * kMtu);
  EXPECT_EQ(psn[kE], 3u * kMtu);
  EXPECT_LT(cr.back().first, 4 * kT);
  EXPECT_EQ(fg.stats().credit_frames_out, cr.size());
}

TEST(FloodgateLogic, DelayCreditHoldsCreditsWhileTheVoqIsLong) {
  Config c = cfg();
  c.thre_credit_bytes = 3 * kMtu;
  FloodgateLogic fg(c);
  // A core-like middle switch: port 0 from an upstream switch, port 1 to
  // the downstream switch (windowed).
  SwitchModel sw({sw_port("up"), sw_port("down")}, fg);
  for (int i = 0; i < 20; ++i) sw.arrive(0, pkt(0, 1, kD));  // 12 pass, 8 into the VOQ
  for (int i = 0; i < 2; ++i) sw.arrive(0, pkt(0, 1, kE));
  sw.run_until(4 * kT);
  auto cr = frames(sw, 0, CtrlType::kCredit);
  uint64_t d_bytes = 0, e_bytes = 0;
  for (const auto& [at, f] : cr)
    for (const auto& r : f.credits) (r.dst == kD ? d_bytes : e_bytes) += r.credit_bytes;
  EXPECT_EQ(d_bytes, 0u) << "D's VOQ (8 frames) is over thre_credit: no credit for D";
  EXPECT_EQ(e_bytes, 2u * kMtu);
  EXPECT_GT(fg.stats().credits_delayed, 0u);
  // The downstream returns D's window: the VOQ drains below 3 frames and
  // the withheld credit goes out with everything that left.
  sw.arrive_control(4 * kT, 1, credit(kD, 12 * kMtu, 12 * kMtu));
  sw.run_until(12 * kT);
  d_bytes = 0;
  for (const auto& [at, f] : frames(sw, 0, CtrlType::kCredit))
    for (const auto& r : f.credits)
      if (r.dst == kD) d_bytes += r.credit_bytes;
  EXPECT_EQ(d_bytes, 20u * kMtu);
}

TEST(FloodgateLogic, PsnRecoversFromLostCreditFrames) {
  FloodgateLogic fg(cfg());
  SwitchModel sw({host_port("h0"), sw_port("up")}, fg);
  for (int i = 0; i < 20; ++i) sw.arrive(0, pkt(0, 1, kD));
  sw.run_until(1'000'000);
  // Credits for 2, 2 and 2 frames: the first two frames are lost; the third
  // carries PSN 6 frames, which is what counts (§4.3).
  sw.arrive_control(1'000'000, 1, credit(kD, 2 * kMtu, 6 * kMtu));
  sw.run_until(2'000'000);
  // Window 17500 - (12 - 6) x 1514 = 8416: six frames leave the VOQ (the
  // sixth takes it to -668); 18 sent, 6 credited.
  EXPECT_EQ(departed(sw, 1, 1), 6u);
  EXPECT_EQ(fg.inflight(1, kD), 12 * int64_t(kMtu));
  // A stale (reordered) credit changes nothing; a bogus one beyond what we
  // sent is clamped to a whole window, never more.
  sw.arrive_control(2'000'000, 1, credit(kD, 2 * kMtu, 2 * kMtu));
  sw.run_until(3'000'000);
  EXPECT_EQ(departed(sw, 1, 1), 6u);
  sw.arrive_control(3'000'000, 1, credit(kD, 100 * kMtu, 1'000'000));
  sw.run_until(4'000'000);
  EXPECT_EQ(fg.stats().credit_ahead, 1u);
  EXPECT_EQ(departed(sw, 1, 1), 8u);
  EXPECT_LE(fg.window(1, kD), kW0);
  EXPECT_EQ(fg.window(1, kD), kW0 - 2 * int64_t(kMtu));
}

TEST(FloodgateLogic, SwitchSynAfterSilenceRestoresTheWindow) {
  Config c = cfg();
  c.syn_timeout_ns = 10 * kT;
  FloodgateLogic fg(c);
  SwitchModel sw({host_port("h0"), sw_port("up")}, fg);
  for (int i = 0; i < 20; ++i) sw.arrive(0, pkt(0, 1, kD));
  sw.run_until(9 * kT);
  EXPECT_TRUE(frames(sw, 1, CtrlType::kSwitchSyn).empty()) << "no SYN before the timeout";
  sw.run_until(12 * kT);
  auto syn = frames(sw, 1, CtrlType::kSwitchSyn);
  ASSERT_EQ(syn.size(), 1u);
  EXPECT_EQ(syn[0].first, 10 * kT);
  ASSERT_EQ(syn[0].second.syns.size(), 1u);
  EXPECT_EQ(syn[0].second.syns[0].dst, kD);
  EXPECT_EQ(syn[0].second.syns[0].next_psn, 12u * kMtu);
  // The downstream answers with its PSN: everything arrived and left.
  sw.arrive_control(12 * kT, 1, credit(kD, 0, 12 * kMtu));
  sw.run_until(20 * kT);
  EXPECT_EQ(departed(sw, 1, 1), 8u);
  EXPECT_EQ(fg.stats().syn_out, 1u);
  // Nothing in flight without credit any more? 8 frames are; but we heard
  // the downstream at 12 T, so the next SYN is due no earlier than 22 T.
  EXPECT_EQ(frames(sw, 1, CtrlType::kSwitchSyn).size(), 1u);
}

TEST(FloodgateLogic, DownstreamAnswersSynAndCreditsBytesLostOnTheLink) {
  FloodgateLogic fg(cfg());
  SwitchModel sw({sw_port("up"), host_port("d")}, fg);
  for (int i = 0; i < 3; ++i) sw.arrive(0, pkt(0, 1, kD));
  sw.run_until(2 * kT);  // the 3 left and were credited (PSN 3 frames)
  // The upstream sent 5: two were lost on the link.
  ControlFrame syn{CtrlType::kSwitchSyn};
  syn.syns = {{kD, 5 * kMtu}};
  sw.arrive_control(2 * kT + 1, 0, encode(syn));
  sw.run_until(2 * kT + 1);
  auto cr = frames(sw, 0, CtrlType::kCredit);
  ASSERT_EQ(cr.size(), 2u);
  EXPECT_EQ(cr[0].second.credits[0].psn, 3u * kMtu);
  EXPECT_EQ(cr[1].first, 2 * kT + 1);  // answered at once
  ASSERT_EQ(cr[1].second.credits.size(), 1u);
  EXPECT_EQ(cr[1].second.credits[0].credit_bytes, 2u * kMtu);
  EXPECT_EQ(cr[1].second.credits[0].psn, 5u * kMtu);
  EXPECT_EQ(fg.stats().syn_lost_bytes, 2u * kMtu);
  // A SYN with nothing lost is answered with the PSN we are at.
  syn.syns = {{kD, 5 * kMtu}};
  sw.arrive_control(3 * kT + 1, 0, encode(syn));
  sw.run_until(3 * kT + 1);
  cr = frames(sw, 0, CtrlType::kCredit);
  ASSERT_EQ(cr.size(), 3u);
  EXPECT_EQ(cr[2].second.credits[0].credit_bytes, 0u);
  EXPECT_EQ(cr[2].second.credits[0].psn, 5u * kMtu);
}

TEST(FloodgateLogic, VoqGroupingSplitsUpAndDownOnAMiddleSwitch) {
  Config c = cfg();
  c.max_voqs = 4;
  c.up_ports = {1};
  FloodgateLogic fg(c);
  SwitchModel sw({sw_port("down", 4), sw_port("up", 4)}, fg);
  EXPECT_EQ(fg.voq_group(0), (std::pair<uint32_t, uint32_t>{0, 2}));
  EXPECT_EQ(fg.voq_group(1), (std::pair<uint32_t, uint32_t>{2, 4}));
  for (const Addr* d : {&kD, &kE, &kF})
    for (int i = 0; i < 14; ++i) sw.arrive(0, pkt(1, 0, *d));  // down traffic
  sw.run_until(0);
  EXPECT_LT(fg.voq_of(kF), 2) << "down traffic stays in the down group even when it is full";
  EXPECT_EQ(fg.stats().voq_hashed, 1u);
  for (int i = 0; i < 14; ++i) sw.arrive(0, pkt(0, 1, addr_parse("10.0.8.1")));  // up traffic
  sw.run_until(0);
  EXPECT_EQ(fg.voq_of(addr_parse("10.0.8.1")), 2);
  // Without grouping, one pool.
  c.voq_grouping = false;
  FloodgateLogic fg2(c);
  SwitchModel sw2({sw_port("down", 4), sw_port("up", 4)}, fg2);
  EXPECT_EQ(fg2.voq_group(0), (std::pair<uint32_t, uint32_t>{0, 4}));
  // A switch without up ports (a core) has one group even with grouping on.
  c.voq_grouping = true;
  c.up_ports = {};
  FloodgateLogic fg3(c);
  SwitchModel sw3({sw_port("a", 4), sw_port("b", 4)}, fg3);
  EXPECT_EQ(fg3.voq_group(1), (std::pair<uint32_t, uint32_t>{0, 4}));
}

TEST(FloodgateLogic, DstPauseTellsOnlyTheSourceHostsAndResumes) {
  Config c = cfg();
  c.dst_pause = true;  // thre_off = thre_on = BDP of the 200M uplink = 5000 B
  FloodgateLogic fg(c);
  SwitchModel sw({host_port("h0"), host_port("h1"), host_port("h2"), sw_port("up")}, fg);
  for (int i = 0; i < 10; ++i) {
    sw.arrive(0, pkt(0, 3, kD));
    sw.arrive(0, pkt(1, 3, kD));
  }
  for (int i = 0; i < 3; ++i) sw.arrive(0, pkt(2, 3, kE));
  sw.run_until(1'000'000);
  // 12 pass; D's VOQ reaches 4 frames (6056 > 5000) at the 16th frame.
  auto p0 = frames(sw, 0, CtrlType::kDstPause), p1 = frames(sw, 1, CtrlType::kDstPause);
  ASSERT_EQ(p0.size(), 1u);
  ASSERT_EQ(p1.size(), 1u);
  EXPECT_EQ(p0[0].second.dsts[0].dst, kD);
  EXPECT_TRUE(frames(sw, 2, CtrlType::kDstPause).empty()) << "h2 never sent to D";
  EXPECT_TRUE(fg.dst_paused(kD, 0));
  EXPECT_TRUE(fg.dst_paused(kD, 1));
  // Credits drain the VOQ below thre_on: dstResume to both, newer seq.
  sw.arrive_control(1'000'000, 3, credit(kD, 12 * kMtu, 12 * kMtu));
  sw.run_until(5'000'000);
  auto r0 = frames(sw, 0, CtrlType::kDstResume);
  ASSERT_EQ(r0.size(), 1u);
  EXPECT_EQ(frames(sw, 1, CtrlType::kDstResume).size(), 1u);
  EXPECT_GT(r0[0].first, p0[0].first);
  EXPECT_EQ(r0[0].second.dsts[0].seq, p0[0].second.dsts[0].seq + 1);
  EXPECT_FALSE(fg.dst_paused(kD, 0));
  EXPECT_EQ(fg.stats().dst_pause_out, 2u);
  EXPECT_EQ(fg.stats().dst_resume_out, 2u);
}

TEST(FloodgateLogic, BadConfigurationIsRefused) {
  auto bad = [](auto mutate) {
    Config c = cfg();
    mutate(c);
    EXPECT_THROW(FloodgateLogic{c}, std::invalid_argument);
  };
  bad([](Config& c) { c.credit_interval_ns = 0; });
  bad([](Config& c) { c.max_voqs = 0; });
  bad([](Config& c) { c.max_voqs = SLUICE_SW_MAX_QUEUES; });
  bad([](Config& c) { c.syn_timeout_ns = kT; });
  bad([](Config& c) { c.thre_off_bytes = 1000, c.thre_on_bytes = 2000; });
  bad([](Config& c) { c.down_voqs = 100; });
  // Ports the logic cannot work with.
  FloodgateLogic fg(cfg());
  PortConfig one = sw_port("up");
  one.queues.resize(1);
  EXPECT_THROW(SwitchModel({host_port("h0"), one}, fg), std::invalid_argument);
  FloodgateLogic fg2(cfg());
  PortConfig flat = sw_port("up");
  for (auto& q : flat.queues) q.priority = 0;
  EXPECT_THROW(SwitchModel({host_port("h0"), flat}, fg2), std::invalid_argument);
  Config c = cfg();
  c.up_ports = {7};
  FloodgateLogic fg3(c);
  EXPECT_THROW(SwitchModel({host_port("h0"), sw_port("up")}, fg3), std::invalid_argument);
}

TEST(FloodgateLogic, BogusCreditsChangeNothing) {
  FloodgateLogic fg(cfg());
  SwitchModel sw({host_port("h0"), sw_port("up"), sw_port("other")}, fg);
  for (int i = 0; i < 14; ++i) sw.arrive(0, pkt(0, 1, kD));
  sw.run_until(1000);
  // A credit for a destination we never sent to, and one for D on the
  // wrong port: ignored and counted.
  sw.arrive_control(2000, 1, credit(kE, 10 * kMtu, 10 * kMtu));
  sw.arrive_control(2000, 2, credit(kD, 10 * kMtu, 10 * kMtu));
  sw.run_until(3'000'000);
  EXPECT_EQ(fg.stats().credit_unknown, 2u);
  EXPECT_TRUE(fg.windows().size() == 1u);
  EXPECT_EQ(sw.depth(1, 1).pkts, 2u);
}

// A tail drop the substrate reports (on_drop, the held data path's queue
// limit): a packet dropped from queue 0 gives its window back, a dropped
// VOQ entry is forgotten at once (no desync to reconcile), and bytes
// received from a switch port that are dropped here are credited upstream
// (freed buffer), so the upstream's window does not shrink by them.
TEST(FloodgateLogic, TailDropsAreUndoneAndCredited) {
  FloodgateLogic fg(cfg());
  PortConfig up = sw_port("up", 2);
  up.queues[0].limit_bytes = 4 * kMtu;
  up.queues[1].limit_bytes = 2 * kMtu;
  // Port 0 comes from an upstream switch (switch-facing): it gets credits.
  SwitchModel sw({sw_port("in"), up}, fg);
  // 6 to D at once into queue 0 (limit 4): 2 dropped, not in flight.
  for (int i = 0; i < 6; ++i) sw.arrive(0, pkt(0, 1, kD));
  sw.run_until(0);
  EXPECT_EQ(fg.stats().dropped, 2u);
  EXPECT_EQ(fg.inflight(1, kD), 4 * int64_t(kMtu)) << "a dropped packet is not in flight";
  EXPECT_EQ(fg.window(1, kD), kW0 - 4 * int64_t(kMtu));
  // 15 to E, 100 us apart (each leaves before the next): 12 use up E's
  // window, 3 go to a VOQ (limit 2): one dropped, and forgotten at once.
  for (int i = 0; i < 15; ++i) sw.arrive(1'000'000 + uint64_t(i) * 100'000, pkt(0, 1, kE));
  sw.run_until(2'500'000);
  EXPECT_EQ(fg.stats().dropped, 3u);
  ASSERT_GE(fg.voq_of(kE), 0);
  EXPECT_EQ(fg.voq_bytes(fg.voq_of(kE)), 2u * kMtu);
  EXPECT_EQ(sw.depth(1, QueueId(1 + fg.voq_of(kE))).bytes, 2u * kMtu);
  sw.run_until(40'000'000);
  EXPECT_EQ(fg.stats().voq_desync, 0u);
  // What came from port 0 and left or was dropped here is credited back to
  // it: 21 frames in, 2 still held.
  uint64_t credited = 0;
  for (const auto& [at, f] : frames(sw, 0, CtrlType::kCredit))
    for (const auto& r : f.credits) credited += r.credit_bytes;
  EXPECT_EQ(credited, 19u * kMtu);
}
