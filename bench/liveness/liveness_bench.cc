// sluice-liveness-bench: how often would BPF fail open although the agent is
// alive, on a busy CPU? Three heartbeat sources run side by side in one
// process, at the same period, under the same load, for the same time:
//
//   loop       a timer on the agent's event loop writes the word (how
//              sluiced did it before core/heartbeat.h)
//   thread     the heartbeat thread in SCHED_OTHER (the logged fallback)
//   thread-rt  the heartbeat thread in SCHED_FIFO 1 with PAC's loop-stall
//              gate (100 ms), as sluiced runs it with the *_compat objects
//              (kernels before 6.2: the heartbeat alone decides)
//   kernel     the same thread's record in a loaded BPF object
//              (probe_liveness, bpf/lib/liveness.h): a stale heartbeat fails
//              open only when the thread is gone or stopped, the agent
//              withdrew, or after stall_ns -- as sluiced runs it on 6.2+
//
// A heartbeat gap longer than the limit is a window in which the BPF side
// fails open: counted per source (gaps_over_limit; 0 is the goal). For
// `kernel` the decision is the program's own: a sampler thread (SCHED_FIFO
// 2, every --sample-us) runs it through BPF_PROG_TEST_RUN and counts the
// episodes (consecutive samples) in which it failed open, by cause (the
// verdict of the episode's first sample: `withdrawn` by the loop-stall gate,
// `stall` past stall_ns, `task_gone`, `task_stopped`), each listed with its
// start, and, from the same samples, those in which the heartbeat alone
// would have (`heartbeat_only_*`). Each withdrawal by the loop-stall gate is
// listed with the heartbeat thread's breakdown of the loop's time
// (`loop_stalls`: blamed, excused as lateness or as runnable-not-running).
// The load is `--spinners` busy loops at the default priority, forked here
// and killed by PID at the end. Prints one JSON object per run.
//
//   sluice-liveness-bench --period-us 1000 --limit-us 6000 --seconds 300 --spinners 2
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "core/bpf_util.h"
#include "core/event_loop.h"
#include "core/features.h"
#include "core/heartbeat.h"
#include "sluice/liveness.h"
#include "probe_liveness.skel.h"

SLUICE_SKELETON(probe_liveness);

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

// Samples the BPF decision of a probe_liveness object until `stop`.
struct Sampler {
  uint64_t samples = 0, failed = 0;
  uint64_t episodes = 0;                 // runs of consecutive samples failing open (the kernel-side check)
  uint64_t hb_failed = 0;                // samples in which the heartbeat alone was stale
  uint64_t hb_episodes = 0;              // ... and their runs
  uint64_t by_verdict[8] = {};           // enum sluice_liveness_verdict
  uint64_t episodes_by_verdict[8] = {};  // ... of each episode's first sample
  struct Episode {
    uint64_t start_ns = 0, samples = 0;
    uint32_t verdict = 0;
  };
  std::vector<Episode> listed;  // the first kListed episodes
  static constexpr size_t kListed = 64;
  uint64_t run_errors = 0;
  std::string sched;

  void run(int prog_fd, uint64_t period_ns, const std::atomic<bool>& stop) {
    sched_param p{};
    p.sched_priority = 2;
    int rc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &p);
    sched = rc == 0 ? "SCHED_FIFO 2" : std::string("SCHED_OTHER (") + strerror(rc) + ")";
    unsigned char pkt[64] = {};
    bool was = false, hb_was = false;
    uint64_t next = monotonic_ns();
    while (!stop.load(std::memory_order_relaxed)) {
      LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = pkt, .data_size_in = sizeof(pkt));
      if (bpf_prog_test_run_opts(prog_fd, &o) != 0) {
        ++run_errors;
      } else {
        ++samples;
        uint32_t v = o.retval;
        ++by_verdict[v < 8 ? v : 7];
        bool fails = v >= SLUICE_DEAD_NO_HEARTBEAT, hb_fails = v != SLUICE_LIVE_FRESH;
        failed += fails;
        hb_failed += hb_fails;
        if (fails && !was) {
          ++episodes;
          ++episodes_by_verdict[v < 8 ? v : 7];
          if (listed.size() < kListed) listed.push_back({monotonic_ns(), 0, v});
        }
        if (fails && episodes <= kListed) ++listed.back().samples;  // the current episode is listed
        hb_episodes += hb_fails && !hb_was;
        was = fails;
        hb_was = hb_fails;
      }
      next += period_ns;
      uint64_t now = monotonic_ns();
      if (next <= now) next = now + period_ns;
      timespec ts{time_t(next / 1'000'000'000ull), long(next % 1'000'000'000ull)};
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
    }
  }
};

