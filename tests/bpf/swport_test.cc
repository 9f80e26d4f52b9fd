// bpf/switch/swport.bpf.c through BPF_PROG_TEST_RUN.
// sw_ingress: the shared control-frame table (tests/lib/ctrl_cases.h) gets
// the same reason as the C++ parser, counted per port; only accepted frames
// reach the ring buffer, byte for byte; every control frame is consumed
// (never forwarded); other traffic is left alone.
// sw_egress: data packets get skb->priority = HTB class major:(queue + 1)
// from the logic's flow map, or the port's default. control_defer: a frame
// shortly before the agent's timer does not wake it.
#include <gtest/gtest.h>
#include <memory>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include <net/if.h>

#include "core/bpf_util.h"
#include "lib/ctrl_cases.h"
#include "lib/packet.h"
#include "lib/prog_test.h"
#include "sluice/switch.h"
#include "sluice/liveness.h"
#include "swport.skel.h"
#include "swport_compat.skel.h"
#include "core/heartbeat.h"

SLUICE_SKELETON_TWIN(swport, swport_compat, sluice::liveness_object);

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr int kNext = -1, kShot = 2;
constexpr uint32_t kLo = 1;  // BPF_PROG_TEST_RUN runs skbs on the loopback device

// The skb->priority the sw_egress program `prog_fd` leaves on `frame`,
// which came in with `prio_in` (the verdict must be TC_NEXT).
uint32_t egress_priority_of(int prog_fd, const Bytes& frame, uint32_t prio_in = 7) {
  struct __sk_buff in {
  }, out{};
  in.priority = prio_in;
  LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = frame.data(), .data_size_in = uint32_t(frame.size()), .ctx_in = &in,
              .ctx_out = &out, .ctx_size_in = sizeof(in), .ctx_size_out = sizeof(out));
  EXPECT_EQ(bpf_prog_test_run_opts(prog_fd, &o), 0);
  EXPECT_EQ(int(o.retval), kNext);
  return out.priority;
}

class SwportTest : public ::testing::Test {
 protected:
  // One load for the whole suite (the verifier is slow under the VM suite's
  // emulated CPU); each test starts from an empty port table and flow map
  // and compares counters by difference.
  static void SetUpTestSuite() {
    if (geteuid() != 0) return;
    skel_ = new Skeleton<swport>();
    skel_->load();
  }
  static void TearDownTestSuite() {
    delete skel_;
    skel_ = nullptr;
  }
  void SetUp() override {
    require_root();
    ASSERT_NE(skel_, nullptr);
    ports_ = bpf_map__fd((*skel_)->maps.sl_sw_ports_v1);
    flows_ = bpf_map__fd((*skel_)->maps.sl_sw_flowq_v1);
    counters_ = bpf_map__fd((*skel_)->maps.sl_sw_cnt_v1);
    uint32_t k = kLo;
    bpf_map_delete_elem(ports_, &k);
    sl_sw_flow_key fk{}, next{};
    while (bpf_map_get_next_key(flows_, nullptr, &next) == 0) {
      fk = next;
      bpf_map_delete_elem(flows_, &fk);
    }
    ring_ = std::make_unique<RingRecords<sl_sw_ctrl_event>>(bpf_map__fd((*skel_)->maps.sl_sw_ctrl_v1));
    ASSERT_TRUE(ring_->ok());
  }
  void set_port(uint32_t ifindex, sl_sw_port p) { ASSERT_EQ(bpf_map_update_elem(ports_, &ifindex, &p, BPF_ANY), 0); }
  uint64_t counter(uint32_t port_id, uint32_t slot) {
    return percpu_packets<sl_sw_counter>(counters_, port_id * SL_SW_CNT_SLOTS + slot);
  }
  int run_ingress(const Bytes& frame) { return run_tc(bpf_program__fd((*skel_)->progs.sw_ingress), frame).retval; }
  RunResult run_egress(const Bytes& frame) { return run_tc(bpf_program__fd((*skel_)->progs.sw_egress), frame); }
  uint32_t egress_priority(const Bytes& frame) {
    return egress_priority_of(bpf_program__fd((*skel_)->progs.sw_egress), frame);
  }

