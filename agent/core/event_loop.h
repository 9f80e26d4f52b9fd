// Boost.Asio behind a few small wrappers: the agent is one io_context on one
// thread; timers, signals and readable fds (ring buffers, sockets) are its
// only event sources. Tests step it with run_one() under a guard timer.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <functional>
#include <initializer_list>
#include <memory>

namespace sluice {

class EventLoop;
class HeartbeatThread;

// Calls fn every `period` until destroyed. The first call is one period after
// creation. A slow fn delays the next call; ticks are not queued up.
class PeriodicTimer {
 public:
  PeriodicTimer(boost::asio::io_context& io, std::chrono::nanoseconds period, std::function<void()> fn);
  ~PeriodicTimer();
  PeriodicTimer(const PeriodicTimer&) = delete;
  PeriodicTimer& operator=(const PeriodicTimer&) = delete;
  void set_period(std::chrono::nanoseconds p) { period_ = p; }

 private:
  void arm();
  boost::asio::steady_timer timer_;
  std::chrono::nanoseconds period_;
  std::function<void()> fn_;
  std::shared_ptr<bool> alive_;
};

// Calls fn each time `fd` becomes readable, until destroyed. Does not own fd.
class FdWatch {
 public:
  FdWatch(boost::asio::io_context& io, int fd, std::function<void()> fn);
  ~FdWatch();
  FdWatch(const FdWatch&) = delete;
  FdWatch& operator=(const FdWatch&) = delete;

 private:
  void arm();
  boost::asio::posix::stream_descriptor sd_;
  std::function<void()> fn_;
  std::shared_ptr<bool> alive_;
};

class EventLoop {
 public:
  EventLoop();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;
  boost::asio::io_context& io() { return io_; }

  void post(std::function<void()> fn);
  std::unique_ptr<PeriodicTimer> every(std::chrono::nanoseconds period, std::function<void()> fn);
  std::unique_ptr<FdWatch> watch_readable(int fd, std::function<void()> fn);
  // fn(signo) for each delivery of the listed signals, until stop().
  void on_signals(std::initializer_list<int> signals, std::function<void(int)> fn);

  // The thread that refreshes BPF heartbeat words while this loop runs
  // (core/heartbeat.h); started on first use.
  HeartbeatThread& heartbeats();
  // nullptr until a mechanism asked for heartbeats.
  const HeartbeatThread* heartbeats_if_started() const { return heartbeats_.get(); }

  void run();
  void stop();
  // Runs ready handlers or waits at most `timeout` for one; returns the
  // number of handlers run (for tests).
  size_t run_one_for(std::chrono::milliseconds timeout);

 private:
  void arm_signals();
  boost::asio::io_context io_;
  std::unique_ptr<boost::asio::signal_set> signals_;
  std::function<void(int)> on_signal_;
  std::unique_ptr<HeartbeatThread> heartbeats_;  // destroyed before io_ (it has a timer on it)
};

}  // namespace sluice
