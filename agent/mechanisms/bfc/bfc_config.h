// [bfc]: BFC's parameters in a sluiced switch config ([switch] logic = "bfc",
// "bfc-stochastic", "bfc-single", "bfc-nosticky"). Every key is optional.
// Two modes (docs/bfc.md): per packet (§3.3) with [switch] datapath = "hold",
// sampled with "tree"; hrtt_us's default depends on the mode, sample_us
// applies to the sampled mode only.
#pragma once

#include <cstdint>

#include "core/config_section.h"
#include "mechanisms/bfc/bfc_logic.h"

namespace sluice {

struct BfcSection {
  static constexpr const char* kSection = "bfc";
  // One-hop RTT in the control loop's terms (§3.3.2 HRTT): Th =
  // HRTT·μ/N_active, sticky threshold 2·HRTT. 0 (absent) = the mode's
  // default: kHoldHrttUs per packet, kSampledHrttUs sampled.
  uint32_t hrtt_us = 0;
  uint32_t sample_us = 1000;           // depth sample period (sampled mode)
  uint32_t bitmap_interval_us = 2000;  // paused-queue bitmap period
  uint32_t pause_expiry_us = 20'000;   // an unrefreshed pause expires (fail open); 0 = never
  uint32_t th_min_bytes = 0;           // floor of Th (0 = the formula)
  uint32_t th_fixed_bytes = 0;         // Th itself (0 = the formula; Fig. 7b sweeps)
  uint32_t flow_table_factor = 100;    // flow-table entries per queue (§3.3.1)

  // Per packet ([switch] datapath = "hold"): the loop is the PAUSE frame
  // through the downstream's port and the upstream's gate (the hold path's
  // pause reaction: p99 <= 235 us at 100 Mbit/s, docs/switch.md) plus the
  // frames already in flight (one-way 60-75 us p50 through a held switch),
  // no wire delay: ~300 us. A link with delay adds its round trip.
  static constexpr uint32_t kHoldHrttUs = 300;
  // Sampled: a depth sample plus the upstream's netlink pause plus the wire.
  static constexpr uint32_t kSampledHrttUs = 1000;

  // The logic's configuration for a variant (bfc, bfc-stochastic, ...):
  // per packet (sample_ns = 0, §3.3) or sampled (sample_ns = sample_us).
  bfc::Config logic_config(std::string_view variant, bool per_packet = false) const;
};

const ConfigSection& bfc_section();

}  // namespace sluice