  static Skeleton<swport>* skel_;
  int ports_ = -1, flows_ = -1, counters_ = -1;
  std::unique_ptr<RingRecords<sl_sw_ctrl_event>> ring_;
};

Skeleton<swport>* SwportTest::skel_ = nullptr;

}  // namespace

TEST_F(SwportTest, ControlFrameTableMatchesTheAgentParser) {
  ASSERT_EQ(if_nametoindex("lo"), kLo);
  const uint32_t port_id = 5;
  for (const auto& c : ctrl_cases()) {
    SCOPED_TRACE(c.desc);
    set_port(kLo, sl_sw_port{port_id, c.role, 1, 0x10, 0, 0});
    const uint32_t slot = c.reason;
    const uint64_t before = counter(port_id, slot);
    ring_->events.clear();
    EXPECT_EQ(run_ingress(c.frame), kShot) << "control frames are always consumed";
    EXPECT_EQ(counter(port_id, slot) - before, 1u) << "counted as " << sw::ctrl_reason_name(c.reason);
    ring_->consume();
    if (c.reason == SL_CTRL_R_OK) {
      ASSERT_EQ(ring_->events.size(), 1u);
      const auto& e = ring_->events[0];
      EXPECT_EQ(e.port_id, port_id);
      EXPECT_EQ(e.ifindex, kLo);
      EXPECT_EQ(e.payload_off, 14u);
      ASSERT_EQ(e.len, c.frame.size());
      EXPECT_TRUE(std::equal(c.frame.begin(), c.frame.end(), e.frame));
      // The agent re-checks what it is handed with the same parser.
      sw::ControlFrame f;
      EXPECT_EQ(sw::accept_control(c.role, e.frame + e.payload_off, e.len - e.payload_off, &f), SL_CTRL_R_OK);
    } else {
      EXPECT_TRUE(ring_->events.empty()) << "a rejected frame reached the agent";
    }
  }
}

TEST_F(SwportTest, ControlFrameOnAnUnconfiguredInterfaceIsDropped) {
  sw::ControlFrame f{sw::CtrlType::kPause};
  f.queues = {{1, 1}};
  auto frame = sw::ethernet_frame({2, 0, 0, 0, 0, 1}, sw::encode(f));
  const uint64_t before = counter(SLUICE_SW_MAX_PORTS, SL_CTRL_R_UNKNOWN_PORT);
  EXPECT_EQ(run_ingress(frame), kShot);
  EXPECT_EQ(counter(SLUICE_SW_MAX_PORTS, SL_CTRL_R_UNKNOWN_PORT) - before, 1u);
  ring_->consume();
  EXPECT_TRUE(ring_->events.empty());
}

TEST_F(SwportTest, VlanTaggedControlFrameIsValidated) {
  set_port(kLo, sl_sw_port{2, SL_PORT_SWITCH_FACING, 1, 0x10, 0, 0});
  sw::ControlFrame f{sw::CtrlType::kResume};
  f.queues = {{9, 3}};
  auto plain = sw::ethernet_frame({2, 0, 0, 0, 0, 1}, sw::encode(f));
  Bytes tagged(plain.begin(), plain.begin() + 12);
  for (uint8_t b : {0x81, 0x00, 0x00, 0x07}) tagged.push_back(b);
  tagged.insert(tagged.end(), plain.begin() + 12, plain.end());
  EXPECT_EQ(run_ingress(tagged), kShot);
  ring_->consume();
  ASSERT_EQ(ring_->events.size(), 1u);
  EXPECT_EQ(ring_->events[0].payload_off, 18u);
}

TEST_F(SwportTest, OtherTrafficIsNotOurs) {
  set_port(kLo, sl_sw_port{1, SL_PORT_SWITCH_FACING, 4, 0x10, 0, 0});
  EXPECT_EQ(run_ingress(build(PacketSpec{})), kNext);
  PacketSpec arp;
  arp.ethertype = 0x0806;
  EXPECT_EQ(run_ingress(build(arp)), kNext);
  ring_->consume();
  EXPECT_TRUE(ring_->events.empty());
}

// The flow hash of a PacketSpec, computed as the logic does.
uint32_t spec_hash(const PacketSpec& s) { return sw::flow_hash(s.src, s.dst, s.sport, s.dport, s.proto); }

