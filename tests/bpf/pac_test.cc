// PAC datapath through BPF_PROG_TEST_RUN: admit vs divert at egress, the
// accounting at ingress, re-injection, fail-open and the bad-input rules.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/bpf.h>

#include <cstring>
#include <functional>
#include <unistd.h>

#include "core/bpf_util.h"
#include "lib/netns_fixture.h"
#include "lib/packet.h"
#include "lib/prog_test.h"
#include "sluice/pac.h"  // before the skeleton: it names these structs
#include "pac_tc.skel.h"
#include "pac_tc_compat.skel.h"
#include "core/heartbeat.h"

SLUICE_SKELETON_TWIN(pac_tc, pac_tc_compat, sluice::liveness_object);

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr int kNext = -1;
constexpr int kShot = 2;
constexpr uint32_t kMss = 1448;
constexpr uint32_t kMark = 0x50ac;

// Receiver 10.0.0.2:40000 requests from sender 10.0.0.1:5201.
PacketSpec data(uint32_t seq, size_t len = kMss) {
  PacketSpec s;
  s.src = "10.0.0.1";
  s.dst = "10.0.0.2";
  s.sport = 5201;
  s.dport = 40000;
  s.seq = seq;
  s.ack = 1;
  s.flags = 0x18;
  s.payload = len;
  return s;
}
PacketSpec ack(uint32_t a, uint8_t flags = 0x10) {
  PacketSpec s;
  s.src = "10.0.0.2";
  s.dst = "10.0.0.1";
  s.sport = 40000;
  s.dport = 5201;
  s.seq = 1;
  s.ack = a;
  s.flags = flags;
  s.tcp_options = tcp_opt_timestamps(100, 200);
  return s;
}

// A flow's quiet_timer fires in softirq a few ms after it is due: poll
// for what it does (2 s at most; no timing is asserted).
bool timer_done(const std::function<bool()>& pred) { return eventually(pred, std::chrono::milliseconds(2000)); }

sluice_pac_flow_key flow_key(uint16_t rport = 5201, uint16_t lport = 40000) {
  sluice_pac_flow_key k{};
  k.family = 4;
  inet_pton(AF_INET, "10.0.0.1", k.raddr);
  inet_pton(AF_INET, "10.0.0.2", k.laddr);
  k.rport = htons(rport);
  k.lport = htons(lport);
  return k;
}

constexpr uint64_t kFailOpenNs = 2'000'000'000ull;

class PacBpfTest : public ::testing::Test {
 protected:
  void SetUp() override {
    require_root();
    skel_ = std::make_unique<Skeleton<pac_tc>>();
    // Time-based rules off the path of the tables: no trigger write-off and
    // no fail-open between two steps of a test, however slow the machine
    // (QEMU without KVM runs a step in tens of milliseconds). Tests of those
    // rules set their own windows.
    (*skel_)->rodata->trigger_age_min_ns = 10'000'000'000ull;
    (*skel_)->rodata->fail_open_ns = kFailOpenNs;
    configure(*skel_);
    skel_->load();
    st_ = &(*skel_)->bss->pac;
    st_->threshold = 10 * kMss;
    alive();
    rb_ = ring_buffer__new(bpf_map__fd((*skel_)->maps.sl_pac_evt_v1), &PacBpfTest::on_event, this, nullptr);
    ASSERT_NE(rb_, nullptr);
  }
  void TearDown() override {
    if (rb_) ring_buffer__free(rb_);
  }
  virtual void configure(Skeleton<pac_tc>&) {}
  static int on_event(void* ctx, void* d, size_t sz) {
    auto* self = static_cast<PacBpfTest*>(ctx);
    sluice_pac_event ev{};
    std::memcpy(&ev, d, std::min(sz, sizeof(ev)));
    self->events_.push_back(ev);
    return 0;
  }
  void alive() { st_->live.heartbeat_ns = monotonic_ns(); }
  int egress() const { return bpf_program__fd((*skel_)->progs.pac_egress); }
  int ingress() const { return bpf_program__fd((*skel_)->progs.pac_ingress); }
  sluice_pac_flow flow(const sluice_pac_flow_key& k = flow_key()) const {
    sluice_pac_flow f{};
    EXPECT_EQ(bpf_map_lookup_elem(bpf_map__fd((*skel_)->maps.sl_pac_flows_v2), &k, &f), 0) << "flow missing";
    return f;
  }
  bool has_flow(const sluice_pac_flow_key& k) const {
    sluice_pac_flow f{};
    return bpf_map_lookup_elem(bpf_map__fd((*skel_)->maps.sl_pac_flows_v2), &k, &f) == 0;
  }
  uint64_t reason(uint32_t r) const { return read_reason_counters(bpf_map__fd((*skel_)->maps.sl_counters))[r].packets; }
  void drain() {
    events_.clear();
    ring_buffer__consume(rb_);
  }
  // The agent's quiet check of flow `k` (pac_quiet_sweep): 1 if a share or
  // expected bytes went. The agent runs it on quiet flows without a timer.
  int sweep(sluice_pac_flow_key k) const {
    (*skel_)->bss->sweep_key = k;
    LIBBPF_OPTS(bpf_test_run_opts, o);
    EXPECT_EQ(bpf_prog_test_run_opts(bpf_program__fd((*skel_)->progs.pac_quiet_sweep), &o), 0);
    return int(o.retval);
  }
  RunResult run_marked(const Bytes& pkt) {
    __sk_buff ctx{};
    ctx.mark = kMark;
    return run_tc(egress(), pkt, &ctx, sizeof(ctx));
  }

  std::unique_ptr<Skeleton<pac_tc>> skel_;
  sluice_pac_state* st_ = nullptr;
  ring_buffer* rb_ = nullptr;
  std::vector<sluice_pac_event> events_;
};

