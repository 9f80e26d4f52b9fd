// bpf/switch/swhold.bpf.c (design B of the switch data path) through
// BPF_PROG_TEST_RUN.
// sw_hold_ingress: a valid PAUSE/RESUME frame sets/clears its queues'
// flags in serial-number order and goes on to the gate (never consumed);
// every frame the shared table rejects, other control types and data
// traffic change nothing.
// sw_hold_egress: a data frame is copied to the agent with the logic's
// queue and dropped, unless the agent is not alive (fail open: passed); the agent's re-injected frames (its mark) and
// frames too long to copy pass. sw_hold_sync: without a qdisc seen by an event there is nothing to read. Per port: the
// object serves several ports (sl_swh_ports_v1: ifindex -> port id); pause flags, flow queues, counters and events are
// the port's. BPF_PROG_TEST_RUN runs on lo, so lo is made port 0 or port 1 in turn.
#include <gtest/gtest.h>
#include <bpf/libbpf.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <array>

#include <memory>
#include <vector>

#include "core/bpf_util.h"
#include "lib/ctrl_cases.h"
#include "lib/packet.h"
#include "lib/prog_test.h"
#include "sluice/liveness.h"
#include "sluice/switch.h"
#include "switch/control.h"
#include "swhold.skel.h"
#include "swhold_compat.skel.h"
#include "core/heartbeat.h"

SLUICE_SKELETON_TWIN(swhold, swhold_compat, sluice::liveness_object);

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr int kNext = -1, kShot = 2;
constexpr uint32_t kQueues = 32, kMark = 0x5e1d, kLo = 1;

class SwholdTest : public ::testing::Test {
 protected:
  // Loaded once for the suite (the verifier is slow under the VM suite's
  // emulated CPU), on first use by a test that runs as root.
  static Skeleton<swhold>& object() {
    static std::unique_ptr<Skeleton<swhold>> s = [] {
      auto o = std::make_unique<Skeleton<swhold>>();
      (*o)->rodata->reinject_mark = kMark;
      o->load();
      return o;
    }();
    return *s;
  }
  void SetUp() override {
    require_root();
    skel_ = &object();
    auto* bss = (*skel_)->bss;
    for (uint32_t p = 0; p < 2; ++p)
      for (uint32_t q = 0; q < SLUICE_SW_MAX_QUEUES; ++q) {
        bss->hold_paused[p][q] = 0;
        bss->hold_pause_seq[p][q] = 0;
        bss->hold_pause_seen[p][q] = 0;
      }
    set_port(0, kQueues);
    ring_ = std::make_unique<RingRecords<sl_sw_hold_event>>(bpf_map__fd((*skel_)->maps.sl_swh_ring_v1));
    ASSERT_TRUE(ring_->ok());
  }
  static Bytes frame(sw::CtrlType t, std::vector<std::pair<uint16_t, uint32_t>> recs) {
    sw::ControlFrame f{t};
    for (auto [q, seq] : recs) f.queues.push_back({q, seq});
    return sw::ethernet_frame({2, 0, 0, 0, 0, 1}, sw::encode(f));
  }
  // lo becomes held port `id` with `queues` queues.
  void set_port(uint32_t id, uint32_t queues) {
    sl_sw_hold_port p{id, queues, 0, 0};
    ASSERT_EQ(bpf_map_update_elem(bpf_map__fd((*skel_)->maps.sl_swh_ports_v1), &kLo, &p, BPF_ANY), 0);
  }
  void set_flow_queue(uint32_t port, uint32_t hash, uint32_t q) {
    sl_sw_flow_key k{port, hash};
    ASSERT_EQ(bpf_map_update_elem(bpf_map__fd((*skel_)->maps.sl_swh_flowq_v1), &k, &q, BPF_ANY), 0);
  }
  int ingress(const Bytes& b) { return run_tc(bpf_program__fd((*skel_)->progs.sw_hold_ingress), b).retval; }
  bool paused(uint32_t q, uint32_t port = 0) const { return (*skel_)->bss->hold_paused[port][q] != 0; }
  uint64_t gen(uint32_t port = 0) const { return (*skel_)->bss->hold_pause_gen[port]; }
  std::vector<uint8_t> flags(uint32_t port = 0) const {
    return std::vector<uint8_t>((*skel_)->bss->hold_paused[port],
                                (*skel_)->bss->hold_paused[port] + SLUICE_SW_MAX_QUEUES);
  }