TEST_F(SwportTest, EgressSteersToTheLogicsQueue) {
  PacketSpec a, b, v6;
  b.sport = 40001;
  v6.ipv6 = true;
  v6.src = "fd00::1";
  v6.dst = "fd00::2";
  v6.proto = 17;
  // Unconfigured port: left alone, priority untouched.
  const uint64_t no_port = counter(SLUICE_SW_MAX_PORTS, SL_SW_CNT_DATA_NO_PORT);
  const uint64_t classified = counter(3, SL_SW_CNT_DATA_CLASSIFIED);
  EXPECT_EQ(egress_priority(build(a)), 7u);
  EXPECT_EQ(counter(SLUICE_SW_MAX_PORTS, SL_SW_CNT_DATA_NO_PORT) - no_port, 1u);

  set_port(kLo, sl_sw_port{3, SL_PORT_HOST_FACING, 32, 0x10, 0, 0});
  // No flow entry: queue 0 = class 10:1.
  EXPECT_EQ(egress_priority(build(a)), (0x10u << 16) | 1);
  // The logic's entries, keyed by the hash it computes itself.
  for (auto [spec, q] : {std::pair{a, 31u}, std::pair{b, 4u}, std::pair{v6, 9u}}) {
    sl_sw_flow_key k{3, spec_hash(spec)};
    ASSERT_EQ(bpf_map_update_elem(flows_, &k, &q, BPF_ANY), 0);
  }
  EXPECT_EQ(egress_priority(build(a)), (0x10u << 16) | 32);
  EXPECT_EQ(egress_priority(build(b)), (0x10u << 16) | 5);
  EXPECT_EQ(egress_priority(build(v6)), (0x10u << 16) | 10);
  // An entry naming a queue the port does not have falls back to queue 0.
  uint32_t bad = 32;
  sl_sw_flow_key ka{3, spec_hash(a)};
  ASSERT_EQ(bpf_map_update_elem(flows_, &ka, &bad, BPF_ANY), 0);
  EXPECT_EQ(egress_priority(build(a)), (0x10u << 16) | 1);
  // Default by hash for unknown flows.
  set_port(kLo, sl_sw_port{3, SL_PORT_HOST_FACING, 32, 0x10, SL_SW_PORT_HASH_DEFAULT, 0});
  PacketSpec c;
  c.sport = 555;
  EXPECT_EQ(egress_priority(build(c)), (0x10u << 16) | (spec_hash(c) % 32 + 1));
  // A one-queue port: queue 0 whatever the flow table or the hash says (the
  // classifier's shortcut must give what the full path gives).
  set_port(kLo, sl_sw_port{3, SL_PORT_HOST_FACING, 1, 0x10, SL_SW_PORT_HASH_DEFAULT, 0});
  EXPECT_EQ(egress_priority(build(b)), (0x10u << 16) | 1);  // entry: queue 4
  EXPECT_EQ(egress_priority(build(c)), (0x10u << 16) | 1);  // no entry, hashed
  EXPECT_EQ(counter(3, SL_SW_CNT_DATA_CLASSIFIED) - classified, 8u);
}

