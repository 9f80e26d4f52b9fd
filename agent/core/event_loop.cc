#include "event_loop.h"

#include <boost/asio/post.hpp>

#include "heartbeat.h"

namespace sluice {

PeriodicTimer::PeriodicTimer(boost::asio::io_context& io, std::chrono::nanoseconds period, std::function<void()> fn)
    : timer_(io), period_(period), fn_(std::move(fn)), alive_(std::make_shared<bool>(true)) {
  arm();
}

PeriodicTimer::~PeriodicTimer() {
  *alive_ = false;
  timer_.cancel();
}

void PeriodicTimer::arm() {
  timer_.expires_after(period_);
  std::weak_ptr<bool> alive = alive_;
  timer_.async_wait([this, alive](const boost::system::error_code& ec) {
    auto a = alive.lock();
    if (ec || !a || !*a) return;
    fn_();
    if (*a) arm();
  });
}

FdWatch::FdWatch(boost::asio::io_context& io, int fd, std::function<void()> fn)
    : sd_(io, fd), fn_(std::move(fn)), alive_(std::make_shared<bool>(true)) {
  arm();
}

FdWatch::~FdWatch() {
  *alive_ = false;
  boost::system::error_code ec;
  sd_.cancel(ec);
  sd_.release();  // the fd belongs to the caller
}

void FdWatch::arm() {
  std::weak_ptr<bool> alive = alive_;
  sd_.async_wait(boost::asio::posix::stream_descriptor::wait_read, [this, alive](const boost::system::error_code& ec) {
    auto a = alive.lock();
    if (ec || !a || !*a) return;
    fn_();
    if (*a) arm();
  });
}

EventLoop::EventLoop() = default;
EventLoop::~EventLoop() = default;

HeartbeatThread& EventLoop::heartbeats() {
  if (!heartbeats_) heartbeats_ = std::make_unique<HeartbeatThread>(*this);
  return *heartbeats_;
}

void EventLoop::post(std::function<void()> fn) { boost::asio::post(io_, std::move(fn)); }

std::unique_ptr<PeriodicTimer> EventLoop::every(std::chrono::nanoseconds period, std::function<void()> fn) {
  return std::make_unique<PeriodicTimer>(io_, period, std::move(fn));
}

std::unique_ptr<FdWatch> EventLoop::watch_readable(int fd, std::function<void()> fn) {
  return std::make_unique<FdWatch>(io_, fd, std::move(fn));
}

void EventLoop::on_signals(std::initializer_list<int> signals, std::function<void(int)> fn) {
  signals_ = std::make_unique<boost::asio::signal_set>(io_);
  for (int s : signals) signals_->add(s);
  on_signal_ = std::move(fn);
  arm_signals();
}

void EventLoop::arm_signals() {
  signals_->async_wait([this](const boost::system::error_code& ec, int signo) {
    if (ec) return;
    on_signal_(signo);
    if (signals_) arm_signals();
  });
}

void EventLoop::run() {
  io_.restart();
  io_.run();
}

void EventLoop::stop() {
  if (signals_) {
    boost::system::error_code ec;
    signals_->cancel(ec);
  }
  io_.stop();
}

size_t EventLoop::run_one_for(std::chrono::milliseconds timeout) {
  io_.restart();
  return io_.run_one_for(timeout);
}

}  // namespace sluice
