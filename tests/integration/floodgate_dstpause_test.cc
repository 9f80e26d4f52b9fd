// Floodgate §4.3 on a real host: the dstpause BPF on a veth uplink and the
// agent's per-destination queues (HostRunner). A "ToR" namespace holds two
// destinations D and E; the host sends TCP to both. A dstPause(D) frame
// from the ToR side stops D's traffic (its frames are held on the host, its
// receiver gets nothing) while E keeps flowing; dstResume(D) sends the held
// frames and D's transfer continues.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <chrono>
#include <thread>

#include "lib/netns_fixture.h"
#include "lib/switch_lab.h"
#include "mechanisms/floodgate/host_runner.h"
#include "sluice/dstpause.h"
#include "switch/control.h"

using namespace sluice;
using namespace sluice::test;
using namespace std::chrono_literals;

namespace {

uint64_t now_ns() {
  return uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

struct Receiver {
  std::atomic<uint64_t> bytes{0};
  std::atomic<bool> stop{false};
  int lfd = -1;
  std::thread t;
  void start(const std::string& ns, const std::string& addr, uint16_t port) {
    lfd = tcp_listen(ns, addr, port);
    ASSERT_GE(lfd, 0) << strerror(errno);
    t = std::thread([this] {
      int c = accept(lfd, nullptr, nullptr);
      if (c < 0) return;
      timeval tv{0, 100'000};
      setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      char buf[65536];
      while (!stop) {
        ssize_t n = read(c, buf, sizeof(buf));
        if (n > 0) bytes += uint64_t(n);
        else if (n == 0) break;
      }
      close(c);
    });
  }
  ~Receiver() {
    stop = true;
    if (lfd >= 0) shutdown(lfd, SHUT_RDWR);
    if (t.joinable()) t.join();
    if (lfd >= 0) close(lfd);
  }
};

struct Sender {
  std::atomic<bool> stop{false};
  int fd = -1;
  std::thread t;
  void start(const std::string& ns, const std::string& addr, uint16_t port) {
    InNetns in(ns);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, addr.c_str(), &a.sin_addr);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << strerror(errno);
    timeval tv{0, 100'000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    t = std::thread([this] {
      std::vector<char> buf(16384, 'x');
      while (!stop) {
        ssize_t n = write(fd, buf.data(), buf.size());
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) break;
      }
    });
  }
  ~Sender() {
    stop = true;
    if (t.joinable()) t.join();
    if (fd >= 0) close(fd);
  }
};

// The runner attaches in the host's namespace and must detach there too.
struct NsRunner {
  std::string ns;
  std::unique_ptr<floodgate::HostRunner> r;
  ~NsRunner() {
    if (r) {
      InNetns in(ns);
      r.reset();
    }
  }
};

class FloodgateDstPauseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (namespaces, BPF)";
    lab_ = std::make_unique<Lab>("fd");
    h_ = lab_->add_ns("h");
    t_ = lab_->add_ns("t");
    up_ = lab_->name("u");
    tor_ = lab_->name("t");
    lab_->add_veth(h_, "u", "10.77.0.1/24", t_, "t", "10.77.0.2/24");
    ASSERT_EQ(lab_->nsh(t_, "ip addr add 10.77.0.9/24 dev " + tor_), 0);
    ASSERT_EQ(lab_->nsh(t_, "ip addr add 10.77.0.10/24 dev " + tor_), 0);
    // MTU frames at tc egress (dstPause holds frames it can copy): TCP
    // builds GSO packets in software even with "gso off" (they are cut up
    // after the qdisc), so the uplink allows one segment per skb.
    ASSERT_EQ(lab_->nsh(h_, "ip link set dev " + up_ + " gso_max_segs 1"), 0);
    ASSERT_EQ(lab_->nsh(h_, "ethtool -K " + up_ + " tso off gso off >/dev/null 2>&1"), 0);
    // A 100 Mbit/s uplink.
    ASSERT_EQ(lab_->nsh(h_, "tc qdisc add dev " + up_ + " root tbf rate 100mbit burst 16k latency 20ms"), 0);
  }

  // A control frame from the ToR side, on its port of the link.
  void send_from_tor(sw::CtrlType type, const std::string& dst, uint32_t seq) {
    InNetns in(t_);
    int fd = socket(AF_PACKET, SOCK_RAW, htons(SLUICE_CTRL_ETHERTYPE));
    ASSERT_GE(fd, 0) << strerror(errno);
    sockaddr_ll ll{};
    ll.sll_family = AF_PACKET;
    ll.sll_ifindex = int(if_nametoindex(tor_.c_str()));
    ll.sll_halen = 6;
    sw::ControlFrame f{type};
    f.dsts = {{sw::addr_parse(dst), seq}};
    auto frame = sw::ethernet_frame({0x02, 0, 0, 0, 0, 0x77}, sw::encode(f));
    std::copy(sw::kCtrlGroupMac.begin(), sw::kCtrlGroupMac.end(), ll.sll_addr);
    ASSERT_EQ(sendto(fd, frame.data(), frame.size(), 0, reinterpret_cast<sockaddr*>(&ll), sizeof(ll)),
              ssize_t(frame.size()))
        << strerror(errno);
    close(fd);
  }

  // A runner on the host's uplink, made in the host's namespace.
  std::unique_ptr<floodgate::HostRunner> make_runner(uint64_t pause_timeout_ns, uint64_t fail_open_ns = 0) {
    InNetns in(h_);
    floodgate::HostRunnerConfig c;
    c.uplink = up_;
    c.state_dir = lab_->tmpdir();
    c.pause.pause_timeout_ns = pause_timeout_ns;
    c.fail_open_ns = fail_open_ns;
    return std::make_unique<floodgate::HostRunner>(c);
  }

  // Polls the runner for `d` (in the host's namespace: its sockets live there).
  void run(floodgate::HostRunner& r, std::chrono::milliseconds d) {
    auto end = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < end) {
      r.poll(now_ns());
      std::this_thread::sleep_for(1ms);
    }
  }

  std::unique_ptr<Lab> lab_;
  std::string h_, t_, up_, tor_;
};

}  // namespace