// A frame that is not IP (ARP, LLDP, an ARP behind a VLAN tag) or is IPv6
// neighbour discovery (NS, NA, RS, RA, redirect) takes the port's fallback
// class, never paused, whatever the logic's table says for flow hash 0 or
// how many queues the port has, and is counted; IP, tagged or not, and
// other ICMPv6 (echo) are still steered. (Queue 0 paused on a router port
// held its ARP, and the neighbour entry's failure dropped every queue's
// traffic, docs/switch.md.)
TEST_F(SwportTest, NetworkControlFramesTakeTheFallbackClass) {
  const uint32_t fallback = (0x10u << 16) | SL_SW_FALLBACK_MINOR;
  PacketSpec arp, lldp, tagged_arp, tagged_ip;
  arp.ethertype = 0x0806;
  lldp.ethertype = 0x88cc;
  tagged_arp.ethertype = 0x0806;
  tagged_arp.vlan = 5;
  tagged_ip.vlan = 5;
  for (uint32_t queues : {4u, 1u}) {
    SCOPED_TRACE(std::to_string(queues) + " queue(s)");
    set_port(kLo, sl_sw_port{6, SL_PORT_SWITCH_FACING, queues, 0x10, SL_SW_PORT_HASH_DEFAULT, 0});
    sl_sw_flow_key zero{6, 0};
    uint32_t q = queues - 1;
    ASSERT_EQ(bpf_map_update_elem(flows_, &zero, &q, BPF_ANY), 0);
    const uint64_t net = counter(6, SL_SW_CNT_DATA_NET_CONTROL), classified = counter(6, SL_SW_CNT_DATA_CLASSIFIED);
    for (const PacketSpec* spec : {&arp, &lldp, &tagged_arp}) EXPECT_EQ(egress_priority(build(*spec)), fallback);
    EXPECT_EQ(egress_priority(Bytes(14, 0xab)), fallback) << "a bare header of an unknown type";
    for (uint8_t type = 133; type <= 137; ++type) EXPECT_EQ(egress_priority(icmpv6_frame(type)), fallback) << int(type);
    EXPECT_EQ(counter(6, SL_SW_CNT_DATA_NET_CONTROL) - net, 9u);
    EXPECT_EQ(counter(6, SL_SW_CNT_DATA_CLASSIFIED) - classified, 0u);
    for (uint8_t type : {128, 132, 138}) {
      const uint32_t c = egress_priority(icmpv6_frame(type));
      EXPECT_TRUE(c >> 16 == 0x10u && (c & 0xffff) >= 1 && (c & 0xffff) <= queues) << "ICMPv6 " << int(type);
    }
    EXPECT_EQ(counter(6, SL_SW_CNT_DATA_CLASSIFIED) - classified, 3u);
    const uint32_t ip_class = egress_priority(build(tagged_ip));
    EXPECT_EQ(ip_class >> 16, 0x10u);
    EXPECT_GE(ip_class & 0xffff, 1u) << "tagged IP goes to a queue, not the fallback";
    EXPECT_LE(ip_class & 0xffff, queues);
    EXPECT_EQ(counter(6, SL_SW_CNT_DATA_CLASSIFIED) - classified, 4u);
    bpf_map_delete_elem(flows_, &zero);
  }
}

// Fail open: with fail_open_ns set, a heartbeat older than it sends every
// data packet to the port's fallback class (never paused) instead of the
// logic's queue, counted; a fresh heartbeat steers again. Control frames
// leaving the port keep the class their sender chose.
TEST(SwportFailOpen, StaleHeartbeatTakesTheFallbackClass) {
  require_root();
  Skeleton<swport> s;
  s->rodata->fail_open_ns = 50'000'000;
  s.load();
  const uint32_t port_id = 4, major = 0x51;
  uint32_t lo = kLo;
  sl_sw_port p{port_id, SL_PORT_SWITCH_FACING, 4, major, 0, 0};
  ASSERT_EQ(bpf_map_update_elem(bpf_map__fd(s->maps.sl_sw_ports_v1), &lo, &p, BPF_ANY), 0);
  PacketSpec a;
  sl_sw_flow_key k{port_id, spec_hash(a)};
  uint32_t q = 2;
  ASSERT_EQ(bpf_map_update_elem(bpf_map__fd(s->maps.sl_sw_flowq_v1), &k, &q, BPF_ANY), 0);
  auto priority_of = [&](const Bytes& pkt, uint32_t prio_in = 7) {
    return egress_priority_of(bpf_program__fd(s->progs.sw_egress), pkt, prio_in);
  };
  auto fail_open_count = [&] {
    return percpu_packets<sl_sw_counter>(bpf_map__fd(s->maps.sl_sw_cnt_v1),
                                         port_id * SL_SW_CNT_SLOTS + SL_SW_CNT_DATA_FAIL_OPEN);
  };
  const uint32_t fallback = (major << 16) | SL_SW_FALLBACK_MINOR;
  // Never written (the agent is not there): fail open.
  EXPECT_EQ(priority_of(build(a)), fallback);
  EXPECT_EQ(fail_open_count(), 1u);
  s->bss->sw_live.heartbeat_ns = monotonic_ns();
  EXPECT_EQ(priority_of(build(a)), (major << 16) | 3) << "a fresh heartbeat steers to the logic's queue";
  s->bss->sw_live.heartbeat_ns = monotonic_ns() - 60'000'000;
  EXPECT_EQ(priority_of(build(a)), fallback) << "a stale heartbeat still steers";
  EXPECT_EQ(fail_open_count(), 2u);
  if (std::string(s.name()) == "swport") {
    // bpf/lib/liveness.h: stale, but the thread it names runs (this one).
    s->bss->sw_live.task_tid = pid_t(syscall(SYS_gettid));
    s->bss->sw_live.task_start = start_ticks_of("/proc/thread-self/stat");
    s->bss->sw_live.tick_ns = 1'000'000'000ull / uint64_t(sysconf(_SC_CLK_TCK));
    s->bss->sw_live.stall_ns = 5'000'000'000ull;
    EXPECT_EQ(priority_of(build(a)), (major << 16) | 3) << "a stale heartbeat from a running thread still steers";
    EXPECT_EQ(fail_open_count(), 2u);
    s->bss->sw_live.task_tid = 0;
  }
  // A control frame the agent sends keeps its SO_PRIORITY class.
  s->bss->sw_live.heartbeat_ns = monotonic_ns();
  sw::ControlFrame f;
  f.type = sw::CtrlType::kPause;
  f.queues.push_back({1, 1});
  Bytes frame = sw::ethernet_frame({2, 0, 0, 0, 0, 1}, sw::encode(f));
  EXPECT_EQ(priority_of(frame, fallback), fallback);
}

