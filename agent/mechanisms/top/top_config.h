// [top]: TOP's host side in sluiced (top-tpds20 §4.3): the token-expiry
// threshold T (given, or derived from the network as §5.1 does), the clock
// manager's source and offset bound, and the lab's injected clock offsets.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "core/config_section.h"
#include "mechanisms/top/wire.h"

namespace sluice {

enum class TopClockSource {
  Ptp4l,   // ptp4l's management socket (pmc): offset, path delay, port state
  Shared,  // every host reads one clock (the lab's namespaces): synced by construction
};

struct TopConfig {
  static constexpr const char* kSection = "top";
  // T. Absent: derived (§5.1) as base one-way delay + 2 x (a full token
  // queue drained at the token group's rate).
  std::optional<uint32_t> threshold_us;
  uint32_t base_one_way_us = 10;  // §5.1: 10 us
  uint32_t link_mbit = 10000;     // §5.1: 10 Gbit/s
  // token / (token + full data frame) on the wire, §4.2: sluice-top's
  // 98-byte tokens and 1538-byte data frames (wire.h), as top-switch.sh.
  double token_share = top::token_group_share();
  uint32_t token_queue = 8;  // tokens per queue (ExpressPass's setting)
  uint32_t token_frame_bytes = static_cast<uint32_t>(top::kTokenFrameBytes);  // a token on the wire
  bool expire = true;    // false: count expired tokens, never drop (top-noexpiry)
  uint32_t port = 7217;  // TOP's UDP port
  TopClockSource clock_source = TopClockSource::Ptp4l;
  std::string ptp_uds = "/var/run/ptp4l";
  uint32_t clock_poll_ms = 1000;
  // While unsynced T is widened by this; with |offset| above it by |offset| + it.
  uint32_t offset_bound_us = 500;
  // Lab: this host's clock skew, added to every reading the XDP program
  // takes (the transport on this host must be given the same), and the
  // peers' skews by address: the correction for a peer is its skew minus ours.
  int64_t clock_offset_ns = 0;
  std::map<std::string, int64_t> peer_clock_offset_ns;
  // The XDP program stops dropping expired tokens once sluiced's heartbeat
  // is older than this (and its heartbeat thread gone or stopped where the
  // kernel can tell, bpf/lib/liveness.h): nobody follows the clock then.
  uint32_t fail_open_ms = 100;

  // The T in effect (given or derived), in ns.
  uint64_t threshold_ns() const;
};

const ConfigSection& top_section();

}  // namespace sluice
