// top_expiry (bpf/host/top_expiry.bpf.c) through BPF_PROG_TEST_RUN: tokens
// older than the threshold are dropped (or only counted with expiry off),
// valid and future-stamped tokens pass, the per-host correction and the
// unsynced widening are applied, every verdict is counted per priority, and
// malformed or non-token packets pass untouched. Fail open: with
// fail_open_ns set, an expired token passes (counted, still expired for its
// priority) while the agent's heartbeat is missing or stale, and is dropped
// again once it is fresh or while the heartbeat thread exists and runs;
// fail_open_ns = 0 never fails open.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "core/bpf_util.h"
#include "core/features.h"
#include "core/heartbeat.h"
#include "lib/packet.h"
#include "lib/prog_test.h"
#include "mechanisms/top/wire.h"
#include "sluice/top.h"
#include "top_expiry.skel.h"
#include "top_expiry_compat.skel.h"

// top_expiry where XDP programs may call bpf_task_from_pid (6.8+),
// top_expiry_compat before (bpf/lib/liveness.h).
SLUICE_SKELETON_TWIN(top_expiry, top_expiry_compat, sluice::liveness_object_xdp);

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr int kPass = 2, kDrop = 1;  // XDP_PASS, XDP_DROP
// The time unit of the table: 100 ms, so that a "fresh" token stays fresh
// while the program runs under a slow emulator (the VM suite runs QEMU TCG,
// where a test run has taken over 1 ms).
constexpr uint64_t kUnit = 100'000'000;
constexpr uint64_t kThreshold = 1 * kUnit;

// A monotonic time `ns` ago (1 when the machine has not run that long).
uint64_t ago(uint64_t ns) {
  uint64_t now = monotonic_ns();
  return now > ns ? now - ns : 1;
}

uint64_t tai_now() {
  timespec ts;
  clock_gettime(CLOCK_TAI, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + ts.tv_nsec;
}

// A UDP frame to the TOP port carrying `p` (plus `extra` bytes of payload).
Bytes top_frame(const top::Packet& p, bool v6 = false, uint16_t dport = SLUICE_TOP_DEFAULT_PORT, size_t cut = 0) {
  PacketSpec s;
  s.proto = 17;
  s.ipv6 = v6;
  if (v6) {
    s.src = "fd00::1";
    s.dst = "fd00::2";
  }
  s.sport = SLUICE_TOP_DEFAULT_PORT;
  s.dport = dport;
  s.payload = top::wire_bytes(p);
  Bytes b = build(s);
  size_t off = l4_offset(b) + 8;
  top::encode(p, b.data() + off, b.size() - off);
  if (cut) b.resize(b.size() - cut);
  return b;
}

top::Packet token(uint8_t prio, uint64_t ts) {
  top::Packet p;
  p.type = top::Type::kToken;
  p.priority = prio;
  p.flow = 42;
  p.seq = 1;
  p.tstamp_ns = ts;
  return p;
}

class TopExpiryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    require_root();
    skel_ = std::make_unique<Skeleton<top_expiry>>();
    skel_->load();
    set_config(kThreshold, 0, 0, true);
  }
  int prog() const { return bpf_program__fd((*skel_)->progs.top_expiry); }
  void set_config(uint64_t thr, uint64_t widen, int64_t local, bool enabled) {
    sluice_top_expiry_config c{};
    c.threshold_ns = thr;
    c.widen_ns = widen;
    c.local_offset_ns = local;
    c.enabled = enabled;
    uint32_t k = 0;
    ASSERT_EQ(bpf_map_update_elem(bpf_map__fd((*skel_)->maps.sl_top_cfg_v1), &k, &c, 0), 0);
  }
  void set_correction(const char* addr, int64_t corr) {
    sluice_top_peer_key k{};
    k.family = 4;
    inet_pton(AF_INET, addr, k.addr);
    ASSERT_EQ(bpf_map_update_elem(bpf_map__fd((*skel_)->maps.sl_top_corr_v1), &k, &corr, 0), 0);
  }
  uint64_t reason(uint32_t r) const { return read_reason_counters(bpf_map__fd((*skel_)->maps.sl_counters))[r].packets; }
  uint64_t stat(int prio, int verdict) const {
    uint32_t slot = prio * SLUICE_TOP_EXPIRY_VERDICTS + verdict;
    std::vector<sluice_counter> v(num_possible_cpus());
    EXPECT_EQ(bpf_map_lookup_elem(bpf_map__fd((*skel_)->maps.sl_top_stats_v1), &slot, v.data()), 0);
    uint64_t n = 0;
    for (auto& c : v) n += c.packets;
    return n;
  }
  std::unique_ptr<Skeleton<top_expiry>> skel_;
};

