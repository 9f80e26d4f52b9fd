// [pac]: PAC's section.
#pragma once

#include <cstdint>
#include <vector>

#include "core/config_section.h"

namespace sluice {

// PAC (pac-icnp14 §III) on a receiver's interface. Defaults follow the
// paper's testbed (Table I) where it has one.
struct PacPortRange {
  uint16_t lo = 0, hi = 0;
};
struct PacPrefix {
  int family = 4;         // 4 or 6
  uint8_t addr[16] = {};  // network order
  uint8_t len = 0;
};
struct PacConfig {
  static constexpr const char* kSection = "pac";
  uint64_t buffer_bytes = 131072;                 // initial (and largest) threshold: the switch buffer
  std::vector<uint64_t> mlfq_level_bytes{20480};  // MLFQ boundaries by bytes received
  double lambda = 0.8;                            // eq. (6) and slow-start inference
  bool ecn = true;                                // adapt the threshold to α (eq. 2)
  uint32_t max_held = 8192;                       // hold queue size (full: release, never drop)
  uint32_t max_hold_ms = 50;                      // no ACK is held longer
  uint32_t max_hold_request_ms = 5000;            // no request (hold_requests) is held longer: a request waits
                                                  // behind the responses ahead of it (256 x 64 KB at 100 Mbit/s: 1.4 s)
  uint32_t fail_open_ms = 60;                     // BPF stops diverting when the heartbeat is older
  uint32_t reinject_mark = 0x50ac;                // skb->mark of re-injected ACKs
  uint32_t idle_timeout_s = 300;                  // flow state dropped after this idle time
  uint32_t control_interval_min_us = 1000;        // floor of the control interval (average RTT)
  bool account_requests = true;                   // a request counts its expected response as in flight
  bool cap_to_response = false;                   // triggers never exceed what is left of a response
  bool hold_requests = false;                     // hold our data segments (requests) like ACKs (extension)
  uint32_t request_max_bytes = 1024;              // larger data segments we send are bulk: never requests
  // While ACKs are held, poll for room this long after the last release
  // before sleeping (0: sleep).
  uint32_t busy_poll_us = 200;
  uint32_t rwnd_cap_bytes = 0;  // clamp the window our segments advertise to this (0: off; extension);
                                // "auto" (the default) is resolved when the config is parsed
  // Expected bytes older than max(2 RTT, this) that never came are written
  // off (0: off).
  uint32_t trigger_age_min_us = 1000;
  std::vector<PacPortRange> local_ports;   // empty = any
  std::vector<PacPortRange> remote_ports;  // empty = any
  std::vector<PacPrefix> remote_prefixes;  // empty = any
};

const ConfigSection& pac_section();

}  // namespace sluice
