// The heartbeat thread (core/heartbeat.h): refreshes its words while the
// event loop runs, withholds them when the loop stalls (a callback spinning
// or blocked in a syscall; so BPF fails open as before) but not when the
// loop's thread only waited for a CPU, stops writing a word once its
// registration is gone, and says which scheduling class it got.
#include "core/heartbeat.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <thread>
#include <vector>

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

// A registration made right after the thread was built (as sluiced does)
// is refreshed at its own period from the start, not after the 100 ms the
// thread sleeps while it has none: the thread may not have armed its first
// sleep yet when add() runs, so this is tried on many fresh threads: with
// the thread arming its own first sleep, 200 constructions caught the
// late refresh in 10 of 20 runs and 1,000 in 7 of 10 on this machine (a
// race: no count makes it certain).
TEST(Heartbeat, ARegistrationAddedAtStartIsRefreshedAtItsPeriodAtOnce) {
  uint64_t worst = 0;
  for (int i = 0; i < 1000; ++i) {
    EventLoop loop;
    HeartbeatThread hb(loop);
    sluice_liveness word{};
    auto reg = hb.add(&word, 2ms, 0ms, 60ms, "test");
    const __u64 first = __atomic_load_n(&word.heartbeat_ns, __ATOMIC_RELAXED);
    auto end = std::chrono::steady_clock::now() + 1s;  // bound only
    while (__atomic_load_n(&word.heartbeat_ns, __ATOMIC_RELAXED) == first && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(200us);
    const __u64 next = __atomic_load_n(&word.heartbeat_ns, __ATOMIC_RELAXED);
    ASSERT_NE(next, first) << "no refresh within 1 s of add(), try " << i;
    worst = std::max<uint64_t>(worst, next - first);
  }
  EXPECT_LT(worst, 50'000'000u) << "a 2 ms registration's first refresh came after the idle sleep (100 ms)";
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

// How long the calling thread has waited on a run queue (ns): schedstat's
// second field.
uint64_t own_runqueue_wait_ns() {
  std::ifstream f("/proc/thread-self/schedstat");
  uint64_t run = 0, wait = 0;
  f >> run >> wait;
  return wait;
}

// Waits (at most `bound`, only so that a broken build cannot hang the suite)
// until the record is withdrawn; true if it was.
bool wait_withdrawn(const sluice_liveness& live, std::chrono::seconds bound) {
  auto end = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < end) {
    if (__atomic_load_n(&live.withdrawn, __ATOMIC_ACQUIRE)) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

// A callback that spins (the loop busy in its own code) withdraws the record:
// the loop's thread runs, so its run-queue wait (which a busy machine adds)
// does not excuse it, and the time it ran is blamed.
TEST(Heartbeat, ALoopSpinningInACallbackWithdrawsTheRecord) {
  EventLoop loop;
  HeartbeatThread hb(loop);
  sluice_liveness live{};
  auto reg = hb.add(&live, 2ms, 50ms, 60ms, "test");
  run_loop_for(loop, 30ms);
  bool seen = false;
  loop.post([&] {
    auto end = std::chrono::steady_clock::now() + 30s;  // bound only; ends at the withdrawal
    while (!seen && std::chrono::steady_clock::now() < end) seen = __atomic_load_n(&live.withdrawn, __ATOMIC_ACQUIRE);
  });
  run_loop_for(loop, 10ms);
  ASSERT_TRUE(seen) << "a loop spinning in a callback kept the record for 30 s";
  HeartbeatThread::Stats st = hb.stats();
  ASSERT_FALSE(st.stalls.empty());
  const HeartbeatThread::LoopStall& l = st.stalls.back();
  EXPECT_GT(l.blamed_ns, 50'000'000u);
  ASSERT_TRUE(l.sampled) << "the loop's thread was not looked at";
  EXPECT_GT(l.ran_ns, 0u) << "the spinning loop did not run?";
  EXPECT_EQ(l.state, 'R') << "the loop thread was spinning when the record was withdrawn";
  run_loop_for(loop, 30ms);
  EXPECT_EQ(__atomic_load_n(&live.withdrawn, __ATOMIC_ACQUIRE), 0u) << "not resumed once the loop ran again";
}

// A callback blocked in a syscall (a read nobody answers until the record
// is withdrawn) withdraws the record.
TEST(Heartbeat, ALoopBlockedInASyscallWithdrawsTheRecord) {
  EventLoop loop;
  HeartbeatThread hb(loop);
  sluice_liveness live{};
  auto reg = hb.add(&live, 2ms, 50ms, 60ms, "test");
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  run_loop_for(loop, 30ms);
  bool seen = false;
  std::thread answer([&] {
    seen = wait_withdrawn(live, 30s);
    char c = 'x';
    EXPECT_EQ(write(p[1], &c, 1), 1);
  });
  loop.post([&] {
    char c = 0;
    EXPECT_EQ(read(p[0], &c, 1), 1);
  });
  run_loop_for(loop, 10ms);
  answer.join();
  close(p[0]);
  close(p[1]);
  ASSERT_TRUE(seen) << "a loop blocked in read() kept the record for 30 s";
  HeartbeatThread::Stats st = hb.stats();
  ASSERT_FALSE(st.stalls.empty());
  EXPECT_GT(st.stalls.back().blamed_ns, 50'000'000u);
  ASSERT_TRUE(st.stalls.back().sampled) << "the loop's thread was not looked at";
  EXPECT_EQ(st.stalls.back().state, 'S') << "the loop thread was blocked in read() when the record was withdrawn";
}

// The loop's thread, pinned to one CPU, is kept off it by a SCHED_FIFO 2
// thread spinning there (above the heartbeat thread's SCHED_FIFO 1, which
// therefore runs on another CPU, on time): the loop is runnable all along
// but not scheduled, as when its vCPU stands still alone. That is no loop
// stall: nothing is withdrawn, and the thread says it excused the wait.
TEST(Heartbeat, ALoopKeptOffItsCpuIsNoLoopStall) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  if (CPU_COUNT(&allowed) < 2)
    GTEST_SKIP() << "needs 2 CPUs: the heartbeat thread must run while the loop's CPU is taken";
  int cpu = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpu = c;  // the last one
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);

  constexpr auto kHog = 400ms, kLoopStall = 50ms;
  std::atomic<int> phase{0};  // 1: hog, 2: hog done, -1: no SCHED_FIFO
  std::string hog_error;
  std::thread hog([&] {
    sched_param sp{};
    sp.sched_priority = 2;
    int rc = pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
    if (rc == 0) rc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
    if (rc != 0) {
      hog_error = strerror(rc);
      phase = -1;
      return;
    }
    while (phase.load() == 0) std::this_thread::sleep_for(1ms);
    auto end = std::chrono::steady_clock::now() + kHog;
    while (std::chrono::steady_clock::now() < end) {
    }
    phase = 2;
  });

  uint64_t waited = 0, withheld = ~0ull, excused = 0;
  std::atomic<bool> withdrawn_seen{false};
  std::thread looper([&] {
    EventLoop loop;
    // Started before the loop's thread is pinned: the heartbeat thread may
    // run on every CPU.
    HeartbeatThread hb(loop);
    sluice_liveness live{};
    auto reg = hb.add(&live, 2ms, kLoopStall, 60ms, "test");
    pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
    run_loop_for(loop, 50ms);
    if (phase.load() < 0) return;
    uint64_t before = own_runqueue_wait_ns();
    phase = 1;
    while (phase.load() == 1) {
      loop.run_one_for(2ms);
      if (__atomic_load_n(&live.withdrawn, __ATOMIC_ACQUIRE)) withdrawn_seen = true;
    }
    run_loop_for(loop, 20ms);
    waited = own_runqueue_wait_ns() - before;
    withheld = reg->stats().withheld;
    excused = hb.stats().loop_waits_excused;
  });
  looper.join();
  hog.join();
  if (phase.load() < 0) GTEST_SKIP() << "no SCHED_FIFO for the competing thread: " << hog_error;
  if (waited < 4 * uint64_t(std::chrono::nanoseconds(kLoopStall).count()))
    GTEST_SKIP() << "the competing thread did not keep the loop off its CPU (it waited " << waited / 1000000
                 << " ms on the run queue)";
  EXPECT_EQ(withheld, 0u) << "the loop's wait for its CPU (" << waited / 1000000 << " ms) was blamed on it";
  EXPECT_FALSE(withdrawn_seen.load());
  EXPECT_GE(excused, 1u) << "the loop waited " << waited / 1000000 << " ms, yet no wait was excused";
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
    HeartbeatThread::LoopStall last;  // the last withdrawal's breakdown, if any
    uint64_t registered_ns = 0;
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
      sh->registered_ns = monotonic_ns();
      auto end = std::chrono::steady_clock::now() + 1500ms;
      while (std::chrono::steady_clock::now() < end) {
        loop.run_one_for(2ms);
        if (__atomic_load_n(&live.withdrawn, __ATOMIC_RELAXED)) sh->withdrawn_seen = 1;
      }
      sh->withheld = reg->stats().withheld;
      sh->max_gap_ns = reg->stats().max_gap_ns;
      HeartbeatThread::Stats st = hb.stats();
      if (!st.stalls.empty()) sh->last = st.stalls.back();
    }
    _exit(0);
  }
  std::this_thread::sleep_for(300ms);
  uint64_t stopped_ns = monotonic_ns();
  kill(child, SIGSTOP);
  std::this_thread::sleep_for(500ms);
  kill(child, SIGCONT);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_GT(sh->max_gap_ns, 400'000'000u)
      << "the stop did not show as a heartbeat gap (the record was written "
      << (int64_t(sh->registered_ns) - int64_t(stopped_ns)) / 1000000 << " ms after the stop)";
  const HeartbeatThread::LoopStall& l = sh->last;
  EXPECT_EQ(sh->withheld, 0u) << "the stand-still was blamed on the loop: age " << l.age_ns / 1000000 << " ms, blamed "
                              << l.blamed_ns / 1000000 << ", late " << l.late_ns / 1000000 << ", waited "
                              << l.waited_ns / 1000000 << ", ran " << l.ran_ns / 1000000 << ", state " << l.state;
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

// Started from a real-time thread (a loop under chrt), the heartbeat runs
// one priority above it, so that neither its loop nor what the loop
// preempts keeps it off the CPU; from a SCHED_OTHER thread it keeps the
// priority asked for (above).
TEST(Heartbeat, RunsAboveARealTimeLoop) {
  if (!may_use_sched_fifo()) GTEST_SKIP() << "SCHED_FIFO not allowed to this process";
  std::string sched, err;
  std::thread t([&] {
    sched_param sp{};
    sp.sched_priority = 5;
    int rc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
    if (rc != 0) {
      err = strerror(rc);
      return;
    }
    EXPECT_EQ(heartbeat_rt_priority(1), 6);
    EXPECT_EQ(heartbeat_rt_priority(9), 9) << "a higher priority asked for stays";
    EventLoop loop;
    HeartbeatThread hb(loop);
    sched = hb.stats().sched;
  });
  t.join();
  if (!err.empty()) GTEST_SKIP() << "SCHED_FIFO 5 refused: " << err;
  EXPECT_EQ(sched, "SCHED_FIFO 6");
  EXPECT_EQ(heartbeat_rt_priority(1), 1) << "from a SCHED_OTHER thread";
}

}  // namespace