  Skeleton<swhold>* skel_ = nullptr;
  std::unique_ptr<RingRecords<sl_sw_hold_event>> ring_;
};

}  // namespace

TEST_F(SwholdTest, PauseAndResumeApplyAtOnceAndPassToTheGate) {
  const uint64_t g0 = gen();
  EXPECT_EQ(ingress(frame(sw::CtrlType::kPause, {{5, 1}})), kNext) << "the gate still hands it to the agent";
  EXPECT_TRUE(paused(5));
  EXPECT_FALSE(paused(4));
  EXPECT_EQ(gen(), g0 + 1);
  EXPECT_EQ(ingress(frame(sw::CtrlType::kResume, {{5, 2}})), kNext);
  EXPECT_FALSE(paused(5));
  EXPECT_EQ(gen(), g0 + 2);
}

TEST_F(SwholdTest, EveryRecordOfAFrameIsApplied) {
  EXPECT_EQ(ingress(frame(sw::CtrlType::kPause, {{1, 1}, {2, 1}, {127, 1}})), kNext);
  EXPECT_TRUE(paused(1));
  EXPECT_TRUE(paused(2));
  EXPECT_TRUE(paused(127));
  EXPECT_FALSE(paused(0));
}

TEST_F(SwholdTest, AnOlderRecordDoesNotUndoANewerOne) {
  ASSERT_EQ(ingress(frame(sw::CtrlType::kPause, {{7, 10}})), kNext);
  ASSERT_EQ(ingress(frame(sw::CtrlType::kResume, {{7, 11}})), kNext);
  const uint64_t g = gen();
  EXPECT_EQ(ingress(frame(sw::CtrlType::kPause, {{7, 10}})), kNext);  // reordered: older
  EXPECT_FALSE(paused(7));
  EXPECT_EQ(ingress(frame(sw::CtrlType::kPause, {{7, 11}})), kNext);  // same seq again
  EXPECT_FALSE(paused(7));
  EXPECT_EQ(gen(), g);
  // Serial arithmetic: 1 is after 0xfffffff0.
  ASSERT_EQ(ingress(frame(sw::CtrlType::kPause, {{8, 0xfffffff0u}})), kNext);
  EXPECT_EQ(ingress(frame(sw::CtrlType::kResume, {{8, 1}})), kNext);
  EXPECT_FALSE(paused(8));
}

TEST_F(SwholdTest, RejectedFramesAndOtherTypesChangeNothing) {
  for (const auto& c : ctrl_cases()) {
    SCOPED_TRACE(c.desc);
    // The program serves a switch-facing port: a frame that port accepts
    // as PAUSE/RESUME is applied (the cases above); every other one must
    // change nothing, whatever role the table gave it.
    size_t off = 14;
    if (c.frame.size() >= 14 && c.frame[12] == 0x81 && c.frame[13] == 0x00) off = 18;
    sw::ControlFrame f;
    const bool pause_type =
        c.frame.size() > off &&
        sw::accept_control(SL_PORT_SWITCH_FACING, c.frame.data() + off, c.frame.size() - off, &f) == SL_CTRL_R_OK &&
        (f.type == sw::CtrlType::kPause || f.type == sw::CtrlType::kResume);
    if (pause_type) continue;  // the cases above
    const auto before = flags();
    const uint64_t g = gen();
    EXPECT_EQ(ingress(c.frame), kNext) << "left to the gate, which counts and drops it";
    EXPECT_EQ(flags(), before);
    EXPECT_EQ(gen(), g);
  }
  const uint64_t g = gen();
  EXPECT_EQ(ingress(build(PacketSpec{})), kNext);
  EXPECT_EQ(gen(), g);
}

