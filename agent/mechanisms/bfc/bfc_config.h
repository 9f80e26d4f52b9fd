// [bfc]: BFC's parameters in a sluiced switch config ([switch] logic = "bfc",
// "bfc-stochastic", "bfc-single"). Every key is optional; the defaults are
// the sampled mode's (docs/bfc.md "In sluiced: the sampled mode").
#pragma once

#include <cstdint>

#include "core/config_section.h"
#include "mechanisms/bfc/bfc_logic.h"

namespace sluice {

struct BfcSection {
  static constexpr const char* kSection = "bfc";
  // One-hop RTT in the control loop's terms (§3.3.2 HRTT): Th =
  // HRTT·μ/N_active, sticky threshold 2·HRTT. In sluiced the loop's round
  // trip is a depth sample plus the upstream's netlink pause plus the wire.
  uint32_t hrtt_us = 1000;
  uint32_t sample_us = 1000;           // depth sample period
  uint32_t bitmap_interval_us = 2000;  // paused-queue bitmap period
  uint32_t pause_expiry_us = 20'000;   // an unrefreshed pause expires (fail open); 0 = never
  uint32_t th_min_bytes = 0;           // floor of Th (0 = the formula)
  uint32_t th_fixed_bytes = 0;         // Th itself (0 = the formula; Fig. 7b sweeps)
  uint32_t flow_table_factor = 100;    // flow-table entries per queue (§3.3.1)

  // The logic's configuration for a variant (bfc, bfc-stochastic, ...).
  bfc::Config logic_config(std::string_view variant) const;
};

const ConfigSection& bfc_section();

}  // namespace sluice
