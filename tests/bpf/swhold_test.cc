// bpf/switch/swhold.bpf.c (design B of the switch data path) through
// BPF_PROG_TEST_RUN.
// sw_hold_ingress: a valid PAUSE/RESUME frame sets/clears its queues'
// flags in serial-number order and goes on to the gate (never consumed);
// every frame the shared table rejects, other control types and data
// traffic change nothing.
// sw_hold_egress: a data frame is copied to the agent with the logic's
// queue and dropped; the agent's re-injected frames (its mark) and frames
// too long to copy pass.
// sw_hold_sync: without a qdisc seen by an event there is nothing to read.
#include <gtest/gtest.h>
#include <bpf/libbpf.h>
#include <unistd.h>

#include <memory>
#include <vector>

#include "core/bpf_util.h"
#include "lib/ctrl_cases.h"
#include "lib/packet.h"
#include "lib/prog_test.h"
#include "sluice/switch.h"
#include "switch/control.h"
#include "swhold.skel.h"

SLUICE_SKELETON(swhold);

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr int kNext = -1, kShot = 2;
constexpr uint32_t kQueues = 32, kMark = 0x5e1d;

class SwholdTest : public ::testing::Test {
 protected:
  // Loaded once for the suite (the verifier is slow under the VM suite's
  // emulated CPU), on first use by a test that runs as root.
  static Skeleton<swhold>& object() {
    static std::unique_ptr<Skeleton<swhold>> s = [] {
      auto o = std::make_unique<Skeleton<swhold>>();
      (*o)->rodata->num_queues = kQueues;
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
    for (uint32_t q = 0; q < SLUICE_SW_MAX_QUEUES; ++q) {
      bss->hold_paused[q] = 0;
      bss->hold_pause_seq[q] = 0;
      bss->hold_pause_seen[q] = 0;
    }
    ring_ = std::make_unique<RingRecords<sl_sw_hold_event>>(bpf_map__fd((*skel_)->maps.sl_swh_ring_v1));
    ASSERT_TRUE(ring_->ok());
  }
  static Bytes frame(sw::CtrlType t, std::vector<std::pair<uint16_t, uint32_t>> recs) {
    sw::ControlFrame f{t};
    for (auto [q, seq] : recs) f.queues.push_back({q, seq});
    return sw::ethernet_frame({2, 0, 0, 0, 0, 1}, sw::encode(f));
  }
  int ingress(const Bytes& b) { return run_tc(bpf_program__fd((*skel_)->progs.sw_hold_ingress), b).retval; }
  bool paused(uint32_t q) const { return (*skel_)->bss->hold_paused[q] != 0; }
  uint64_t gen() const { return (*skel_)->bss->hold_pause_gen; }
  std::vector<uint8_t> flags() const {
    return std::vector<uint8_t>((*skel_)->bss->hold_paused, (*skel_)->bss->hold_paused + SLUICE_SW_MAX_QUEUES);
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
  ASSERT_EQ(bpf_map_update_elem(bpf_map__fd((*skel_)->maps.sl_swh_flowq_v1), &h, &q, BPF_ANY), 0);
  const int fd = bpf_program__fd((*skel_)->progs.sw_hold_egress);
  EXPECT_EQ(run_tc(fd, pkt).retval, kShot);
  ring_->consume();
  ASSERT_EQ(ring_->events.size(), 1u);
  EXPECT_EQ(ring_->events[0].queue, q);
  ASSERT_EQ(ring_->events[0].len, pkt.size());
  EXPECT_TRUE(std::equal(pkt.begin(), pkt.end(), ring_->events[0].frame));

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

TEST_F(SwholdTest, SyncWithoutAQdiscReadsNothing) {
  if ((*skel_)->bss->hold_qdisc) GTEST_SKIP() << "a qdisc event was already recorded by this object";
  const uint64_t syncs = (*skel_)->bss->hold.syncs;
  LIBBPF_OPTS(bpf_test_run_opts, o);
  ASSERT_EQ(bpf_prog_test_run_opts(bpf_program__fd((*skel_)->progs.sw_hold_sync), &o), 0);
  EXPECT_EQ(o.retval, 1u);
  EXPECT_EQ((*skel_)->bss->hold.syncs, syncs);
}