TEST_F(SwholdTest, EgressDivertsDataFramesWithTheLogicsQueue) {
  PacketSpec s;
  s.proto = 17;
  s.payload = 100;
  const Bytes pkt = build(s);
  const uint32_t h = sw::flow_hash(s.src, s.dst, s.sport, s.dport, s.proto);
  const uint32_t q = 9;
  set_flow_queue(0, h, q);
  const int fd = bpf_program__fd((*skel_)->progs.sw_hold_egress);
  const uint64_t diverted = (*skel_)->bss->hold[0].diverted;
  EXPECT_EQ(run_tc(fd, pkt).retval, kShot);
  ring_->consume();
  ASSERT_EQ(ring_->events.size(), 1u);
  const auto& ev = ring_->events[0];
  EXPECT_EQ(ev.queue, q);
  EXPECT_EQ(ev.port_id, 0u);
  EXPECT_EQ((*skel_)->bss->hold[0].diverted, diverted + 1);
  ASSERT_EQ(ev.len, pkt.size());
  EXPECT_TRUE(std::equal(pkt.begin(), pkt.end(), ev.frame));
  // What the agent builds the logic's PacketMeta from: the same tuple and
  // hash the classifier computes.
  EXPECT_EQ(ev.is_ip, 1);
  EXPECT_EQ(ev.flow_hash, h);
  EXPECT_EQ(sw::Addr(std::to_array(ev.tuple.src)), sw::addr_parse(s.src));
  EXPECT_EQ(sw::Addr(std::to_array(ev.tuple.dst)), sw::addr_parse(s.dst));
  EXPECT_EQ(ntohs(ev.tuple.sport), s.sport);
  EXPECT_EQ(ntohs(ev.tuple.dport), s.dport);
  EXPECT_EQ(ev.tuple.proto, 17);

  // The agent's own re-injection passes to the qdisc, untouched.
  ring_->events.clear();
  struct __sk_buff ctx {};
  ctx.mark = kMark;
  EXPECT_EQ(run_tc(fd, pkt, &ctx, sizeof(ctx)).retval, kNext);
  // Longer than a held frame can be: passes (fail open), not diverted.
  s.payload = SLUICE_SW_HOLD_FRAME_MAX;
  EXPECT_EQ(run_tc(fd, build(s)).retval, kNext);
  ring_->consume();
  EXPECT_TRUE(ring_->events.empty());
}

