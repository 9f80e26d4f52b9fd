// TOP protocol logic (agent/mechanisms/top) on a deterministic simulated
// network (top_sim.h): flows complete with known size and with FIN, token
// loss costs no data, data loss is NACKed and resent at most once per RTT,
// the objective orders flows through the token priorities at a shared
// sender, expired tokens are dropped unless the clock correction covers the
// offset, and an incast loses no data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <map>
#include <vector>

#include "mechanisms/top/objective.h"
#include "mechanisms/top/receiver.h"
#include "mechanisms/top/sender.h"
#include "mechanisms/top/wire.h"
#include "top_sim.h"

using namespace sluice::top;

namespace {

constexpr uint64_t kUs = 1000, kMs = 1000 * kUs;

ReceiverConfig rcfg(Objective o = Objective::kFct) {
  ReceiverConfig c;
  c.slot_ns = pacing_slot_ns(1000, 1440);  // (98 + 1538) bytes at 1 Gbit/s
  c.objective = o;
  c.rtt_ns = 100 * kUs;
  return c;
}
SenderConfig scfg() {
  SenderConfig c;
  c.rtt_ns = 100 * kUs;
  return c;
}
FlowSpec flow(uint64_t bytes, bool clairvoyant = true) {
  FlowSpec f;
  f.size_bytes = bytes;
  f.clairvoyant = clairvoyant;
  return f;
}
uint64_t pkts(uint64_t bytes) { return (bytes + 1439) / 1440; }
// A clairvoyant flow's SYNC, as a sender opens it.
Packet sync_of(uint64_t flow, uint64_t bytes) {
  Packet s;
  s.type = Type::kSync;
  s.flow = flow;
  s.mss = 1440;
  s.sized = true;
  s.size_bytes = bytes;
  return s;
}

std::vector<uint8_t> enc(const Packet& p) {
  std::vector<uint8_t> b(wire_bytes(p) + 8);
  size_t n = encode(p, b.data(), b.size());
  b.resize(n + (p.type == Type::kData ? p.len : 0));
  return b;
}

}  // namespace

TEST(TopWire, RoundTripsEveryType) {
  for (Type t : {Type::kToken, Type::kData, Type::kSync, Type::kFin, Type::kNack, Type::kDone}) {
    Packet p;
    p.type = t;
    p.priority = 3;
    p.flow = 0x1122334455667788ull;
    p.seq = 77;
    p.aux = 5;
    p.tstamp_ns = 0x0102030405060708ull;
    p.len = t == Type::kData ? 100 : 0;
    p.size_bytes = 5000;
    p.mss = 1440;
    p.sized = true;
    p.deadline_ns = 42;
    p.prio_class = 2;
    auto b = enc(p);
    std::string why;
    auto q = decode(b.data(), b.size(), &why);
    ASSERT_TRUE(q) << type_name(t) << ": " << why;
    EXPECT_EQ(q->type, t);
    EXPECT_EQ(q->flow, p.flow);
    EXPECT_EQ(q->seq, 77u);
    EXPECT_EQ(q->aux, 5u);
    EXPECT_EQ(q->tstamp_ns, p.tstamp_ns);
    EXPECT_EQ(q->priority, 3);
    if (t == Type::kSync || t == Type::kFin) {
      EXPECT_EQ(q->size_bytes, 5000u);
      EXPECT_EQ(q->mss, 1440);
      EXPECT_TRUE(q->sized);
      EXPECT_EQ(q->deadline_ns, 42u);
      EXPECT_EQ(q->prio_class, 2);
    }
  }
}

TEST(TopWire, RejectsMalformed) {
  Packet tok;
  tok.type = Type::kToken;
  auto good = enc(tok);
  struct Case {
    const char* desc;
    std::vector<uint8_t> b;
  };
  std::vector<Case> cases;
  cases.push_back({"short", std::vector<uint8_t>(good.begin(), good.begin() + 31)});
  auto b = good;
  b[0] ^= 0xff;
  cases.push_back({"bad magic", b});
  b = good;
  b[2] = 9;
  cases.push_back({"bad version", b});
  b = good;
  b[3] = 0;
  cases.push_back({"type 0", b});
  b = good;
  b[3] = 7;
  cases.push_back({"type 7", b});
  b = good;
  b[4] = 6;
  cases.push_back({"token priority 6", b});
  Packet d;
  d.type = Type::kData;
  d.len = 100;
  b = enc(d);
  b.resize(b.size() - 1);
  cases.push_back({"data shorter than len", b});
  Packet s;
  s.type = Type::kSync;
  s.mss = 1440;
  s.sized = true;
  s.size_bytes = 10;
  b = enc(s);
  b.resize(40);
  cases.push_back({"sync without record", b});
  s.mss = 0;
  cases.push_back({"sync mss 0", enc(s)});
  s.mss = 1440;
  s.size_bytes = 0;
  cases.push_back({"sized sync of 0 bytes", enc(s)});
  s.size_bytes = 10;
  s.prio_class = 6;
  cases.push_back({"priority class 6", enc(s)});
  Packet n;
  n.type = Type::kNack;
  n.aux = 0;
  cases.push_back({"nack of 0", enc(n)});
  for (auto& c : cases) {
    std::string why;
    EXPECT_FALSE(decode(c.b.data(), c.b.size(), &why)) << c.desc;
    EXPECT_FALSE(why.empty()) << c.desc;
  }
}