TEST_F(PacBpfTest, AdmitDivertReinject) {
  std::vector<BpfCase> in = {
      {"ingress data creates the flow; in_flight cannot go below 0", build(data(1000)), kNext,
       [&](const RunResult&) {
         auto f = flow();
         EXPECT_EQ(f.bytes_rcvd, kMss);
         EXPECT_EQ(f.mss, kMss);
         EXPECT_EQ(st_->in_flight, 0);
         EXPECT_EQ(st_->data_bytes, kMss);
       }},
  };
  run_table(ingress(), in);

  Bytes held_ack = build(ack(1000 + 2 * kMss));
  std::vector<BpfCase> out = {
      {"a pure ACK whose trigger fits is admitted in the kernel (first ACK: MSS + MSS)", build(ack(1000 + kMss)), kNext,
       [&](const RunResult&) {
         EXPECT_EQ(st_->in_flight, int64_t(2 * kMss));
         auto f = flow();
         EXPECT_EQ(f.admitted, 1u);
         EXPECT_EQ(f.last_ack, 1000 + kMss);
         EXPECT_TRUE(f.ack_valid);
       }},
      {"an ACK that does not fit (9 + 2 MSS > 10 MSS) is copied to the agent and dropped", held_ack, kShot,
       [&](const RunResult&) {
         drain();
         ASSERT_EQ(events_.size(), 1u);
         const auto& ev = events_[0];
         EXPECT_EQ(ev.type, SLUICE_PAC_EV_HELD);
         EXPECT_EQ(ev.ack, 1000 + 2 * kMss);
         EXPECT_EQ(ev.last_ack, 1000 + kMss);
         EXPECT_EQ(ev.frame_len, held_ack.size());
         EXPECT_EQ(std::memcmp(ev.frame, held_ack.data(), held_ack.size()), 0) << "the frame is copied whole";
         EXPECT_EQ(flow().diverted, 1u);
         EXPECT_EQ(st_->in_flight, int64_t(9 * kMss)) << "a held ACK adds nothing yet";
       },
       [&] { st_->in_flight = 9 * kMss; }},
      {"with an ACK of its flow held and another flow's ACK waiting in the agent, the next ACK is held "
       "too even if it fits (order, MLFQ)",
       build(ack(1000 + 3 * kMss)), kShot, [&](const RunResult&) { EXPECT_EQ(flow().diverted, 2u); },
       [&] {
         st_->in_flight = 0;
         st_->held = 5;
       }},
  };
  run_table(egress(), out);

  // The agent re-injects the first held ACK with the mark: admitted and its
  // trigger accounted (delta 1 MSS + slow start 1 MSS).
  st_->in_flight = 0;
  RunResult r = run_marked(held_ack);
  EXPECT_EQ(r.retval, kNext);
  EXPECT_EQ(st_->in_flight, int64_t(2 * kMss));
  auto f = flow();
  EXPECT_EQ(f.reinjected, 1u);
  EXPECT_EQ(f.last_ack, 1000 + 2 * kMss);

  // The agent dropped the other one (stale): once sl_pac_ctl_v2 says so, the
  // flow has nothing held and ACKs are admitted again.
  st_->in_flight = 0;
  EXPECT_EQ(run_tc(egress(), build(ack(1000 + 4 * kMss))).retval, kShot) << "still one held (others too)";
  st_->held = 0;
  sluice_pac_flow_ctl c{};
  c.dropped = 2;
  c.id = flow().id;
  ASSERT_NE(c.id, 0u);
  __u32 slot = c.id % SLUICE_PAC_CTL_SLOTS;
  // A slot that names another flow is not this flow's control.
  c.id += 1;
  ASSERT_EQ(bpf_map_update_elem(bpf_map__fd((*skel_)->maps.sl_pac_ctl_v2), &slot, &c, BPF_ANY), 0);
  st_->held = 10;  // (others hold too: not a lone flow's superseding ACK)
  EXPECT_EQ(run_tc(egress(), build(ack(1000 + 4 * kMss + 1))).retval, kShot) << "another flow's slot";
  st_->held = 0;
  c.id -= 1;
  c.dropped = 3;  // that one too
  ASSERT_EQ(bpf_map_update_elem(bpf_map__fd((*skel_)->maps.sl_pac_ctl_v2), &slot, &c, BPF_ANY), 0);
  EXPECT_EQ(run_tc(egress(), build(ack(1000 + 5 * kMss))).retval, kNext);
  EXPECT_EQ(reason(SLUICE_R_PAC_ADMIT), 2u);
  EXPECT_EQ(reason(SLUICE_R_PAC_DIVERT), 4u);
  EXPECT_EQ(reason(SLUICE_R_PAC_REINJECTED), 1u);
}

TEST_F(PacBpfTest, AnotherFlowsWaitingAckKeepsItsRoom) {
  // Flow 2 (port 40001) has an ACK waiting in the agent whose trigger is
  // 4 MSS. Flow 1 has nothing held; its ACK (2 MSS) fits the threshold by
  // itself, but not with the waiting one: it queues behind it.
  ASSERT_EQ(run_tc(ingress(), build(data(1000))).retval, kNext);
  st_->in_flight = 5 * kMss;
  st_->held = 1;
  st_->ack_room = 4 * kMss;
  EXPECT_EQ(run_tc(egress(), build(ack(1000 + kMss))).retval, kShot);
  EXPECT_EQ(flow().diverted, 1u);
  EXPECT_EQ(st_->in_flight, int64_t(5 * kMss));
  // With room for both it is admitted.
  PacketSpec other = data(5000);
  other.dport = 40002;
  ASSERT_EQ(run_tc(ingress(), build(other)).retval, kNext);
  PacketSpec a = ack(5000 + kMss);
  a.sport = 40002;
  st_->in_flight = 4 * kMss;
  EXPECT_EQ(run_tc(egress(), build(a)).retval, kNext) << "4 + 4 + 2 MSS <= 10 MSS";
  EXPECT_EQ(st_->in_flight, int64_t(6 * kMss));
}

TEST_F(PacBpfTest, NewerCumulativeAckSupersedesItsFlowsHeldAcks) {
  ASSERT_EQ(run_tc(ingress(), build(data(1000))).retval, kNext);
  ASSERT_EQ(run_tc(egress(), build(ack(1000 + kMss))).retval, kNext);  // last released: 1000 + MSS
  st_->in_flight = 9 * kMss;
  ASSERT_EQ(run_tc(egress(), build(ack(1000 + 2 * kMss))).retval, kShot);  // held
  drain();
  st_->held = 1;  // the agent holds that one ACK, of this flow

  st_->in_flight = 9 * kMss;
  EXPECT_EQ(run_tc(egress(), build(ack(1000 + 3 * kMss))).retval, kShot)
      << "does not fit (9 + 2+2 MSS > 10): held behind the first";
  drain();
  st_->held = 2;

  PacketSpec dup = ack(1000 + kMss);
  EXPECT_EQ(run_tc(egress(), build(dup)).retval, kShot) << "a duplicate ACK never overtakes held ACKs";
  PacketSpec sack = ack(1000 + 4 * kMss);
  sack.tcp_options = tcp_opt_timestamps(100, 200);
  sack.tcp_options.insert(sack.tcp_options.end(), {1, 1, 5, 10, 0, 0, 0x20, 0, 0, 0, 0x30, 0});
  st_->in_flight = 0;
  EXPECT_EQ(run_tc(egress(), build(sack)).retval, kShot) << "an ACK carrying SACK never overtakes held ACKs";
  drain();
  st_->held = 4;

  // Data arrived (in_flight fell); the stack's next cumulative ACK fits:
  // it goes in the kernel, its trigger counted from the last released ACK
  // (delta 4 MSS + slow start 4 MSS), and the agent is told to drop the
  // held ones it supersedes.
  st_->in_flight = kMss;
  RunResult r = run_tc(egress(), build(ack(1000 + 5 * kMss)));
  EXPECT_EQ(r.retval, kNext);
  EXPECT_EQ(st_->in_flight, int64_t(9 * kMss));
  auto f = flow();
  EXPECT_EQ(f.last_ack, 1000 + 5 * kMss);
  EXPECT_EQ(reason(SLUICE_R_PAC_SUPERSEDE), 1u);
  drain();
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].type, SLUICE_PAC_EV_SEGMENT);
  EXPECT_EQ(events_[0].ack, 1000 + 5 * kMss);
  EXPECT_EQ(events_[0].flags & SLUICE_PAC_EVF_INGRESS, 0);

  // A held ACK of this flow re-injected late (the agent had not seen the
  // event yet) is behind ACK_prev: it triggers nothing.
  RunResult late = run_marked(build(ack(1000 + 2 * kMss)));
  EXPECT_EQ(late.retval, kNext);
  EXPECT_EQ(st_->in_flight, int64_t(9 * kMss));
  EXPECT_EQ(flow().last_ack, 1000 + 5 * kMss);

  // Another flow's ACK waits in the agent (pac.held counts more than this
  // flow holds): the newer ACK waits its turn, MLFQ order is kept.
  st_->held = 10;
  st_->in_flight = 0;
  EXPECT_EQ(run_tc(egress(), build(ack(1000 + 6 * kMss))).retval, kShot);
  EXPECT_EQ(reason(SLUICE_R_PAC_SUPERSEDE), 1u);
}

