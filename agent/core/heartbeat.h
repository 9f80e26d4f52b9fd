// The agent's liveness as BPF programs see it. A mechanism whose BPF side
// diverts packets to the agent (PAC's held ACKs, the switch classifier's
// paused classes) reads a liveness record the agent keeps
// (include/sluice/liveness.h, decided by bpf/lib/liveness.h), and stops
// diverting -- fails open -- when the heartbeat in it is older than its
// limit and, where the kernel can tell (6.2+), the thread writing it is gone,
// stopped or frozen; a live thread gets up to stall_ns (kTaskStall, at least
// twice the limit): a machine that ran nothing for a while (a VM stopped by
// its host, measured up to 1.6 s) is not a dead agent.
//
// The records are refreshed by a thread of their own, not by the event loop:
// woken by an absolute CLOCK_MONOTONIC timerfd each period, in the SCHED_FIFO
// class when the process may use it (CAP_SYS_NICE or RLIMIT_RTPRIO >= 1; the
// systemd unit sets LimitRTPRIO), so a busy CPU does not make the agent look
// dead. Refused, it runs SCHED_OTHER and says so in the log
// (HEARTBEAT_SCHED). A thread that beats while the loop is stuck would
// keep packets diverted that nobody releases, so each record is refreshed
// only while the event loop has shown progress within its registration's
// `loop_stall` (the loop stamps itself every kLoopStampPeriod); beyond that
// the thread withdraws the record (`withdrawn`: BPF fails open at the limit
// whatever the thread does, HEARTBEAT_PAUSED). The loop is blamed only for
// time it could have run: not for time in which the thread itself could not
// run (its wake-ups' lateness: after the machine stood still, the loop gets
// loop_stall to run), nor for time the loop's thread was runnable but not
// running (a vCPU that stood still alone, competitors that kept it off the
// CPU). Once the loop is late the thread looks at the loop's thread every
// period: its state (/proc/self/task/<tid>/stat) and CPU time
// (pthread_getcpuclockid); while it is runnable (R) only the CPU time it
// used is blamed. What is left is time it ran its own code or was blocked
// (a callback spinning, or stuck in a syscall: S, D), or stopped, and that
// withdraws the record as before.
//
// Measured in bench/liveness (docs/operations.md "Liveness under load").
#pragma once

#include <linux/types.h>
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bpf_util.h"
#include "sluice/liveness.h"

namespace sluice {

class EventLoop;
class PeriodicTimer;

// The object a mechanism that fails open loads: `own`, whose programs look
// at the heartbeat thread (bpf_task_from_pid), where the kernel has the
// bpf-task-from-pid feature, else `compat`, its twin built with
// SLUICE_LIVENESS_HEARTBEAT_ONLY (the heartbeat alone; LIVENESS_COMPAT in
// the log, once).
SkelElf liveness_object(const SkelElf& own, const SkelElf& compat);
// The same for an object of XDP programs, which may call the kfunc from 6.8
// on only (the bpf-task-from-pid-xdp feature; 6.2 to 6.7 take `compat`).
SkelElf liveness_object_xdp(const SkelElf& own, const SkelElf& compat);

// Field 22 of a /proc/<pid>/stat (or /proc/<pid>/task/<tid>/stat) file: the
// task's start in clock ticks since boot, what liveness.task_start holds; 0
// when unreadable.
uint64_t start_ticks_of(const std::string& proc_stat);

// The SCHED_FIFO priority of a heartbeat thread started from the calling
// thread: `wanted`, or one above the caller's own real-time priority when
// that is as high or higher (the heartbeat must not wait behind the loop it
// watches, nor behind what the loop itself may preempt).
int heartbeat_rt_priority(int wanted);

class HeartbeatThread {
 public:
  static constexpr std::chrono::milliseconds kLoopStampPeriod{5};
  // How long BPF waits for a heartbeat thread that exists and may run
  // (stall_ns = max(kTaskStall, 2 x limit)): three times the longest
  // stand-still of the whole machine measured (1.66 s, docs/operations.md
  // "Liveness under load"). It bounds the case the loop-stall gate cannot
  // see: the thread itself stuck while runnable or blocked in the kernel.
  static constexpr std::chrono::milliseconds kTaskStall{5000};

  struct Options {
    bool realtime = true;  // try SCHED_FIFO
    int rt_priority = 1;   // the lowest real-time priority: above every SCHED_OTHER task, below the rest
                           // (raised above the starting thread's own, heartbeat_rt_priority)
  };

  // One liveness record. Destroying it withdraws the record (BPF fails
  // open at its limit) and stops the refreshes (before the record's memory
  // goes away).
  class Registration {
   public:
    ~Registration();
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;
    // Longest time the word went unrefreshed since the last call, including
    // its current age: above the BPF side's limit means it may have failed
    // open meanwhile.
    uint64_t take_max_gap_ns();

    struct Stats {
      uint64_t writes = 0;
      uint64_t gaps_over_limit = 0;  // refreshes that came later than `limit` after the one before
      uint64_t max_gap_ns = 0;
      uint64_t withheld = 0;  // wake-ups that did not refresh: the loop had stalled
    };
    Stats stats() const;

   private:
    friend class HeartbeatThread;
    Registration() = default;
    HeartbeatThread* owner_ = nullptr;
    sluice_liveness* live_ = nullptr;
    uint64_t period_ns_ = 0, loop_stall_ns_ = 0, limit_ns_ = 0;
    std::string owner_name_;
    uint64_t last_ns_ = 0, max_gap_ns_ = 0;  // under owner_->mu_
    bool paused_ = false;
    Stats stats_;
  };

