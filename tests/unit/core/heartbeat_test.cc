// The heartbeat thread (core/heartbeat.h): refreshes its words while the
// event loop runs, withholds them when the loop stalls (so BPF fails open
// as before), stops writing a word once its registration is gone, and says
// which scheduling class it got.
#include "core/heartbeat.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <new>
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

__u64 age_ns(const sluice_liveness& live) {
  uint64_t now = monotonic_ns();
  __u64 w = __atomic_load_n(&live.heartbeat_ns, __ATOMIC_RELAXED);
  return now > w ? now - w : 0;
}

TEST(Heartbeat, WordIsWrittenAtOnceAndRefreshedWhileTheLoopRuns) {
  EventLoop loop;
  HeartbeatThread hb(loop);
  sluice_liveness word{};
  auto reg = hb.add(&word, 2ms, 200ms, 60ms, "test");
  EXPECT_NE(word.heartbeat_ns, 0u) << "not written before add() returned";
  __u64 first = word.heartbeat_ns;
  run_loop_for(loop, 100ms);
  EXPECT_GT(__atomic_load_n(&word.heartbeat_ns, __ATOMIC_RELAXED), first);
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
  sluice_liveness word{};
  auto reg = hb.add(&word, 2ms, 30ms, 60ms, "test");
  run_loop_for(loop, 50ms);
  // The loop does not run: within loop_stall (30 ms) plus a period the
  // thread stops writing, so the word ages with the stall.
  std::this_thread::sleep_for(300ms);
  EXPECT_GT(age_ns(word), 200'000'000u) << "refreshed while the loop was stalled";
  EXPECT_GT(reg->stats().withheld, 0u);
  EXPECT_EQ(__atomic_load_n(&word.withdrawn, __ATOMIC_RELAXED), 1u) << "a stalled loop must fail open at the limit";
  EXPECT_GT(reg->take_max_gap_ns(), 200'000'000u) << "the stall is not reported to the module";
  run_loop_for(loop, 50ms);
  EXPECT_LT(age_ns(word), 200'000'000u) << "not resumed once the loop ran again";
  EXPECT_EQ(__atomic_load_n(&word.withdrawn, __ATOMIC_RELAXED), 0u) << "still withdrawn once the loop ran again";
  EXPECT_GE(reg->stats().gaps_over_limit, 1u) << "the stall's gap was not counted against the 60 ms limit";
}

TEST(Heartbeat, WithoutLoopStallTheWordIsRefreshedWhateverTheLoopDoes) {
  EventLoop loop;
  HeartbeatThread hb(loop);
  sluice_liveness word{};
  auto reg = hb.add(&word, 2ms, 0ms, 60ms, "test");
  std::this_thread::sleep_for(200ms);
  EXPECT_LT(age_ns(word), 150'000'000u) << "a 2 ms heartbeat stopped although no loop stall applies";
  EXPECT_EQ(reg->stats().withheld, 0u);
}

TEST(Heartbeat, ARemovedRegistrationIsNoLongerWritten) {
  EventLoop loop;
  HeartbeatThread hb(loop);
  sluice_liveness word{};
  auto reg = hb.add(&word, 2ms, 0ms, 60ms, "test");
  run_loop_for(loop, 20ms);
  reg.reset();
  __u64 last = __atomic_load_n(&word.heartbeat_ns, __ATOMIC_RELAXED);
  EXPECT_EQ(__atomic_load_n(&word.withdrawn, __ATOMIC_RELAXED), 1u) << "a removed record must fail open at its limit";
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(__atomic_load_n(&word.heartbeat_ns, __ATOMIC_RELAXED), last);
  EXPECT_EQ(hb.status()["words"].size(), 0u);
}

TEST(Heartbeat, TheRecordNamesTheThreadBpfLooksAt) {
  EventLoop loop;
  HeartbeatThread hb(loop);
  sluice_liveness live{};
  auto reg = hb.add(&live, 2ms, 100ms, 60ms, "test");
  ASSERT_GT(live.task_tid, 0);
  EXPECT_EQ(live.task_tid, hb.tid());
  // The thread is one of this process's, and its start is the one /proc says.
  std::string stat = "/proc/self/task/" + std::to_string(live.task_tid) + "/stat";
  EXPECT_NE(start_ticks_of(stat), 0u) << stat;
  EXPECT_EQ(live.task_start, start_ticks_of(stat));
  EXPECT_EQ(live.tick_ns, 1'000'000'000ull / uint64_t(sysconf(_SC_CLK_TCK)));
  EXPECT_EQ(live.stall_ns, 5'000'000'000ull) << "kTaskStall for a 60 ms limit";
  EXPECT_EQ(live.withdrawn, 0u);
  sluice_liveness slow{};
  auto reg2 = hb.add(&slow, 2ms, 100ms, 4000ms, "slow");
  EXPECT_EQ(slow.stall_ns, 8'000'000'000ull) << "twice a limit above half of kTaskStall";
}

// The whole process stands still (SIGSTOP from outside, as a host stops its
// VM) for longer than the loop-stall gate: once it runs again the thread and
// the loop were late together, which is no loop stall, so nothing is
// withdrawn. A child runs the loop; the parent stops and continues it.
TEST(Heartbeat, AProcessThatStoodStillIsNoLoopStall) {
  struct Shared {
    uint64_t withheld = ~0ull;
    uint64_t max_gap_ns = 0;
    uint32_t withdrawn_seen = 0;
  };
  void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* sh = new (mem) Shared();
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    {
      EventLoop loop;
      HeartbeatThread hb(loop);
      sluice_liveness live{};
      auto reg = hb.add(&live, 2ms, 100ms, 60ms, "child");
      auto end = std::chrono::steady_clock::now() + 1500ms;
      while (std::chrono::steady_clock::now() < end) {
        loop.run_one_for(2ms);
        if (__atomic_load_n(&live.withdrawn, __ATOMIC_RELAXED)) sh->withdrawn_seen = 1;
      }
      sh->withheld = reg->stats().withheld;
      sh->max_gap_ns = reg->stats().max_gap_ns;
    }
    _exit(0);
  }
  std::this_thread::sleep_for(300ms);
  kill(child, SIGSTOP);
  std::this_thread::sleep_for(500ms);
  kill(child, SIGCONT);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_GT(sh->max_gap_ns, 400'000'000u) << "the stop did not show as a heartbeat gap";
  EXPECT_EQ(sh->withheld, 0u) << "the stand-still was blamed on the loop";
  EXPECT_EQ(sh->withdrawn_seen, 0u);
  munmap(mem, sizeof(Shared));
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