void stop_spinners(const std::vector<pid_t>& pids) {
  for (pid_t p : pids) kill(p, SIGKILL);
  for (pid_t p : pids) waitpid(p, nullptr, 0);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"heartbeat gaps on a busy CPU: event-loop timer vs heartbeat thread"};
  uint64_t period_us = 1000, limit_us = 6000, loop_stall_us = 100'000, sample_us = 1000;
  double seconds = 60;
  int spinners = 2;
  app.add_option("--period-us", period_us, "heartbeat period (sluiced: 10-20 ms)")->check(CLI::Range(100, 1'000'000));
  app.add_option("--limit-us", limit_us, "age at which BPF fails open (PAC: 60 ms, 6 periods)");
  app.add_option("--loop-stall-us", loop_stall_us, "thread-rt's loop-stall gate (PAC: 100 ms)");
  app.add_option("--sample-us", sample_us, "kernel: how often the BPF decision is sampled")
      ->check(CLI::Range(100, 1'000'000));
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

  // Source "kernel": thread-rt's thread, its record in a loaded program.
  // Loaded before any registration: the loop does not run meanwhile.
  const FeatureResult& task = task_from_pid_feature();
  std::unique_ptr<Skeleton<probe_liveness>> probe;
  std::unique_ptr<HeartbeatThread::Registration> r_kernel;
  Sampler sampler;
  std::atomic<bool> stop{false};
  std::thread sampling;
  if (task.ok) {
    probe = std::make_unique<Skeleton<probe_liveness>>();
    (*probe)->rodata->fail_open_ns = limit_ns;
    probe->load();
  }

  HeartbeatThread::Options other;
  other.realtime = false;
  HeartbeatThread thread_other(loop, other);
  HeartbeatThread thread_rt(loop);
  sluice_liveness w_other{}, w_rt{};
  auto r_other =
      thread_other.add(&w_other, period, std::chrono::nanoseconds(0), std::chrono::microseconds(limit_us), "thread");
  auto r_rt = thread_rt.add(&w_rt, period, std::chrono::microseconds(loop_stall_us),
                            std::chrono::microseconds(limit_us), "thread-rt");

  if (task.ok) {
    r_kernel = thread_rt.add(&(*probe)->bss->live, period, std::chrono::microseconds(loop_stall_us),
                             std::chrono::microseconds(limit_us), "kernel");
    int fd = bpf_program__fd((*probe)->progs.probe_liveness);
    sampling = std::thread([&sampler, fd, sample_us, &stop] { sampler.run(fd, sample_us * 1000, stop); });
  }

  uint64_t start = monotonic_ns();
  // The loop did not run while the object loaded and the threads started:
  // not a gap of the run.
  loop_last = start;
  loop_max = loop_over = 0;
  uint64_t end = start + uint64_t(seconds * 1e9);
  while (monotonic_ns() < end) loop.run_one_for(std::chrono::milliseconds(50));
  double elapsed = double(monotonic_ns() - start) / 1e9;
  stop = true;
  if (sampling.joinable()) sampling.join();
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
                          {"late_over_10ms", ts.late_over[2]},
                          {"loop_waits_excused", ts.loop_waits_excused},
                          {"loop_wait_excused_max_us", ts.loop_wait_excused_max_ns / 1000}};
  };
  // Seconds since the run started, of a monotonic time.
  auto at_s = [start](uint64_t t) { return t > start ? double(t - start) / 1e9 : -double(start - t) / 1e9; };
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
  nlohmann::json stalls = nlohmann::json::array();
  HeartbeatThread::Stats rt_stats = thread_rt.stats();
  for (const HeartbeatThread::LoopStall& l : rt_stats.stalls) {
    nlohmann::json j = l.json();
    j["at_s"] = at_s(l.at_ns);
    stalls.push_back(j);
  }
  out["sources"]["thread-rt"]["loop_stalls_total"] = rt_stats.loop_stalls_total;
  out["sources"]["thread-rt"]["loop_stalls"] = stalls;
  if (r_kernel) {
    nlohmann::json k = reg_json(thread_rt, *r_kernel);
    k["stall_ms"] = double((*probe)->bss->live.stall_ns) / 1e6;
    k["sampler"] = {{"sched", sampler.sched},
                    {"sample_us", sample_us},
                    {"samples", sampler.samples},
                    {"run_errors", sampler.run_errors},
                    {"fail_open_samples", sampler.failed},
                    {"fail_open_episodes", sampler.episodes},
                    {"heartbeat_only_samples", sampler.hb_failed},
                    {"heartbeat_only_episodes", sampler.hb_episodes}};
    nlohmann::json verdicts;
    const char* names[8] = {"live_fresh",     "live_task",  "dead_no_heartbeat", "dead_stale",
                            "dead_withdrawn", "dead_stall", "dead_task_gone",    "dead_task_stopped"};
    for (int i = 0; i < 8; ++i) verdicts[names[i]] = sampler.by_verdict[i];
    k["verdicts"] = verdicts;
    // Why each episode failed open: withdrawn (the loop-stall gate, or a
    // registration going away), stall (older than stall_ns), task_gone,
    // task_stopped; live_* never fail open.
    nlohmann::json causes, listed = nlohmann::json::array();
    for (int i = SLUICE_DEAD_NO_HEARTBEAT; i < 8; ++i) causes[names[i]] = sampler.episodes_by_verdict[i];
    for (const Sampler::Episode& e : sampler.listed)
      listed.push_back(
          {{"at_s", at_s(e.start_ns)}, {"samples", e.samples}, {"cause", names[e.verdict < 8 ? e.verdict : 7]}});
    k["sampler"]["fail_open_episodes_by_cause"] = causes;
    k["sampler"]["fail_open_listed"] = listed;
    out["sources"]["kernel"] = k;
  } else {
    out["sources"]["kernel"] = {{"skipped", "bpf-task-from-pid: " + task.detail}};
  }
  r_kernel.reset();
  r_other.reset();
  r_rt.reset();
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