// A 500 ms age window, so that a loaded machine (or an emulated one) cannot
// stretch the gap between two test runs into a write-off.
class PacBpfAgeTest : public PacBpfTest {
  void configure(Skeleton<pac_tc>& s) override { s->rodata->trigger_age_min_ns = 500'000'000ull; }
};

TEST_F(PacBpfAgeTest, ExpectedBytesThatNeverCameAreWrittenOff) {
  // No RTT sample: the age window is trigger_age_min.
  ASSERT_EQ(run_tc(ingress(), build(data(1000))).retval, kNext);
  ASSERT_EQ(run_tc(egress(), build(ack(1000 + kMss))).retval, kNext);  // trigger 2 MSS
  EXPECT_EQ(st_->in_flight, int64_t(2 * kMss));
  EXPECT_EQ(flow().expect, 2 * kMss);
  // Data right after the release: what is still expected was triggered
  // within the window, it is kept.
  ASSERT_EQ(run_tc(ingress(), build(data(1000 + kMss, 100))).retval, kNext);
  EXPECT_EQ(st_->in_flight, int64_t(2 * kMss - 100));
  EXPECT_EQ(flow().phantom_bytes, 0u);
  EXPECT_EQ(flow().ca_inferred, 0);
  // Two windows later the rest has not come: the sender did not take the
  // slow-start increment. Written off, and the flow is in CA (§III-C).
  // Meanwhile an old ACK of ours (triggers nothing) every 100 ms: the flow
  // is not quiet, so its quiet_timer leaves the write-off to this data.
  PacketSpec old = ack(1000);
  for (int i = 0; i < 11; ++i) {
    usleep(100'000);
    alive();
    ASSERT_EQ(run_tc(egress(), build(old)).retval, kNext);
  }
  EXPECT_EQ(st_->in_flight, int64_t(2 * kMss - 100)) << "not quiet: nothing written off yet";
  ASSERT_EQ(run_tc(ingress(), build(data(1000 + kMss + 100, 100))).retval, kNext);
  EXPECT_EQ(st_->in_flight, 0);
  auto f = flow();
  EXPECT_EQ(f.expect, 0u);
  EXPECT_EQ(f.phantom_bytes, 2 * kMss - 200);
  EXPECT_EQ(f.ca_inferred, 1);
  EXPECT_EQ(st_->phantom_bytes, 2 * kMss - 200);
  // In CA the next ACK's increment is MSS²/window (window unknown yet: MSS),
  // not slow start's max(delta, MSS): delta 2 MSS -> 3 MSS, not 4.
  ASSERT_EQ(run_tc(egress(), build(ack(1000 + 3 * kMss))).retval, kNext);
  EXPECT_EQ(st_->in_flight, int64_t(3 * kMss));
  // A retransmission timeout puts it back into slow start (§III-D): data
  // starting at the last released ACK, already acknowledged by a held ACK.
  st_->in_flight = 1 << 30;
  ASSERT_EQ(run_tc(egress(), build(ack(1000 + 5 * kMss))).retval, kShot);
  ASSERT_EQ(run_tc(ingress(), build(data(1000 + 3 * kMss, kMss))).retval, kNext);
  EXPECT_EQ(flow().retrans_segs, 1u);
  EXPECT_EQ(flow().ca_inferred, 0);
}

// The last ACKs of a response of unknown size trigger data that never comes
// (eq. 3 in slow start counts a doubling). The finished flow sends nothing
// more, so its own next segment never writes the bytes off; its quiet_timer
// does once the flow was quiet for the age window, with no other traffic
// (before, a 32-slot list checked by other flows' data: a pipe whose
// threshold was full of such bytes had no data left to check them).
class PacBpfWatchTest : public PacBpfTest {
  void configure(Skeleton<pac_tc>& s) override { s->rodata->trigger_age_min_ns = 20'000'000ull; }
};

TEST_F(PacBpfWatchTest, AQuietFlowsExpectedBytesAreWrittenOffByItsTimer) {
  st_->threshold = 1 << 20;
  ASSERT_EQ(run_tc(ingress(), build(data(1000))).retval, kNext);
  ASSERT_EQ(run_tc(egress(), build(ack(1000 + kMss))).retval, kNext);    // trigger 2 MSS
  ASSERT_EQ(run_tc(ingress(), build(data(1000 + kMss))).retval, kNext);  // listed: 1 MSS still expected
  EXPECT_TRUE(flow().bflags & SLUICE_PAC_BF_LISTED);
  EXPECT_EQ(flow().expect, kMss);
  EXPECT_EQ(st_->in_flight, int64_t(kMss));
  // Quiet for the age window (20 ms): written off by the timer alone.
  EXPECT_TRUE(timer_done([&] { return flow().expect == 0; })) << "quiet for the age window: written off";
  EXPECT_FALSE(flow().bflags & SLUICE_PAC_BF_LISTED);
  EXPECT_EQ(flow().phantom_bytes, kMss);
  EXPECT_EQ(st_->in_flight, 0);
}

// More flows than the old list had slots: every finished flow is cleared.
TEST_F(PacBpfWatchTest, EveryOneOfManyFinishedFlowsIsWrittenOff) {
  st_->threshold = 1 << 30;
  constexpr uint16_t kFlows = 100;
  for (uint16_t i = 0; i < kFlows; ++i) {
    PacketSpec d = data(1000);
    d.dport = uint16_t(40000 + i);
    PacketSpec a = ack(1000 + kMss);
    a.sport = d.dport;
    ASSERT_EQ(run_tc(ingress(), build(d)).retval, kNext);
    ASSERT_EQ(run_tc(egress(), build(a)).retval, kNext);  // trigger 2 MSS
    d.seq = 1000 + kMss;
    ASSERT_EQ(run_tc(ingress(), build(d)).retval, kNext);  // 1 MSS still expected
  }
  // Each flow's 1 MSS goes once that flow was quiet for 20 ms (some may
  // have gone while the loop still ran). Wait for every flow's write-off,
  // not for in_flight to reach 0: each new flow's first segment (no ACK
  // triggered it) already took the previous flow's 1 MSS out of in_flight,
  // so in_flight reaches 0 with the first timer, before the last ones fire.
  // A flow whose timer could not be allocated (timer_fails; Linux 6.18 fails
  // some allocations even here) is written off by the agent's sweep, as in
  // sluiced: run it on every flow (a flow its timer cleared has nothing).
  timer_done([&] { return st_->phantom_bytes == uint64_t(kFlows) * kMss; });
  if (st_->timer_fails) {
    std::printf("%llu failed timer arms: the sweep clears those flows\n", (unsigned long long)st_->timer_fails);
    for (uint16_t i = 0; i < kFlows; ++i) sweep(flow_key(5201, uint16_t(40000 + i)));
  }
  EXPECT_EQ(st_->phantom_bytes, uint64_t(kFlows) * kMss);
  EXPECT_EQ(st_->in_flight, 0);
  for (uint16_t i = 0; i < kFlows; ++i) EXPECT_EQ(flow(flow_key(5201, uint16_t(40000 + i))).expect, 0u) << i;
}

TEST_F(PacBpfTest, NeverHeldSegmentsAndFailOpen) {
  ASSERT_EQ(run_tc(ingress(), build(data(1000))).retval, kNext);
  PacketSpec req = ack(1000 + kMss, 0x18);
  req.payload = 100;
  PacketSpec fin = ack(1000 + kMss, 0x11);
  PacketSpec rst = ack(1000 + kMss, 0x14);
  PacketSpec syn = ack(0, 0x02);
  std::vector<BpfCase> cases = {
      {"a data segment (request) is never held", build(req), kNext, nullptr, [&] { st_->in_flight = 1 << 30; }},
      {"FIN is never held", build(fin), kNext, nullptr, [&] { st_->in_flight = 1 << 30; }},
      {"RST is never held", build(rst), kNext, nullptr, [&] { st_->in_flight = 1 << 30; }},
      {"SYN is never held", build(syn), kNext, nullptr, [&] { st_->in_flight = 1 << 30; }},
      {"a stale heartbeat fails open: a pure ACK that does not fit passes", build(ack(1000 + kMss)), kNext,
       [&](const RunResult&) { EXPECT_EQ(reason(SLUICE_R_PAC_FAIL_OPEN), 1u); },
       [&] {
         st_->in_flight = 1 << 30;
         st_->live.heartbeat_ns = monotonic_ns() - kFailOpenNs - 1'000'000ull;
       }},
      {"a heartbeat of 0 (agent never started) fails open", build(ack(1000 + kMss)), kNext, nullptr,
       [&] { st_->live.heartbeat_ns = 0; }},
  };
  run_table(egress(), cases);
  EXPECT_EQ(reason(SLUICE_R_PAC_NOT_PURE_ACK), 4u + 0u) << "request, FIN, RST, SYN";
  EXPECT_EQ(reason(SLUICE_R_PAC_DIVERT), 0u);
  // The request with data counted the flow's expected response (one initial
  // window for a first request).
  EXPECT_GT(flow().trig_sum, 0u);
}

// bpf/lib/liveness.h wired into pac_egress (tests/bpf/liveness_test.cc has
// the decision itself): a stale heartbeat whose thread runs -- a machine that
// ran nothing for a while -- keeps ACKs controlled; withdrawn or naming a
// recycled thread id, it fails open.
TEST_F(PacBpfTest, AStaleHeartbeatFromARunningThreadKeepsControlling) {
  if (std::string(skel_->name()) != "pac_tc")
    GTEST_SKIP() << "loaded " << skel_->name() << ": this kernel lacks bpf-task-from-pid, the heartbeat alone decides";
  ASSERT_EQ(run_tc(ingress(), build(data(1000))).retval, kNext);
  st_->in_flight = 1 << 30;
  st_->live.task_tid = pid_t(syscall(SYS_gettid));
  st_->live.task_start = start_ticks_of("/proc/thread-self/stat");
  st_->live.tick_ns = 1'000'000'000ull / uint64_t(sysconf(_SC_CLK_TCK));
  st_->live.stall_ns = 4 * kFailOpenNs;
  st_->live.heartbeat_ns = monotonic_ns() - kFailOpenNs - 1'000'000ull;
  EXPECT_EQ(run_tc(egress(), build(ack(1000 + kMss))).retval, kShot) << "the agent's thread runs: diverted";
  EXPECT_EQ(reason(SLUICE_R_PAC_FAIL_OPEN), 0u);
  st_->live.withdrawn = 1;
  EXPECT_EQ(run_tc(egress(), build(ack(1000 + kMss))).retval, kNext) << "withdrawn: fails open";
  EXPECT_EQ(reason(SLUICE_R_PAC_FAIL_OPEN), 1u);
  st_->live.withdrawn = 0;
  st_->live.task_start += 1;
  EXPECT_EQ(run_tc(egress(), build(ack(1000 + kMss))).retval, kNext) << "the id names another thread: fails open";
  EXPECT_EQ(reason(SLUICE_R_PAC_FAIL_OPEN), 2u);
}

TEST_F(PacBpfTest, UnknownFlowsWindowReopenAndIngressAccounting) {
  // An ACK of a flow PAC never saw data of (handshake) passes untouched.
  PacketSpec other = ack(5000);
  other.sport = 41000;
  EXPECT_EQ(run_tc(egress(), build(other)).retval, kNext);
  EXPECT_EQ(reason(SLUICE_R_PAC_UNKNOWN_FLOW), 1u);
  EXPECT_FALSE(has_flow(flow_key(5201, 41000)));

  ASSERT_EQ(run_tc(ingress(), build(data(1000))).retval, kNext);
  // Zero-window ACK admitted, then the window update after it is never held.
  PacketSpec zw = ack(1000 + kMss);
  zw.window = 0;
  st_->in_flight = 0;
  ASSERT_EQ(run_tc(egress(), build(zw)).retval, kNext);
  EXPECT_EQ(flow().last_win, 0u);
  PacketSpec upd = ack(1000 + kMss);
  upd.window = 512;
  st_->in_flight = 1 << 30;
  EXPECT_EQ(run_tc(egress(), build(upd)).retval, kNext);
  EXPECT_EQ(reason(SLUICE_R_PAC_WINDOW_REOPEN), 1u);

  // A hole: data beyond rcv_high lowers in_flight by the hole and its payload.
  st_->in_flight = 100000;
  ASSERT_EQ(run_tc(ingress(), build(data(1000 + 3 * kMss))).retval, kNext);
  EXPECT_EQ(st_->in_flight, int64_t(100000 - 2 * kMss - kMss));
  EXPECT_EQ(flow().gap_bytes, 2u * kMss);
  // A duplicate below the last released ACK (a tail loss probe) is not a
  // timeout; one starting at the last released ACK (the sender's snd_una)
  // while our stack acknowledged beyond it (ACK held) is: §III-D's stale case.
  ASSERT_EQ(run_tc(ingress(), build(data(1000))).retval, kNext);
  EXPECT_EQ(flow().retrans_segs, 0u);
  st_->in_flight = 1 << 30;
  ASSERT_EQ(run_tc(egress(), build(ack(1000 + 4 * kMss))).retval, kShot);
  ASSERT_EQ(run_tc(ingress(), build(data(1000 + kMss))).retval, kNext);
  EXPECT_EQ(flow().retrans_segs, 1u);
  // CE puts the flow in congestion avoidance and counts for α.
  PacketSpec ce = data(1000 + 4 * kMss);
  ce.tos = 0x03;
  ASSERT_EQ(run_tc(ingress(), build(ce)).retval, kNext);
  EXPECT_EQ(flow().ce_pkts, 1u);
  EXPECT_TRUE(flow().ce_seen);
  EXPECT_EQ(st_->ce_pkts, 1u);
  // GSO: one skb of 10 segments counts 10 wire packets (test runs are
  // limited to a page, so the payload itself stays small).
  __sk_buff ctx{};
  ctx.gso_segs = 10;
  ctx.gso_size = 100;
  PacketSpec big = data(1000 + 5 * kMss, 1000);
  ASSERT_EQ(run_tc(ingress(), build(big), &ctx, sizeof(ctx)).retval, kNext);
  EXPECT_EQ(flow().data_pkts, 5u + 10u) << "five single segments so far, then one GSO skb of 10";
  // Not TCP, malformed: neutral verdict.
  PacketSpec udp;
  udp.proto = 17;
  udp.payload = 10;
  EXPECT_EQ(run_tc(egress(), build(udp)).retval, kNext);
  EXPECT_EQ(run_tc(egress(), truncate(build(ack(1)), 40)).retval, kNext);
  EXPECT_EQ(reason(SLUICE_R_PASS_MALFORMED), 1u);
}

TEST_F(PacBpfTest, WakesTheAgentWhenTheHeadAckFits) {
  ASSERT_EQ(run_tc(ingress(), build(data(1000))).retval, kNext);
  drain();
  st_->held = 1;
  st_->wake_room = 2 * kMss;
  st_->threshold = 10 * kMss;
  st_->in_flight = 10 * kMss + kMss;  // after this segment: 10 MSS, no room for 2
  ASSERT_EQ(run_tc(ingress(), build(data(1000 + kMss))).retval, kNext);
  drain();
  EXPECT_TRUE(events_.empty());
  ASSERT_EQ(run_tc(ingress(), build(data(1000 + 2 * kMss))).retval, kNext);  // 9 MSS: still no room
  ASSERT_EQ(run_tc(ingress(), build(data(1000 + 3 * kMss))).retval, kNext);  // 8 MSS: 8 + 2 <= 10
  drain();
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].type, SLUICE_PAC_EV_WAKE);
  EXPECT_EQ(st_->wake_pending, 1u);
  ASSERT_EQ(run_tc(ingress(), build(data(1000 + 4 * kMss))).retval, kNext);
  drain();
  EXPECT_TRUE(events_.empty()) << "one wake until the agent consumes it";
}

