// The heartbeat thread (core/heartbeat.h): refreshes its words while the
// event loop runs, withholds them when the loop stalls (so BPF fails open
// as before), stops writing a word once its registration is gone, and says
// which scheduling class it got.
#include "core/heartbeat.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "core/bpf_util.h"
#include "core/event_loop.h"

using namespace sluice;
using namespace std::chrono_literals;

namespace {

// Runs the loop for `d` (the loop stamps itself every 5 ms meanwhile).
void run_loop_for(EventLoop& loop, std::chrono::milliseconds d) {
  auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) loop.run_one_for(5ms);
}

// CAP_SYS_NICE in the effective set, or an RLIMIT_RTPRIO of at least 1.
bool may_use_sched_fifo() {
  rlimit rl{};
  if (getrlimit(RLIMIT_RTPRIO, &rl) == 0 && rl.rlim_cur >= 1) return true;
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("CapEff:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> 23) & 1;  // CAP_SYS_NICE
  return false;
}

__u64 age_ns(const __u64& word) {
  uint64_t now = monotonic_ns();
  __u64 w = __atomic_load_n(&word, __ATOMIC_RELAXED);
  return now > w ? now - w : 0;
}

TEST(Heartbeat, WordIsWrittenAtOnceAndRefreshedWhileTheLoopRuns) {
  EventLoop loop;
  HeartbeatThread hb(loop);
  __u64 word = 0;
  auto reg = hb.add(&word, 2ms, 200ms, 60ms, "test");
  EXPECT_NE(word, 0u) << "not written before add() returned";
  __u64 first = word;
  run_loop_for(loop, 100ms);
  EXPECT_GT(__atomic_load_n(&word, __ATOMIC_RELAXED), first);
  HeartbeatThread::Registration::Stats s = reg->stats();
  EXPECT_GT(s.writes, 10u) << "2 ms period over 100 ms";
  EXPECT_EQ(s.withheld, 0u);
  nlohmann::json st = hb.status();
  ASSERT_EQ(st["words"].size(), 1u);
  EXPECT_EQ(st["words"][0]["owner"], "test");
}

TEST(Heartbeat, AStalledLoopStopsTheRefreshesAndARunningOneResumesThem) {
  EventLoop loop;
  HeartbeatThread hb(loop);
  __u64 word = 0;
  auto reg = hb.add(&word, 2ms, 30ms, 60ms, "test");
  run_loop_for(loop, 50ms);
  // The loop does not run: within loop_stall (30 ms) plus a period the
  // thread stops writing, so the word ages with the stall.
  std::this_thread::sleep_for(300ms);
  EXPECT_GT(age_ns(word), 200'000'000u) << "refreshed while the loop was stalled";
  EXPECT_GT(reg->stats().withheld, 0u);
  EXPECT_GT(reg->take_max_gap_ns(), 200'000'000u) << "the stall is not reported to the module";
  run_loop_for(loop, 50ms);
  EXPECT_LT(age_ns(word), 200'000'000u) << "not resumed once the loop ran again";
  EXPECT_GE(reg->stats().gaps_over_limit, 1u) << "the stall's gap was not counted against the 60 ms limit";
}

TEST(Heartbeat, WithoutLoopStallTheWordIsRefreshedWhateverTheLoopDoes) {
  EventLoop loop;
  HeartbeatThread hb(loop);
  __u64 word = 0;
  auto reg = hb.add(&word, 2ms, 0ms, 60ms, "test");
  std::this_thread::sleep_for(200ms);
  EXPECT_LT(age_ns(word), 150'000'000u) << "a 2 ms heartbeat stopped although no loop stall applies";
  EXPECT_EQ(reg->stats().withheld, 0u);
}

TEST(Heartbeat, ARemovedRegistrationIsNoLongerWritten) {
  EventLoop loop;
  HeartbeatThread hb(loop);
  __u64 word = 0;
  auto reg = hb.add(&word, 2ms, 0ms, 60ms, "test");
  run_loop_for(loop, 20ms);
  reg.reset();
  __u64 last = __atomic_load_n(&word, __ATOMIC_RELAXED);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(__atomic_load_n(&word, __ATOMIC_RELAXED), last);
  EXPECT_EQ(hb.status()["words"].size(), 0u);
}

TEST(Heartbeat, SaysWhichSchedulingClassItRunsIn) {
  EventLoop loop;
  HeartbeatThread::Options o;
  o.realtime = false;
  HeartbeatThread other(loop, o);
  EXPECT_FALSE(other.realtime());
  EXPECT_EQ(other.stats().sched.rfind("SCHED_OTHER", 0), 0u) << other.stats().sched;
  HeartbeatThread rt(loop);
  if (rt.realtime()) {
    EXPECT_EQ(rt.stats().sched, "SCHED_FIFO 1");
  } else {
    // Refused: the fallback says why, and it is refused only to a process
    // with neither CAP_SYS_NICE nor RLIMIT_RTPRIO >= 1.
    EXPECT_NE(rt.stats().sched.find("SCHED_FIFO refused"), std::string::npos) << rt.stats().sched;
    EXPECT_FALSE(may_use_sched_fifo()) << "allowed SCHED_FIFO, yet: " << rt.stats().sched;
  }
}

}  // namespace