TEST_F(FloodgateDstPauseTest, PausedDestinationStopsOthersContinueResumeDelivers) {
  // no expiry during the test
  NsRunner holder{h_, make_runner(5'000'000'000)};
  auto& runner = holder.r;
  Receiver rd, re;
  rd.start(t_, "10.77.0.9", 5001);
  re.start(t_, "10.77.0.10", 5002);
  Sender sd, se;
  sd.start(h_, "10.77.0.9", 5001);
  se.start(h_, "10.77.0.10", 5002);
  run(*runner, 300ms);
  ASSERT_GT(rd.bytes.load(), 100'000u) << "D flows before the pause";
  ASSERT_GT(re.bytes.load(), 100'000u);

  send_from_tor(sw::CtrlType::kDstPause, "10.77.0.9", 1);
  run(*runner, 100ms);  // what was queued past tc egress drains
  ASSERT_TRUE(runner->state().paused(sw::addr_parse("10.77.0.9")));
  const uint64_t d0 = rd.bytes, e0 = re.bytes;
  run(*runner, 500ms);
  EXPECT_EQ(rd.bytes.load(), d0) << "D received data while paused";
  EXPECT_GT(re.bytes.load() - e0, 1'000'000u) << "E must keep flowing (500 ms at 100 Mbit/s is 6 MB)";
  EXPECT_GT(runner->state().stats().held_frames, 0u);
  EXPECT_GT(runner->counter(SL_DP_CNT_HELD), 0u);
  EXPECT_EQ(runner->counter(SL_DP_CNT_TOO_BIG), 0u) << "GSO off: every held frame could be copied";

  send_from_tor(sw::CtrlType::kDstResume, "10.77.0.9", 2);
  run(*runner, 500ms);
  EXPECT_FALSE(runner->state().paused(sw::addr_parse("10.77.0.9")));
  EXPECT_GT(rd.bytes.load() - d0, 500'000u) << "D flows again after the resume";
  // Every frame stolen is sent again: the held ones, and the ones dp_egress
  // stole after the resume emptied the queue but before it removed the
  // destination from its map (passed on at once; under load, a few).
  const auto& st = runner->state().stats();
  EXPECT_EQ(st.resent_frames, st.held_frames + st.passed_frames);
  EXPECT_EQ(runner->send_errors(), 0u);
  EXPECT_GT(runner->counter(SL_DP_CNT_REINJECTED), 0u);
  sd.stop = se.stop = true;
}

// A pause that no dstResume ends is released by the host's pause timeout
// (fail open; [floodgate] host_pause_timeout_ms, here 1 s instead of the
// 20 ms default): D gets nothing until then, and flows again after.
TEST_F(FloodgateDstPauseTest, UnresumedPauseIsReleasedAtTheConfiguredTimeout) {
  constexpr auto kTimeout = 1000ms;
  NsRunner holder{h_, make_runner(uint64_t(std::chrono::nanoseconds(kTimeout).count()))};
  auto& runner = holder.r;
  const sw::Addr d = sw::addr_parse("10.77.0.9");
  Receiver rd;
  rd.start(t_, "10.77.0.9", 5001);
  Sender sd;
  sd.start(h_, "10.77.0.9", 5001);
  run(*runner, 200ms);
  ASSERT_GT(rd.bytes.load(), 100'000u) << "D flows before the pause";

  const auto paused_at = std::chrono::steady_clock::now();
  send_from_tor(sw::CtrlType::kDstPause, "10.77.0.9", 1);
  run(*runner, 100ms);  // what was queued past tc egress drains
  ASSERT_TRUE(runner->state().paused(d));
  const uint64_t d0 = rd.bytes;
  run(*runner, 300ms);
  EXPECT_TRUE(runner->state().paused(d)) << "released before the configured timeout";
  EXPECT_EQ(rd.bytes.load(), d0) << "D received data while paused";
  EXPECT_EQ(runner->state().stats().expired, 0u);
  // Then released by the timeout: not before it (the pause was applied
  // after paused_at), and within a generous bound of it.
  while (runner->state().paused(d) && std::chrono::steady_clock::now() - paused_at < kTimeout + 3s) run(*runner, 5ms);
  const auto released_after = std::chrono::steady_clock::now() - paused_at;
  EXPECT_FALSE(runner->state().paused(d));
  EXPECT_GE(released_after, kTimeout);
  EXPECT_EQ(runner->state().stats().expired, 1u);
  EXPECT_EQ(runner->state().stats().resumes, 0u);
  run(*runner, 300ms);
  EXPECT_GT(rd.bytes.load() - d0, 100'000u) << "D flows again after the timeout";
  EXPECT_EQ(runner->send_errors(), 0u);
  sd.stop = true;
}

// Fail open when the agent dies: a killed or stopped sluiced leaves dp_egress
// attached and its destinations in sl_fg_held_v1, and nobody reads what it
// steals. Once the liveness record is older than fail_open_ns (here the
// test plays sluiced's heartbeat thread: it refreshes the record while it
// polls, then stops both, as a SIGSTOP would), dp_egress holds nothing: the
// paused destination's frames leave at once and its transfer goes on.
// Before the record, a dead agent blackholed D until sluiced came back.
TEST_F(FloodgateDstPauseTest, HeldDestinationFlowsOnceTheAgentStopsBeating) {
  constexpr auto kFailOpen = 200ms;
  // the pause itself never expires here
  NsRunner holder{h_, make_runner(60'000'000'000, uint64_t(std::chrono::nanoseconds(kFailOpen).count()))};
  auto& runner = holder.r;
  sluice_liveness* live = runner->liveness();
  auto beat_and_run = [&](std::chrono::milliseconds d) {
    auto end = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < end) {
      __atomic_store_n(&live->heartbeat_ns, now_ns(), __ATOMIC_RELAXED);
      runner->poll(now_ns());
      std::this_thread::sleep_for(1ms);
    }
  };
  const sw::Addr d = sw::addr_parse("10.77.0.9");
  Receiver rd;
  rd.start(t_, "10.77.0.9", 5001);
  Sender sd;
  sd.start(h_, "10.77.0.9", 5001);
  beat_and_run(200ms);
  ASSERT_GT(rd.bytes.load(), 100'000u) << "D flows before the pause";

  send_from_tor(sw::CtrlType::kDstPause, "10.77.0.9", 1);
  beat_and_run(100ms);  // what was queued past tc egress drains
  ASSERT_TRUE(runner->state().paused(d));
  const uint64_t d0 = rd.bytes;
  beat_and_run(2 * kFailOpen);
  EXPECT_EQ(rd.bytes.load(), d0) << "D received data while paused and the agent alive";
  EXPECT_GT(runner->counter(SL_DP_CNT_HELD), 0u);
  EXPECT_EQ(runner->counter(SL_DP_CNT_FAIL_OPEN), 0u) << "failed open with a fresh heartbeat";

  // The agent stops: no heartbeat, no poll. D is still held in the map.
  const uint64_t held_before = runner->counter(SL_DP_CNT_HELD);
  const auto stopped_at = std::chrono::steady_clock::now();
  while (rd.bytes.load() - d0 < 500'000 && std::chrono::steady_clock::now() - stopped_at < 10s)
    std::this_thread::sleep_for(10ms);
  const auto took = std::chrono::steady_clock::now() - stopped_at;
  std::printf("agent stopped: D got %llu B in %lld ms; frames held after the stop %llu, passed by fail open %llu\n",
              (unsigned long long)(rd.bytes.load() - d0),
              (long long)std::chrono::duration_cast<std::chrono::milliseconds>(took).count(),
              (unsigned long long)(runner->counter(SL_DP_CNT_HELD) - held_before),
              (unsigned long long)runner->counter(SL_DP_CNT_FAIL_OPEN));
  EXPECT_GE(rd.bytes.load() - d0, 500'000u) << "D blackholed by a stopped agent";
  EXPECT_GT(runner->counter(SL_DP_CNT_FAIL_OPEN), 0u);
  EXPECT_TRUE(runner->state().paused(d)) << "the agent's own state is untouched (it did not run)";

  // The agent comes back: it holds D again (D's sender, in flight, sends
  // within the first RTT; then it waits for ACKs that do not come).
  // The counts are taken once the fresh heartbeat is in place: a frame that
  // dp_egress saw just before it still failed open.
  beat_and_run(20ms);
  const uint64_t held_back = runner->counter(SL_DP_CNT_HELD), fo = runner->counter(SL_DP_CNT_FAIL_OPEN);
  const uint64_t d1 = rd.bytes;
  beat_and_run(600ms);
  EXPECT_GT(runner->counter(SL_DP_CNT_HELD), held_back) << "a live agent holds the paused destination again";
  EXPECT_EQ(runner->counter(SL_DP_CNT_FAIL_OPEN), fo);
  EXPECT_LE(rd.bytes.load() - d1, 100'000u) << "D flowed on with the agent back and D paused";
  sd.stop = true;
}