// §3.2: floor(K log_p(a x + b)) with K = 6: classes split [1, p] at p^(i/K).
TEST(TopObjective, FctClassesFollowTheLogFormula) {
  PriorityParams pp;
  pp.p = 20000;
  pp.a = 1;
  pp.b = 0 + 1;
  EXPECT_EQ(fct_priority(1, pp), 0);
  EXPECT_EQ(fct_priority(20000, pp), 5);
  EXPECT_EQ(fct_priority(1'000'000, pp), 5);  // clamped to K-1
  int prev = 0;
  for (uint64_t x = 1; x <= 20000; x = x * 3 / 2 + 1) {
    int c = fct_priority(x, pp);
    EXPECT_GE(c, prev) << x;
    EXPECT_EQ(c, std::min(5, static_cast<int>(std::floor(6 * std::log(x + 1.0) / std::log(20000.0))))) << x;
    prev = c;
  }
  // The i-th threshold is p^(i/K): 20000^(1/6) = 5.2 packets.
  EXPECT_EQ(fct_priority(3, pp), 0);
  EXPECT_EQ(fct_priority(5, pp), 1);
  EXPECT_EQ(las_priority(0, pp), 0);
  EXPECT_EQ(deadline_priority(std::nullopt, pp), 5);
  EXPECT_EQ(deadline_priority(-5, pp), 5);
  EXPECT_LT(deadline_priority(10 * kUs, pp), deadline_priority(50 * kMs, pp));
  EXPECT_TRUE(pp.validate() == std::nullopt);
  pp.b = 0;
  EXPECT_TRUE(pp.validate());
  EXPECT_EQ(parse_objective("las"), Objective::kLas);
  EXPECT_FALSE(parse_objective("sjf"));
}

// Explicit bounds (sluice-top recv --bounds) replace the formula for the
// FCT and LAS classes; class c holds [bounds[c-1], bounds[c]).
TEST(TopObjective, ExplicitBoundsReplaceTheFormula) {
  PriorityParams pp;
  pp.p = 6944;
  // 3,000 and 6,000 packets share the formula's last class ...
  EXPECT_EQ(fct_priority(3000, pp), 5);
  EXPECT_EQ(fct_priority(6000, pp), 5);
  pp.bounds = {3.4, 700, 1800, 3500, 5200};
  ASSERT_EQ(pp.validate(), std::nullopt);
  // ... and not with bounds that split the large flows.
  EXPECT_EQ(fct_priority(3000, pp), 3);
  EXPECT_EQ(fct_priority(6000, pp), 5);
  EXPECT_EQ(fct_priority(1, pp), 0);
  EXPECT_EQ(fct_priority(3, pp), 0);
  EXPECT_EQ(fct_priority(4, pp), 1);
  EXPECT_EQ(fct_priority(699, pp), 1);
  EXPECT_EQ(fct_priority(700, pp), 2);
  EXPECT_EQ(fct_priority(5199, pp), 4);
  EXPECT_EQ(fct_priority(1'000'000, pp), 5);
  EXPECT_EQ(las_priority(0, pp), 0);
  EXPECT_EQ(las_priority(1800, pp), 3);
  EXPECT_EQ(deadline_priority(std::nullopt, pp), 5);  // the deadline classes keep their formula
  // Bad bounds are refused with a reason.
  for (auto bad : std::vector<std::vector<double>>{{1, 2, 3, 4},
                                                   {1, 2, 3, 4, 5, 6},
                                                   {1, 2, 2, 4, 5},
                                                   {5, 4, 3, 2, 1},
                                                   {0, 2, 3, 4, 5},
                                                   {1, 2, 3, 4, std::nan("")},
                                                   {1, 2, 3, 4, HUGE_VAL}}) {
    pp.bounds = bad;
    auto why = pp.validate();
    ASSERT_TRUE(why) << bad.size();
    EXPECT_NE(why->find("bounds"), std::string::npos) << *why;
  }
  pp.classes = 1;
  pp.bounds = {};
  EXPECT_EQ(pp.validate(), std::nullopt);
  EXPECT_EQ(fct_priority(6000, pp), 0);
}

TEST(TopObjective, RateControlCutsOnLossAndClimbsWithout) {
  RateParams rp;
  EXPECT_DOUBLE_EQ(RateControl(rp).rate(), 1.0);  // a new flow starts at the full token rate
  rp.initial_rate = 0.5;
  RateControl rc(rp);
  EXPECT_DOUBLE_EQ(rc.rate(), 0.5);
  rc.update(0.5);  // above the 10% target: rate * (1 - loss) * (1 + target)
  EXPECT_NEAR(rc.rate(), 0.5 * 0.5 * 1.1, 1e-12);
  double r = rc.rate();
  for (int i = 0; i < 50; i++) rc.update(0.0);
  EXPECT_GT(rc.rate(), r);
  EXPECT_DOUBLE_EQ(rc.rate(), 1.0);  // clamped to the full token rate
  for (int i = 0; i < 50; i++) rc.update(1.0);
  EXPECT_DOUBLE_EQ(rc.rate(), rp.min_rate);
  rp.min_rate = 0.9;
  EXPECT_TRUE(rp.validate());
}

