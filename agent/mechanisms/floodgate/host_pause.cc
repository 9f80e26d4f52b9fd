#include "mechanisms/floodgate/host_pause.h"

namespace sluice::floodgate {

void HostPause::count() {
  uint32_t n = 0;
  for (const auto& [a, d] : dsts_) n += d.paused;
  stats_.paused_dsts = n;
  stats_.queued_frames = uint32_t(total_);
}

// Sends everything held for dst, in order, then stops holding it.
void HostPause::release(const sw::Addr& dst, Dst& d, std::vector<Effect>& out) {
  for (auto& f : d.frames) {
    out.push_back({Effect::kSend, dst, std::move(f)});
    ++stats_.resent_frames;
  }
  total_ -= d.frames.size();
  d.frames.clear();
  d.paused = false;
  out.push_back({Effect::kRelease, dst, {}});
}

void HostPause::on_control(const sw::ControlFrame& f, uint64_t now, std::vector<Effect>& out) {
  if (f.type != sw::CtrlType::kDstPause && f.type != sw::CtrlType::kDstResume) return;
  for (const auto& r : f.dsts) {
    Dst& d = dsts_[r.dst];
    // wire.h: a record applies only if its seq is after the last applied
    // one (serial arithmetic), so a reordered resume never undoes a pause.
    if (d.have_seq && int32_t(r.seq - d.seq) <= 0) {
      ++stats_.stale;
      continue;
    }
    d.have_seq = true;
    d.seq = r.seq;
    if (f.type == sw::CtrlType::kDstPause) {
      ++stats_.pauses;
      d.expires_ns = now + cfg_.pause_timeout_ns;
      if (!d.paused) {
        d.paused = true;
        out.push_back({Effect::kHold, r.dst, {}});
      }
    } else {
      ++stats_.resumes;
      if (d.paused) release(r.dst, d, out);
    }
  }
  count();
}

void HostPause::on_frame(const sw::Addr& dst, const uint8_t* frame, size_t len, uint64_t, std::vector<Effect>& out) {
  auto it = dsts_.find(dst);
  std::vector<uint8_t> copy(frame, frame + len);
  if (it == dsts_.end() || !it->second.paused) {
    // Stolen just before the release took effect: send it on.
    out.push_back({Effect::kSend, dst, std::move(copy)});
    ++stats_.resent_frames;
    ++stats_.passed_frames;
    return;
  }
  Dst& d = it->second;
  d.frames.push_back(std::move(copy));
  ++total_;
  ++stats_.held_frames;
  if (total_ > cfg_.max_frames) {
    ++stats_.overflow;
    release(dst, d, out);
  }
  count();
}

void HostPause::on_tick(uint64_t now, std::vector<Effect>& out) {
  for (auto& [a, d] : dsts_)
    if (d.paused && now >= d.expires_ns) {
      ++stats_.expired;
      release(a, d, out);
    }
  count();
}

}  // namespace sluice::floodgate
