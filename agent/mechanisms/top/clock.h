// TOP's clock manager logic (top-tpds20 §4.3 needs synced clocks): reads the
// PTP state of the host from ptp4l's management interface (pmc), and turns
// it into the XDP expiry settings: the threshold T from the config, widened
// by the configured bound while the clock is unsynced or its offset exceeds
// the bound, so a bad clock never makes valid tokens look expired.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace sluice::top {

struct ClockSample {
  bool have_ptp = false;      // ptp4l answered
  std::string port_state;     // SLAVE, MASTER, UNCALIBRATED, LISTENING, ...
  int64_t offset_ns = 0;      // offsetFromMaster
  int64_t path_delay_ns = 0;  // meanPathDelay
  int steps_removed = 0;
  int64_t injected_ns = 0;  // lab: the configured per-host offset
  bool shared = false;      // one clock shared by every host (the lab's namespaces): synced
};

// The sample of a clock every host shares (no PTP to ask).
ClockSample shared_clock_sample();

// Synced: ptp4l answered and the port is SLAVE (or this host is the MASTER),
// or the clock is shared.
bool synced(const ClockSample& s);

struct ExpirySettings {
  uint64_t threshold_ns = 0;
  uint64_t widen_ns = 0;
  std::string why;  // empty when not widened
};

// T from the config; widened by `bound_ns` when unsynced, and by
// |offset| + bound when the offset is above the bound.
ExpirySettings expiry_for(const ClockSample& s, uint64_t threshold_ns, uint64_t bound_ns);

// What the XDP program adds to this host's clock reading: the lab's injected
// skew, minus the offset from the master that ptp4l measured when that
// measurement is trustworthy (synced and within the bound); otherwise only
// the skew (expiry_for widens T instead).
int64_t local_offset_ns(const ClockSample& s, uint64_t bound_ns);

// §5.1: T = base one-way delay + 2 x the longest a token queues at one hop
// (a full token queue drained at the token rate).
uint64_t derive_threshold_ns(uint64_t base_one_way_ns, double link_bps, double token_share, unsigned token_queue,
                             unsigned token_frame_bytes = 84);

// pmc's text answers ("\t\tkey value" lines under each RESPONSE) as
// response name -> key -> value.
std::map<std::string, std::map<std::string, std::string>> parse_pmc(const std::string& text);
// A sample from CURRENT_DATA_SET and PORT_DATA_SET answers; have_ptp false
// when either is missing or malformed.
ClockSample sample_from_pmc(const std::string& text);
// Runs `pmc -u -b 0 -s UDS 'GET CURRENT_DATA_SET' 'GET PORT_DATA_SET'`.
ClockSample read_ptp4l(const std::string& uds_path);

}  // namespace sluice::top
