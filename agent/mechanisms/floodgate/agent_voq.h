// [floodgate] voq = "agent": the VOQs design A keeps in sluiced
// (switch_glue.cc, docs/floodgate.md "VOQs in the agent"), one FIFO of
// frames per (egress port, destination), and the bytes each port's VOQs
// hold together (what voq_limit_bytes bounds). I/O-free: the caller sends.
//
// A VOQ exists only while it holds frames: release() erases the one it
// empties, and the next frame for that destination makes a new one, so
// the map is bounded by the destinations waiting now, not by every
// destination that ever waited.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "mechanisms/floodgate/switch_keys.h"

namespace sluice::floodgate {

class AgentVoqs {
 public:
  struct Frame {
    std::vector<uint8_t> bytes;
    uint64_t stolen_ns = 0;  // when fg_egress took it (CLOCK_MONOTONIC)
  };

  explicit AgentVoqs(size_t ports) : held_(ports, 0), held_max_(ports, 0) {}

  // Frames k's VOQ holds (0: it has none).
  size_t frames(const SwKey& k) const {
    auto it = voqs_.find(k);
    return it == voqs_.end() ? 0 : it->second.frames.size();
  }
  bool has(const SwKey& k) const { return voqs_.count(k) != 0; }
  // VOQs that exist (each holds at least one frame).
  size_t size() const { return voqs_.size(); }
  // Bytes the VOQs of port p hold now, and the most they held at once.
  uint64_t held(uint32_t p) const { return p < held_.size() ? held_[p] : 0; }
  uint64_t held_max(uint32_t p) const { return p < held_max_.size() ? held_max_[p] : 0; }
  uint64_t held_total() const {
    uint64_t s = 0;
    for (uint64_t h : held_) s += h;
    return s;
  }

  // Appends a copy of the frame to k's VOQ (made if it has none) and
  // returns it (the caller may mark it). k.first must be below `ports`.
  Frame& push(const SwKey& k, const uint8_t* data, size_t len, uint64_t stolen_ns) {
    Voq& v = voqs_[k];
    v.frames.push_back({std::vector<uint8_t>(data, data + len), stolen_ns});
    held_[k.first] += len;
    held_max_[k.first] = std::max(held_max_[k.first], held_[k.first]);
    return v.frames.back();
  }

  // From the head of k's VOQ while `window` > 0, each frame taking its
  // length off it (the last may take it below zero, as fg_egress lets a
  // direct frame do): send(frame) for each, in order (it may complete the
  // frame's checksums in place), then it is gone. A
  // VOQ left empty is erased. Returns the frames taken.
  template <class Send>
  size_t release(const SwKey& k, int64_t window, Send&& send) {
    auto it = voqs_.find(k);
    if (it == voqs_.end()) return 0;
    std::deque<Frame>& q = it->second.frames;
    size_t n = 0;
    while (!q.empty() && window > 0) {
      const uint64_t len = q.front().bytes.size();
      send(q.front());
      window -= int64_t(len);
      held_[k.first] -= len;
      q.pop_front();
      ++n;
    }
    if (q.empty()) voqs_.erase(it);
    return n;
  }

  // Every frame of every VOQ, window or not (shutdown): send(key, frame).
  template <class Send>
  void drain(Send&& send) {
    for (auto& [k, v] : voqs_)
      for (Frame& f : v.frames) send(k, f);
    voqs_.clear();
    std::fill(held_.begin(), held_.end(), 0);
  }

 private:
  struct Voq {
    std::deque<Frame> frames;
  };
  std::map<SwKey, Voq> voqs_;
  std::vector<uint64_t> held_, held_max_;
};

}  // namespace sluice::floodgate
