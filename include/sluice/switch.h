/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The switch substrate's BPF <-> agent ABI (bpf/switch/swport.bpf.c,
 * agent/switch/): port table, per-flow queue choice, counters, and the ring
 * buffer that hands accepted control frames to the agent. Control-frame
 * format: sluice/wire.h. */
#ifndef SLUICE_SWITCH_H
#define SLUICE_SWITCH_H

#include "sluice/types.h"
#include "sluice/wire.h"

/* Largest control frame copied to the agent: Ethernet + 802.1Q + the
 * largest valid payload (8 + 32 * 28 = 904) rounded up. */
#define SLUICE_SW_CTRL_FRAME_MAX 1024
#define SLUICE_SW_FLOW_TABLE_SIZE 65536

/* sl_sw_ports_v1: ifindex -> the port's configuration (written by the agent). */
struct sl_sw_port {
	__u32 port_id;    /* 0 .. SLUICE_SW_MAX_PORTS-1 */
	__u32 role;       /* enum sl_port_role */
	__u32 num_queues; /* data queues on this egress port (HTB leaf classes) */
	__u32 htb_major;  /* HTB root handle major: class = major:(queue + 1) */
	__u32 flags;      /* SL_SW_PORT_* */
	__u32 pad;
};
#define SL_SW_PORT_HASH_DEFAULT 0x1 /* unknown flows: queue = hash % num_queues (else queue 0) */
/* HTB minor of the port's fallback class: HTB's default class, never
 * paused. Packets the classifier does not steer (agent heartbeat stale,
 * classifier gone) and the control frames the agent sends go there. */
#define SL_SW_FALLBACK_MINOR 0xfff0

/* The network's own control plane, which a switch sends past its data
 * queues (the classifier: fallback class; the held path: at once): frames
 * that are not IP (ARP, LLDP, unparsed) and IPv6 neighbour discovery,
 * ICMPv6 types FIRST..LAST (RS, RA, NS, NA, redirect; RFC 4861 §4). */
#define SLUICE_IPPROTO_ICMPV6 58
#define SLUICE_ND_TYPE_FIRST 133
#define SLUICE_ND_TYPE_LAST 137

/* A flow as the classifier and the logic both see it: addresses IPv6 or
 * IPv4-mapped (as in control frames), ports in network order. */
struct sl_sw_flow_tuple {
	__u8 src[16];
	__u8 dst[16];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};
SLUICE_STATIC_ASSERT(sizeof(struct sl_sw_flow_tuple) == 40, "sl_sw_flow_tuple size");

/* The flow hash both sides compute (FNV-1a, 32 bit, over the tuple): the
 * logic writes sl_sw_flowq_v1 under it, the classifier looks it up. Not the
 * kernel's skb hash, whose seed user space cannot know. */
static inline __u32 sl_sw_flow_hash(const struct sl_sw_flow_tuple *t)
{
	const __u8 *b = (const __u8 *)t;
	__u32 h = 2166136261u;
	for (int i = 0; i < (int)sizeof(*t); i++) {
		h ^= b[i];
		h *= 16777619u;
	}
	return h;
}

/* sl_sw_flowq_v1: (egress port, flow hash) -> queue, written by the logic. */
struct sl_sw_flow_key {
	__u32 port_id;
	__u32 flow_hash;
};

/* Per-CPU counters, index port_id * SL_SW_CNT_SLOTS + slot. Control-frame
 * slots are the sl_ctrl_reason values (OK = accepted); then data slots. */
enum sl_sw_data_slot {
	SL_SW_CNT_DATA_CLASSIFIED = SL_CTRL_R_COUNT, /* egress: steered to a queue */
	SL_SW_CNT_DATA_NO_PORT,                      /* egress: not a configured port */
	SL_SW_CNT_CTRL_RING_FULL,                    /* ingress: valid frame, ring full */
	SL_SW_CNT_DATA_FAIL_OPEN,                    /* egress: agent heartbeat stale, fallback class */
	SL_SW_CNT_DATA_NET_CONTROL,                  /* egress: not IP or IPv6 ND, fallback class */
	SL_SW_CNT_SLOTS,
};
struct sl_sw_counter {
	__u64 packets;
	__u64 bytes;
};

/* Ring buffer event: one accepted control frame. */
struct sl_sw_ctrl_event {
	__u32 ifindex;
	__u32 port_id;
	__u32 len;         /* bytes in frame[] (the whole Ethernet frame, capped) */
	__u32 payload_off; /* offset of sl_ctrl_hdr in frame[] */
	__u64 rx_ns;       /* bpf_ktime_get_ns() at ingress */
	__u8 frame[SLUICE_SW_CTRL_FRAME_MAX];
};

/* Design B (docs/switch.md): held queues in the agent. The egress program
 * copies each data frame to the agent (sl_swh_ring_v1) and drops it; the
 * agent queues, schedules and re-injects it with skb->mark == the object's
 * reinject mark, keeping the port's qdisc backlog at a few packets.
 *
 * sl_swh_ports_v1: ifindex -> the held port (written by the agent). */
