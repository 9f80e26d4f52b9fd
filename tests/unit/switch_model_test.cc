// The switch-logic interface against the deterministic port model
// (agent/switch/port_model.h): link timing, FIFO, strict priority, DRR
// fairness over 32 queues, pause/resume through control frames, shaper
// groups, timers, the control-frame gate, and the enqueue/dequeue contract.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "lib/switch_model_util.h"
#include "switch/logic.h"
#include "switch/port_model.h"

using namespace sluice::sw;

namespace {

constexpr uint64_t k100M = 100'000'000;
constexpr uint32_t kMtu = 1514;

PacketMeta pkt(PortId in, PortId out, uint32_t bytes, uint32_t hash = 0) {
  return sluice::test::model_pkt(in, out, bytes, hash);
}

PortConfig port(std::string name, size_t queues, PortRole role = PortRole::kSwitchFacing, uint64_t rate = k100M) {
  return sluice::test::model_port(std::move(name), queues, role, rate);
}

// Queue = flow_hash % queues; records every callback; pauses/resumes its
// own queues when told to by a pause/resume frame (as BFC's upstream does).
class RecordingLogic : public Logic {
 public:
  std::string_view name() const override { return "recording"; }
  Verdict on_enqueue(const PacketMeta& p, PortId in) override {
    EXPECT_EQ(in, p.in_port);
    enq.push_back(p.id);
    if (drop_hash && p.flow_hash == *drop_hash) return Verdict::drop();
    return Verdict::enqueue(QueueId(p.flow_hash % sw_->port(p.out_port).queues.size()));
  }
  void on_dequeue(const PacketMeta& p, PortId out, QueueId q) override {
    EXPECT_EQ(out, p.out_port);
    deq.push_back({p.id, q});
  }
  void on_control(const ControlFrame& f, PortId port) override {
    frames.push_back(f);
    // Pause/resume the queue on the link the frame came from: port 1's
    // frames name queues of egress port 1.
    for (const auto& r : f.queues) sw_->set_paused(port, r.queue, f.type == CtrlType::kPause);
  }
  void on_timer(uint64_t now) override {
    timers.push_back(now);
    if (rearm) sw_->arm_timer(now + *rearm);
  }
  std::optional<uint32_t> drop_hash;
  std::optional<uint64_t> rearm;
  std::vector<uint64_t> enq;
  std::vector<std::pair<uint64_t, QueueId>> deq;
  std::vector<ControlFrame> frames;
  std::vector<uint64_t> timers;
};

std::vector<uint8_t> queue_frame(CtrlType t, QueueId q, uint32_t seq) {
  ControlFrame f{t};
  f.queues = {{q, seq}};
  return encode(f);
}

}  // namespace