class PacBpfPortsTest : public PacBpfTest {
  void configure(Skeleton<pac_tc>& s) override {
    s->rodata->n_local_ports = 1;
    s->rodata->local_ports[0].lo = 40000;
    s->rodata->local_ports[0].hi = 40010;
    s->rodata->n_prefixes = 1;
    s->rodata->prefixes[0].family = 4;
    s->rodata->prefixes[0].len = 24;
    inet_pton(AF_INET, "10.0.0.0", const_cast<__u32*>(s->rodata->prefixes[0].addr));
  }
};

TEST_F(PacBpfPortsTest, OnlyConfiguredFlowsAreManaged) {
  PacketSpec d = data(1000);
  d.dport = 50000;  // local port outside 40000-40010
  EXPECT_EQ(run_tc(ingress(), build(d)).retval, kNext);
  EXPECT_FALSE(has_flow(flow_key(5201, 50000)));
  PacketSpec d2 = data(1000);
  d2.src = "10.0.1.1";  // remote outside 10.0.0.0/24
  EXPECT_EQ(run_tc(ingress(), build(d2)).retval, kNext);
  EXPECT_EQ(reason(SLUICE_R_PAC_UNMANAGED), 2u);
  EXPECT_EQ(run_tc(ingress(), build(data(1000))).retval, kNext);
  EXPECT_TRUE(has_flow(flow_key()));
  st_->in_flight = 1 << 30;
  PacketSpec a = ack(1000 + kMss);
  a.sport = 50000;
  Bytes in = build(a);
  RunResult r = run_tc(egress(), in);
  EXPECT_EQ(r.retval, kNext);
  EXPECT_EQ(r.out, in) << "unmanaged traffic is untouched";
  EXPECT_EQ(run_tc(egress(), build(ack(1000 + kMss))).retval, kShot) << "managed: held";
}

}  // namespace

