// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Switch-port programs of the sluice switch substrate (docs/switch.md).
 *
 * sw_ingress (tc ingress of every switch port): hop-by-hop control frames
 *   (EtherType 0x88B5, sluice/wire.h) are consumed here. A frame is handed
 *   to the agent through sl_sw_ctrl_v1 only if the port is a configured
 *   switch port whose role accepts the type and every header and record
 *   check passes; anything else is dropped and counted by reason. Control
 *   frames are never forwarded. Other traffic is not ours: TC_NEXT.
 * sw_egress (tc egress of every switch port): steers a data packet to its
 *   queue = HTB leaf class major:(queue + 1) by setting skb->priority, which
 *   HTB honours before any filter. The queue comes from sl_sw_flowq_v1
 *   (written by the switch logic); unknown flows go to queue 0 or, with
 *   SL_SW_PORT_HASH_DEFAULT, to hash % num_queues. The hash is
 *   sl_sw_flow_hash() of the 5-tuple, which the logic computes the same
 *   way. A frame that is not IP (ARP, LLDP, one the parser cannot read)
 *   or is IPv6 neighbour discovery is the network's own control plane,
 *   not data a logic schedules: it takes the fallback class (below) and
 *   is counted, so a paused queue cannot hold the port's ARP or ND and
 *   starve its neighbour entries (the held path sends such frames at once
 *   for the same reason). Fail open: when the agent is not alive
 *   (lib/liveness.h: its heartbeat older than fail_open_ns and its
 *   heartbeat thread gone or stopped), nothing is steered any more: every
 *   packet takes the port's fallback class (major:SL_SW_FALLBACK_MINOR, never paused), so a
 *   dead agent cannot keep traffic in a queue it paused. Control frames
 *   leaving the port keep the class their sender chose (SO_PRIORITY). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "sluice/switch.h"
#include "lib/count.h"
#include "lib/ctrl.h"
#include "lib/flow.h"
#include "lib/verdict.h"
#include "lib/liveness.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SLUICE_SW_MAX_PORTS);
	__type(key, __u32); /* ifindex */
	__type(value, struct sl_sw_port);
} sl_sw_ports_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SLUICE_SW_FLOW_TABLE_SIZE);
	__type(key, struct sl_sw_flow_key);
	__type(value, __u32);
} sl_sw_flowq_v1 SEC(".maps");

/* Slot SLUICE_SW_MAX_PORTS holds what arrived on unconfigured interfaces. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, (SLUICE_SW_MAX_PORTS + 1) * SL_SW_CNT_SLOTS);
	__type(key, __u32);
	__type(value, struct sl_sw_counter);
} sl_sw_cnt_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} sl_sw_ctrl_v1 SEC(".maps");

/* Set before load (0 = never fail open); the agent writes its liveness
 * record (lib/liveness.h) through the mmap'ed .bss. */
const volatile __u64 fail_open_ns = 0;
struct sluice_liveness sw_live = {};

/* [switch] control_defer_us (0 = off), set before load: a control frame
 * arriving less than this before the logic's next timer (sw_next_timer_ns,
 * CLOCK_MONOTONIC, which the agent writes through the mmap'ed .bss when it
 * arms the timer) does not wake the agent; its timer reads the ring before
 * the logic's on_timer. One wake-up instead of two for a logic (floodgate)
 * whose frames come about as often as its timer fires. The ring's adaptive
 * wake-up only wakes the reader for a record at its read position, so
 * frames that follow a deferred one (even far from the timer) do not wake
 * the agent either until it has read the ring: every one of them waits at
 * most until that timer, i.e. at most ctrl_defer_ns plus the timer's
 * lateness. */
const volatile __u64 ctrl_defer_ns = 0;
__u64 sw_next_timer_ns = 0;

