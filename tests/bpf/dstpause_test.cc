// bpf/host/dstpause.bpf.c through BPF_PROG_TEST_RUN (Floodgate §4.3 on a
// host).
// dp_ingress: the shared control-frame table (tests/lib/ctrl_cases.h) on
// the configured uplink gets the same reason as the C++ parser; on any
// other port every control frame is rejected (only the ToR may pause us);
// accepted frames reach the ring byte for byte; control frames are always
// consumed; other traffic is left alone.
// dp_egress: frames to a held destination are copied to the agent's ring and
// stolen; the agent's re-sent frames (its mark), other destinations, non-IP
// and frames too big to copy pass.
#include <gtest/gtest.h>
#include <bpf/libbpf.h>
#include <net/if.h>

#include <optional>

#include "core/bpf_util.h"
#include "core/heartbeat.h"
#include "lib/ctrl_cases.h"
#include "lib/packet.h"
#include "lib/prog_test.h"
#include "sluice/dstpause.h"
#include "sluice/switch.h"
#include "sluice/liveness.h"
#include "dstpause.skel.h"
#include "dstpause_compat.skel.h"

// dstpause on 6.2+, dstpause_compat before (bpf/lib/liveness.h).
SLUICE_SKELETON_TWIN(dstpause, dstpause_compat, sluice::liveness_object);

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr int kNext = -1, kShot = 2, kStolen = 4;
constexpr uint32_t kMark = 0x5107;
constexpr uint32_t kLo = 1;  // BPF_PROG_TEST_RUN runs skbs on the loopback device

class DstPauseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    require_root();
    skel_ = std::make_unique<Skeleton<dstpause>>();
    skel_->load();
    ports_ = bpf_map__fd((*skel_)->maps.sl_fg_ports_v1);
    held_ = bpf_map__fd((*skel_)->maps.sl_fg_held_v1);
    held_ring_ =
        ring_buffer__new(bpf_map__fd((*skel_)->maps.sl_fg_hring_v1), &collect_record<sl_dp_frame>, &frames_, nullptr);
    ASSERT_NE(held_ring_, nullptr);
    counters_ = bpf_map__fd((*skel_)->maps.sl_fg_cnt_v1);
    ring_ = ring_buffer__new(bpf_map__fd((*skel_)->maps.sl_fg_ctrl_v1), &collect_record<sl_sw_ctrl_event>, &events_,
                             nullptr);
    ASSERT_NE(ring_, nullptr);
  }
  void TearDown() override {
    if (ring_) ring_buffer__free(ring_);
    if (held_ring_) ring_buffer__free(held_ring_);
  }
  void set_port(sl_dp_port p) { ASSERT_EQ(bpf_map_update_elem(ports_, &kLo, &p, BPF_ANY), 0); }
  void clear_port() { bpf_map_delete_elem(ports_, &kLo); }
  void hold(const std::string& dst, uint32_t v = 1) {
    auto a = sw::addr_parse(dst);
    ASSERT_EQ(bpf_map_update_elem(held_, a.data(), &v, BPF_ANY), 0);
  }
  uint64_t counter(uint32_t slot) { return percpu_packets<sl_sw_counter>(counters_, slot); }
  int run_ingress(const Bytes& frame) { return run_tc(bpf_program__fd((*skel_)->progs.dp_ingress), frame).retval; }
  int run_egress(const Bytes& p, uint32_t mark = 0, uint32_t gso_segs = 0) {
    struct __sk_buff in {
    }, out{};
    in.mark = mark;
    in.gso_segs = gso_segs;
    LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = p.data(), .data_size_in = uint32_t(p.size()), .ctx_in = &in,
                .ctx_out = &out, .ctx_size_in = sizeof(in), .ctx_size_out = sizeof(out));
    EXPECT_EQ(bpf_prog_test_run_opts(bpf_program__fd((*skel_)->progs.dp_egress), &o), 0);
    return int(o.retval);
  }

  std::unique_ptr<Skeleton<dstpause>> skel_;
  int ports_ = -1, held_ = -1, counters_ = -1;
  ring_buffer* ring_ = nullptr;
  ring_buffer* held_ring_ = nullptr;
  std::vector<sl_sw_ctrl_event> events_;
  std::vector<sl_dp_frame> frames_;
};

}  // namespace