namespace {

class PacBpfRequestsTest : public PacBpfTest {
  void configure(Skeleton<pac_tc>& s) override {
    s->rodata->hold_requests = 1;
    s->rodata->cap_to_response = 1;
  }
};

TEST_F(PacBpfRequestsTest, RequestsAreHeldLikeAcksAndLookSent) {
  // The flow has answered one response of 4 MSS (between two requests).
  ASSERT_EQ(run_tc(ingress(), build(data(1000))).retval, kNext);
  PacketSpec req = ack(1000 + kMss, 0x18);
  req.payload = 32;
  st_->in_flight = 0;
  ASSERT_EQ(run_tc(egress(), build(req)).retval, kNext) << "the first request fits: admitted";
  for (uint32_t i = 1; i <= 4; ++i) ASSERT_EQ(run_tc(ingress(), build(data(1000 + i * kMss))).retval, kNext);
  EXPECT_EQ(flow().cur_burst, 4u * kMss);
  // The next request does not fit: held. It must look sent to TCP
  // (TC_ACT_STOLEN), or TCP would send it again after a timer.
  st_->in_flight = 9 * kMss;
  PacketSpec req2 = ack(1000 + 5 * kMss, 0x18);
  req2.payload = 32;
  req2.seq = 33;
  ASSERT_EQ(run_tc(egress(), build(req2)).retval, 4);
  drain();
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].req_bytes, 4u * kMss) << "its trigger is the response it sets going";
  EXPECT_EQ(flow().cur_burst, 4u * kMss) << "a held request does not end the response yet";
  // Re-injected: now it leaves; the response counters restart.
  st_->in_flight = 0;
  ASSERT_EQ(run_marked(build(req2)).retval, kNext);
  EXPECT_EQ(st_->in_flight, int64_t(4 * kMss));
  EXPECT_EQ(flow().cur_burst, 0u);
  EXPECT_EQ(flow().burst_bytes, 4u * kMss);
  EXPECT_EQ(flow().expect, 4u * kMss);
  // cap_to_response: the response's own ACKs trigger nothing beyond it.
  ASSERT_EQ(run_tc(ingress(), build(data(1000 + 5 * kMss))).retval, kNext);
  st_->in_flight = 100 * kMss;
  EXPECT_EQ(run_tc(egress(), build(ack(1000 + 6 * kMss))).retval, kNext)
      << "an ACK with nothing left to trigger is admitted even above the threshold";
}

TEST_F(PacBpfRequestsTest, ANewConnectionsFirstRequestCountsOneInitialWindow) {
  // No packet of this connection was seen before its first request (the
  // handshake's pure ACKs do not start a flow): the request starts it and
  // lets one initial window out, unprompted by any ACK.
  PacketSpec req = ack(1000, 0x18);
  req.payload = 24;
  st_->in_flight = 0;
  ASSERT_EQ(run_tc(egress(), build(req)).retval, kNext);
  EXPECT_EQ(st_->new_flows, 1u);
  EXPECT_EQ(st_->first_window, uint64_t(SLUICE_PAC_IW_SEGS) * kMss);
  EXPECT_EQ(st_->in_flight, int64_t(SLUICE_PAC_IW_SEGS) * kMss);
  EXPECT_EQ(st_->uncounted, 0u);
  // Data beyond what the estimate holds arrives uncounted: the estimate is
  // clamped at 0 and the excess is what the diagnostics report.
  for (uint32_t i = 0; i < SLUICE_PAC_IW_SEGS + 2; ++i)
    ASSERT_EQ(run_tc(ingress(), build(data(1000 + i * kMss))).retval, kNext);
  EXPECT_EQ(st_->in_flight, 0);
  EXPECT_EQ(st_->uncounted, 2u * kMss);
}