TEST(SwitchModel, FifoSendsBackToBackAtLinkRate) {
  FifoLogic fifo;
  SwitchModel sw({port("in", 1), port("out", 1)}, fifo);
  for (int i = 0; i < 10; ++i) sw.arrive(0, pkt(0, 1, kMtu));
  EXPECT_EQ(sw.depth(1, 0).pkts, 0u);  // nothing happens before the clock runs
  sw.run_until(0);
  const uint64_t t = tx_time_ns(kMtu, k100M);
  EXPECT_EQ(t, 121120u);
  sw.run_idle(1'000'000'000);
  ASSERT_EQ(sw.departures().size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(sw.departures()[i].id, i + 1);  // FIFO order
    EXPECT_EQ(sw.departures()[i].start_ns, i * t);
    EXPECT_EQ(sw.departures()[i].end_ns, (i + 1) * t);
  }
  auto st = sw.port_model(1).stats(0);
  EXPECT_EQ(st.pkts_in, 10u);
  EXPECT_EQ(st.pkts_out, 10u);
  EXPECT_EQ(st.bytes_out, 10u * kMtu);
  EXPECT_EQ(sw.depth(1, 0).bytes, 0u);
}

TEST(SwitchModel, DepthCountsBytesPacketsAndSegments) {
  FifoLogic fifo;
  SwitchModel sw({port("in", 1), port("out", 1)}, fifo);
  auto gso = pkt(0, 1, 64 * 1024);
  gso.segs = 45;
  sw.arrive(0, gso);
  sw.arrive(0, pkt(0, 1, 100));
  sw.arrive(0, pkt(0, 1, 200));
  sw.run_until(0);
  // The GSO packet left (started) at 0; the other two are queued.
  EXPECT_EQ(sw.depth(1, 0).bytes, 300u);
  EXPECT_EQ(sw.depth(1, 0).pkts, 2u);
  EXPECT_EQ(sw.depth(1, 0).segs, 2u);
  ASSERT_EQ(sw.departures().size(), 1u);
  EXPECT_EQ(sw.departures()[0].end_ns, tx_time_ns(64 * 1024, k100M));
}

TEST(SwitchModel, StrictPriorityServesLevelZeroFirst) {
  RecordingLogic logic;
  auto out = port("out", 2);
  out.queues[0].priority = 1;  // queue 0 low
  out.queues[1].priority = 0;  // queue 1 high
  SwitchModel sw({port("in", 1), out}, logic);
  for (int i = 0; i < 5; ++i) sw.arrive(0, pkt(0, 1, kMtu, 0));
  for (int i = 0; i < 5; ++i) sw.arrive(0, pkt(0, 1, kMtu, 1));
  sw.run_idle(1'000'000'000);
  ASSERT_EQ(logic.deq.size(), 10u);
  // All ten arrive at t=0, before the link is served.
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(logic.deq[i].second, 1) << i;
  for (size_t i = 5; i < 10; ++i) EXPECT_EQ(logic.deq[i].second, 0) << i;
}

TEST(SwitchModel, DrrSharesBytesFairlyAcross32Queues) {
  RecordingLogic logic;
  SwitchModel sw({port("in", 1), port("out", 32)}, logic);
  // Queue q sends packets of a size that depends on q (64..1514 bytes),
  // all backlogged.
  std::map<QueueId, uint32_t> size;
  for (QueueId q = 0; q < 32; ++q) size[q] = 64 + (q * 47) % 1451;
  // 60 KB each: more than a 1/32 share of 100 ms at 100 Mbit/s (39 KB).
  for (QueueId q = 0; q < 32; ++q)
    for (uint32_t b = 0; b < 60000; b += size[q]) sw.arrive(0, pkt(0, 1, size[q], q));
  const uint64_t window = 100'000'000;  // 100 ms: far less than the backlog
  sw.run_until(window);
  std::map<QueueId, uint64_t> bytes;
  for (const auto& d : sw.departures()) bytes[d.queue] += d.wire_bytes;
  ASSERT_EQ(bytes.size(), 32u);
  uint64_t lo = UINT64_MAX, hi = 0, total = 0;
  for (auto& [q, b] : bytes) lo = std::min(lo, b), hi = std::max(hi, b), total += b;
  // DRR: any two backlogged queues differ by at most quantum + max packet.
  EXPECT_LE(hi - lo, 2u * kMtu + kMtu);
  // The link never idles while backlogged.
  EXPECT_GE(total * 8 * 1'000'000'000ull / window, k100M * 99 / 100);
}

TEST(SwitchModel, PauseFrameStopsQueueAndResumeRestartsIt) {
  RecordingLogic logic;
  // Port 1 is switch-facing: frames on it name its own egress queues.
  SwitchModel sw({port("in", 1), port("up", 2)}, logic);
  for (int i = 0; i < 200; ++i) {
    sw.arrive(0, pkt(0, 1, kMtu, 0));
    sw.arrive(0, pkt(0, 1, kMtu, 1));
  }
  const uint64_t t_pause = 5'000'000 + 1234;  // mid-packet
  const uint64_t t_resume = 20'000'000;
  sw.arrive_control(t_pause, 1, queue_frame(CtrlType::kPause, 1, 1));
  sw.arrive_control(t_resume, 1, queue_frame(CtrlType::kResume, 1, 2));
  sw.run_until(30'000'000);
  ASSERT_EQ(logic.frames.size(), 2u);
  EXPECT_EQ(sw.port_model(1).ctrl().in, 2u);
  uint64_t last_q1_before = 0, first_q1_after = UINT64_MAX, q0_during = 0;
  for (const auto& d : sw.departures()) {
    if (d.queue == 1 && d.start_ns < t_resume) last_q1_before = std::max(last_q1_before, d.end_ns);
    if (d.queue == 1 && d.start_ns >= t_resume) first_q1_after = std::min(first_q1_after, d.start_ns);
    if (d.queue == 0 && d.start_ns > t_pause && d.end_ns < t_resume) ++q0_during;
  }
  // Reaction: only the packet already on the wire finishes after the pause.
  EXPECT_LE(last_q1_before, t_pause + tx_time_ns(kMtu, k100M));
  // While queue 1 is paused, queue 0 gets the whole link.
  EXPECT_GE(q0_during, (t_resume - t_pause) / tx_time_ns(kMtu, k100M) - 2);
  // After the resume, queue 1 is served within one packet time.
  EXPECT_LE(first_q1_after, t_resume + tx_time_ns(kMtu, k100M));
}

TEST(SwitchModel, RejectedFramesAreCountedAndNeverReachTheLogic) {
  RecordingLogic logic;
  SwitchModel sw({port("host", 1, PortRole::kHostFacing), port("up", 2), port("none", 1, PortRole::kNone)}, logic);
  sw.arrive(0, pkt(0, 1, kMtu, 1));
  sw.arrive(0, pkt(0, 1, kMtu, 1));
  // A pause for queue 1 arriving from a host: spoofed.
  sw.arrive_control(1, 0, queue_frame(CtrlType::kPause, 1, 1));
  // On the switch-facing port but malformed: bad version, truncated, range.
  auto bad = queue_frame(CtrlType::kPause, 1, 1);
  bad[0] = 2;
  sw.arrive_control(2, 1, bad);
  auto cut = queue_frame(CtrlType::kPause, 1, 1);
  cut.resize(12);
  sw.arrive_control(3, 1, cut);
  auto range = queue_frame(CtrlType::kPause, 1, 1);
  range[8] = 0xff;
  sw.arrive_control(4, 1, range);
  sw.arrive_control(5, 2, queue_frame(CtrlType::kPause, 0, 1));
  sw.run_idle(1'000'000'000);
  EXPECT_TRUE(logic.frames.empty());
  EXPECT_FALSE(sw.paused(1, 1));
  EXPECT_EQ(logic.deq.size(), 2u);
  EXPECT_EQ(sw.port_model(0).ctrl().rejected, 1u);
  EXPECT_EQ(sw.port_model(0).ctrl().by_reason[SL_CTRL_R_WRONG_PORT], 1u);
  const auto& up = sw.port_model(1).ctrl();
  EXPECT_EQ(up.rejected, 3u);
  EXPECT_EQ(up.in, 0u);
  EXPECT_EQ(up.by_reason[SL_CTRL_R_BAD_VERSION], 1u);
  EXPECT_EQ(up.by_reason[SL_CTRL_R_TRUNCATED], 1u);
  EXPECT_EQ(up.by_reason[SL_CTRL_R_QUEUE_RANGE], 1u);
  EXPECT_EQ(sw.port_model(2).ctrl().by_reason[SL_CTRL_R_UNKNOWN_PORT], 1u);
}

TEST(SwitchModel, ShaperGroupLimitsTokenQueuesAsOne) {
  RecordingLogic logic;
  auto out = port("out", 3);
  // TOP §3.1 R1: token queues 0 and 1 (strict priority among them) share 5%
  // of the link; data (queue 2) gets the rest.
  out.groups = {ShaperGroup{k100M / 20, 1514}};
  out.queues[0] = {0, 1514, 0, 0};
  out.queues[1] = {1, 1514, 0, 0};
  out.queues[2] = {2, 1514, 0, -1};
  SwitchModel sw({port("in", 1), out}, logic);
  for (int i = 0; i < 3000; ++i) {
    sw.arrive(0, pkt(0, 1, 84, 0));
    sw.arrive(0, pkt(0, 1, 84, 1));
    sw.arrive(0, pkt(0, 1, kMtu, 2));
  }
  const uint64_t window = 200'000'000;
  sw.run_until(window);
  std::map<QueueId, uint64_t> bytes;
  for (const auto& d : sw.departures()) bytes[d.queue] += d.wire_bytes;
  double token_share = double(bytes[0] + bytes[1]) * 8 / (double(window) / 1e9) / double(k100M);
  EXPECT_NEAR(token_share, 0.05, 0.005);
  // Strict priority inside the group: queue 1 only when queue 0 is empty.
  EXPECT_EQ(bytes[1], 0u);
  EXPECT_GT(bytes[0], 0u);
}

TEST(SwitchModel, TimersControlOutputAndDropsFollowTheContract) {
  RecordingLogic logic;
  auto out = port("out", 2);
  out.queues[1].limit_bytes = 3 * kMtu;
  SwitchModel sw({port("in", 1), out}, logic);
  logic.rearm = 1'000'000;
  sw.arm_timer(500'000);
  logic.drop_hash = 7;
  sw.arrive(0, pkt(0, 1, kMtu, 7));  // dropped by the logic
  // All six arrive before the link is served: 3 fit the limit.
  for (int i = 0; i < 6; ++i) sw.arrive(0, pkt(0, 1, kMtu, 1));
  sw.run_until(3'000'000);
  EXPECT_EQ(logic.timers, (std::vector<uint64_t>{500'000, 1'500'000, 2'500'000}));
  EXPECT_EQ(sw.dropped_by_logic(), 1u);
  EXPECT_EQ(sw.port_model(1).stats(1).dropped, 3u);
  EXPECT_EQ(logic.enq.size(), 7u);
  EXPECT_EQ(logic.deq.size(), 3u);
  std::set<uint64_t> ids;
  for (auto& [id, q] : logic.deq) EXPECT_TRUE(ids.insert(id).second) << "dequeued twice: " << id;

  ControlFrame ok{CtrlType::kPause};
  ok.queues = {{1, 1}};
  sw.send_control(0, ok);
  ControlFrame bad{CtrlType::kPause};
  bad.queues = {{500, 1}};
  sw.send_control(0, bad);
  ASSERT_EQ(sw.sent_control().size(), 1u);
  EXPECT_EQ(sw.sent_control()[0].payload, encode(ok));
  EXPECT_EQ(sw.sent_control()[0].at_ns, 3'000'000u);
  EXPECT_EQ(sw.port_model(0).ctrl().out, 1u);
  EXPECT_EQ(sw.port_model(0).ctrl().out_rejected, 1u);
}

TEST(SwitchModel, BadConfigurationIsRefused) {
  FifoLogic fifo;
  EXPECT_THROW(SwitchModel({}, fifo), std::invalid_argument);
  EXPECT_THROW(SwitchModel({port("a", 0)}, fifo), std::invalid_argument);
  EXPECT_THROW(SwitchModel({port("a", SLUICE_SW_MAX_QUEUES + 1)}, fifo), std::invalid_argument);
  auto g = port("a", 1);
  g.queues[0].shaper_group = 0;
  EXPECT_THROW(SwitchModel({g}, fifo), std::invalid_argument);
  SwitchModel sw({port("a", 1)}, fifo);
  EXPECT_THROW(sw.arrive(0, pkt(0, 3, 100)), std::out_of_range);
  // A logic that names a queue the port does not have.
  class Bad : public Logic {
    std::string_view name() const override { return "bad"; }
    Verdict on_enqueue(const PacketMeta&, PortId) override { return Verdict::enqueue(9); }
  } bad;
  SwitchModel sw2({port("a", 1)}, bad);
  sw2.arrive(0, pkt(0, 0, 100));
  EXPECT_THROW(sw2.run_until(10), std::out_of_range);
}