// submit_frame: while the agent says a wake-up of the port is due anyway
// (arrival_quiet), a frame goes to the ring without one, still delivered
// whole; at most SLUICE_SW_HOLD_QUIET_MAX_BYTES of them wait unseen, the
// frames after that wake the agent as before; with the flag clear no frame
// is quiet.
TEST_F(SwholdTest, FramesOfAWaitingPortWaitInTheRingWithoutAWakeUpUpToABound) {
  PacketSpec s;
  s.proto = 17;
  s.payload = 1000;
  const Bytes pkt = build(s);
  const int fd = bpf_program__fd((*skel_)->progs.sw_hold_egress);
  auto* bss = (*skel_)->bss;
  ring_->consume();
  ring_->events.clear();
  const uint64_t quiet0 = bss->hold[0].quiet, diverted0 = bss->hold[0].diverted;
  bss->hold[0].arrival_quiet = 1;
  bss->hold_quiet_pending = 0;
  const size_t per_record = (sizeof(sl_sw_hold_event) + 8 + 7) / 8 * 8;  // the ring's header, 8-byte aligned
  // Quiet while the ring, this frame's record included, holds less than
  // the bound.
  const size_t bound = (SLUICE_SW_HOLD_QUIET_MAX_BYTES - 1) / per_record;
  for (size_t i = 0; i < bound + 6; ++i) ASSERT_EQ(run_tc(fd, pkt).retval, kShot);
  bss->hold[0].arrival_quiet = 0;
  EXPECT_EQ(bss->hold[0].quiet - quiet0, bound) << "quiet frames stop at the bound";
  EXPECT_EQ(bss->hold[0].diverted - diverted0, bound + 6);
  EXPECT_EQ(bss->hold_quiet_pending, 1u);
  EXPECT_EQ(bss->hold[0].late_wakes, 0u) << "the flag stayed set while each frame was submitted";
  ring_->consume();
  ASSERT_EQ(ring_->events.size(), bound + 6) << "every frame is delivered, woken for or not";
  for (const auto& ev : ring_->events) {
    ASSERT_EQ(ev.len, pkt.size());
    EXPECT_TRUE(std::equal(pkt.begin(), pkt.end(), ev.frame));
  }
  ring_->events.clear();
  const uint64_t quiet1 = bss->hold[0].quiet;
  ASSERT_EQ(run_tc(fd, pkt).retval, kShot);
  EXPECT_EQ(bss->hold[0].quiet, quiet1) << "flag clear: the frame may wake the agent";
  ring_->consume();
  EXPECT_EQ(ring_->events.size(), 1u);
  ring_->events.clear();
}

TEST_F(SwholdTest, SyncWithoutAQdiscReadsNothing) {
  for (uint32_t port : {0u, 1u, uint32_t(SLUICE_SW_MAX_PORTS)}) {
    SCOPED_TRACE(port);
    if (port < SLUICE_SW_MAX_PORTS && (*skel_)->bss->hold[port].qdisc)
      GTEST_SKIP() << "a qdisc event was already recorded for port " << port;
    const uint64_t syncs = port < SLUICE_SW_MAX_PORTS ? (*skel_)->bss->hold[port].syncs : 0;
    sl_sw_hold_sync_ctx c{port};
    LIBBPF_OPTS(bpf_test_run_opts, o, .ctx_in = &c, .ctx_size_in = sizeof(c));
    ASSERT_EQ(bpf_prog_test_run_opts(bpf_program__fd((*skel_)->progs.sw_hold_sync), &o), 0);
    EXPECT_EQ(o.retval, port < SLUICE_SW_MAX_PORTS ? 1u : 2u) << "1: no qdisc yet, 2: no such port";
    if (port < SLUICE_SW_MAX_PORTS) {
      EXPECT_EQ((*skel_)->bss->hold[port].syncs, syncs);
    }
  }
}

