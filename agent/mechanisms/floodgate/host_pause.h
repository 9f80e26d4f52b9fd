// Floodgate §4.3 on a host: per-destination queues driven by dstPause and
// dstResume from the first-hop ToR. I/O-free: the caller (sluiced, a test)
// feeds it accepted control frames (from dp_ingress's ring), the frames
// dp_egress stole for held destinations, and ticks, and applies the
// effects it returns, in order: hold a destination (sl_fg_held_v1[dst] = 1),
// re-send a frame (AF_PACKET with the reinject mark), release a
// destination (delete sl_fg_held_v1[dst]).
//
// Fail open: a pause that is not refreshed within pause_timeout is resumed,
// and a host that holds more than max_frames frames releases the
// destination it was about to queue to (sending everything held for it).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "switch/control.h"

namespace sluice::floodgate {

// [floodgate] host_pause_timeout_ms and host_max_held_frames (config.h);
// these defaults when the keys are absent.
struct HostPauseConfig {
  uint64_t pause_timeout_ns = 20'000'000;
  size_t max_frames = 4096;  // all destinations together
};

struct HostPauseStats {
  uint64_t pauses = 0, resumes = 0;  // applied
  uint64_t stale = 0;                // frames with a seq not after the last applied
  uint64_t expired = 0;              // pauses resumed by the timeout
  uint64_t overflow = 0;             // destinations released because max_frames was reached
  uint64_t held_frames = 0;          // frames queued, ever
  uint64_t resent_frames = 0;        // frames handed back for sending: held ones and passed ones
  uint64_t passed_frames = 0;        // stolen for a destination no longer paused: sent on, never held
  uint32_t paused_dsts = 0;
  uint32_t queued_frames = 0;
};

class HostPause {
 public:
  struct Effect {
    enum Kind { kHold, kSend, kRelease } kind;
    sw::Addr dst;
    std::vector<uint8_t> frame;  // kSend
  };

  explicit HostPause(HostPauseConfig cfg = {}) : cfg_(cfg) {}

  // An accepted dstPause / dstResume (other types are ignored).
  void on_control(const sw::ControlFrame& f, uint64_t now, std::vector<Effect>& out);
  // A frame dp_egress stole for `dst`.
  void on_frame(const sw::Addr& dst, const uint8_t* frame, size_t len, uint64_t now, std::vector<Effect>& out);
  // Expires pauses; call every few milliseconds.
  void on_tick(uint64_t now, std::vector<Effect>& out);

  bool paused(const sw::Addr& dst) const { return dsts_.count(dst) && dsts_.at(dst).paused; }
  size_t queued(const sw::Addr& dst) const { return dsts_.count(dst) ? dsts_.at(dst).frames.size() : 0; }
  const HostPauseStats& stats() const { return stats_; }
  const HostPauseConfig& config() const { return cfg_; }

 private:
  struct Dst {
    bool paused = false;
    bool have_seq = false;
    uint32_t seq = 0;
    uint64_t expires_ns = 0;
    std::deque<std::vector<uint8_t>> frames;
  };
  void release(const sw::Addr& dst, Dst& d, std::vector<Effect>& out);
  void count();

  HostPauseConfig cfg_;
  std::map<sw::Addr, Dst> dsts_;
  size_t total_ = 0;
  HostPauseStats stats_;
};

}  // namespace sluice::floodgate