struct sl_sw_hold_port {
	__u32 port_id;    /* 0 .. SLUICE_SW_MAX_PORTS-1: index of the per-port state */
	__u32 num_queues; /* queue numbers from sl_swh_flowq_v1 at or above: queue 0 */
	__u32 netns_ino;  /* the port's network namespace (the tracepoints see every qdisc) */
	__u32 low_water;  /* wake the agent when a dequeue leaves at most this many */
};
#define SLUICE_SW_HOLD_FRAME_MAX 1536
struct sl_sw_hold_event {
	__u32 queue;      /* sl_swh_flowq_v1's choice, else 0 */
	__u32 len;        /* bytes in frame[] */
	__u32 port_id;    /* the egress port (sl_sw_hold_port.port_id) */
	__u32 in_ifindex; /* skb->ingress_ifindex (0: sent by this host) */
	__u64 rx_ns;
	__u32 flow_hash; /* sl_sw_flow_hash of tuple (0 if not IP) */
	__u16 l3_off;    /* IP header in frame[] */
	__u16 l4_off;    /* TCP/UDP header in frame[] */
	__u8 is_ip;
	__u8 family; /* 4 or 6 */
	__u8 tos;    /* IPv4 TOS / IPv6 traffic class */
	__u8 pad;
	__u16 upstream_q; /* the upstreamQ tag sw_hold_uq_ingress popped (0xffff: none) */
	__u16 pad2;
	struct sl_sw_flow_tuple tuple;
	__u8 frame[SLUICE_SW_HOLD_FRAME_MAX];
};
/* upstreamQ across a switch (BFC §3.3.2, the tag: sluice/bfc.h): the held
 * port's ingress pops the tag and keeps the queue in skb->mark as
 * SLUICE_SW_UQ_MARK | queue until the egress divert reads it (the mark
 * survives forwarding inside the switch's namespace; a frame that crosses
 * into another namespace has it scrubbed). */
#define SLUICE_SW_UQ_MARK 0x5e1f0000u
#define SLUICE_SW_UQ_MARK_MASK 0xffffff00u
#define SLUICE_SW_UQ_NONE 0xffff
/* BPF_PROG_TEST_RUN input of sw_hold_sync. */
struct sl_sw_hold_sync_ctx {
	__u32 port_id;
};
struct sl_sw_hold_state {
	__u64 dequeued;   /* dequeue events with a packet (informational) */
	__u64 agent_sent; /* frames the agent handed to the port (incremented
			   * before the send, taken back when it fails) */
	__u64 diverted;
	__u64 passed_big; /* too long to copy: passed (fail open) */
	__u64 ring_full;  /* ring full: passed (fail open) */
	__u64 wakeups;
	__u32 want_wake;  /* agent: wake me when backlog <= low_water */
	__u32 qlen;       /* root qdisc packets right after the last event */
	__u64 sent_at_ev; /* agent_sent as of that event */
	__u64 events;     /* enqueue + dequeue events of the root qdisc */
	__u64 q_sent;     /* the root qdisc's own counters at the last event */
	__u64 q_drops;
	__u64 syncs;     /* sw_hold_sync runs (the agent's watchdog) */
	__u64 fail_open; /* agent not alive: passed to the qdisc */
	__u64 qdisc;     /* the root qdisc the last event saw (sw_hold_sync) */
	/* sw_hold_uq_ingress (ports of a logic that reads upstreamQ): */
	__u64 uq_popped;  /* upstreamQ tags popped (the queue went on in skb->mark) */
	__u64 uq_foreign; /* 802.1Q tags that are no upstreamQ tag: left alone */
	__u64 uq_bad;     /* an 802.1Q frame too short to hold its tag: left alone */
	__u64 uq_failed;  /* the kernel refused the pop: the frame passed tagged */
	/* Wake-ups of the agent for diverted frames (sw_hold_egress): */
	__u32 arrival_quiet; /* agent: a wake-up for this port is due anyway (want_wake
			      * set, the qdisc at its target): its frames need not
			      * wake the agent (0: every frame may wake it) */
	__u32 pad_q;
	__u64 quiet;      /* frames handed over without a wake-up */
	__u64 late_wakes; /* quiet frames that found arrival_quiet cleared right
			   * after their submit: woken through the wake ring */
};
/* A frame is handed over without a wake-up only while the ring holds less
 * than this (a bound on what waits there unseen by the agent). */
#define SLUICE_SW_HOLD_QUIET_MAX_BYTES (64 * (80 + SLUICE_SW_HOLD_FRAME_MAX))

SLUICE_STATIC_ASSERT(sizeof(struct sl_sw_port) == 24, "sl_sw_port size");
SLUICE_STATIC_ASSERT(sizeof(struct sl_sw_flow_key) == 8, "sl_sw_flow_key size");
SLUICE_STATIC_ASSERT(sizeof(struct sl_sw_counter) == 16, "sl_sw_counter size");
SLUICE_STATIC_ASSERT(sizeof(struct sl_sw_hold_port) == 16, "sl_sw_hold_port size");
SLUICE_STATIC_ASSERT(sizeof(struct sl_sw_hold_event) == 80 + SLUICE_SW_HOLD_FRAME_MAX, "sl_sw_hold_event size");
SLUICE_STATIC_ASSERT(sizeof(struct sl_sw_ctrl_event) == 24 + SLUICE_SW_CTRL_FRAME_MAX, "sl_sw_ctrl_event size");

#endif