TEST_F(DstPauseTest, ControlFramesOnTheUplinkGetTheParsersVerdict) {
  ASSERT_EQ(if_nametoindex("lo"), kLo);
  set_port(sl_dp_port{SL_PORT_HOST_UPLINK, kMark});
  int accepted = 0;
  for (const auto& c : ctrl_cases()) {
    if (c.role != SL_PORT_HOST_UPLINK) continue;  // rows for the uplink
    SCOPED_TRACE(c.desc);
    const uint64_t before = counter(uint32_t(c.reason));
    events_.clear();
    EXPECT_EQ(run_ingress(c.frame), kShot) << "control frames are always consumed";
    EXPECT_EQ(counter(uint32_t(c.reason)) - before, 1u) << "counted as " << sw::ctrl_reason_name(c.reason);
    ring_buffer__consume(ring_);
    if (c.reason == SL_CTRL_R_OK) {
      ++accepted;
      ASSERT_EQ(events_.size(), 1u);
      const auto& e = events_[0];
      EXPECT_EQ(e.ifindex, kLo);
      ASSERT_EQ(e.len, c.frame.size());
      EXPECT_TRUE(std::equal(c.frame.begin(), c.frame.end(), e.frame));
      sw::ControlFrame f;
      EXPECT_EQ(sw::accept_control(SL_PORT_HOST_UPLINK, e.frame + e.payload_off, e.len - e.payload_off, &f),
                SL_CTRL_R_OK);
    } else {
      EXPECT_TRUE(events_.empty()) << "a rejected frame reached the agent";
    }
  }
  EXPECT_EQ(accepted, 2);  // dstPause and dstResume
}

TEST_F(DstPauseTest, EveryFrameOfTheTableOnAnUplinkOrAnyOtherPort) {
  // The whole table on the uplink: switch-to-switch types are refused
  // (a host takes no credits or queue pauses), malformed frames get their
  // reason. Then every frame on a port that is not the uplink, or on an
  // unconfigured one: refused, never handed to the agent.
  struct Row {
    std::optional<sl_dp_port> port;
    const char* what;
  };
  for (const Row& row : {Row{sl_dp_port{SL_PORT_HOST_UPLINK, kMark}, "uplink"},
                         Row{sl_dp_port{SL_PORT_HOST_FACING, kMark}, "host-facing port"},
                         Row{sl_dp_port{SL_PORT_SWITCH_FACING, 0}, "switch-facing port"},
                         Row{sl_dp_port{SL_PORT_NONE, 0}, "role none"}, Row{std::nullopt, "unconfigured"}}) {
    if (row.port) set_port(*row.port);
    else clear_port();
    for (const auto& c : ctrl_cases()) {
      SCOPED_TRACE(std::string(row.what) + ": " + c.desc);
      int want;
      if (!row.port) want = SL_CTRL_R_UNKNOWN_PORT;
      else if (row.port->role != SL_PORT_HOST_UPLINK) want = SL_CTRL_R_WRONG_PORT;
      else {
        // The frame's own verdict, as the C++ gate gives it on an uplink.
        long off = sw::ctrl_payload_offset(c.frame.data(), c.frame.size());
        sw::ControlFrame f;
        want = off < 0
                   ? SL_CTRL_R_TRUNCATED
                   : sw::accept_control(SL_PORT_HOST_UPLINK, c.frame.data() + off, c.frame.size() - size_t(off), &f);
      }
      const uint64_t before = counter(uint32_t(want));
      events_.clear();
      EXPECT_EQ(run_ingress(c.frame), kShot);
      EXPECT_EQ(counter(uint32_t(want)) - before, 1u) << "want " << sw::ctrl_reason_name(want);
      ring_buffer__consume(ring_);
      EXPECT_EQ(events_.size(), want == SL_CTRL_R_OK ? 1u : 0u);
    }
  }
}

