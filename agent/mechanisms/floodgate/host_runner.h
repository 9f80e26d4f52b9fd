// Floodgate §4.3 on a host, the I/O half: loads bpf/host/dstpause.bpf.c on
// the uplink (ingress gate, egress hold), owns its two rings and the
// sl_fg_held_v1 map, re-sends held frames through an AF_PACKET socket with the
// reinject mark, and drives HostPause (host_pause.h). Call poll() from the
// event loop (or a test) every millisecond or two; it never blocks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/config.h"
#include "mechanisms/floodgate/host_pause.h"
#include "sluice/liveness.h"

namespace sluice::floodgate {

// tc priority of dp_ingress / dp_egress (core/tc.h): before flowstat, like
// PAC, so a held frame is counted once, when it is re-sent.
inline constexpr uint32_t kDstPauseTcPrio = 0xA430;

struct HostRunnerConfig {
  std::string uplink;  // interface to the first-hop ToR
  uint32_t reinject_mark = 0x5107;
  AttachMode attach_mode = AttachMode::Clsact;  // dp_egress returns TC_ACT_STOLEN: cls_bpf only
  std::string state_dir;                        // TcAttachment's marker directory
  HostPauseConfig pause;
  // dp_egress stops holding (every frame passes) once liveness() is older
  // than this and the thread that refreshes it is gone or stopped
  // (bpf/lib/liveness.h); 0 = never.
  uint64_t fail_open_ns = 0;
};

class HostRunner {
 public:
  explicit HostRunner(HostRunnerConfig cfg);  // throws on failure, leaving nothing attached
  ~HostRunner();
  HostRunner(const HostRunner&) = delete;
  HostRunner& operator=(const HostRunner&) = delete;

  // Consumes both rings, applies the effects, expires pauses.
  void poll(uint64_t now_ns);
  const HostPause& state() const;
  // The record dp_egress reads; whoever drives poll() keeps it fresh
  // (sluiced: its heartbeat thread, core/heartbeat.h).
  sluice_liveness* liveness();
  uint64_t fail_open_ns() const;
  uint64_t send_errors() const;
  // sl_fg_cnt_v1 summed over CPUs (packets), by sl_dp_slot / sl_ctrl_reason.
  uint64_t counter(uint32_t slot) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::floodgate
