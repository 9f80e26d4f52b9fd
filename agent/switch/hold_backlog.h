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
  explicit PerMsMax(size_t cap = kDefaultCap) : cap_(std::max<size_t>(cap, 1)), hist_(kBuckets, 0) {}

  // The quantity is `v` from `now_ns` on. Closes the milliseconds since the
  // last change: the first with the largest value it saw, the rest with
  // the value then (it did not change meanwhile).
  void set(uint64_t v, uint64_t now_ns) {
    const uint64_t ms = now_ns / 1'000'000;
    if (started_ && ms > ms_) {
      close(max_);
      close_idle(value_, ms - ms_ - 1);
      max_ = value_;
    }
    started_ = true;
    ms_ = std::max(ms_, ms);
    value_ = v;
    max_ = std::max(max_, v);
  }

  // p99 and max of the kept milliseconds. Read from a histogram, not by
  // sorting the ring: a status request costs the same few microseconds
  // whatever the ring holds (sorting 10 minutes took ~5 ms per port on the
  // loop that sends the held frames). Values below 1024 are exact; above,
  // each is the top of its bucket, at most 1/512 (0.2%) above the true
  // value, never below it.
  struct Summary {
    size_t intervals = 0;  // closed milliseconds kept (the samples behind p99)
    uint64_t p99 = 0, max = 0;
  };
  Summary summary() const {
    Summary s;
    s.intervals = ring_.size();
    if (ring_.empty()) return s;
    // The rank nth_element would pick: round(0.99 * (n - 1)), 0-based.
    const size_t rank = std::min(ring_.size() - 1, size_t(0.99 * double(ring_.size() - 1) + 0.5));
    size_t seen = 0;
    bool p99_found = false;
    for (size_t b = 0; b < kBuckets; ++b) {
      if (!hist_[b]) continue;
      seen += hist_[b];
      if (!p99_found && seen > rank) {
        s.p99 = bucket_top(b);
        p99_found = true;
      }
      s.max = bucket_top(b);
    }
    return s;
  }

  // The bucket of `x` and the largest value that falls in it (exposed for
  // the tests).
  static size_t bucket(uint32_t x) {
    if (x < kExact) return x;
    const int e = 31 - __builtin_clz(x);  // 10..31
    return kExact + size_t(e - kExactBits) * kSub + ((x >> (e - kSubBits)) & (kSub - 1));
  }
  static uint64_t bucket_top(size_t b) {
    if (b < kExact) return b;
    const int e = int((b - kExact) / kSub) + kExactBits;
    const uint64_t sub = (b - kExact) % kSub;
    const uint64_t lo = (uint64_t(1) << e) | (sub << (e - kSubBits));
    return lo + (uint64_t(1) << (e - kSubBits)) - 1;
  }

 private:
  static constexpr int kExactBits = 10, kSubBits = 9;
  static constexpr size_t kExact = size_t(1) << kExactBits, kSub = size_t(1) << kSubBits;
  static constexpr size_t kBuckets = kExact + (32 - kExactBits) * kSub;

  static uint32_t clamp32(uint64_t m) { return uint32_t(std::min<uint64_t>(m, UINT32_MAX)); }
  void close(uint64_t m) {
    const uint32_t x = clamp32(m);
    ++hist_[bucket(x)];
    if (ring_.size() < cap_) {
      ring_.push_back(x);
    } else {
      --hist_[bucket(ring_[next_])];
      ring_[next_] = x;
      next_ = (next_ + 1) % cap_;
    }
  }
  // `n` milliseconds at `m`; an idle gap of the ring's size or more
  // replaces all of it at once.
  void close_idle(uint64_t m, uint64_t n) {
    if (n < cap_) {
      for (uint64_t i = 0; i < n; ++i) close(m);
      return;
    }
    const uint32_t x = clamp32(m);
    ring_.assign(cap_, x);
    next_ = 0;
    std::fill(hist_.begin(), hist_.end(), 0);
    hist_[bucket(x)] = uint32_t(cap_);
  }

  size_t cap_;
  std::vector<uint32_t> ring_;  // closed milliseconds' maxima; full: next_ is the oldest
  std::vector<uint32_t> hist_;  // how many of ring_ fall in each bucket()
  size_t next_ = 0;
  bool started_ = false;
  uint64_t ms_ = 0, value_ = 0, max_ = 0;
};

}  // namespace sluice::sw