// Fresh connections, one response each (docs/pac.md "New connections").
TEST_F(PacBpfRequestsTest, ANewConnectionsResponseIsCountedPastItsFirstWindow) {
  st_->threshold = 1 << 20;
  auto req_on = [](uint16_t lport, uint32_t ack_no) {
    PacketSpec r = ack(ack_no, 0x18);
    r.sport = lport;
    r.payload = 24;
    return r;
  };
  auto seg_on = [](uint16_t lport, uint32_t seq) {
    PacketSpec d = data(seq);
    d.dport = lport;
    return d;
  };
  auto ack_on = [](uint16_t lport, uint32_t a) {
    PacketSpec x = ack(a);
    x.sport = lport;
    return x;
  };
  // A: the first response the agent ever sees (no size measured on any
  // flow): one initial window, and that stays its cap.
  ASSERT_EQ(run_tc(egress(), build(req_on(40000, 1000))).retval, kNext);
  EXPECT_EQ(st_->in_flight, int64_t(SLUICE_PAC_IW_SEGS * kMss));
  for (uint32_t i = 0; i < 20; ++i) ASSERT_EQ(run_tc(ingress(), build(seg_on(40000, 1000 + i * kMss))).retval, kNext);
  // Our FIN ends A's response: 20 segments, measured for the next flow.
  PacketSpec fin = ack_on(40000, 1000 + 20 * kMss);
  fin.flags = 0x11;
  ASSERT_EQ(run_tc(egress(), build(fin)).retval, kNext);
  EXPECT_EQ(st_->resp_guess, 20u * kMss);
  uint64_t cut0 = st_->resp_cut;

  // B, a new connection: its request lets one initial window out.
  st_->in_flight = 0;
  ASSERT_EQ(run_tc(egress(), build(req_on(40001, 5000))).retval, kNext);
  EXPECT_EQ(st_->in_flight, int64_t(SLUICE_PAC_IW_SEGS * kMss));
  EXPECT_TRUE(flow(flow_key(5201, 40001)).bflags & SLUICE_PAC_BF_GUESS);
  for (uint32_t i = 0; i < SLUICE_PAC_IW_SEGS; ++i)
    ASSERT_EQ(run_tc(ingress(), build(seg_on(40001, 5000 + i * kMss))).retval, kNext);
  EXPECT_EQ(st_->in_flight, 0);
  // The ACK of that window is slow start's (eq. 3: 10 + 10 segments), not
  // capped at the first window as if the response were over: the response
  // is A's size (20 segments), 10 of which are still to come.
  ASSERT_EQ(run_tc(egress(), build(ack_on(40001, 5000 + SLUICE_PAC_IW_SEGS * kMss))).retval, kNext);
  EXPECT_EQ(st_->in_flight, int64_t(10 * kMss)) << "what is left of the measured response";
  EXPECT_EQ(st_->resp_cut - cut0, 10u * kMss);
  for (uint32_t i = 10; i < 20; ++i) ASSERT_EQ(run_tc(ingress(), build(seg_on(40001, 5000 + i * kMss))).retval, kNext);
  EXPECT_EQ(st_->in_flight, 0);
  EXPECT_EQ(st_->uncounted, 10u * kMss) << "only A's, the first response ever, arrived uncounted";
  // A response larger than the measured one is uncapped from then on.
  ASSERT_EQ(run_tc(ingress(), build(seg_on(40001, 5000 + 20 * kMss))).retval, kNext);
  ASSERT_EQ(run_tc(egress(), build(ack_on(40001, 5000 + 21 * kMss))).retval, kNext);
  EXPECT_EQ(st_->in_flight, int64_t(22 * kMss)) << "eq. (3) in slow start: 11 + 11 segments";
}

}  // namespace

namespace {

// rwnd_cap_bytes (an extension, docs/pac.md "Receive-window cap"): our
// segments' window is clamped, read with the scale of our own SYN, and no
// trigger exceeds the room the window leaves.
class PacBpfRwndCapTest : public PacBpfTest {
  void configure(Skeleton<pac_tc>& s) override { s->rodata->rwnd_cap_bytes = 16384; }
};

std::vector<uint8_t> syn_options(int wscale) {
  std::vector<uint8_t> o = {2, 4, 0x05, 0xb4, 4, 2};
  auto ts = tcp_opt_timestamps(100, 0);
  o.insert(o.end(), ts.begin() + 2, ts.end());  // drop the helper's 2 NOPs: kind 8 directly
  if (wscale >= 0) {
    o.push_back(1);
    o.insert(o.end(), {3, 3, uint8_t(wscale)});
  }
  return o;
}

uint16_t window_of(const Bytes& frame) {
  size_t off = l4_offset(frame) + 14;
  return uint16_t(frame[off] << 8 | frame[off + 1]);
}

TEST_F(PacBpfRwndCapTest, OurWindowIsClampedWithOurScaleAndBoundsTheTrigger) {
  PacketSpec syn = ack(0, 0x02);
  syn.tcp_options = syn_options(7);
  ASSERT_EQ(run_tc(egress(), build(syn)).retval, kNext) << "a SYN is never held";
  EXPECT_EQ(flow().wscale, 8) << "our SYN starts the flow and gives the scale (7, stored + 1)";
  PacketSpec synack = data(999, 0);
  synack.flags = 0x12;
  synack.tcp_options = syn_options(9);
  ASSERT_EQ(run_tc(ingress(), build(synack)).retval, kNext);
  EXPECT_EQ(flow().wscale, 8) << "the sender's own scale does not matter";

  // 512 << 7 = 64 KB advertised: clamped to 16 KB = 128 << 7.
  ASSERT_EQ(run_tc(ingress(), build(data(1000))).retval, kNext);
  st_->in_flight = 0;
  RunResult r = run_tc(egress(), build(ack(1000 + kMss)));
  ASSERT_EQ(r.retval, kNext);
  EXPECT_EQ(window_of(r.out), 128);
  std::string why;
  EXPECT_TRUE(checksums_ok(r.out, &why)) << why;
  EXPECT_EQ(st_->rwnd_clamped, 1u);
  EXPECT_EQ(st_->in_flight, int64_t(2 * kMss)) << "first ACK: one MSS acked + one MSS of slow start";

  // Twelve segments arrive, then one ACK for them all: eq. (3) in slow
  // start says 24 MSS, the window lets out 16 KB beyond what arrived.
  for (uint32_t i = 1; i <= 12; ++i) ASSERT_EQ(run_tc(ingress(), build(data(1000 + i * kMss))).retval, kNext);
  EXPECT_EQ(flow().expect, 0u);
  st_->in_flight = 0;
  r = run_tc(egress(), build(ack(1000 + 13 * kMss)));
  ASSERT_EQ(r.retval, kNext);
  EXPECT_EQ(st_->in_flight, int64_t(11 * kMss))
      << "the trigger is bounded by the whole segments the window has room for (16 KB: 11)";
  EXPECT_EQ(window_of(r.out), 128);

  // A window already below the cap, and a zero window, are left alone.
  PacketSpec small = ack(1000 + 13 * kMss);
  small.window = 100;
  r = run_tc(egress(), build(small));
  EXPECT_EQ(window_of(r.out), 100);
  PacketSpec zero = ack(1000 + 13 * kMss);
  zero.window = 0;
  r = run_tc(egress(), build(zero));
  EXPECT_EQ(window_of(r.out), 0) << "a zero window stays zero";
  EXPECT_EQ(st_->rwnd_clamped, 2u);
}

TEST_F(PacBpfRwndCapTest, UnscaledAndUnknownConnections) {
  // Our SYN offers scaling, the sender's SYN-ACK does not: no side scales.
  PacketSpec syn = ack(0, 0x02);
  syn.sport = 40001;
  syn.tcp_options = syn_options(7);
  ASSERT_EQ(run_tc(egress(), build(syn)).retval, kNext);
  PacketSpec synack = data(999, 0);
  synack.dport = 40001;
  synack.flags = 0x12;
  synack.tcp_options = syn_options(-1);
  ASSERT_EQ(run_tc(ingress(), build(synack)).retval, kNext);
  EXPECT_EQ(flow(flow_key(5201, 40001)).wscale, 1);
  PacketSpec a = ack(1000);
  a.sport = 40001;
  a.window = 20000;
  RunResult r = run_tc(egress(), build(a));
  EXPECT_EQ(window_of(r.out), 16384) << "unscaled: the cap in bytes";
  std::string why;
  EXPECT_TRUE(checksums_ok(r.out, &why)) << why;

  // A connection that was open before the program (no SYN seen) is never
  // clamped: its scale is unknown.
  ASSERT_EQ(run_tc(ingress(), build(data(1000))).retval, kNext);
  r = run_tc(egress(), build(ack(1000 + kMss)));
  EXPECT_EQ(window_of(r.out), 512);
  EXPECT_EQ(flow().wscale, 0);
}

}  // namespace

