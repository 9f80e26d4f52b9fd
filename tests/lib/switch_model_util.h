// Ports and packets for the switch-logic unit tests that run a logic on the
// in-process port model (agent/switch/port_model.h).
#pragma once

#include <string>
#include <utility>

#include "switch/logic.h"

namespace sluice::test {

// A port of `queues` default queues.
inline sw::PortConfig model_port(std::string name, size_t queues, sw::PortRole role, uint64_t rate_bps) {
  sw::PortConfig c;
  c.name = std::move(name);
  c.role = role;
  c.rate_bps = rate_bps;
  c.queues.assign(queues, sw::QueueConfig{});
  return c;
}

// A data packet from port `in` to port `out`.
inline sw::PacketMeta model_pkt(sw::PortId in, sw::PortId out, uint32_t wire_bytes, uint32_t flow_hash = 0,
                                uint16_t upstream_q = sw::kNoQueue) {
  sw::PacketMeta p;
  p.in_port = in;
  p.out_port = out;
  p.wire_bytes = wire_bytes;
  p.flow_hash = flow_hash;
  p.upstream_q = upstream_q;
  return p;
}

}  // namespace sluice::test
