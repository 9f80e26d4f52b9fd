// sluiced's switch mode ([switch], docs/switch.md): a host-wide part of
// the agent that turns the listed ports into switch ports of one switch,
// running one switch logic on the agent's event loop.
//
// Per port it builds and owns the HTB/TBF queue tree (switch/tree.h),
// attaches swport (bpf/switch/swport.bpf.c: control-frame gate at ingress,
// queue classifier at egress) and writes the port table the classifier
// reads. Accepted control frames come from the ring buffer to
// logic.on_control(); on_timer() runs from the loop; set_paused() changes
// the queue's TBF leaf over netlink; send_control() sends a frame out of the
// port through an AF_PACKET socket (into the never-paused fallback class).
//
// Fail open. Stopped (SIGTERM, reload): programs detached, trees removed,
// the ports forward through the kernel's default qdisc. Killed (SIGKILL,
// crash): the trees stay (the TBF leaves of unpaused queues at the link
// rate); under clsact the classifier stays too and, once the agent's
// heartbeat is older than [switch] fail_open_ms, stops steering, so every
// new packet takes HTB's default class 51:fff0 (never paused, link rate);
// under tcx the classifier goes with the process and HTB's default class
// takes everything the same way. Packets already held in a paused queue at
// that moment leave at the paused rate (1000 B/s) or are flushed by the
// next sluiced, which rebuilds the tree.
//
// In this data path packets do not pass through the agent: a logic's
// on_enqueue / on_dequeue / on_drop are NOT called per packet. A flow is
// queued by the classifier (queue 0, or flow hash % queues for logics with
// hash_flows); depth() reads the leaf classes' backlog from the kernel
// (refreshed at most every millisecond).
#pragma once

#include <memory>
#include <string>

#include "core/module.h"

namespace sluice {

// tc priority of swport's sw_ingress / sw_egress (core/tc.h): the gate
// before flowstat, which then counts none of the control frames it consumes.
inline constexpr uint32_t kSwportTcPrio = 0xA500;

std::unique_ptr<HostService> make_switch_service(const ServiceContext& ctx);
// "[switch] ports" when the configuration lists switch ports, else "".
std::string switch_used_by(const Config& cfg);

}  // namespace sluice