static __always_inline __u64 sw_ctrl_wake(void)
{
	if (!ctrl_defer_ns)
		return 0;
	__u64 at = *(volatile __u64 *)&sw_next_timer_ns;
	__u64 now = bpf_ktime_get_ns();
	return at > now && at - now <= ctrl_defer_ns ? BPF_RB_NO_WAKEUP : 0;
}

static __always_inline void sw_count(__u32 port_id, __u32 slot, struct __sk_buff *skb)
{
	if (port_id > SLUICE_SW_MAX_PORTS || slot >= SL_SW_CNT_SLOTS)
		return;
	sl_count_skb_in(&sl_sw_cnt_v1, port_id * SL_SW_CNT_SLOTS + slot, skb);
}

SEC("tc")
int sw_ingress(struct __sk_buff *skb)
{
	long off = sl_ctrl_payload_off(skb);
	if (off < 0)
		return SL_TC_NEXT;
	__u32 ifindex = skb->ifindex;
	struct sl_sw_port *port = bpf_map_lookup_elem(&sl_sw_ports_v1, &ifindex);
	__u32 port_id = port ? port->port_id : SLUICE_SW_MAX_PORTS;
	if (!port || port->role == SL_PORT_NONE) {
		sw_count(port_id, SL_CTRL_R_UNKNOWN_PORT, skb);
		return SL_TC_SHOT;
	}
	sw_count(port_id,
		 sl_ctrl_ingress(skb, &sl_sw_ctrl_v1, (__u32)off, port->role, port_id, SL_SW_CNT_CTRL_RING_FULL,
				 sw_ctrl_wake()),
		 skb);
	return SL_TC_SHOT;
}

SEC("tc")
int sw_egress(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	struct sl_sw_port *port = bpf_map_lookup_elem(&sl_sw_ports_v1, &ifindex);
	if (!port || !port->num_queues || !port->htb_major) {
		sw_count(SLUICE_SW_MAX_PORTS, SL_SW_CNT_DATA_NO_PORT, skb);
		return SL_TC_NEXT;
	}
	if (skb->protocol == bpf_htons(SLUICE_CTRL_ETHERTYPE))
		return SL_TC_NEXT;
	struct sl_pkt pkt = {};
	if (!sl_skb_parse_ip(skb, &pkt, NULL) || sl_skb_is_nd(skb, &pkt)) {
		skb->priority = (port->htb_major << 16) | SL_SW_FALLBACK_MINOR;
		sw_count(port->port_id, SL_SW_CNT_DATA_NET_CONTROL, skb);
		return SL_TC_NEXT;
	}
	if (!sl_agent_alive(&sw_live, bpf_ktime_get_ns(), fail_open_ns)) {
		skb->priority = (port->htb_major << 16) | SL_SW_FALLBACK_MINOR;
		sw_count(port->port_id, SL_SW_CNT_DATA_FAIL_OPEN, skb);
		return SL_TC_NEXT;
	}
	if (port->num_queues == 1) {
		/* One queue: every flow's answer is queue 0 (an entry >= 1 is
		 * out of range and means queue 0 too); no hash, no lookup. */
		skb->priority = (port->htb_major << 16) | 1;
		sw_count(port->port_id, SL_SW_CNT_DATA_CLASSIFIED, skb);
		return SL_TC_NEXT;
	}
	struct sl_sw_flow_key key = { .port_id = port->port_id, .flow_hash = sl_sw_pkt_flow_hash(&pkt) };
	__u32 queue = 0;
	__u32 *q = bpf_map_lookup_elem(&sl_sw_flowq_v1, &key);
	if (q)
		queue = *q;
	else if (port->flags & SL_SW_PORT_HASH_DEFAULT)
		queue = key.flow_hash % port->num_queues;
	if (queue >= port->num_queues)
		queue = 0;
	skb->priority = (port->htb_major << 16) | (queue + 1);
	sw_count(port->port_id, SL_SW_CNT_DATA_CLASSIFIED, skb);
	return SL_TC_NEXT;
}