// Two ports: each has its own pause flags, flow queues, counters and
// events; a frame on an interface that is no held port is not touched.
TEST_F(SwholdTest, TwoPortsKeepTheirOwnState) {
  PacketSpec s;
  s.proto = 17;
  s.payload = 100;
  const Bytes pkt = build(s);
  const uint32_t h = sw::flow_hash(s.src, s.dst, s.sport, s.dport, s.proto);
  set_flow_queue(0, h, 3);
  set_flow_queue(1, h, 6);
  const int fd = bpf_program__fd((*skel_)->progs.sw_hold_egress);
  auto* bss = (*skel_)->bss;
  const uint64_t d0 = bss->hold[0].diverted, d1 = bss->hold[1].diverted;

  // lo as port 1 with 4 queues: queue 6 is out of its range, so queue 0.
  set_port(1, 4);
  EXPECT_EQ(run_tc(fd, pkt).retval, kShot);
  set_port(1, 8);
  EXPECT_EQ(run_tc(fd, pkt).retval, kShot);
  set_port(0, kQueues);
  EXPECT_EQ(run_tc(fd, pkt).retval, kShot);
  ring_->consume();
  ASSERT_EQ(ring_->events.size(), 3u);
  EXPECT_EQ(ring_->events[0].port_id, 1u);
  EXPECT_EQ(ring_->events[0].queue, 0u);
  EXPECT_EQ(ring_->events[1].port_id, 1u);
  EXPECT_EQ(ring_->events[1].queue, 6u);
  EXPECT_EQ(ring_->events[2].port_id, 0u);
  EXPECT_EQ(ring_->events[2].queue, 3u);
  EXPECT_EQ(bss->hold[0].diverted, d0 + 1);
  EXPECT_EQ(bss->hold[1].diverted, d1 + 2);

  // PAUSE on port 1 pauses port 1's queue only.
  set_port(1, 8);
  const uint64_t g0 = gen(0), g1 = gen(1);
  EXPECT_EQ(ingress(frame(sw::CtrlType::kPause, {{2, 1}})), kNext);
  EXPECT_TRUE(paused(2, 1));
  EXPECT_FALSE(paused(2, 0));
  EXPECT_EQ(gen(1), g1 + 1);
  EXPECT_EQ(gen(0), g0);
  // The same seq on port 0 is that port's first: applied there.
  set_port(0, kQueues);
  EXPECT_EQ(ingress(frame(sw::CtrlType::kPause, {{2, 1}})), kNext);
  EXPECT_TRUE(paused(2, 0));
  EXPECT_EQ(ingress(frame(sw::CtrlType::kResume, {{2, 2}})), kNext);
  EXPECT_FALSE(paused(2, 0));
  EXPECT_TRUE(paused(2, 1)) << "port 1 keeps its pause";

  // lo no held port: nothing diverted, nothing applied.
  ASSERT_EQ(bpf_map_delete_elem(bpf_map__fd((*skel_)->maps.sl_swh_ports_v1), &kLo), 0);
  ring_->events.clear();
  EXPECT_EQ(run_tc(fd, pkt).retval, kNext);
  const auto before = flags(0);
  EXPECT_EQ(ingress(frame(sw::CtrlType::kPause, {{9, 5}})), kNext);
  EXPECT_EQ(flags(0), before);
  ring_->consume();
  EXPECT_TRUE(ring_->events.empty());
  set_port(0, kQueues);
}

// The agent's control frames (EtherType 0x88B5) pass: they are not data.
TEST_F(SwholdTest, ControlFramesLeavingThePortAreNotDiverted) {
  const int fd = bpf_program__fd((*skel_)->progs.sw_hold_egress);
  EXPECT_EQ(run_tc(fd, frame(sw::CtrlType::kPause, {{1, 1}})).retval, kNext);
  ring_->consume();
  EXPECT_TRUE(ring_->events.empty());
}

// Fail open: with a fail-open limit and no heartbeat (an agent that died
// before or never beat), every data frame passes to the qdisc, counted.
TEST(SwholdFailOpen, WithoutAHeartbeatEveryFramePasses) {
  require_root();
  Skeleton<swhold> o;
  o->rodata->fail_open_ns = 1'000'000;
  o.load();
  sl_sw_hold_port p{0, 4, 0, 0};
  ASSERT_EQ(bpf_map_update_elem(bpf_map__fd(o->maps.sl_swh_ports_v1), &kLo, &p, BPF_ANY), 0);
  RingRecords<sl_sw_hold_event> ring(bpf_map__fd(o->maps.sl_swh_ring_v1));
  ASSERT_TRUE(ring.ok());
  PacketSpec s;
  s.proto = 17;
  s.payload = 100;
  EXPECT_EQ(run_tc(bpf_program__fd(o->progs.sw_hold_egress), build(s)).retval, kNext);
  EXPECT_EQ(o->bss->hold[0].fail_open, 1u);
  EXPECT_EQ(o->bss->hold[0].diverted, 0u);
  ring.consume();
  EXPECT_TRUE(ring.events.empty());
}