// fail_open_ns = 0 (sluice-top --xdp): never fails open, whatever the
// liveness record says (the fixture never writes it).
TEST_F(TopExpiryTest, ZeroFailOpenNeverFailsOpen) {
  EXPECT_EQ((*skel_)->rodata->fail_open_ns, 0u);
  for (uint64_t hb : {uint64_t(0), ago(30'000'000'000ull)}) {
    (*skel_)->bss->top_live.heartbeat_ns = hb;
    EXPECT_EQ(run_xdp(prog(), top_frame(token(1, tai_now() - 5 * kUnit))).retval, kDrop) << "heartbeat " << hb;
  }
  EXPECT_EQ(reason(SLUICE_R_TOP_TOKEN_EXPIRED), 2u);
  EXPECT_EQ(reason(SLUICE_R_TOP_FAIL_OPEN), 0u);
}

// With fail_open_ns set (sluiced's [top] fail_open_ms): nobody follows the
// clock once the agent is gone, so an expired token passes.
class TopExpiryFailOpenTest : public TopExpiryTest {
 protected:
  static constexpr uint64_t kFailOpen = 10 * kUnit;  // 1 s: fresh stays fresh under QEMU TCG
  void SetUp() override {
    require_root();
    skel_ = std::make_unique<Skeleton<top_expiry>>();
    (*skel_)->rodata->fail_open_ns = kFailOpen;
    skel_->load();
    set_config(kThreshold, 0, 0, true);
  }
  sluice_liveness& live() { return (*skel_)->bss->top_live; }
  int expired_token(uint8_t prio) { return run_xdp(prog(), top_frame(token(prio, tai_now() - 5 * kUnit))).retval; }
  // Tokens counted expired over every flow (this test's tokens are one flow).
  uint64_t flow_expired() const {
    uint64_t n = 0;
    for_each_entry<sluice_top_flow_key, sluice_top_flow_stats>(
        bpf_map__fd((*skel_)->maps.sl_top_flows_v1),
        [&](const sluice_top_flow_key&, const sluice_top_flow_stats& st) { n += st.tokens_expired; });
    return n;
  }
};

TEST_F(TopExpiryFailOpenTest, StaleHeartbeatPassesExpiredTokens) {
  EXPECT_EQ(expired_token(3), kPass) << "never written: the agent is not there";
  EXPECT_EQ(reason(SLUICE_R_TOP_FAIL_OPEN), 1u);
  EXPECT_EQ(stat(3, SLUICE_TOP_X_EXPIRED), 1u) << "still counted expired for its priority";
  EXPECT_EQ(flow_expired(), 1u) << "and for its flow";

  live().heartbeat_ns = monotonic_ns();
  EXPECT_EQ(expired_token(3), kDrop) << "a fresh heartbeat drops";
  EXPECT_EQ(reason(SLUICE_R_TOP_TOKEN_EXPIRED), 1u);
  EXPECT_EQ(reason(SLUICE_R_TOP_FAIL_OPEN), 1u);

  live().heartbeat_ns = ago(3 * kFailOpen);
  EXPECT_EQ(expired_token(5), kPass) << "a stale heartbeat still drops";
  EXPECT_EQ(reason(SLUICE_R_TOP_FAIL_OPEN), 2u);
  EXPECT_EQ(stat(5, SLUICE_TOP_X_EXPIRED), 1u);
  EXPECT_EQ(reason(SLUICE_R_TOP_TOKEN_EXPIRED), 1u);

  live().withdrawn = 1;
  EXPECT_EQ(expired_token(5), kPass) << "withdrawn and stale";
  EXPECT_EQ(reason(SLUICE_R_TOP_FAIL_OPEN), 3u);
  live().withdrawn = 0;

  // Valid tokens and expiry off are what they were: not failed open.
  RunResult r = run_xdp(prog(), top_frame(token(0, tai_now() - 100'000)));
  EXPECT_EQ(r.retval, kPass);
  EXPECT_EQ(reason(SLUICE_R_TOP_TOKEN_VALID), 1u);
  set_config(kThreshold, 0, 0, false);
  EXPECT_EQ(expired_token(2), kPass);
  EXPECT_EQ(reason(SLUICE_R_TOP_EXPIRED_KEPT), 1u);
  EXPECT_EQ(reason(SLUICE_R_TOP_FAIL_OPEN), 3u);
}

// Where XDP programs may call bpf_task_from_pid (top_expiry, 6.8+), a stale
// heartbeat whose thread still exists and may run is not a dead agent (a
// machine that ran nothing for a while): the token is dropped until stall_ns;
// a thread that is gone fails open at the limit. The compat object decides
// by the heartbeat alone.
TEST_F(TopExpiryFailOpenTest, LiveHeartbeatThreadKeepsDropping) {
  if (std::string(skel_->name()) != "top_expiry")
    GTEST_SKIP() << "loaded " << skel_->name() << ": " << task_from_pid_xdp_feature().detail;
  pid_t tid = pid_t(syscall(SYS_gettid));
  live().task_tid = tid;
  live().task_start = start_ticks_of("/proc/self/task/" + std::to_string(tid) + "/stat");
  live().tick_ns = 1'000'000'000ull / uint64_t(sysconf(_SC_CLK_TCK));
  live().stall_ns = 5 * kFailOpen;
  live().heartbeat_ns = ago(3 * kFailOpen);
  ASSERT_NE(live().task_start, 0u);
  EXPECT_EQ(expired_token(1), kDrop) << "this thread runs: the agent is alive";
  EXPECT_EQ(reason(SLUICE_R_TOP_FAIL_OPEN), 0u);
  live().task_start += 1;  // the id now names another thread: ours is gone
  EXPECT_EQ(expired_token(1), kPass);
  EXPECT_EQ(reason(SLUICE_R_TOP_FAIL_OPEN), 1u);
  live().task_start -= 1;
  live().heartbeat_ns = ago(6 * kFailOpen);  // older than stall_ns
  EXPECT_EQ(expired_token(1), kPass);
  EXPECT_EQ(reason(SLUICE_R_TOP_FAIL_OPEN), 2u);
}

TEST_F(TopExpiryTest, Verdicts) {
  // Each row's counters are checked as deltas, so rows are independent.
  struct Row {
    std::string desc;
    std::function<Bytes()> frame;  // built when the row runs: timestamps are "now"
    int verdict;
    uint32_t reason;
    int prio = -1, pverdict = -1;  // sl_top_stats_v1 slot that must count it
    std::function<void()> before = nullptr;
  };
  top::Packet data;
  data.type = top::Type::kData;
  data.len = 0;
  top::Packet sync;
  sync.type = top::Type::kSync;
  sync.mss = 1440;
  std::vector<Row> rows = {
      {"fresh token", [] { return top_frame(token(0, tai_now() - 100'000)); }, kPass, SLUICE_R_TOP_TOKEN_VALID, 0,
       SLUICE_TOP_X_VALID},
      {"token 5 units old, T = 1 unit: dropped", [] { return top_frame(token(3, tai_now() - 5 * kUnit)); }, kDrop,
       SLUICE_R_TOP_TOKEN_EXPIRED, 3, SLUICE_TOP_X_EXPIRED},
      {"lowest priority expired", [] { return top_frame(token(5, tai_now() - 2 * kUnit)); }, kDrop,
       SLUICE_R_TOP_TOKEN_EXPIRED, 5, SLUICE_TOP_X_EXPIRED},
      {"token from the future (skew): passed", [] { return top_frame(token(1, tai_now() + 50 * kUnit)); }, kPass,
       SLUICE_R_TOP_TOKEN_VALID, 1, SLUICE_TOP_X_FUTURE},
      {"IPv6 token expired", [] { return top_frame(token(2, tai_now() - 5 * kUnit), true); }, kDrop,
       SLUICE_R_TOP_TOKEN_EXPIRED, 2, SLUICE_TOP_X_EXPIRED},
      {"data packet on the TOP port", [=] { return top_frame(data); }, kPass, SLUICE_R_TOP_NOT_TOKEN},
      {"SYNC on the TOP port", [=] { return top_frame(sync); }, kPass, SLUICE_R_TOP_NOT_TOKEN},
      {"old token to another UDP port", [] { return top_frame(token(0, 1), false, 9999); }, kPass,
       SLUICE_R_TOP_NOT_TOP},
      {"TCP", [] { return build(PacketSpec{}); }, kPass, SLUICE_R_TOP_NOT_TOP},
      {"not IP",
       [] {
         PacketSpec s;
         s.ethertype = 0x0806;
         return build(s);
       },
       kPass, SLUICE_R_PASS_NOT_IP},
      {"header cut short", [] { return top_frame(token(0, 1), false, SLUICE_TOP_DEFAULT_PORT, 4); }, kPass,
       SLUICE_R_TOP_MALFORMED},
      {"bad magic",
       [] {
         Bytes b = top_frame(token(0, 1));
         b[l4_offset(b) + 8] ^= 0xff;
         return b;
       },
       kPass, SLUICE_R_TOP_MALFORMED},
      {"bad version",
       [] {
         Bytes b = top_frame(token(0, 1));
         b[l4_offset(b) + 8 + 2] = 77;
         return b;
       },
       kPass, SLUICE_R_TOP_MALFORMED},
      {"priority 6",
       [] {
         Bytes b = top_frame(token(0, 1));
         b[l4_offset(b) + 8 + 4] = 6;
         return b;
       },
       kPass, SLUICE_R_TOP_MALFORMED},
      {"correction for the source covers the 5 units", [] { return top_frame(token(4, tai_now() - 5 * kUnit)); }, kPass,
       SLUICE_R_TOP_TOKEN_VALID, 4, SLUICE_TOP_X_VALID,
       [this] { set_correction("10.0.0.1", -5 * static_cast<int64_t>(kUnit)); }},
      {"a correction the other way expires a fresh token", [] { return top_frame(token(4, tai_now())); }, kDrop,
       SLUICE_R_TOP_TOKEN_EXPIRED, 4, SLUICE_TOP_X_EXPIRED,
       [this] { set_correction("10.0.0.1", 3 * static_cast<int64_t>(kUnit)); }},
      {"unsynced: widened by 10 units, the 5-unit token passes",
       [] { return top_frame(token(0, tai_now() - 5 * kUnit)); }, kPass, SLUICE_R_TOP_TOKEN_VALID, 0,
       SLUICE_TOP_X_VALID,
       [this] {
         set_correction("10.0.0.1", 0);
         set_config(kThreshold, 10 * kUnit, 0, true);
       }},
      {"local clock offset (lab injection) ages the token", [] { return top_frame(token(0, tai_now())); }, kDrop,
       SLUICE_R_TOP_TOKEN_EXPIRED, 0, SLUICE_TOP_X_EXPIRED, [this] { set_config(kThreshold, 0, 4 * kUnit, true); }},
      {"expiry off (top-noexpiry): counted, passed", [] { return top_frame(token(2, tai_now() - 5 * kUnit)); }, kPass,
       SLUICE_R_TOP_EXPIRED_KEPT, 2, SLUICE_TOP_X_EXPIRED, [this] { set_config(kThreshold, 0, 0, false); }},
      {"no threshold configured: passed", [] { return top_frame(token(0, 1)); }, kPass, SLUICE_R_TOP_NO_CONFIG, -1, -1,
       [this] { set_config(0, 0, 0, true); }},
  };
  for (auto& r : rows) {
    SCOPED_TRACE(r.desc);
    if (r.before) r.before();
    uint64_t reason0 = reason(r.reason);
    uint64_t stat0 = r.prio >= 0 ? stat(r.prio, r.pverdict) : 0;
    Bytes f = r.frame();
    RunResult res = run_xdp(prog(), f);
    EXPECT_EQ(res.retval, r.verdict);
    EXPECT_EQ(reason(r.reason), reason0 + 1);
    if (r.prio >= 0) {
      EXPECT_EQ(stat(r.prio, r.pverdict), stat0 + 1);
    }
    if (r.verdict == kPass) {
      EXPECT_EQ(res.out, f) << "passed packets are not rewritten";
    }
  }
}

}  // namespace
