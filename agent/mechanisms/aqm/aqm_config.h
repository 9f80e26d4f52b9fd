// [aqm]: switch-port ECN + EIN marking (mechanism "aqm").
#pragma once

#include <cstdint>
#include <optional>

#include "core/config_section.h"

namespace sluice {

// Where aqm reads the root qdisc backlog (README "EIN on Linux").
enum class AqmQueueSource { Auto, KernCtx, Tracepoint };
const char* to_string(AqmQueueSource s);

struct AqmConfig {
  static constexpr const char* kSection = "aqm";
  bool ecn = true;
  // K: exactly one unit. Neither set: 20 packets (DCTCP's K at 1 Gbit/s).
  std::optional<uint64_t> ecn_threshold_bytes;
  std::optional<uint64_t> ecn_threshold_packets;
  bool ein = true;
  uint32_t ein_samples = 50;               // N
  double ein_threshold = 0.25;             // EIN_threshold as a fraction of the line rate
  std::optional<uint64_t> ein_high_water;  // HighWaterMark, K's unit; default K
  // Where EIN is written (ein_mark): on arrival at the qdisc, or (Pulser's
  // dequeue marking) on departure, at the far end of the port's link
  // (interface link_far_end).
  bool ein_at_departure = false;
  // auto: bpf_cast_to_kern_ctx (object aqm) where the kernel has it, else
  // the qdisc tracepoints (object aqm_compat).
  AqmQueueSource queue_source = AqmQueueSource::Auto;

  bool k_in_packets() const { return !ecn_threshold_bytes.has_value(); }
  uint64_t k() const { return ecn_threshold_bytes ? *ecn_threshold_bytes : ecn_threshold_packets.value_or(20); }
  uint64_t high_water() const { return ein_high_water.value_or(k()); }
};

const ConfigSection& aqm_section();

}  // namespace sluice