TEST_F(DstPauseTest, OtherTrafficIsNotOurs) {
  set_port(sl_dp_port{SL_PORT_HOST_UPLINK, kMark});
  EXPECT_EQ(run_ingress(build(PacketSpec{})), kNext);
  PacketSpec arp;
  arp.ethertype = 0x0806;
  EXPECT_EQ(run_ingress(build(arp)), kNext);
  ring_buffer__consume(ring_);
  EXPECT_TRUE(events_.empty());
}

TEST_F(DstPauseTest, EgressHoldsOnlyHeldDestinations) {
  PacketSpec to_d, to_e, udp_d, v6, arp, big;
  to_d.dst = "10.0.9.1";
  to_d.payload = 1000;
  to_e.dst = "10.0.9.2";
  udp_d.dst = "10.0.9.1";
  udp_d.proto = 17;
  v6.ipv6 = true;
  v6.src = "fd00::1";
  v6.dst = "fd00::9";
  arp.ethertype = 0x0806;
  big.dst = "10.0.9.1";
  big.payload = 2000;  // a frame larger than a copy: passes (fail open)
  // Unconfigured uplink, or no reinject mark: nothing is held.
  clear_port();
  hold("10.0.9.1");
  EXPECT_EQ(run_egress(build(to_d)), kNext);
  set_port(sl_dp_port{SL_PORT_HOST_UPLINK, 0});
  EXPECT_EQ(run_egress(build(to_d)), kNext);
  set_port(sl_dp_port{SL_PORT_HOST_UPLINK, kMark});
  hold("fd00::9");
  struct Case {
    const char* desc;
    Bytes frame;
    uint32_t mark, gso_segs;
    int verdict;
    uint32_t slot;  // counter it lands in
  };
  const std::vector<Case> cases = {
      {"TCP to a held destination: copied and stolen", build(to_d), 0, 0, kStolen, SL_DP_CNT_HELD},
      {"UDP to the same destination", build(udp_d), 0, 0, kStolen, SL_DP_CNT_HELD},
      {"IPv6 held destination", build(v6), 0, 0, kStolen, SL_DP_CNT_HELD},
      {"another destination passes", build(to_e), 0, 0, kNext, SL_DP_CNT_PASSED},
      {"the agent's re-sent frame passes", build(to_d), kMark, 0, kNext, SL_DP_CNT_REINJECTED},
      {"another mark is not ours: held", build(to_d), kMark + 1, 0, kStolen, SL_DP_CNT_HELD},
      {"too big to copy: passes", build(big), 0, 0, kNext, SL_DP_CNT_TOO_BIG},
      {"a GSO super-packet: passes", build(to_d), 0, 4, kNext, SL_DP_CNT_TOO_BIG},
      {"ARP: not IP", build(arp), 0, 0, kNext, SL_DP_CNT_NET_CONTROL},
      {"unicast neighbour solicitation to a held destination passes", icmpv6_frame(135, "fd00::9"), 0, 0, kNext,
       SL_DP_CNT_NET_CONTROL},
      {"neighbour advertisement to it passes", icmpv6_frame(136, "fd00::9"), 0, 0, kNext, SL_DP_CNT_NET_CONTROL},
      {"an ICMPv6 echo request to it is held", icmpv6_frame(128, "fd00::9"), 0, 0, kStolen, SL_DP_CNT_HELD},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.desc);
    const uint64_t before = counter(c.slot);
    frames_.clear();
    EXPECT_EQ(run_egress(c.frame, c.mark, c.gso_segs), c.verdict);
    EXPECT_EQ(counter(c.slot) - before, c.gso_segs ? c.gso_segs : 1u);
    ring_buffer__consume(held_ring_);
    if (c.verdict == kStolen) {
      ASSERT_EQ(frames_.size(), 1u);
      ASSERT_EQ(frames_[0].len, c.frame.size());
      EXPECT_TRUE(std::equal(c.frame.begin(), c.frame.end(), frames_[0].frame)) << "the copy is the frame";
      EXPECT_EQ(frames_[0].ifindex, kLo);
    } else {
      EXPECT_TRUE(frames_.empty());
    }
  }
  // A held value of 0, or no entry: passes.
  frames_.clear();
  hold("10.0.9.1", 0);
  EXPECT_EQ(run_egress(build(to_d)), kNext);
  auto d = sw::addr_parse("fd00::9");
  ASSERT_EQ(bpf_map_delete_elem(held_, d.data()), 0);
  EXPECT_EQ(run_egress(build(v6)), kNext);
  ring_buffer__consume(held_ring_);
  EXPECT_TRUE(frames_.empty());
}