namespace {

// The drift-free bound (rwnd_cap_bytes + cap_to_response): a capped
// request/response flow counts as min(window edge - highest byte received,
// rest of the response), in pac.bound instead of pac.in_flight.
class PacBpfBoundTest : public PacBpfTest {
  void configure(Skeleton<pac_tc>& s) override {
    s->rodata->rwnd_cap_bytes = 16384;
    s->rodata->hold_requests = 1;
    s->rodata->cap_to_response = 1;
  }
};

TEST_F(PacBpfBoundTest, CappedRequestResponseFlowsAreCountedByTheirWindow) {
  PacketSpec syn = ack(0, 0x02);
  syn.tcp_options = syn_options(7);
  ASSERT_EQ(run_tc(egress(), build(syn)).retval, kNext);
  st_->threshold = 40000;

  // First request: the response size is unknown (one initial window is
  // the guess), so the flow counts its whole window: the 11 whole segments
  // 16 KB has room for (a Linux sender sends no partial segment into it).
  PacketSpec req = ack(1000, 0x18);
  req.payload = 32;
  ASSERT_EQ(run_tc(egress(), build(req)).retval, kNext);
  EXPECT_EQ(st_->in_flight, 0) << "a covered flow is not in the eq. (4) estimate";
  EXPECT_EQ(st_->bound, int64_t(11 * kMss));
  EXPECT_TRUE(flow().bflags & SLUICE_PAC_BF_GUESS);

  // Four segments arrive: the bound falls by what arrived.
  for (uint32_t i = 0; i < 4; ++i) ASSERT_EQ(run_tc(ingress(), build(data(1000 + i * kMss))).retval, kNext);
  EXPECT_EQ(st_->bound, int64_t(7 * kMss));
  EXPECT_EQ(st_->in_flight, 0);
  // Their ACK moves the window's edge by 4 MSS: the bound is the window again.
  ASSERT_EQ(run_tc(egress(), build(ack(1000 + 4 * kMss))).retval, kNext);
  EXPECT_EQ(st_->bound, int64_t(11 * kMss));

  // The next request: the response was 4 MSS (measured now), so the flow
  // counts at most 4 MSS however large its window.
  PacketSpec req2 = ack(1000 + 4 * kMss, 0x18);
  req2.payload = 32;
  req2.seq = 33;
  ASSERT_EQ(run_tc(egress(), build(req2)).retval, kNext);
  EXPECT_FALSE(flow().bflags & SLUICE_PAC_BF_GUESS);
  EXPECT_EQ(st_->bound, int64_t(4 * kMss));
  for (uint32_t i = 4; i < 8; ++i) ASSERT_EQ(run_tc(ingress(), build(data(1000 + i * kMss))).retval, kNext);
  EXPECT_EQ(st_->bound, 0) << "the whole response arrived";

  // A request that does not fit is held; our TCP's resend of it while it is
  // held is absorbed (looks sent), not held a second time.
  st_->threshold = 1;
  st_->bound = 5000;  // room taken by other flows
  PacketSpec req3 = ack(1000 + 8 * kMss, 0x18);
  req3.payload = 32;
  req3.seq = 65;
  drain();
  ASSERT_EQ(run_tc(egress(), build(req3)).retval, 4);
  ASSERT_EQ(run_tc(egress(), build(req3)).retval, 4);
  drain();
  EXPECT_EQ(events_.size(), 1u) << "one held request, not two";
  EXPECT_EQ(reason(SLUICE_R_PAC_REQUEST_DUP), 1u);
}

// Shares that outlive their response, and what a new flow guesses: with a
// short quiet time (the quiet timer's floor is trigger_age_min_ns).
class PacBpfBoundWatchTest : public PacBpfTest {
  void configure(Skeleton<pac_tc>& s) override {
    s->rodata->rwnd_cap_bytes = 16384;
    s->rodata->hold_requests = 1;
    s->rodata->cap_to_response = 1;
    s->rodata->trigger_age_min_ns = 2'000'000;
  }

