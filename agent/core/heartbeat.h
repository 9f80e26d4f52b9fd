// The agent's liveness as BPF programs see it. A mechanism whose BPF side
// diverts packets to the agent (PAC's held ACKs, the switch classifier's
// paused classes) reads a heartbeat word the agent refreshes, and stops
// diverting -- fails open -- when the word is older than its limit.
//
// The words are refreshed by a thread of their own, not by the event loop:
// woken by an absolute CLOCK_MONOTONIC timerfd each period, in the SCHED_FIFO
// class when the process may use it (CAP_SYS_NICE or RLIMIT_RTPRIO >= 1; the
// systemd unit sets LimitRTPRIO), so a busy CPU does not make the agent look
// dead. Refused, it runs SCHED_OTHER and says so in the log
// (HEARTBEAT_SCHED). A thread that beats while the loop is stuck would
// keep packets diverted that nobody releases, so each word is refreshed
// only while the event loop has shown progress within its registration's
// `loop_stall` (the loop stamps itself every kLoopStampPeriod); beyond that
// the word goes stale and BPF fails open as before (HEARTBEAT_PAUSED).
//
// Measured in bench/liveness (docs/operations.md "Liveness under load").
#pragma once

#include <linux/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace sluice {

class EventLoop;
class PeriodicTimer;

class HeartbeatThread {
 public:
  static constexpr std::chrono::milliseconds kLoopStampPeriod{5};

  struct Options {
    bool realtime = true;  // try SCHED_FIFO
    int rt_priority = 1;   // the lowest real-time priority: above every SCHED_OTHER task, below the rest
  };

  // One heartbeat word. Destroying it stops the refreshes (before the word's
  // memory goes away).
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
    __u64* word_ = nullptr;
    uint64_t period_ns_ = 0, loop_stall_ns_ = 0, limit_ns_ = 0;
    std::string owner_name_;
    uint64_t last_ns_ = 0, max_gap_ns_ = 0;  // under owner_->mu_
    bool paused_ = false;
    Stats stats_;
  };

  struct Stats {
    std::string sched;  // "SCHED_FIFO 1" or "SCHED_OTHER (why)"
    uint64_t wakeups = 0;
    uint64_t late_max_ns = 0;
    // Wake-ups later than 0.1, 1, 10, 100 ms past their deadline.
    uint64_t late_over[4] = {};
  };

  HeartbeatThread(EventLoop& loop, Options opt);
  explicit HeartbeatThread(EventLoop& loop) : HeartbeatThread(loop, Options{}) {}
  ~HeartbeatThread();
  HeartbeatThread(const HeartbeatThread&) = delete;
  HeartbeatThread& operator=(const HeartbeatThread&) = delete;

  // Refreshes *word (monotonic ns, what bpf_ktime_get_ns() returns) every
  // `period` while the loop has run within `loop_stall` (0: whatever the
  // loop does). `limit` is the age at which the BPF side fails open: gaps
  // longer than it are counted. The word is written once now, before this
  // returns.
  std::unique_ptr<Registration> add(__u64* word, std::chrono::nanoseconds period, std::chrono::nanoseconds loop_stall,
                                    std::chrono::nanoseconds limit, const std::string& owner);

  Stats stats() const;
  nlohmann::json status() const;
  bool realtime() const { return realtime_; }

 private:
  void run();
  void remove(Registration* r);

  EventLoop& loop_;
  mutable std::mutex mu_;
  std::vector<Registration*> regs_;
  Stats stats_;
  uint64_t deadline_ = 0;  // the timer's next expiry (absolute, monotonic ns)
  std::atomic<uint64_t> loop_stamp_ns_{0};
  std::unique_ptr<PeriodicTimer> stamp_;
  int timer_fd_ = -1, stop_fd_ = -1;
  bool realtime_ = false;
  Options opt_;
  std::thread thread_;
};

}  // namespace sluice