// Fail open (bpf/lib/liveness.h): with fail_open_ns set, a frame to a held
// destination passes, counted, while the agent's heartbeat was never
// written or is stale; a fresh one holds again. A destination not held
// passes either way, counted as before.
TEST(DstPauseFailOpen, AStaleHeartbeatHoldsNothing) {
  require_root();
  Skeleton<dstpause> s;
  s->rodata->fail_open_ns = 50'000'000;
  s.load();
  uint32_t lo = kLo;
  sl_dp_port port{SL_PORT_HOST_UPLINK, kMark};
  ASSERT_EQ(bpf_map_update_elem(bpf_map__fd(s->maps.sl_fg_ports_v1), &lo, &port, BPF_ANY), 0);
  auto d = sw::addr_parse("10.0.9.1");
  uint32_t one = 1;
  ASSERT_EQ(bpf_map_update_elem(bpf_map__fd(s->maps.sl_fg_held_v1), d.data(), &one, BPF_ANY), 0);
  RingRecords<sl_dp_frame> ring(bpf_map__fd(s->maps.sl_fg_hring_v1));
  ASSERT_TRUE(ring.ok());
  auto count = [&](uint32_t slot) { return percpu_packets<sl_sw_counter>(bpf_map__fd(s->maps.sl_fg_cnt_v1), slot); };
  auto egress = [&](const Bytes& p) {
    struct __sk_buff in {
    }, out{};
    LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = p.data(), .data_size_in = uint32_t(p.size()), .ctx_in = &in,
                .ctx_out = &out, .ctx_size_in = sizeof(in), .ctx_size_out = sizeof(out));
    EXPECT_EQ(bpf_prog_test_run_opts(bpf_program__fd(s->progs.dp_egress), &o), 0);
    return int(o.retval);
  };
  PacketSpec to_d, to_e;
  to_d.dst = "10.0.9.1";
  to_e.dst = "10.0.9.2";
  sluice_liveness& live = s->bss->dp_live;
  EXPECT_EQ(egress(build(to_d)), kNext) << "never written: the agent is not there";
  EXPECT_EQ(count(SL_DP_CNT_FAIL_OPEN), 1u);
  live.heartbeat_ns = monotonic_ns();
  EXPECT_EQ(egress(build(to_d)), kStolen) << "a fresh heartbeat holds";
  EXPECT_EQ(count(SL_DP_CNT_HELD), 1u);
  live.heartbeat_ns = monotonic_ns() - 60'000'000;
  EXPECT_EQ(egress(build(to_d)), kNext) << "a stale heartbeat still holds";
  EXPECT_EQ(count(SL_DP_CNT_FAIL_OPEN), 2u);
  live.withdrawn = 1;
  EXPECT_EQ(egress(build(to_d)), kNext) << "withdrawn and stale";
  EXPECT_EQ(count(SL_DP_CNT_FAIL_OPEN), 3u);
  live.withdrawn = 0;
  EXPECT_EQ(egress(build(to_e)), kNext);
  EXPECT_EQ(count(SL_DP_CNT_PASSED), 1u) << "not held: passed, not failed open";
  EXPECT_EQ(count(SL_DP_CNT_FAIL_OPEN), 3u);
  ring.consume();
  EXPECT_EQ(ring.events.size(), 1u) << "only the frame held with a fresh heartbeat reached the ring";
}