TEST(TopProtocol, SingleFlowCompletesOneDataPacketPerToken) {
  sim::Net net({}, 2, rcfg(), scfg());
  net.open(0, 1, flow(300'000), 0);
  ASSERT_TRUE(net.run_all(100 * kMs));
  auto done = net.sender(0).take_completions();
  ASSERT_EQ(done.size(), 1u);
  auto& s = net.sender(0).stats();
  EXPECT_EQ(s.data_sent, pkts(300'000));
  EXPECT_EQ(s.data_resent, 0u);
  EXPECT_EQ(net.totals().data_drops, 0u);
  EXPECT_EQ(net.receiver(1).stats().flows_closed, 1u);
  // Data cannot beat the link: 209 full frames at 1 Gbit/s.
  uint64_t fct = done[0].done_ns - done[0].start_ns;
  EXPECT_GT(fct, pkts(300'000) * 1538 * 8);
  auto rdone = net.receiver(1).take_completions();
  ASSERT_EQ(rdone.size(), 1u);
  EXPECT_EQ(rdone[0].size_bytes, 300'000u);
}

TEST(TopProtocol, TokenLossCostsNoDataAndNoResend) {
  sim::Net net({}, 2, rcfg(), scfg());
  int n = 0;
  net.set_drop([&](const Packet& p) { return p.type == Type::kToken && ++n % 7 == 0; });
  net.open(0, 1, flow(200'000), 0);
  ASSERT_TRUE(net.run_all(100 * kMs));
  EXPECT_GT(net.injected_drops(), 10u);
  auto& s = net.sender(0).stats();
  EXPECT_EQ(s.data_sent, pkts(200'000));
  EXPECT_EQ(s.data_resent, 0u);
  uint64_t tokens = 0;
  for (auto t : net.receiver(1).stats().tokens_sent) tokens += t;
  EXPECT_GT(tokens, pkts(200'000));
}

TEST(TopProtocol, DataLossIsNackedAndResentIncludingTheTail) {
  sim::Net net({}, 2, rcfg(), scfg());
  std::map<uint32_t, int> sent;
  uint32_t last = static_cast<uint32_t>(pkts(100'000) - 1);
  net.set_drop([&](const Packet& p) {
    if (p.type != Type::kData) return false;
    int k = ++sent[p.seq];
    return (p.seq == 5 || p.seq == last) && k == 1;
  });
  net.open(0, 1, flow(100'000), 0);
  ASSERT_TRUE(net.run_all(100 * kMs));
  EXPECT_EQ(net.injected_drops(), 2u);
  EXPECT_EQ(net.sender(0).stats().data_resent, 2u);
  EXPECT_EQ(sent[5], 2);
  EXPECT_EQ(sent[last], 2);
  EXPECT_GE(net.receiver(1).stats().nacks_sent, 2u);
}

// §4.4: "the sender only retransmits a specific packet at most once in each RTT".
TEST(TopProtocol, ResendsAnIdAtMostOncePerRtt) {
  sim::Net net({}, 2, rcfg(), scfg());
  std::vector<uint64_t> sends;
  net.set_drop([&](const Packet& p) {
    return p.type == Type::kData && p.seq == 3 && net.now() < 3 * kMs;  // lost for 3 ms
  });
  // The sender's own send times: one hop later a copy may have waited in
  // the NIC's queue behind another packet and the first copy not, or the
  // other way round.
  net.set_sent([&](int host, const Packet& p) {
    if (host == 0 && p.type == Type::kData && p.seq == 3) sends.push_back(net.now());
  });
  net.open(0, 1, flow(2'000'000), 0);
  ASSERT_TRUE(net.run_all(200 * kMs));
  ASSERT_GE(sends.size(), 3u);
  for (size_t i = 1; i < sends.size(); i++) EXPECT_GE(sends[i] - sends[i - 1], 100 * kUs) << i;
}

TEST(TopProtocol, NonClairvoyantFlowEndsWithFinAndWalksDownLasClasses) {
  ReceiverConfig rc = rcfg(Objective::kLas);
  rc.prio.p = 200;
  sim::Net net({}, 2, rc, scfg());
  net.open(0, 1, flow(250'000, false), 0);
  ASSERT_TRUE(net.run_all(100 * kMs));
  EXPECT_GE(net.sender(0).stats().fins_sent, 1u);
  EXPECT_EQ(net.sender(0).take_completions().size(), 1u);
  const auto& t = net.receiver(1).stats().tokens_sent;
  int used = 0;
  for (auto x : t) used += x > 0;
  EXPECT_GE(used, 4) << "LAS: class rises with packets received";
  EXPECT_GT(t[0], 0u);
}

TEST(TopProtocol, LostSyncIsRetriedAndLostDoneIsProbed) {
  sim::Net net({}, 2, rcfg(), scfg());
  int syncs = 0, dones = 0;
  net.set_drop([&](const Packet& p) {
    if (p.type == Type::kSync) return ++syncs == 1;
    if (p.type == Type::kDone) return ++dones == 1;
    return false;
  });
  net.open(0, 1, flow(30'000), 0);
  ASSERT_TRUE(net.run_all(100 * kMs));
  EXPECT_EQ(syncs, 2);
  EXPECT_EQ(dones, 2);
  EXPECT_GE(net.sender(0).stats().fins_sent, 1u);  // the probe that brought the second DONE
  EXPECT_EQ(net.sender(0).stats().data_resent, 0u);
}

// Fig. 2: two receivers' tokens meet at the sender's downlink, where the
// token group is limited to ~5% and strict priority picks the short flow's.
static uint64_t short_fct_next_to_long(Objective o) {
  sim::Net net({}, 3, rcfg(o), scfg());
  net.open(0, 1, flow(3'000'000), 0);
  net.open(0, 2, flow(30'000), 5 * kMs);
  EXPECT_TRUE(net.run_all(1000 * kMs));
  EXPECT_EQ(net.totals().data_drops, 0u);
  for (auto& c : net.sender(0).take_completions())
    if (c.size_bytes == 30'000) return c.done_ns - c.start_ns;
  return 0;
}

TEST(TopProtocol, ShortFlowTokensWinAtASharedSender) {
  uint64_t top = short_fct_next_to_long(Objective::kFct);
  uint64_t fair = short_fct_next_to_long(Objective::kFair);
  sim::Net alone({}, 3, rcfg(), scfg());
  alone.open(0, 2, flow(30'000), 0);
  ASSERT_TRUE(alone.run_all(100 * kMs));
  auto c = alone.sender(0).take_completions();
  uint64_t solo = c[0].done_ns - c[0].start_ns;
  ASSERT_GT(top, 0u);
  ASSERT_GT(fair, 0u);
  EXPECT_LT(top, fair * 3 / 4) << "top " << top << " fair " << fair << " alone " << solo;
  EXPECT_LT(top, solo * 2) << "top " << top << " alone " << solo;
}

TEST(TopProtocol, EarlierDeadlineFinishesFirst) {
  sim::Net net({}, 3, rcfg(Objective::kDeadline), scfg());
  FlowSpec late = flow(400'000), early = flow(400'000);
  late.deadline_ns = 80 * kMs;
  early.deadline_ns = 8 * kMs;
  net.open(1, 0, late, 0);
  net.open(2, 0, early, 10 * kUs);
  ASSERT_TRUE(net.run_all(1000 * kMs));
  auto done = net.receiver(0).take_completions();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].deadline_ns - done[0].start_ns, 8 * kMs) << "the 8 ms flow closes first";
  EXPECT_TRUE(done[0].deadline_met);
  EXPECT_TRUE(done[1].deadline_met);
}

// §4.3: a receiver clock 5 ms behind makes every token look 5 ms late, far
// past T; the sender drops them all. The per-host correction fixes it.
TEST(TopProtocol, ExpiryDropsSkewedTokensUnlessCorrected) {
  for (bool corrected : {false, true}) {
    sim::Net net({}, 2, rcfg(), scfg());
    net.set_clock_offset(1, -5 * static_cast<int64_t>(kMs));
    if (corrected) net.set_correction(0, -5 * static_cast<int64_t>(kMs));
    net.open(0, 1, flow(50'000), 0);
    bool done = net.run_all(50 * kMs);
    uint64_t expired = 0;
    for (auto e : net.totals().tokens_expired) expired += e;
    if (corrected) {
      EXPECT_TRUE(done);
      EXPECT_EQ(expired, 0u);
    } else {
      EXPECT_FALSE(done);
      EXPECT_GT(expired, 50u);
      EXPECT_EQ(net.sender(0).stats().data_sent, 0u);
    }
  }
}

TEST(TopProtocol, IncastLosesNoDataAndKeepsTheQueueShort) {
  sim::NetConfig nc;
  nc.data_queue_bytes = 200'000;
  sim::Net net(nc, 9, rcfg(), scfg());
  for (int s = 1; s <= 8; s++) net.open(s, 0, flow(200'000), 0);
  ASSERT_TRUE(net.run_all(1000 * kMs));
  auto t = net.totals();
  EXPECT_EQ(t.data_drops, 0u);
  EXPECT_LT(t.max_data_bytes, 20'000u) << "receiver paces the tokens: data arrives spaced";
  EXPECT_EQ(net.receiver(0).stats().flows_closed, 8u);
}

TEST(TopProtocol, BadInputChangesNothing) {
  Receiver r(rcfg());
  Sender s(scfg());
  std::vector<Packet> out;
  Packet d;
  d.type = Type::kData;
  d.flow = 99;
  r.on_packet(d, 0, out);
  EXPECT_EQ(r.stats().data_unknown_flow, 1u);
  Packet t;
  t.type = Type::kToken;
  t.flow = 99;
  s.on_packet(t, 0, out);
  EXPECT_EQ(s.stats().tokens_unknown_flow, 1u);
  EXPECT_TRUE(out.empty());
  // Data naming a token never sent.
  Packet sync;
  sync.type = Type::kSync;
  sync.flow = 7;
  sync.mss = 1440;
  sync.sized = true;
  sync.size_bytes = 5000;
  r.on_packet(sync, 0, out);
  d.flow = 7;
  d.aux = 3;
  r.on_packet(d, 0, out);
  EXPECT_EQ(r.stats().bad_packets, 1u);
  EXPECT_EQ(r.stats().data_received, 0u);
  EXPECT_THROW(s.open_flow(flow(0), 0, out), std::invalid_argument);
  FlowSpec f = flow(10);
  f.prio_class = 9;
  EXPECT_THROW(s.open_flow(f, 0, out), std::invalid_argument);
  EXPECT_TRUE(rcfg().validate() == std::nullopt);
  ReceiverConfig bad = rcfg();
  bad.slot_ns = 0;
  EXPECT_TRUE(bad.validate());
}

// The transport's floor (docs/top.md "The transport's floor"): what a flow
// alone gets.

TEST(TopFloor, SlotIsOneTokenAndOneDataFrameAsTheSwitchChargesThem) {
  EXPECT_EQ(kTokenFrameBytes, 98u);  // 32-byte header + 42 B of headers + 24 B FCS/preamble/gap
  EXPECT_EQ(data_frame_bytes(1440), 1538u);
  EXPECT_EQ(frame_on_wire(1), 84u);  // a minimum frame
  EXPECT_EQ(pacing_slot_ns(100, 1440), 130'880u);
  EXPECT_EQ(pacing_slot_ns(1000, 1440), 13'088u);
}

TEST(TopFloor, PacerKeepsTheGridAndCatchesUpAFewSlotsAtMost) {
  SlotPacer p(100, 4);
  p.start(1000);
  EXPECT_TRUE(p.due(1000));
  p.fired(1000);
  EXPECT_EQ(p.next(), 1100u);
  p.fired(1130);  // 30 late: the grid stays
  EXPECT_EQ(p.next(), 1200u);
  // A wake-up 10 slots late: this slot and 4 more right away, 5 given up.
  uint64_t now = 1200 + 1000;
  int fired = 0;
  while (p.due(now)) {
    p.fired(now);
    fired++;
  }
  EXPECT_EQ(fired, 5);
  EXPECT_EQ(p.missed(), 6u);
  EXPECT_EQ(p.next(), 2300u);  // back on the grid
}

TEST(TopJitter, EveryGapWithinTheJitterTheOffsetWithinHalfASlotTheRateExact) {
  const uint64_t slot = 1000;
  SlotPacer p(slot, 4, 0.1, 42);
  p.start(5000);
  uint64_t prev = p.next();
  int64_t lo = 0, hi = 0;
  const int n = 20000;
  for (int i = 0; i < n; i++) {
    uint64_t t = p.next();
    ASSERT_TRUE(p.due(t));
    p.fired(t);  // on time: no slot missed
    uint64_t gap = p.next() - prev;
    prev = p.next();
    ASSERT_GE(gap, 900u) << i;
    ASSERT_LE(gap, 1100u) << i;
    ASSERT_LE(std::abs(p.offset()), int64_t(slot / 2)) << i;
    lo = std::min(lo, p.offset());
    hi = std::max(hi, p.offset());
  }
  EXPECT_EQ(p.missed(), 0u);
  // The long-run rate is the grid's: n gaps within half a slot of n slots.
  EXPECT_LE(std::llabs(int64_t(prev) - int64_t(5000 + n * slot)), int64_t(slot / 2));
  // The phase wanders over the whole slot, not a few percent of it.
  EXPECT_LT(lo, -int64_t(slot) * 4 / 10);
  EXPECT_GT(hi, int64_t(slot) * 4 / 10);
}

TEST(TopJitter, ZeroJitterIsTheFixedGrid) {
  SlotPacer p(1000, 4, 0.0, 7);
  p.start(0);
  for (int i = 0; i < 100; i++) {
    EXPECT_EQ(p.next(), uint64_t(i) * 1000);
    p.fired(p.next());
  }
}

// Three receivers' tokens at one 8-token queue that passes one token per
// slot (the switches' token group): on a fixed grid the receiver whose phase
// comes first after the queue's service takes every token and the others
// none (what starved the `tokens` baseline's small flows on a quiet
// machine); with ExpressPass's jitter every receiver gets a share.
static std::vector<double> token_queue_shares(double jitter) {
  const uint64_t slot = 1000;
  const int slots = 6000;
  std::vector<SlotPacer> rx;
  const uint64_t phase[3] = {100, 400, 700};
  for (int i = 0; i < 3; i++) {
    rx.emplace_back(slot, 4, jitter, 1000 + i);
    rx.back().start(slot + phase[i]);
  }
  std::vector<uint64_t> accepted(3, 0);
  size_t queue = 0;
  uint64_t next_service = slot;
  const uint64_t end = uint64_t(slots) * slot;
  while (true) {
    // The earliest event: the queue's service or a receiver's token.
    int who = -1;
    uint64_t t = next_service;
    for (int i = 0; i < 3; i++)
      if (rx[i].next() < t) {
        t = rx[i].next();
        who = i;
      }
    if (t >= end) break;
    if (who < 0) {
      if (queue) queue--;
      next_service += slot;
      continue;
    }
    rx[who].fired(t);
    if (queue < 8) {
      queue++;
      if (t > 100 * slot) accepted[who]++;  // after the queue has filled
    }
  }
  uint64_t total = accepted[0] + accepted[1] + accepted[2];
  std::vector<double> share;
  for (auto a : accepted) share.push_back(total ? double(a) / double(total) : 0);
  return share;
}

TEST(TopJitter, ReceiversSharingATokenQueueDoNotLockPhase) {
  auto fixed = token_queue_shares(0.0);
  EXPECT_GT(fixed[0], 0.95);  // phase 100 always first after the service
  EXPECT_LT(fixed[1] + fixed[2], 0.05);
  auto jittered = token_queue_shares(0.1);
  for (int i = 0; i < 3; i++) EXPECT_GT(jittered[i], 0.2) << "receiver " << i;
}

TEST(TopFloor, ALoneShortFlowGetsATokenEverySlotFromTheStart) {
  ReceiverConfig c = rcfg();
  Receiver r(c);
  std::vector<Packet> out;
  r.on_packet(sync_of(7, 10 * 1440), 0, out);
  int tokens = 0;
  for (int i = 0; i < 10; i++) {
    out.clear();
    r.on_slot(i * c.slot_ns, out);
    for (auto& p : out) tokens += p.type == Type::kToken;
  }
  EXPECT_EQ(tokens, 10);
  EXPECT_EQ(r.stats().slots_idle, 0u);
}

TEST(TopFloor, TokensAnsweredLateFromTheTokenQueuesAreNotLost) {
  // Every token is answered 300 us after it left: more than 2 RTT (200 us),
  // less than 2 RTT + two full 8-token queues. Nothing was lost, so the
  // flow keeps the full token rate.
  ReceiverConfig c = rcfg();
  Receiver r(c);
  std::vector<Packet> out;
  r.on_packet(sync_of(9, 3000ull * 1440), 0, out);
  std::deque<std::pair<uint64_t, Packet>> answers;
  uint32_t next_id = 0;
  for (uint64_t now = 0; now < 20 * kMs; now += c.slot_ns) {
    while (!answers.empty() && answers.front().first <= now) {
      out.clear();
      r.on_packet(answers.front().second, now, out);
      answers.pop_front();
    }
    out.clear();
    r.on_slot(now, out);
    for (auto& p : out) {
      if (p.type != Type::kToken) continue;
      Packet d;
      d.type = Type::kData;
      d.flow = 9;
      d.seq = next_id++;
      d.aux = p.seq;
      d.len = 1440;
      answers.emplace_back(now + 300 * kUs, d);
    }
  }
  auto v = r.flows(20 * kMs);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_DOUBLE_EQ(v[0].rate, 1.0);
  EXPECT_EQ(r.stats().nacks_sent, 0u);
  EXPECT_LT(r.stats().slots_idle, 5u);
}

TEST(TopFloor, ALoneFlowFillsItsSlotsThroughTheTokenGroup) {
  // The switch's token group passes tokens at the rate the receiver paces
  // them (frames as charged on the wire): a flow alone gets one data packet
  // per slot after its first RTT. (The simulated receiver jitters its slots
  // by +-25%, a random walk against the group's constant rate, so its
  // 8-token queue overflows now and then: a few drops, not the 14% that a
  // group sized for 84-byte tokens charging 98 drops.)
  sim::Net net({}, 2, rcfg(), scfg());
  net.open(0, 1, flow(3'000'000), 0);
  ASSERT_TRUE(net.run_all(200 * kMs));
  auto done = net.sender(0).take_completions();
  ASSERT_EQ(done.size(), 1u);
  uint64_t drops = 0;
  for (auto d : net.totals().token_drops) drops += d;
  EXPECT_LT(drops * 100, pkts(3'000'000));
  uint64_t fct = done[0].done_ns - done[0].start_ns;
  EXPECT_LT(fct, pkts(3'000'000) * rcfg().slot_ns * 103 / 100 + 500 * kUs);
}

// Mean FCT against the one-class baseline (docs/top.md "Mean FCT against
// tokens"): the class comes from what a flow still needs, and a slot that no
// flow's rate allows still carries a token.

namespace {
// A data packet for `flow` with ID `seq`, answering no particular token.
Packet data_of(uint64_t flow, uint32_t seq) {
  Packet d;
  d.type = Type::kData;
  d.flow = flow;
  d.seq = seq;
  d.len = 1440;
  return d;
}
int token_class(Receiver& r, uint64_t now) {
  std::vector<Packet> out;
  r.on_slot(now, out);
  for (auto& p : out)
    if (p.type == Type::kToken) return p.priority;
  return -1;
}
}  // namespace

TEST(TopMeanFct, ClassComesFromThePacketsStillMissing) {
  // 3000 packets: floor(6 ln 3001 / ln 20000) = 4; with 10 left,
  // floor(6 ln 11 / ln 20000) = 1. The total size keeps it at 4.
  for (bool remaining : {true, false}) {
    ReceiverConfig c = rcfg();
    c.fct_class_remaining = remaining;
    Receiver r(c);
    std::vector<Packet> out;
    r.on_packet(sync_of(5, 3000ull * 1440), 0, out);
    EXPECT_EQ(token_class(r, 0), 4);
    for (uint32_t i = 0; i < 2990; i++) r.on_packet(data_of(5, i), 1000, out);
    EXPECT_EQ(token_class(r, c.slot_ns), remaining ? 1 : 4) << (remaining ? "remaining" : "size");
  }
}

TEST(TopMeanFct, ASlotNoFlowsRateAllowsStillCarriesAToken) {
  // One flow whose tokens are never answered: the rate control cuts it to
  // its floor (1/64) and keeps it there. With spare slots the receiver still
  // sends a token every slot (nothing else wants one); without, or for the
  // one-class baseline, about one in 64.
  struct Case {
    Objective o;
    Spare spare;
    bool every_slot;
  };
  for (Case k : {Case{Objective::kFct, Spare::kEvery, true}, Case{Objective::kFct, Spare::kOff, false},
                 Case{Objective::kFair, Spare::kEvery, false}}) {
    ReceiverConfig c = rcfg(k.o);
    c.spare = k.spare;
    Receiver r(c);
    std::vector<Packet> out;
    r.on_packet(sync_of(3, 100000ull * 1440), 0, out);
    int tokens = 0, slots = 0;
    for (uint64_t now = 0; now < 30 * kMs; now += c.slot_ns) {
      out.clear();
      r.on_slot(now, out);
      if (now < 20 * kMs) continue;
      slots++;
      for (auto& p : out) tokens += p.type == Type::kToken;
    }
    auto v = r.flows(30 * kMs);
    ASSERT_EQ(v.size(), 1u);
    EXPECT_LT(v[0].rate, 0.05) << "the rate control still cuts the rate";
    if (k.every_slot) EXPECT_EQ(tokens, slots);
    else EXPECT_LT(tokens, slots / 16) << objective_name(k.o) << " spare " << spare_name(k.spare);
    EXPECT_EQ(r.stats().slots_spare > 0, k.every_slot);
  }
}

TEST(TopMeanFct, TheRateStillSharesTheSlotsAmongAReceiversFlows) {
  // Flow 1 (3000 packets, class 4) is never answered; flow 2 (20000, class
  // 5) is answered at once. Flow 1 ranks first, but its rate is cut to the
  // floor while flow 2's allows a token every slot: the slots go to flow 2,
  // spare slots or not (a spare slot is one no flow's rate allows).
  ReceiverConfig c = rcfg();
  c.spare = Spare::kEvery;
  Receiver r(c);
  std::vector<Packet> out;
  r.on_packet(sync_of(1, 3000ull * 1440), 0, out);
  r.on_packet(sync_of(2, 20000ull * 1440), 0, out);
  uint32_t next2 = 0;
  std::map<uint64_t, int> late;  // tokens of each flow in the last 10 ms
  for (uint64_t now = 0; now < 30 * kMs; now += c.slot_ns) {
    out.clear();
    r.on_slot(now, out);
    for (auto& p : out) {
      if (p.type != Type::kToken) continue;
      if (now >= 20 * kMs) late[p.flow]++;
      if (p.flow == 2) {
        Packet d = data_of(2, next2++);
        d.aux = p.seq;
        std::vector<Packet> o2;
        r.on_packet(d, now + 1, o2);
      }
    }
  }
  EXPECT_GT(late[2], 10 * late[1]) << "flow 1 " << late[1] << " flow 2 " << late[2];
  EXPECT_EQ(r.stats().slots_spare, 0u);
}

TEST(TopMeanFct, APreemptedFlowTakesTheGroupBackWhenTheHigherClassEnds) {
  // Two receivers' tokens meet at one sender's downlink (its token group):
  // a 3 MB flow to host 1 from 0 ms, a 300 KB flow (a higher class) to host
  // 2 from 5 ms. The group passes one token per slot, the short flow's
  // first; its tokens cut the long flow's rate to the floor. When it ends
  // the long flow's receiver, with spare slots, has the group back in the
  // next slot: both flows together take close to their packets' slots. With
  // ExpressPass's rate alone the long flow climbs back over several rate
  // periods.
  // The probe (the default) takes it back about an RTT after the short
  // flow ends, from its one outstanding spare token.
  std::map<Spare, uint64_t> fct;
  for (Spare spare : {Spare::kEvery, Spare::kProbe, Spare::kOff}) {
    ReceiverConfig c = rcfg();
    c.spare = spare;
    sim::Net net({}, 3, c, scfg());
    net.open(0, 1, flow(3'000'000), 0);
    net.open(0, 2, flow(300'000), 5 * kMs);
    ASSERT_TRUE(net.run_all(500 * kMs));
    auto done = net.sender(0).take_completions();
    ASSERT_EQ(done.size(), 2u);
    for (auto& d : done)
      if (d.size_bytes == 3'000'000) fct[spare] = d.done_ns - d.start_ns;
    EXPECT_EQ(net.totals().data_drops, 0u) << spare_name(spare);
  }
  uint64_t every = fct[Spare::kEvery], probe = fct[Spare::kProbe], off = fct[Spare::kOff];
  uint64_t both = (pkts(3'000'000) + pkts(300'000)) * rcfg().slot_ns;
  EXPECT_LT(every, both * 105 / 100) << "every " << every << " off " << off << " both " << both;
  EXPECT_LT(every * 105 / 100, off) << "every " << every << " off " << off;
  EXPECT_LT(probe * 105 / 100, off) << "probe " << probe << " off " << off;
  std::printf(
      "3 MB flow preempted by 300 KB: %.2f ms with every spare slot, %.2f ms with the probe, %.2f ms "
      "without; both flows' slots %.2f ms\n",
      every / 1e6, probe / 1e6, off / 1e6, both / 1e6);
}

TEST(TopMeanFct, SpareProbeIsOneTokenAtATimeAndItsAnswerRestoresTheRate) {
  // The flow of ASlotNoFlowsRateAllowsStillCarriesAToken, tokens never
  // answered: with Spare::kProbe the receiver sends a spare token only when
  // none is outstanding (answered or older than the token timeout), so far
  // fewer than one per slot; answering the probe puts the rate back to 1.
  ReceiverConfig c = rcfg();
  c.spare = Spare::kProbe;
  Receiver r(c);
  std::vector<Packet> out;
  r.on_packet(sync_of(3, 100000ull * 1440), 0, out);
  int tokens = 0, slots = 0;
  uint64_t now = 0;
  for (; now < 30 * kMs; now += c.slot_ns) {
    out.clear();
    r.on_slot(now, out);
    if (now < 20 * kMs) continue;
    slots++;
    for (auto& p : out) tokens += p.type == Type::kToken;
  }
  EXPECT_GT(r.stats().slots_spare, 0u);
  EXPECT_LT(tokens, slots / 8) << tokens << " tokens in " << slots << " slots";
  EXPECT_LT(r.flows(now)[0].rate, 0.05);
  // The next spare token is a probe; its answer restores the full rate.
  uint64_t spare_before = r.stats().slots_spare;
  Packet probe;
  for (; r.stats().slots_spare == spare_before; now += c.slot_ns) {
    out.clear();
    r.on_slot(now, out);
    for (auto& p : out)
      if (p.type == Type::kToken) probe = p;
  }
  Packet d = data_of(3, 0);
  d.aux = probe.seq;
  out.clear();
  r.on_packet(d, now, out);
  EXPECT_DOUBLE_EQ(r.flows(now)[0].rate, 1.0);
}

// Where a flow's time goes (docs/top.md "Data mining in the lab against the
// model"): the receiver tells when the SYNC arrived, its first token left
// and its first data came back, and how long each data packet took since
// its token left; the sender when the first token arrived.

TEST(TopTimeline, ReceiverAndSenderTellWhereAFlowsTimeWent) {
  // One 10-packet flow alone at 1 Gbit/s, 5 us per link, from 1 ms.
  sim::Net net({}, 2, rcfg(), scfg());
  net.open(0, 1, flow(10 * 1440), 1 * kMs);
  ASSERT_TRUE(net.run_all(100 * kMs));
  auto r = net.receiver(1).take_completions();
  auto s = net.sender(0).take_completions();
  ASSERT_EQ(r.size(), 1u);
  ASSERT_EQ(s.size(), 1u);
  const Completion& c = r[0];
  // SYNC: two links and a small frame; then the first token within a slot
  // or so (the simulated pacer's first slot), then the token's two links,
  // then a data frame over two links.
  EXPECT_GT(c.sync_ns, c.start_ns + 10 * kUs);
  EXPECT_LT(c.sync_ns, c.start_ns + 15 * kUs);
  EXPECT_GT(c.first_token_ns, c.sync_ns);
  EXPECT_LE(c.first_token_ns, c.sync_ns + 2 * rcfg().slot_ns);
  EXPECT_GT(s[0].first_token_ns, c.first_token_ns + 10 * kUs);
  EXPECT_LT(s[0].first_token_ns, c.first_token_ns + 15 * kUs);
  EXPECT_GT(c.first_data_ns, s[0].first_token_ns + 2 * 12 * kUs);  // 1538 B twice at 1 Gbit/s
  EXPECT_LT(c.first_data_ns, s[0].first_token_ns + 2 * 12 * kUs + 15 * kUs);
  EXPECT_LT(c.first_data_ns, c.done_ns);
  // Every data packet: token path + data path, 35-60 us here (a token may
  // wait for the group's credit): bins of 25 us.
  const auto& st = net.receiver(1).stats();
  EXPECT_EQ(st.token_data_ns[0], 0u);
  EXPECT_EQ(st.token_data_ns[1] + st.token_data_ns[2], 10u);
  EXPECT_EQ(st.token_data_quantile(0.5), 50 * kUs);
  EXPECT_LE(st.token_data_quantile(0.99), 75 * kUs);
  EXPECT_EQ(ReceiverStats{}.token_data_quantile(0.5), 0u);
}
