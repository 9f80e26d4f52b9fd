// Pulser's brake state machine (Pulser §III-B) and DCTCP's α update
// (DCTCP §3.1), the code sluice_pulser and sluice_dctcp run, driven through
// BPF_PROG_TEST_RUN with scripted ACKs.
#include <gtest/gtest.h>

#include <cmath>

#include "sluice/pulser.h"
#include "cc_model.skel.h"
#include "core/bpf_util.h"
#include "lib/prog_test.h"
#include "progs/cc_model.h"

SLUICE_SKELETON(cc_model);

using namespace sluice;
using namespace sluice::test;

namespace {

enum { kNone = 0, kBrake = 1, kExtend = 2, kRestore = 3, kAbandon = 4 };
enum { kOpen = 0, kDisorder = 1, kCwr = 2, kRecovery = 3, kLoss = 4 };
constexpr uint32_t kInfinite = 0x7fffffff;

class CcModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    require_root();
    skel_ = std::make_unique<Skeleton<cc_model>>();
    skel_->load();
  }
  void step(sl_cc_model& m) {
    LIBBPF_OPTS(bpf_test_run_opts, o, .ctx_in = &m, .ctx_size_in = sizeof(m));
    ASSERT_EQ(bpf_prog_test_run_opts(bpf_program__fd((*skel_)->progs.cc_model_step), &o), 0) << strerror(errno);
  }
  uint32_t alpha_next(uint32_t alpha, uint32_t delivered, uint32_t ce, uint32_t shift = 4) {
    sl_cc_model m{};
    m.op = SL_CC_MODEL_DCTCP_ALPHA;
    m.alpha = alpha;
    m.delivered = delivered;
    m.delivered_ce = ce;
    m.shift_g = shift;
    step(m);
    return m.alpha;
  }
  std::unique_ptr<Skeleton<cc_model>> skel_;
};

TEST_F(CcModelTest, DctcpAlphaFollowsTheEwma) {
  // α ← (1 − g)·α + g·F, g = 1/16, α in 1/1024.
  EXPECT_EQ(alpha_next(1024, 10, 0), 960u) << "no marks: α decays by g";
  EXPECT_EQ(alpha_next(0, 10, 10), 64u) << "all marked from 0: α = g";
  EXPECT_EQ(alpha_next(512, 100, 50), 512u) << "F = α is a fixed point";
  EXPECT_EQ(alpha_next(1024, 10, 10), 1024u) << "α stays capped at 1";
  EXPECT_EQ(alpha_next(10, 10, 0), 0u) << "a remainder below g is dropped, not kept forever";
  EXPECT_EQ(alpha_next(0, 0, 3), 192u) << "delivered = 0 does not divide by zero (counts as 1)";
  EXPECT_EQ(alpha_next(1024, 10, 0, 0), 0u) << "g = 1: α = F";
  EXPECT_EQ(alpha_next(0, 4, 1, 0), 256u) << "g = 1: α = F";
  // Converges to F with g = 1/16.
  for (double f : {0.1, 0.25, 0.6}) {
    uint32_t a = 1024;
    for (int i = 0; i < 300; ++i) a = alpha_next(a, 1000, uint32_t(f * 1000));
    EXPECT_NEAR(a / 1024.0, f, 0.02) << "F = " << f;
  }
}

struct Ack {
  const char* desc;
  uint32_t ein, ece, ca_state, cwnd, ssthresh, in_flight, snd_una, snd_nxt;
  uint32_t event, set_cwnd, set_ssthresh;
  uint32_t braking_after, prev_after;
};

void run_script(CcModelTest* t, sl_cc_model& m, const std::vector<Ack>& script,
                const std::function<void(sl_cc_model&)>& stepper) {
  (void)t;
  for (const auto& a : script) {
    SCOPED_TRACE(a.desc);
    m.ein = a.ein;
    m.ece = a.ece;
    m.ca_state = a.ca_state;
    m.cwnd = a.cwnd;
    m.ssthresh = a.ssthresh;
    m.in_flight = a.in_flight;
    m.snd_una = a.snd_una;
    m.snd_nxt = a.snd_nxt;
    stepper(m);
    EXPECT_EQ(m.event, a.event);
    EXPECT_EQ(m.set_cwnd, a.set_cwnd);
    EXPECT_EQ(m.set_ssthresh, a.set_ssthresh);
    EXPECT_EQ(m.braking, a.braking_after);
    EXPECT_EQ(m.prev_cwnd, a.prev_after);
  }
}

