#include "heartbeat.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <sstream>

#include "bpf_util.h"
#include "error.h"
#include "event_loop.h"
#include "features.h"
#include "log.h"

namespace sluice {

namespace {
constexpr uint64_t kIdlePeriodNs = 100'000'000;  // no registration yet
constexpr uint64_t kLateBucketsNs[4] = {100'000, 1'000'000, 10'000'000, 100'000'000};

// The calling thread's id in the outermost PID namespace /proc shows
// (NSpid's first field; the initial one unless /proc was mounted inside a
// namespace, in which case BPF finds another start time and falls back to
// the heartbeat) and its start in clock ticks since boot (stat field 22).
void own_task(pid_t* tid, uint64_t* start_ticks) {
  *tid = pid_t(syscall(SYS_gettid));
  *start_ticks = 0;
  std::ifstream status("/proc/thread-self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("NSpid:", 0) == 0) {
      std::istringstream in(line.substr(6));
      long v = 0;
      if (in >> v && v > 0) *tid = pid_t(v);
      break;
    }
  *start_ticks = start_ticks_of("/proc/thread-self/stat");
}

pid_t this_tid() {
  static thread_local pid_t tid = pid_t(syscall(SYS_gettid));
  return tid;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Field n (3 or more, numbered as in proc(5)) of a /proc/.../stat text;
// empty when absent. Counted from the last ')': the name may hold anything.
std::string stat_field(const std::string& text, int n) {
  size_t paren = text.rfind(')');
  if (paren == std::string::npos) return {};
  std::istringstream in(text.substr(paren + 1));
  std::string field;
  for (int i = 3; i <= n && in >> field; ++i)  // field 3 is the state
    if (i == n) return field;
  return {};
}

timespec to_timespec(uint64_t ns) {
  timespec t{};
  t.tv_sec = time_t(ns / 1'000'000'000ull);
  t.tv_nsec = long(ns % 1'000'000'000ull);
  return t;
}
}  // namespace

uint64_t start_ticks_of(const std::string& proc_stat) {
  std::string field = stat_field(read_text(proc_stat), 22);
  return field.empty() ? 0 : std::strtoull(field.c_str(), nullptr, 10);
}

namespace {
// The object to load for a feature probe's answer; said once per kind of
// program that the *_compat objects serve.
SkelElf pick_liveness_object(const FeatureResult& f, std::once_flag& said, const char* programs, const SkelElf& own,
                             const SkelElf& compat) {
  if (f.ok) return own;
  std::call_once(said, [&f, programs] {
    SLOG_WARN("LIVENESS_COMPAT",
              "{} fail open by heartbeat alone (the *_compat objects): {}; a machine that runs nothing for longer "
              "than a mechanism's fail_open_ms makes it fail open although sluiced is alive",
              programs, f.detail);
  });
  return compat;
}
}  // namespace

SkelElf liveness_object(const SkelElf& own, const SkelElf& compat) {
  static std::once_flag said;
  return pick_liveness_object(task_from_pid_feature(), said, "tc programs", own, compat);
}

SkelElf liveness_object_xdp(const SkelElf& own, const SkelElf& compat) {
  static std::once_flag said;
  return pick_liveness_object(task_from_pid_xdp_feature(), said, "XDP programs", own, compat);
}

HeartbeatThread::Registration::~Registration() {
  if (owner_) owner_->remove(this);
  __atomic_store_n(&live_->withdrawn, 1u, __ATOMIC_RELEASE);
}

uint64_t HeartbeatThread::Registration::take_max_gap_ns() {
  std::lock_guard<std::mutex> g(owner_->mu_);
  uint64_t now = monotonic_ns();
  uint64_t gap = std::max(max_gap_ns_, now > last_ns_ ? now - last_ns_ : 0);
  max_gap_ns_ = 0;
  return gap;
}

HeartbeatThread::Registration::Stats HeartbeatThread::Registration::stats() const {
  std::lock_guard<std::mutex> g(owner_->mu_);
  return stats_;
}

int heartbeat_rt_priority(int wanted) {
  int policy = 0;
  sched_param sp{};
  if (pthread_getschedparam(pthread_self(), &policy, &sp) != 0 || (policy != SCHED_FIFO && policy != SCHED_RR))
    return wanted;
  return std::max(wanted, std::min(sp.sched_priority + 1, sched_get_priority_max(SCHED_FIFO)));
}

HeartbeatThread::HeartbeatThread(EventLoop& loop, Options opt) : loop_(loop), opt_(opt) {
  timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
  if (timer_fd_ < 0) throw SysError("heartbeat timerfd", errno);
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  if (stop_fd_ < 0) {
    int e = errno;
    close(timer_fd_);
    throw SysError("heartbeat eventfd", e);
  }
  // The first sleep is armed here, before the thread exists: armed by the
  // thread, it could land after an add() made right after construction and
  // put that registration's first refresh (and the loop's first look) up to
  // the idle period late; a spinning-loop test saw its stall blamed unsampled.
  deadline_ = monotonic_ns() + kIdlePeriodNs;
  {
    itimerspec its{};
    its.it_value = to_timespec(deadline_);
    timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &its, nullptr);
  }
  loop_stamp_ns_ = monotonic_ns();
  // The loop's thread: most likely this one; each stamp says.
  auto loop_thread = [this] {
    clockid_t clock = CLOCK_THREAD_CPUTIME_ID;
    pthread_getcpuclockid(pthread_self(), &clock);
    loop_clock_.store(clock, std::memory_order_relaxed);
    loop_tid_.store(this_tid(), std::memory_order_relaxed);
  };
  loop_thread();
  stamp_ = loop_.every(kLoopStampPeriod, [this, loop_thread] {
    loop_thread();
    loop_stamp_ns_.store(monotonic_ns(), std::memory_order_relaxed);
  });
  std::promise<std::string> sched;
  auto sched_result = sched.get_future();
  tick_ns_ = 1'000'000'000ull / uint64_t(std::max(1L, sysconf(_SC_CLK_TCK)));
  // Above the loop it watches when the loop itself runs real-time (a
  // process started under chrt): at the default priority 1 it starved
  // below a busy SCHED_FIFO 12 loop and the FIFO 10/11 traffic generator
  // (runnable for 5.3 s while the loop forwarded at 1 Gbit/s, and BPF
  // failed open for 2-6 k frames per repeat, docs/switch.md "The held
  // path's cost"). The loop-progress gate keeps a stuck loop failing open.
  const int rt_priority = heartbeat_rt_priority(opt_.rt_priority);
  thread_ = std::thread([this, &sched, rt_priority] {
    own_task(&tid_, &start_ticks_);
    std::string why;
    if (opt_.realtime) {
      sched_param p{};
      p.sched_priority = rt_priority;
      int rc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &p);
      if (rc == 0) {
        realtime_ = true;
        why = "SCHED_FIFO " + std::to_string(rt_priority);
      } else {
        why = std::string("SCHED_OTHER (SCHED_FIFO refused: ") + strerror(rc) + ")";
      }
    } else {
      why = "SCHED_OTHER (real-time class not requested)";
    }
    sched.set_value(why);
    run();
  });
  std::string how = sched_result.get();
  {
    std::lock_guard<std::mutex> g(mu_);
    stats_.sched = how;
  }
  if (realtime_) SLOG_INFO("HEARTBEAT_SCHED", "heartbeat thread runs {}: a busy CPU does not delay it", how);
  else
    SLOG_WARN("HEARTBEAT_SCHED",
              "heartbeat thread runs {}: under CPU load it can be late and BPF fail open although the agent is "
              "alive (grant CAP_SYS_NICE or LimitRTPRIO=1)",
              how);
}

HeartbeatThread::~HeartbeatThread() {
  uint64_t one = 1;
  if (write(stop_fd_, &one, sizeof(one)) != sizeof(one)) {
    // The eventfd cannot be full after one write; nothing else to do.
  }
  if (thread_.joinable()) thread_.join();
  stamp_.reset();
  close(timer_fd_);
  close(stop_fd_);
  if (stat_fd_ >= 0) close(stat_fd_);
  std::lock_guard<std::mutex> g(mu_);
  for (Registration* r : regs_) r->owner_ = nullptr;
}

std::unique_ptr<HeartbeatThread::Registration> HeartbeatThread::add(sluice_liveness* live,
                                                                    std::chrono::nanoseconds period,
                                                                    std::chrono::nanoseconds loop_stall,
                                                                    std::chrono::nanoseconds limit,
                                                                    const std::string& owner) {
  std::unique_ptr<Registration> r(new Registration());
  r->owner_ = this;
  r->live_ = live;
  r->period_ns_ = uint64_t(std::max<int64_t>(period.count(), 1'000'000));
  r->loop_stall_ns_ = uint64_t(std::max<int64_t>(loop_stall.count(), 0));
  r->limit_ns_ = uint64_t(std::max<int64_t>(limit.count(), 0));
  r->owner_name_ = owner;
  uint64_t now = monotonic_ns();
  std::lock_guard<std::mutex> g(mu_);
  __atomic_store_n(&live->heartbeat_ns, now, __ATOMIC_RELAXED);
  __atomic_store_n(&live->stall_ns,
                   std::max<uint64_t>(uint64_t(std::chrono::nanoseconds(kTaskStall).count()), 2 * r->limit_ns_),
                   __ATOMIC_RELAXED);
  __atomic_store_n(&live->tick_ns, tick_ns_, __ATOMIC_RELAXED);
  __atomic_store_n(&live->task_start, start_ticks_, __ATOMIC_RELAXED);
  __atomic_store_n(&live->task_tid, tid_, __ATOMIC_RELAXED);
  __atomic_store_n(&live->withdrawn, 0u, __ATOMIC_RELEASE);
  r->last_ns_ = now;
  r->stats_.writes = 1;
  regs_.push_back(r.get());
  // A shorter period than the thread sleeps now takes effect at once.
  if (now + r->period_ns_ < deadline_) {
    deadline_ = now + r->period_ns_;
    itimerspec its{};
    its.it_value = to_timespec(deadline_);
    timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &its, nullptr);
  }
  return r;
}

void HeartbeatThread::remove(Registration* r) {
  std::lock_guard<std::mutex> g(mu_);
  regs_.erase(std::remove(regs_.begin(), regs_.end(), r), regs_.end());
}

HeartbeatThread::Stats HeartbeatThread::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  return stats_;
}

nlohmann::json HeartbeatThread::LoopStall::json() const {
  return {{"age_ms", double(age_ns) / 1e6},   {"blamed_ms", double(blamed_ns) / 1e6},
          {"late_ms", double(late_ns) / 1e6}, {"waited_ms", double(waited_ns) / 1e6},
          {"ran_ms", double(ran_ns) / 1e6},   {"sampled", sampled},
          {"state", std::string(1, state)},   {"cpu", cpu}};
}

nlohmann::json HeartbeatThread::status() const {
  std::lock_guard<std::mutex> g(mu_);
  nlohmann::json stalls = nlohmann::json::array();
  for (const LoopStall& l : stats_.stalls) {
    nlohmann::json j = l.json();
    j["at_ms"] = l.at_ns / 1'000'000;  // monotonic
    stalls.push_back(j);
  }
  nlohmann::json words = nlohmann::json::array();
  for (const Registration* r : regs_)
    words.push_back({{"owner", r->owner_name_},
                     {"period_ms", double(r->period_ns_) / 1e6},
                     {"limit_ms", double(r->limit_ns_) / 1e6},
                     {"loop_stall_ms", double(r->loop_stall_ns_) / 1e6},
                     {"task_stall_ms", double(__atomic_load_n(&r->live_->stall_ns, __ATOMIC_RELAXED)) / 1e6},
                     {"writes", r->stats_.writes},
                     {"gaps_over_limit", r->stats_.gaps_over_limit},
                     {"max_gap_us", r->stats_.max_gap_ns / 1000},
                     {"withheld", r->stats_.withheld}});
  return {{"sched", stats_.sched},
          {"tid", tid_},
          {"start_ticks", start_ticks_},
          {"wakeups", stats_.wakeups},
          {"late_max_us", stats_.late_max_ns / 1000},
          {"late_over_100us", stats_.late_over[0]},
          {"late_over_1ms", stats_.late_over[1]},
          {"late_over_10ms", stats_.late_over[2]},
          {"late_over_100ms", stats_.late_over[3]},
          {"loop_waits_excused", stats_.loop_waits_excused},
          {"loop_wait_excused_max_us", stats_.loop_wait_excused_max_ns / 1000},
          {"loop_stalls_total", stats_.loop_stalls_total},
          {"loop_stalls", stalls},
          {"words", words}};
}

bool HeartbeatThread::sample_loop(LoopSample* s) {
  pid_t tid = loop_tid_.load(std::memory_order_relaxed);
  if (tid <= 0) return false;
  if (tid != stat_tid_) {
    if (stat_fd_ >= 0) close(stat_fd_);
    stat_tid_ = tid;
    std::string path = "/proc/self/task/" + std::to_string(tid) + "/stat";
    stat_fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  }
  if (stat_fd_ < 0) return false;
  char buf[1024];
  ssize_t n = pread(stat_fd_, buf, sizeof(buf) - 1, 0);  // offset 0: formatted afresh
  if (n <= 0) return false;
  std::string text(buf, size_t(n));
  std::string state = stat_field(text, 3), cpu = stat_field(text, 39);
  // The loop thread's CPU time, exact even while it runs (schedstat's and
  // stat's figures move at ticks; schedstat's run-queue wait only once a
  // wait has ended, so an ongoing one does not show there).
  timespec ts{};
  if (state.empty() || clock_gettime(loop_clock_.load(std::memory_order_relaxed), &ts) != 0) return false;
  s->state = state[0];
  s->cpu = cpu.empty() ? -1 : std::atoi(cpu.c_str());
  s->cpu_ns = uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
  return true;
}

uint64_t HeartbeatThread::loop_blame(uint64_t now, uint64_t late, uint64_t min_stall, LoopStall* st) {
  uint64_t stamp = loop_stamp_ns_.load(std::memory_order_relaxed);
  uint64_t age = now - std::min(now, stamp);
  if (stamp != seen_stamp_) {
    // The loop ran: start over. Its age so far, bar this wake-up's
    // lateness, is blamed on it.
    seen_stamp_ = stamp;
    acc_ = LoopStall{};
    acc_.late_ns = std::min(age, late);
    acc_.blamed_ns = age - acc_.late_ns;
    sampled_ = false;
    excused_this_stamp_ = false;
  } else {
    // Since the last wake-up: time this thread could not run is not the
    // loop's (after the whole machine stood still both are late together).
    uint64_t dt = now - std::min(now, prev_now_);
    uint64_t late_part = std::min(dt, late);
    uint64_t blame = dt - late_part;
    if (sampled_) {
      LoopSample s;
      if (sample_loop(&s)) {
        uint64_t ran = std::min(dt, s.cpu_ns - std::min(s.cpu_ns, prev_cpu_ns_));
        prev_cpu_ns_ = s.cpu_ns;
        acc_.ran_ns += ran;
        acc_.state = s.state;
        acc_.cpu = s.cpu;
        // Runnable: it is blamed for the time it ran (its own code), not
        // for the time it waited for a CPU. Blocked (S, D), stopped or
        // traced: the whole interval, as before.
        if (s.state == 'R') {
          uint64_t b = std::min(blame, ran);
          acc_.waited_ns += blame - b;
          blame = b;
        }
      } else {
        sampled_ = false;
      }
    }
    acc_.late_ns += late_part;
    acc_.blamed_ns += blame;
  }
  prev_now_ = now;
  // Late enough to look at the loop's thread from now on (a few reads of
  // /proc per period, only while the loop is late).
  uint64_t suspect = std::min<uint64_t>(min_stall / 2, 2 * std::chrono::nanoseconds(kLoopStampPeriod).count());
  if (min_stall && !sampled_ && acc_.blamed_ns > suspect) {
    LoopSample s;
    if (sample_loop(&s)) {
      sampled_ = true;
      acc_.sampled = true;
      prev_cpu_ns_ = s.cpu_ns;
      acc_.state = s.state;
      acc_.cpu = s.cpu;
    }
  }
  *st = acc_;
  st->at_ns = now;
  st->age_ns = age;
  if (min_stall && acc_.blamed_ns <= min_stall && acc_.blamed_ns + acc_.waited_ns > min_stall) {
    if (!excused_this_stamp_) ++stats_.loop_waits_excused;
    excused_this_stamp_ = true;
    stats_.loop_wait_excused_max_ns = std::max(stats_.loop_wait_excused_max_ns, acc_.waited_ns);
  }
  return acc_.blamed_ns;
}

void HeartbeatThread::run() {
  pollfd fds[2] = {{timer_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  for (;;) {
    int n = poll(fds, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (fds[1].revents & POLLIN)) return;
    if (!(fds[0].revents & POLLIN)) continue;
    uint64_t expirations = 0;
    if (read(timer_fd_, &expirations, sizeof(expirations)) != sizeof(expirations)) continue;
    uint64_t now = monotonic_ns();
    uint64_t period = kIdlePeriodNs;
    std::vector<std::string> paused, resumed;
    LoopStall stall;
    {
      std::lock_guard<std::mutex> g(mu_);
      // Lateness against the deadline this wake-up was armed for.
      uint64_t late = now > deadline_ ? now - deadline_ : 0;
      uint64_t min_stall = 0;
      for (const Registration* r : regs_)
        if (r->loop_stall_ns_ && (!min_stall || r->loop_stall_ns_ < min_stall)) min_stall = r->loop_stall_ns_;
      uint64_t loop_age = loop_blame(now, late, min_stall, &stall);
      ++stats_.wakeups;
      stats_.late_max_ns = std::max(stats_.late_max_ns, late);
      for (int b = 0; b < 4; ++b)
        if (late > kLateBucketsNs[b]) ++stats_.late_over[b];
      for (Registration* r : regs_) {
        period = std::min(period, r->period_ns_);
        if (r->loop_stall_ns_ && loop_age > r->loop_stall_ns_) {
          ++r->stats_.withheld;
          if (!r->paused_) {
            paused.push_back(r->owner_name_);
            __atomic_store_n(&r->live_->withdrawn, 1u, __ATOMIC_RELEASE);
          }
          r->paused_ = true;
          continue;
        }
        uint64_t gap = now - std::min(now, r->last_ns_);
        r->max_gap_ns_ = std::max(r->max_gap_ns_, gap);
        __atomic_store_n(&r->live_->heartbeat_ns, now, __ATOMIC_RELEASE);
        if (r->paused_) {
          resumed.push_back(r->owner_name_);
          __atomic_store_n(&r->live_->withdrawn, 0u, __ATOMIC_RELEASE);
        }
        r->paused_ = false;
        r->last_ns_ = now;
        ++r->stats_.writes;
        r->stats_.max_gap_ns = std::max(r->stats_.max_gap_ns, gap);
        if (r->limit_ns_ && gap > r->limit_ns_) ++r->stats_.gaps_over_limit;
      }
      // Next deadline on the period grid; wake-ups missed while late are
      // not made up (one refresh is as good as several).
      deadline_ = std::min(deadline_, now) + period;
      if (deadline_ <= now) deadline_ = now + period;
      itimerspec its{};
      its.it_value = to_timespec(deadline_);
      timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &its, nullptr);
      if (!paused.empty()) {
        ++stats_.loop_stalls_total;
        if (stats_.stalls.size() >= kStallsKept) stats_.stalls.erase(stats_.stalls.begin());
        stats_.stalls.push_back(stall);
      }
    }
    for (const auto& o : paused)
      SLOG_WARN("HEARTBEAT_PAUSED",
                "{}: the event loop has not run for {} ms, {} ms of it its own (not: this thread late {} ms, the "
                "loop's thread runnable but not running {} ms; it ran {} ms, now in state {}): heartbeat withdrawn, "
                "BPF fails open",
                o, stall.age_ns / 1'000'000, stall.blamed_ns / 1'000'000, stall.late_ns / 1'000'000,
                stall.waited_ns / 1'000'000, stall.ran_ns / 1'000'000, stall.state);
    for (const auto& o : resumed) SLOG_INFO("HEARTBEAT_RESUMED", "{}: the event loop runs again: heartbeat resumed", o);
  }
}

}  // namespace sluice
