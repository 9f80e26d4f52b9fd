// Design B of the switch data path (docs/switch.md, "Design B"): the agent
// holds the queues and feeds the port's root qdisc a shallow backlog. This
// is the agent's view of that backlog and its watchdog, free of I/O and of
// the clock, so the same code runs in sluice-swbench and in unit tests.
//
// The record is what bpf/switch/swhold.bpf.c writes at each enqueue or
// dequeue event of the root qdisc (sl_sw_hold_state): the qdisc's own qlen
// and agent_sent at that moment. Frames the agent handed over since then
// are in the kernel (queued, on the device, or dropped: the next event's
// qlen says which), so the backlog is qlen + agent_sent - sent_at_ev.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice::sw {

struct HoldRecord {
  uint32_t qlen = 0;        // root qdisc packets after the last event
  uint64_t sent_at_ev = 0;  // the agent's agent_sent as that event saw it
  uint64_t events = 0;      // events so far (changes when one fires)
};

// Frames the agent must assume are in the kernel. agent_sent below
// sent_at_ev (a send that failed after an event counted it) counts as 0.
inline uint64_t hold_backlog(const HoldRecord& r, uint64_t agent_sent) {
  return uint64_t(r.qlen) + (agent_sent > r.sent_at_ev ? agent_sent - r.sent_at_ev : 0);
}

// Watchdog: the kernel does not fire qdisc_dequeue for every dequeue, and
// when the missed one was the last, the record says the backlog is full
// while the qdisc is empty and no later event will correct it. While the
// agent waits for the backlog to fall, a period without any event makes
// the watchdog due: the agent then re-reads the qdisc (sw_hold_sync) and
// reports the result with synced(), which counts how often that changed
// the backlog (a missed event) and by how many frames.
class HoldWatchdog {
 public:
  explicit HoldWatchdog(uint64_t period_ns) : period_ns_(period_ns) {}

  // Called on every turn of the agent's loop. `waiting`: the agent has
  // frames to send and the backlog is at its target. Returns true when the
  // agent should re-read the qdisc now.
  bool due(uint64_t now_ns, uint64_t events, bool waiting) {
    if (events != events_ || !waiting || !armed_) {
      events_ = events;
      since_ns_ = now_ns;
      armed_ = waiting;
      return false;
    }
    return now_ns - since_ns_ >= period_ns_;
  }
  // When due() can next return true (for the loop's poll timeout), or 0 if
  // it is not armed.
  uint64_t deadline_ns() const { return armed_ ? since_ns_ + period_ns_ : 0; }

  // After a re-read: the backlog before and after. Re-arms for another
  // period (a qdisc that still holds the frames is not a missed event).
  void synced(uint64_t now_ns, uint64_t events, uint64_t before, uint64_t after) {
    ++fired_;
    if (after < before) {
      ++fixed_;
      fixed_frames_ += before - after;
    }
    events_ = events;
    since_ns_ = now_ns;
  }

  uint64_t period_ns() const { return period_ns_; }
  uint64_t fired() const { return fired_; }  // re-reads
  uint64_t fixed() const { return fixed_; }  // re-reads that lowered the backlog
  uint64_t fixed_frames() const { return fixed_frames_; }

 private:
  uint64_t period_ns_;
  uint64_t events_ = 0, since_ns_ = 0;
  bool armed_ = false;
  uint64_t fired_ = 0, fixed_ = 0, fixed_frames_ = 0;
};

// The largest value per millisecond of a quantity that changes at events
// (the bytes a port holds: what sluice-qmon reports for a kernel qdisc, the
// bench's buffer p99), over the last `cap` closed milliseconds: a ring, so
// a switch that runs for hours reports its recent past, not its first
// minutes, in bounded memory (4 bytes per millisecond kept).
class PerMsMax {
 public:
  static constexpr size_t kDefaultCap = 600'000;  // 10 minutes
  explicit PerMsMax(size_t cap = kDefaultCap) : cap_(std::max<size_t>(cap, 1)) {}

  // The quantity is `v` from `now_ns` on. Closes the milliseconds since the
  // last change: the first with the largest value it saw, the rest with
  // the value then (it did not change meanwhile).
  void set(uint64_t v, uint64_t now_ns) {
    const uint64_t ms = now_ns / 1'000'000;
    if (started_ && ms > ms_) {
      close(max_);
      const uint64_t idle = std::min<uint64_t>(ms - ms_ - 1, cap_);
      for (uint64_t i = 0; i < idle; ++i) close(value_);
      max_ = value_;
    }
    started_ = true;
    ms_ = std::max(ms_, ms);
    value_ = v;
    max_ = std::max(max_, v);
  }

  struct Summary {
    size_t intervals = 0;  // closed milliseconds kept (the samples behind p99)
    uint64_t p99 = 0, max = 0;
  };
  Summary summary() const {
    Summary s;
    s.intervals = ring_.size();
    if (ring_.empty()) return s;
    std::vector<uint32_t> v = ring_;
    s.max = *std::max_element(v.begin(), v.end());
    auto k = v.begin() + long(std::min(v.size() - 1, size_t(0.99 * double(v.size() - 1) + 0.5)));
    std::nth_element(v.begin(), k, v.end());
    s.p99 = *k;
    return s;
  }

 private:
  void close(uint64_t m) {
    const uint32_t x = uint32_t(std::min<uint64_t>(m, UINT32_MAX));
    if (ring_.size() < cap_) {
      ring_.push_back(x);
    } else {
      ring_[next_] = x;
      next_ = (next_ + 1) % cap_;
    }
  }

  size_t cap_;
  std::vector<uint32_t> ring_;  // closed milliseconds' maxima; full: next_ is the oldest
  size_t next_ = 0;
  bool started_ = false;
  uint64_t ms_ = 0, value_ = 0, max_ = 0;
};

}  // namespace sluice::sw
