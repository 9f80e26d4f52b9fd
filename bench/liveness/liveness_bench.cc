// sluice-liveness-bench: how often would BPF fail open although the agent is
// alive, on a busy CPU? Three heartbeat sources run side by side in one
// process, at the same period, under the same load, for the same time:
//
//   loop       a timer on the agent's event loop writes the word (how
//              sluiced did it before core/heartbeat.h)
//   thread     the heartbeat thread in SCHED_OTHER (the logged fallback)
//   thread-rt  the heartbeat thread in SCHED_FIFO 1 with PAC's loop-stall
//              gate (100 ms), as sluiced runs it
//
// A heartbeat gap longer than the limit is a window in which the BPF side
// fails open: counted per source (gaps_over_limit; 0 is the goal). The
// load is `--spinners` busy loops at the default priority, forked here and
// killed by PID at the end. Prints one JSON object per run.
//
//   sluice-liveness-bench --period-us 1000 --limit-us 6000 --seconds 300 --spinners 2
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/bpf_util.h"
#include "core/event_loop.h"
#include "core/heartbeat.h"

using namespace sluice;

namespace {

std::vector<pid_t> start_spinners(int n) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    pid_t p = fork();
    if (p == 0) {
      volatile uint64_t x = 0;
      for (;;) x = x + 1;
    }
    if (p > 0) pids.push_back(p);
  }
  return pids;
}

void stop_spinners(const std::vector<pid_t>& pids) {
  for (pid_t p : pids) kill(p, SIGKILL);
  for (pid_t p : pids) waitpid(p, nullptr, 0);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"heartbeat gaps on a busy CPU: event-loop timer vs heartbeat thread"};
  uint64_t period_us = 1000, limit_us = 6000, loop_stall_us = 100'000;
  double seconds = 60;
  int spinners = 2;
  app.add_option("--period-us", period_us, "heartbeat period (sluiced: 10-20 ms)")->check(CLI::Range(100, 1'000'000));
  app.add_option("--limit-us", limit_us, "age at which BPF fails open (PAC: 60 ms, 6 periods)");
  app.add_option("--loop-stall-us", loop_stall_us, "thread-rt's loop-stall gate (PAC: 100 ms)");
  app.add_option("--seconds", seconds, "run length")->check(CLI::Range(1.0, 86400.0));
  app.add_option("--spinners", spinners, "busy loops started (and killed by PID) for the run")
      ->check(CLI::Range(0, 64));
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::err);  // stdout carries the JSON result

  std::vector<pid_t> spin = start_spinners(spinners);
  EventLoop loop;
  const auto period = std::chrono::microseconds(period_us);
  const uint64_t limit_ns = limit_us * 1000;

  // Source "loop": the old way, a timer on the event loop.
  __u64 loop_word = 0;
  uint64_t loop_writes = 0, loop_over = 0, loop_max = 0, loop_last = monotonic_ns();
  auto loop_timer = loop.every(period, [&] {
    uint64_t now = monotonic_ns();
    uint64_t gap = now - loop_last;
    loop_last = now;
    __atomic_store_n(&loop_word, now, __ATOMIC_RELAXED);
    ++loop_writes;
    loop_max = std::max(loop_max, gap);
    if (gap > limit_ns) ++loop_over;
  });

  HeartbeatThread::Options other;
  other.realtime = false;
  HeartbeatThread thread_other(loop, other);
  HeartbeatThread thread_rt(loop);
  __u64 w_other = 0, w_rt = 0;
  auto r_other =
      thread_other.add(&w_other, period, std::chrono::nanoseconds(0), std::chrono::microseconds(limit_us), "thread");
  auto r_rt = thread_rt.add(&w_rt, period, std::chrono::microseconds(loop_stall_us),
                            std::chrono::microseconds(limit_us), "thread-rt");

  uint64_t start = monotonic_ns();
  uint64_t end = start + uint64_t(seconds * 1e9);
  while (monotonic_ns() < end) loop.run_one_for(std::chrono::milliseconds(50));
  double elapsed = double(monotonic_ns() - start) / 1e9;
  stop_spinners(spin);

  auto reg_json = [&](const HeartbeatThread& t, const HeartbeatThread::Registration& r) {
    HeartbeatThread::Registration::Stats s = r.stats();
    HeartbeatThread::Stats ts = t.stats();
    return nlohmann::json{{"sched", ts.sched},
                          {"periods", s.writes},
                          {"gaps_over_limit", s.gaps_over_limit},
                          {"max_gap_us", s.max_gap_ns / 1000},
                          {"withheld", s.withheld},
                          {"late_max_us", ts.late_max_ns / 1000},
                          {"late_over_1ms", ts.late_over[1]},
                          {"late_over_10ms", ts.late_over[2]}};
  };
  nlohmann::json out = {
      {"period_us", period_us},
      {"limit_us", limit_us},
      {"seconds", elapsed},
      {"spinners", spinners},
      {"cpus", sysconf(_SC_NPROCESSORS_ONLN)},
      {"sources",
       {{"loop", {{"periods", loop_writes}, {"gaps_over_limit", loop_over}, {"max_gap_us", loop_max / 1000}}},
        {"thread", reg_json(thread_other, *r_other)},
        {"thread-rt", reg_json(thread_rt, *r_rt)}}},
  };
  r_other.reset();
  r_rt.reset();
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
