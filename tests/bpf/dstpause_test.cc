// bpf/host/dstpause.bpf.c through BPF_PROG_TEST_RUN (Floodgate §4.3 on a
// host).
// dp_ingress: the shared control-frame table (tests/lib/ctrl_cases.h) on
// the configured uplink gets the same reason as the C++ parser; on any
// other port every control frame is rejected (only the ToR may pause us);
// accepted frames reach the ring byte for byte; control frames are always
// consumed; other traffic is left alone.
// dp_egress: packets to a destination with a slot go to its HTB class, the
// rest to the default class, non-IP untouched.
#include <gtest/gtest.h>
#include <bpf/libbpf.h>
#include <net/if.h>

#include <optional>

#include "lib/bpf_util.h"
#include "lib/ctrl_cases.h"
#include "lib/packet.h"
#include "lib/prog_test.h"
#include "sluice/dstpause.h"
#include "sluice/switch.h"
#include "dstpause.skel.h"

SLUICE_SKELETON(dstpause);

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr int kNext = -1, kShot = 2;
constexpr uint32_t kLo = 1;  // BPF_PROG_TEST_RUN runs skbs on the loopback device

class DstPauseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    require_root();
    skel_ = std::make_unique<Skeleton<dstpause>>();
    skel_->load();
    ports_ = bpf_map__fd((*skel_)->maps.dp_ports);
    slots_ = bpf_map__fd((*skel_)->maps.dp_dst_slot);
    counters_ = bpf_map__fd((*skel_)->maps.dp_counters);
    ring_ = ring_buffer__new(bpf_map__fd((*skel_)->maps.dp_ctrl_ring), &DstPauseTest::on_event, this, nullptr);
    ASSERT_NE(ring_, nullptr);
  }
  void TearDown() override {
    if (ring_) ring_buffer__free(ring_);
  }
  void set_port(sl_dp_port p) { ASSERT_EQ(bpf_map_update_elem(ports_, &kLo, &p, BPF_ANY), 0); }
  void clear_port() { bpf_map_delete_elem(ports_, &kLo); }
  void set_slot(const std::string& dst, uint32_t slot) {
    auto a = sw::addr_parse(dst);
    ASSERT_EQ(bpf_map_update_elem(slots_, a.data(), &slot, BPF_ANY), 0);
  }
  uint64_t counter(uint32_t slot) {
    int ncpu = libbpf_num_possible_cpus();
    std::vector<sl_sw_counter> v(ncpu);
    EXPECT_EQ(bpf_map_lookup_elem(counters_, &slot, v.data()), 0);
    uint64_t n = 0;
    for (auto& c : v) n += c.packets;
    return n;
  }
  static int on_event(void* ctx, void* data, size_t size) {
    auto* self = static_cast<DstPauseTest*>(ctx);
    EXPECT_EQ(size, sizeof(sl_sw_ctrl_event));
    self->events_.push_back(*static_cast<sl_sw_ctrl_event*>(data));
    return 0;
  }
  int run_ingress(const Bytes& frame) {
    return run_tc(bpf_program__fd((*skel_)->progs.dp_ingress), frame).retval;
  }
  // (verdict, priority after the program) for a packet starting with priority 7.
  std::pair<int, uint32_t> run_egress(const Bytes& p) {
    struct __sk_buff in {}, out {};
    in.priority = 7;
    LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = p.data(), .data_size_in = uint32_t(p.size()),
                .ctx_in = &in, .ctx_out = &out, .ctx_size_in = sizeof(in), .ctx_size_out = sizeof(out));
    EXPECT_EQ(bpf_prog_test_run_opts(bpf_program__fd((*skel_)->progs.dp_egress), &o), 0);
    return {int(o.retval), out.priority};
  }

  std::unique_ptr<Skeleton<dstpause>> skel_;
  int ports_ = -1, slots_ = -1, counters_ = -1;
  ring_buffer* ring_ = nullptr;
  std::vector<sl_sw_ctrl_event> events_;
};

}  // namespace

TEST_F(DstPauseTest, ControlFramesOnTheUplinkGetTheParsersVerdict) {
  ASSERT_EQ(if_nametoindex("lo"), kLo);
  set_port(sl_dp_port{SL_PORT_HOST_UPLINK, 0x20});
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
  for (const Row& row : {Row{sl_dp_port{SL_PORT_HOST_UPLINK, 0x20}, "uplink"},
                         Row{sl_dp_port{SL_PORT_HOST_FACING, 0x20}, "host-facing port"},
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
        want = off < 0 ? SL_CTRL_R_TRUNCATED
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
  set_port(sl_dp_port{SL_PORT_HOST_UPLINK, 0x20});
  EXPECT_EQ(run_ingress(build(PacketSpec{})), kNext);
  PacketSpec arp;
  arp.ethertype = 0x0806;
  EXPECT_EQ(run_ingress(build(arp)), kNext);
  ring_buffer__consume(ring_);
  EXPECT_TRUE(events_.empty());
}

TEST_F(DstPauseTest, EgressSteersPausedDestinationsToTheirClass) {
  PacketSpec to_d, to_e, udp_d, v6, arp;
  to_d.dst = "10.0.9.1";
  to_e.dst = "10.0.9.2";
  udp_d.dst = "10.0.9.1";
  udp_d.proto = 17;
  v6.ipv6 = true;
  v6.src = "fd00::1";
  v6.dst = "fd00::9";
  arp.ethertype = 0x0806;
  struct Case {
    const char* desc;
    PacketSpec spec;
    uint32_t priority;
  };
  // Unconfigured uplink: left alone.
  clear_port();
  EXPECT_EQ(run_egress(build(to_d)), (std::pair<int, uint32_t>{kNext, 7u}));
  set_port(sl_dp_port{SL_PORT_HOST_UPLINK, 0x20});
  set_slot("10.0.9.1", 0);
  set_slot("fd00::9", 63);
  set_slot("10.0.9.3", SLUICE_DP_MAX_SLOTS);  // out of range: ignored
  PacketSpec to_f;
  to_f.dst = "10.0.9.3";
  const std::vector<Case> cases = {
      {"TCP to a paused destination: its slot's class", to_d, 0x200002u},
      {"UDP to the same destination: same class", udp_d, 0x200002u},
      {"another destination: the default class", to_e, 0x200001u},
      {"IPv6 destination in the last slot", v6, 0x200000u | (2 + 63)},
      {"a slot out of range: the default class", to_f, 0x200001u},
      {"ARP: not IP, untouched", arp, 7u},
  };
  const uint64_t steered = counter(SL_DP_CNT_STEERED);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.desc);
    auto [verdict, prio] = run_egress(build(c.spec));
    EXPECT_EQ(verdict, kNext) << "egress never drops";
    EXPECT_EQ(prio, c.priority);
  }
  EXPECT_EQ(counter(SL_DP_CNT_STEERED) - steered, 3u);
  // The agent removes the slot: back to the default class.
  auto d = sw::addr_parse("10.0.9.1");
  ASSERT_EQ(bpf_map_delete_elem(slots_, d.data()), 0);
  EXPECT_EQ(run_egress(build(to_d)).second, 0x200001u);
}
