// [switch]: sluiced's switch mode (docs/switch.md). The box's listed ports
// become switch ports: sluiced builds and owns an HTB/TBF queue tree on each
// port's egress, attaches the swport programs, and runs the named switch
// logic (agent/switch/registry.h) on its event loop.
//
//   [switch]
//   logic = "fifo"            # a name of the logic registry
//   queues = 1                # queues per port (default for every port)
//   rate_mbit = 100           # link rate per port (default for every port)
//   buffer_bytes = 131072     # tail-drop limit of each queue (its TBF leaf)
//   burst_bytes = 0           # token bucket of classes and leaves (0 = 100 us at the rate)
//   datapath = "tree"         # or "hold": the queues held in sluiced (switch/hold_path.h)
//   hold_backlog_us = 100     # "hold": frames kept in each port's root qdisc, as time at the rate
//   ecn_threshold_packets = 0 # "hold": CE on ECT packets entering a queue deeper than this (0 = off)
//   control_defer_us = 0      # control frames this close to the logic's timer wait for it (0 = off)
//   [[switch.ports]]
//   name = "swp1"
//   role = "switch-facing"    # or "host-facing"
//   rate_mbit = 1000          # optional, overrides the default above
//   queues = 8                # optional
//   buffer_bytes = 65536      # optional
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/config_section.h"
#include "switch/logic.h"

namespace sluice {

struct SwitchPortEntry {
  std::string name;
  sw::PortRole role = sw::PortRole::kSwitchFacing;
  std::optional<uint32_t> rate_mbit;
  std::optional<uint32_t> queues;
  std::optional<uint32_t> buffer_bytes;
  std::string where;  // "file:line" of its table, for later errors
  bool operator==(const SwitchPortEntry& o) const {
    return name == o.name && role == o.role && rate_mbit == o.rate_mbit && queues == o.queues &&
           buffer_bytes == o.buffer_bytes;
  }
};

// Where the switch's queues are (docs/switch.md): "tree", an HTB/TBF tree
// per port in the kernel (pause = a netlink change of a TBF leaf); "hold",
// in sluiced (every data frame diverted to the agent and re-injected; pause
// = immediate). One data path for all ports of the switch.
enum class SwitchDatapath : uint8_t { kTree, kHold };

struct SwitchConfig {
  static constexpr const char* kSection = "switch";
  std::string logic = "fifo";
  uint32_t queues = 1;
  uint32_t rate_mbit = 100;
  uint32_t buffer_bytes = 131072;
  // Token bucket of every class and TBF leaf, bytes; 0 = 100 us at the
  // port's rate, at least two MTU frames (the lab's shaper default).
  uint32_t burst_bytes = 0;
  // Agent heartbeat older than this: the classifier stops steering and
  // every new packet takes the never-paused fallback class (fail open).
  uint32_t fail_open_ms = 1000;
  SwitchDatapath datapath = SwitchDatapath::kTree;
  // datapath = "hold": the agent keeps each port's root qdisc at this much
  // link time of full-size frames (at least one frame). Longer keeps a fast
  // link busy across the agent's wake-ups; shorter bounds what a pause
  // cannot recall (docs/switch.md, "Design B in sluiced").
  uint32_t hold_backlog_us = 100;
  // datapath = "hold": DCTCP step marking in the held queues (CE on an
  // ECT packet that finds more than this many packets in its queue; 0 =
  // off). The aqm mechanism's program reads the root qdisc, which holds
  // about one frame of a held port, so it cannot mark there.
  uint32_t ecn_threshold_packets = 0;
  // A control frame that arrives less than this before the logic's next
  // timer does not wake the agent: the timer reads it (the control ring is
  // read before on_timer), so it reaches the logic at most this (plus the
  // timer's lateness) later. One wake-up instead of two for a logic whose
  // frames come about as often as its timer (floodgate's credits every T);
  // 0 = off, every frame wakes an idle agent (what a logic that waits for
  // frames, e.g. PFC or BFC pauses, needs). docs/switch.md.
  uint32_t control_defer_us = 0;
  std::vector<SwitchPortEntry> ports;

  uint32_t port_rate_mbit(const SwitchPortEntry& p) const { return p.rate_mbit.value_or(rate_mbit); }
  uint32_t port_queues(const SwitchPortEntry& p) const { return p.queues.value_or(queues); }
  uint32_t port_buffer(const SwitchPortEntry& p) const { return p.buffer_bytes.value_or(buffer_bytes); }
};

const ConfigSection& switch_section();

// "switch-facing" / "host-facing".
const char* port_role_name(sw::PortRole r);

}  // namespace sluice
