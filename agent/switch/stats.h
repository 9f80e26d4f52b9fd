// Counters of the switch substrate, the same in the port model and the real
// data path (sluicectl switch and the metrics read these).
#pragma once

#include <array>
#include <cstdint>

#include "sluice/wire.h"

namespace sluice::sw {

struct QueueStats {
  uint64_t pkts_in = 0;
  uint64_t bytes_in = 0;
  uint64_t pkts_out = 0;
  uint64_t bytes_out = 0;
  uint64_t dropped = 0;  // tail drops at the queue limit
};

struct CtrlStats {
  uint64_t in = 0;            // accepted and handed to the logic
  uint64_t out = 0;           // sent
  uint64_t rejected = 0;      // arrived and dropped (sum of by_reason)
  uint64_t out_rejected = 0;  // a logic asked to send an invalid frame
  std::array<uint64_t, SL_CTRL_R_COUNT> by_reason{};
};

}  // namespace sluice::sw