 protected:
  // Our SYN (scale 7) on local port `lport`, then its first request.
  void open_and_request(uint16_t lport) {
    PacketSpec syn = ack(0, 0x02);
    syn.sport = lport;
    syn.tcp_options = syn_options(7);
    ASSERT_EQ(run_tc(egress(), build(syn)).retval, kNext);
    ASSERT_EQ(run_tc(egress(), build(request(lport, 1, 1000))).retval, kNext);
  }
  static PacketSpec request(uint16_t lport, uint32_t seq, uint32_t ack_no) {
    PacketSpec r = ack(ack_no, 0x18);
    r.sport = lport;
    r.seq = seq;
    r.payload = 32;
    return r;
  }
  static PacketSpec request_ack(uint16_t lport, uint32_t ack_no) {
    PacketSpec a = ack(ack_no);
    a.sport = lport;
    a.seq = 33;
    return a;
  }
  static PacketSpec seg(uint16_t lport, uint32_t seq) {
    PacketSpec d = data(seq);
    d.dport = lport;
    return d;
  }
  int64_t share(uint16_t lport) const { return int64_t(flow(flow_key(5201, lport)).contrib); }
};

TEST_F(PacBpfBoundWatchTest, ResponsesLargerOrShorterThanExpectedAndTheNextFlowsGuess) {
  st_->threshold = 1 << 20;
  // A: the first response ever, size unknown: the whole window (11 MSS).
  open_and_request(40000);
  EXPECT_TRUE(flow(flow_key(5201, 40000)).bflags & SLUICE_PAC_BF_GUESS);
  EXPECT_EQ(share(40000), int64_t(11 * kMss));
  for (uint32_t i = 0; i < 4; ++i) ASSERT_EQ(run_tc(ingress(), build(seg(40000, 1000 + i * kMss))).retval, kNext);
  // A's next request measures its response: 4 MSS, published for new flows.
  ASSERT_EQ(run_tc(egress(), build(request(40000, 33, 1000 + 4 * kMss))).retval, kNext);
  EXPECT_EQ(st_->resp_guess, 4u * kMss);
  EXPECT_EQ(share(40000), int64_t(4 * kMss));

  // B's first request takes the measured size, not its whole window.
  open_and_request(40001);
  EXPECT_FALSE(flow(flow_key(5201, 40001)).bflags & SLUICE_PAC_BF_GUESS);
  EXPECT_EQ(share(40001), int64_t(4 * kMss));
  EXPECT_EQ(st_->bound, int64_t(8 * kMss));
  // B answers more than that: from its 5th segment on the size is unknown
  // again and B counts what its window still lets out (11 - 5 segments).
  for (uint32_t i = 0; i < 5; ++i) ASSERT_EQ(run_tc(ingress(), build(seg(40001, 1000 + i * kMss))).retval, kNext);
  EXPECT_TRUE(flow(flow_key(5201, 40001)).bflags & SLUICE_PAC_BF_GUESS);
  EXPECT_EQ(share(40001), int64_t(6 * kMss));

  // A answers less than its 4 MSS this time: 2 segments, then nothing. Its
  // 2 MSS would stay counted until its next request; once A was quiet for
  // the quiet time, its timer clears them.
  ASSERT_EQ(run_tc(ingress(), build(seg(40000, 1000 + 4 * kMss))).retval, kNext);
  ASSERT_EQ(run_tc(ingress(), build(seg(40000, 1000 + 5 * kMss))).retval, kNext);
  EXPECT_EQ(share(40000), int64_t(2 * kMss));
  // B keeps sending; A's timer alone clears A (B is quiet for less).
  for (uint32_t i = 0; i < 40 && share(40000) != 0; ++i) {
    usleep(1'000);
    ASSERT_EQ(run_tc(ingress(), build(seg(40001, 1000 + (5 + i) * kMss))).retval, kNext);
  }
  EXPECT_TRUE(timer_done([&] { return share(40000) == 0; })) << "A's share outlived its response: cleared";
  EXPECT_EQ(st_->bound, share(40001)) << "the sum follows the shares";
}

// The last ACK of a response gives the flow a share after its last segment
// came: its window's edge moves beyond what arrived, and with the size
// unknown the whole window counts. Nothing of the flow arrives after it, so
// the timer must be armed by the ACK itself (before, only data armed it,
// and such a share stayed until the agent's idle reset: 20 ms stalls, the
// held requests waiting behind it). The cleared share wakes the agent.
TEST_F(PacBpfBoundWatchTest, AShareTheLastAckOpensIsClearedByItsTimerAndWakesTheAgent) {
  st_->threshold = 1 << 20;
  open_and_request(40000);
  // The sender fills the window: nothing more may come before our ACK.
  for (uint32_t i = 0; i < 11; ++i) ASSERT_EQ(run_tc(ingress(), build(seg(40000, 1000 + i * kMss))).retval, kNext);
  EXPECT_EQ(share(40000), 0);
  // Let the ring's events so far go; a held ACK waits for room.
  st_->held = 1;
  st_->wake_room = 1;
  st_->wake_pending = 0;
  drain();
  // Our ACK of all of it opens the window again: 11 MSS counted, and the
  // response is over (nothing follows).
  ASSERT_EQ(run_tc(egress(), build(request_ack(40000, 1000 + 11 * kMss))).retval, kNext);
  EXPECT_EQ(share(40000), int64_t(11 * kMss));
  EXPECT_TRUE(flow(flow_key(5201, 40000)).bflags & SLUICE_PAC_BF_LISTED) << "the ACK armed the timer";
  st_->threshold = 11 * kMss;  // full: only the cleared share makes room
  EXPECT_TRUE(timer_done([&] { return share(40000) == 0; })) << "cleared once quiet, with no further traffic";
  EXPECT_EQ(st_->bound, 0);
  EXPECT_EQ(st_->resp_guess, 11u * kMss) << "the response of unknown size is measured";
  EXPECT_TRUE(timer_done([&] {
    ring_buffer__consume(rb_);
    for (const auto& e : events_)
      if (e.type == SLUICE_PAC_EV_WAKE) return true;
    return false;
  })) << "the room the timer made woke the agent";
}

// A flow whose quiet_timer was never armed: bpf_timer_init allocates, and
// in softirq the allocation can fail (-ENOMEM, for most new flows under
// load on Linux 6.18). The agent's flow scan finds such a flow quiet and
// runs pac_quiet_sweep on it: the datapath's own check, which clears a
// finished response's share and leaves one still waiting for its response.
TEST_F(PacBpfBoundWatchTest, TheAgentsSweepClearsAQuietFlowWithoutATimer) {
  st_->threshold = 1 << 20;
  const auto k = flow_key(5201, 40000);
  open_and_request(40000);
  // The request left, its response has not begun: however long that
  // takes, the sweep leaves the share (the response will come).
  usleep(10'000);
  EXPECT_EQ(sweep(k), 0);
  EXPECT_EQ(share(40000), int64_t(11 * kMss));
  // Four segments of a response of unknown size, then nothing.
  for (uint32_t i = 0; i < 4; ++i) ASSERT_EQ(run_tc(ingress(), build(seg(40000, 1000 + i * kMss))).retval, kNext);
  // Its timer is gone (an element replaced from user space loses it, as
  // one whose timer could not be allocated never had it), and unlisted.
  int fd = bpf_map__fd((*skel_)->maps.sl_pac_flows_v2);
  sluice_pac_flow f = flow(k);
  f.bflags &= uint8_t(~SLUICE_PAC_BF_LISTED);
  ASSERT_EQ(bpf_map_update_elem(fd, &k, &f, BPF_EXIST), 0);
  ASSERT_GT(share(40000), 0);
  // Once quiet for its quiet time (2 ms here), the sweep clears it.
  EXPECT_TRUE(timer_done([&] { return sweep(k) == 1; })) << "cleared by the sweep";
  EXPECT_EQ(share(40000), 0);
  EXPECT_EQ(st_->bound, 0);
  EXPECT_EQ(st_->resp_guess, 4u * kMss) << "the response of unknown size is measured";
  EXPECT_EQ(sweep(k), 0) << "nothing left to clear";
  EXPECT_EQ(sweep(flow_key(5201, 40999)), 0) << "an unknown flow";
}

// A resent segment is not more response: a covered flow's response is
// measured by the sequence space it advanced (a duplicate counted as
// payload made the next flows' guess too large, and each finished flow
// kept the difference as a share until seen quiet).
TEST_F(PacBpfBoundWatchTest, AResentSegmentIsNotCountedAsMoreResponse) {
  st_->threshold = 1 << 20;
  open_and_request(40000);
  for (uint32_t i = 0; i < 4; ++i) ASSERT_EQ(run_tc(ingress(), build(seg(40000, 1000 + i * kMss))).retval, kNext);
  ASSERT_EQ(run_tc(ingress(), build(seg(40000, 1000 + 2 * kMss))).retval, kNext);  // a resend
  EXPECT_EQ(flow(flow_key(5201, 40000)).cur_burst, 4u * kMss);
  // The next request measures the response: 4 segments, not 5.
  ASSERT_EQ(run_tc(egress(), build(request(40000, 33, 1000 + 4 * kMss))).retval, kNext);
  EXPECT_EQ(st_->resp_guess, 4u * kMss);
  EXPECT_EQ(share(40000), int64_t(4 * kMss));
  // A segment beyond a hole counts the hole; the hole's retransmission
  // then counts nothing: 4 segments again.
  ASSERT_EQ(run_tc(ingress(), build(seg(40000, 1000 + 4 * kMss))).retval, kNext);
  ASSERT_EQ(run_tc(ingress(), build(seg(40000, 1000 + 6 * kMss))).retval, kNext);
  EXPECT_EQ(flow(flow_key(5201, 40000)).cur_burst, 3u * kMss);
  ASSERT_EQ(run_tc(ingress(), build(seg(40000, 1000 + 5 * kMss))).retval, kNext);
  ASSERT_EQ(run_tc(ingress(), build(seg(40000, 1000 + 7 * kMss))).retval, kNext);
  EXPECT_EQ(flow(flow_key(5201, 40000)).cur_burst, 4u * kMss);
  EXPECT_EQ(share(40000), 0) << "the whole response arrived";
}

}  // namespace