TEST_F(CcModelTest, PulserBrakesAndRestores) {
  sl_cc_model m{};
  m.op = SL_CC_MODEL_PULSER_ACK;
  m.cwnd_safe = 4;
  // desc, ein ece state cwnd ssthresh inflight una nxt -> event set_cwnd set_ssthresh braking prev
  std::vector<Ack> script = {
      {"no echo, not braking: nothing", 0, 0, kOpen, 40, kInfinite, 40, 1000, 2000, kNone, 0, 0, 0, 0},
      {"echo in Open: save 40, cwnd = cwnd_safe (eq. 1, 2)", 1, 0, kOpen, 40, kInfinite, 40, 1000, 61000, kBrake, 4, 0,
       1, 40},
      {"echo again: the window restarts, cwnd already safe", 1, 0, kOpen, 4, kInfinite, 39, 2448, 62448, kExtend, 0, 0,
       1, 40},
      {"no echo, window not over: keep braking", 0, 0, kOpen, 4, kInfinite, 30, 30000, 62448, kNone, 0, 0, 1, 40},
      {"ECE in Open while braking: PRR will scale from the data in flight", 0, 1, kOpen, 4, kInfinite, 25, 40000, 62448,
       kNone, 25, 0, 1, 40},
      {"a window without echo: restore the saved 40 at once (eq. 3)", 0, 0, kOpen, 4, 4, 3, 62448, 66792, kRestore, 40,
       0, 0, 40},
      {"after the restore: nothing", 0, 0, kOpen, 40, 4, 40, 70000, 120000, kNone, 0, 0, 0, 40},
      {"echo with a cwnd the flow never filled: the window in use (in flight) is saved", 1, 0, kOpen, 700, 4, 115,
       130000, 300000, kBrake, 4, 0, 1, 115},
      {"restore to it", 0, 0, kOpen, 4, 4, 2, 300000, 305000, kRestore, 115, 0, 0, 115},
      {"in flight below cwnd_safe: saves cwnd_safe", 1, 0, kOpen, 50, 4, 2, 305000, 310000, kBrake, 4, 0, 1, 4},
  };
  run_script(this, m, script, [this](sl_cc_model& s) { step(s); });
}

TEST_F(CcModelTest, PulserInReductionStatesGoesThroughSsthresh) {
  sl_cc_model m{};
  m.op = SL_CC_MODEL_PULSER_ACK;
  m.cwnd_safe = 4;
  std::vector<Ack> script = {
      {"echo in CWR: PRR is steering cwnd, aim it at cwnd_safe", 1, 0, kCwr, 30, 25, 30, 100, 50000, kBrake, 0, 4, 1,
       30},
      {"window over in CWR: ssthresh = saved window, TCP sets cwnd to it when CWR ends", 0, 0, kCwr, 6, 4, 5, 50000,
       60000, kRestore, 0, 30, 0, 30},
      {"echo again while CWR still heads to 30: 30 is the window to save", 1, 0, kCwr, 10, 30, 10, 50100, 60000, kBrake,
       0, 4, 1, 30},
      {"window over in Recovery", 0, 0, kRecovery, 5, 4, 4, 60000, 61000, kRestore, 0, 30, 0, 30},
      {"echo with ECE in Open: CWR follows; cwnd raised to the data in flight for PRR", 1, 1, kOpen, 40, kInfinite, 45,
       70000, 130000, kBrake, 45, 0, 1, 40},
      {"RTO while braking: the brake is abandoned", 0, 0, kLoss, 1, 20, 0, 70000, 130000, kAbandon, 0, 0, 0, 40},
      {"echo during Loss: left to TCP", 1, 0, kLoss, 1, 20, 0, 70000, 130000, kNone, 0, 0, 0, 40},
  };
  run_script(this, m, script, [this](sl_cc_model& s) { step(s); });
}

TEST_F(CcModelTest, PulserEdgeCases) {
  sl_cc_model m{};
  m.op = SL_CC_MODEL_PULSER_ACK;
  m.cwnd_safe = 4;
  std::vector<Ack> script = {
      {"a brake never raises the window", 1, 0, kOpen, 2, kInfinite, 2, 10, 3000, kBrake, 0, 0, 1, 2},
      {"restore gives back exactly the saved window", 0, 0, kOpen, 2, kInfinite, 0, 3000, 3000, kRestore, 2, 0, 0, 2},
      {"infinite ssthresh in CWR is not a window", 1, 0, kCwr, 12, kInfinite, 12, 3000, 9000, kBrake, 0, 4, 1, 12},
      // Sequence numbers wrap: brake_end just below 2^32, snd_una past it.
      {"echo near the wrap", 1, 0, kOpen, 4, 4, 4, 0xfffff000u, 0xfffffff0u, kExtend, 0, 0, 1, 12},
      {"snd_una wrapped past the window end: restore", 0, 0, kOpen, 4, 4, 0, 0x00000100u, 0x00001000u, kRestore, 12, 0,
       0, 12},
  };
  run_script(this, m, script, [this](sl_cc_model& s) { step(s); });
  // cwnd_safe is a parameter.
  sl_cc_model p{};
  p.op = SL_CC_MODEL_PULSER_ACK;
  p.cwnd_safe = 10;
  p.ein = 1;
  p.cwnd = 50;
  p.ssthresh = kInfinite;
  p.snd_nxt = 100;
  step(p);
  EXPECT_EQ(p.set_cwnd, 10u);
}

}  // namespace