  // The loop's time since it last stamped itself, when the thread
  // withdrew a record for it: what it was blamed for and what was not.
  struct LoopStall {
    uint64_t at_ns = 0;      // monotonic
    uint64_t age_ns = 0;     // since the loop's last stamp
    uint64_t late_ns = 0;    // of which this thread could not run (its wake-ups' lateness)
    uint64_t waited_ns = 0;  // of which the loop's thread was runnable but not running
    uint64_t ran_ns = 0;     // the loop thread's CPU time meanwhile (while looked at)
    uint64_t blamed_ns = 0;  // age - late - waited: above loop_stall
    char state = '?';        // the loop thread's state when last looked at (stat field 3: R, S, D, T, t...)
    int cpu = -1;            // the CPU it last ran on (stat field 39)
    bool sampled = false;    // the loop's thread was looked at (else ran/waited/state unknown)
    // The breakdown in ms (without at_ns), as `sluicectl status` shows it.
    nlohmann::json json() const;
  };
  static constexpr size_t kStallsKept = 32;

  struct Stats {
    std::string sched;  // "SCHED_FIFO 1" or "SCHED_OTHER (why)"
    uint64_t wakeups = 0;
    uint64_t late_max_ns = 0;
    // Wake-ups later than 0.1, 1, 10, 100 ms past their deadline.
    uint64_t late_over[4] = {};
    // Times the loop went longer than a loop_stall without stamping itself
    // but was not blamed, because its thread was runnable and not running
    // for part of it (counted once per loop stamp), and the longest such
    // wait excused.
    uint64_t loop_waits_excused = 0;
    uint64_t loop_wait_excused_max_ns = 0;
    // Withdrawals because the loop stalled (wake-ups that paused a record),
    // and the last kStallsKept of them, oldest first.
    uint64_t loop_stalls_total = 0;
    std::vector<LoopStall> stalls;
  };

  HeartbeatThread(EventLoop& loop, Options opt);
  explicit HeartbeatThread(EventLoop& loop) : HeartbeatThread(loop, Options{}) {}
  ~HeartbeatThread();
  HeartbeatThread(const HeartbeatThread&) = delete;
  HeartbeatThread& operator=(const HeartbeatThread&) = delete;

  // Fills *live (this thread's id and start, stall_ns) and refreshes its
  // heartbeat (monotonic ns, what bpf_ktime_get_ns() returns) every
  // `period` while the loop has run within `loop_stall` (0: whatever the
  // loop does). `limit` is the age at which the BPF side fails open: gaps
  // longer than it are counted. The record is written once now, before
  // this returns.
  std::unique_ptr<Registration> add(sluice_liveness* live, std::chrono::nanoseconds period,
                                    std::chrono::nanoseconds loop_stall, std::chrono::nanoseconds limit,
                                    const std::string& owner);
  // The usual registration of a program that fails open at `limit`:
  // refreshed every limit / 4 (at least 1 ms) while the loop has run
  // within `limit`.
  std::unique_ptr<Registration> add_fail_open(sluice_liveness* live, std::chrono::milliseconds limit,
                                              const std::string& owner) {
    return add(live, std::max<std::chrono::nanoseconds>(limit / 4, std::chrono::milliseconds(1)), limit, limit, owner);
  }

  // The thread BPF looks at: its id in the initial PID namespace (as far as
  // /proc tells) and its start in clock ticks since boot.
  pid_t tid() const { return tid_; }
  uint64_t start_ticks() const { return start_ticks_; }

  Stats stats() const;
  nlohmann::json status() const;
  bool realtime() const { return realtime_; }

 private:
  void run();
  void remove(Registration* r);
  struct LoopSample {
    uint64_t cpu_ns = 0;
    char state = '?';
    int cpu = -1;
  };
  // The loop's thread now: state, last CPU, CPU time.
  bool sample_loop(LoopSample* s);
  // How long the loop has not stamped itself, minus the time it could not
  // run; fills *st with the breakdown. Thread-only, under mu_.
  uint64_t loop_blame(uint64_t now, uint64_t late, uint64_t min_stall, LoopStall* st);

  EventLoop& loop_;
  mutable std::mutex mu_;
  std::vector<Registration*> regs_;
  Stats stats_;
  uint64_t deadline_ = 0;  // the timer's next expiry (absolute, monotonic ns)
  // Thread-only state: the loop's last stamp this thread saw, the time
  // since then split into blamed / excused (acc_), the last wake-up, and
  // whether the loop's thread is being looked at (its CPU time then).
  uint64_t seen_stamp_ = 0, prev_now_ = 0, prev_cpu_ns_ = 0;
  LoopStall acc_;
  bool sampled_ = false, excused_this_stamp_ = false;
  pid_t stat_tid_ = 0;
  int stat_fd_ = -1;
  // The loop's thread, as its stamps say.
  std::atomic<pid_t> loop_tid_{0};
  std::atomic<clockid_t> loop_clock_{CLOCK_THREAD_CPUTIME_ID};
  pid_t tid_ = 0;
  uint64_t start_ticks_ = 0, tick_ns_ = 0;
  std::atomic<uint64_t> loop_stamp_ns_{0};
  std::unique_ptr<PeriodicTimer> stamp_;
  int timer_fd_ = -1, stop_fd_ = -1;
  bool realtime_ = false;
  Options opt_;
  std::thread thread_;
};

}  // namespace sluice