// [switch] control_defer_us: a control frame that arrives less than
// ctrl_defer_ns before the logic's next timer (sw_next_timer_ns, which the
// agent writes when it arms the timer) is put in the ring without waking
// the agent (the timer reads it); further from the timer, with no timer
// pending, or with the option off, it wakes an idle agent as before.
TEST(SwportControlDefer, ControlFramesCloseToTheTimerDoNotWake) {
  require_root();
  for (const uint64_t defer_ns : {uint64_t{0}, uint64_t{500'000'000}}) {
    SCOPED_TRACE(defer_ns ? "defer 500 ms" : "defer off");
    Skeleton<swport> s;
    s->rodata->ctrl_defer_ns = defer_ns;
    s.load();
    uint32_t lo = kLo;
    sl_sw_port p{3, SL_PORT_SWITCH_FACING, 1, 0x10, 0, 0};
    ASSERT_EQ(bpf_map_update_elem(bpf_map__fd(s->maps.sl_sw_ports_v1), &lo, &p, BPF_ANY), 0);
    RingRecords<sl_sw_ctrl_event> ring(bpf_map__fd(s->maps.sl_sw_ctrl_v1));
    ASSERT_TRUE(ring.ok());
    sw::ControlFrame f{sw::CtrlType::kResume};
    f.queues = {{1, 1}};
    const Bytes frame = sw::ethernet_frame({2, 0, 0, 0, 0, 1}, sw::encode(f));
    // Whether handing one frame over made the ring's epoll fd readable
    // (what wakes the agent's loop), then the frame is read either way.
    auto wakes = [&] {
      epoll_event ev{};
      // The ring is empty: this clears a level-triggered readiness left
      // from the frame before.
      EXPECT_EQ(epoll_wait(ring.epoll_fd(), &ev, 1, 0), 0);
      EXPECT_EQ(run_tc(bpf_program__fd(s->progs.sw_ingress), frame).retval, kShot);
      const int n = epoll_wait(ring.epoll_fd(), &ev, 1, 200);
      const size_t before = ring.events.size();
      ring.consume();
      EXPECT_EQ(ring.events.size(), before + 1) << "the frame is in the ring, woken or not";
      return n > 0;
    };
    // No timer pending (never armed, or one in the past): woken.
    EXPECT_TRUE(wakes());
    s->bss->sw_next_timer_ns = monotonic_ns() - 1'000'000;
    EXPECT_TRUE(wakes());
    // A timer 100 ms away: within 500 ms, so not woken when deferring.
    s->bss->sw_next_timer_ns = monotonic_ns() + 100'000'000;
    EXPECT_EQ(wakes(), defer_ns == 0);
    // A timer 2 s away: further than the deferral, woken.
    s->bss->sw_next_timer_ns = monotonic_ns() + 2'000'000'000;
    EXPECT_TRUE(wakes());
  }
}
