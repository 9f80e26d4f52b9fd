/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Floodgate on a sluice switch, data path (bpf/switch/floodgate.bpf.c) <->
 * agent (agent/mechanisms/floodgate/switch_glue.cc). Design A of the switch
 * substrate: packets never pass through the agent, so the per-packet part of
 * Floodgate (floodgate-conext21 §3.2, §4.1) runs here at tc egress:
 *  - per (egress port, dst): bytes sent with window (direct) and bytes put
 *    into a VOQ; the window is init_window - (direct + voq_out - credit_psn),
 *    where voq_out and credit_psn are the agent's (sl_fg_ag_v1);
 *  - per (ingress port, dst): bytes forwarded, which the agent returns
 *    upstream as credits every T.
 * Every map value is written by one side only: counters by BPF (atomic
 * adds), sl_fg_ag_v1 and sl_fg_port_v1 by the agent.
 *
 * VOQs in the agent ([floodgate] voq = "agent", sl_fg_port.voq_agent): a
 * packet that finds its destination's window exhausted, or whose
 * destination still has stolen bytes the agent has not finished
 * (sl_fg_tx.voq_bytes > sl_fg_ag.voq_done: keeps the order), is copied to
 * sl_fg_voq_v1 (a struct sl_dp_frame, sluice/dstpause.h, ifindex = the
 * egress port) and stolen; the agent queues it per (egress port, dst) and
 * sends it again through AF_PACKET with skb->mark = reinject_mark when
 * credits reopen the window; fg_egress passes such frames untouched. A
 * frame that cannot be copied (too big, ring full) passes, counted as
 * direct (fail open). */
#ifndef SLUICE_FLOODGATE_SW_H
#define SLUICE_FLOODGATE_SW_H

#include "sluice/types.h"

#define SL_FG_SW_TABLE 16384

/* sl_fg_port_v1: ifindex -> the port as Floodgate runs it. */
struct sl_fg_port {
	__u32 port_id;
	__u32 windowed;    /* egress keeps per-dst windows (switch-facing, >= 2 queues) */
	__u32 credits;     /* ingress returns credits (switch-facing) */
	__u32 nvoq;        /* VOQs = queues 1..nvoq */
	__u32 htb_major;   /* class of queue q = major:(q + 1) */
	__u32 voq_agent;   /* VOQs are the agent's (stolen to sl_fg_voq_v1), not queues of the tree */
	__u64 init_window; /* bytes: BDP_nextHop + C_out * T (§3.2) */
};

/* Key of every per-destination map: a port and an IPv6 / IPv4-mapped dst. */
struct sl_fg_key {
	__u32 port_id;
	__u8 dst[16];
};

/* fg_tx[slot] (BPF .bss; its slot in sl_fg_tx_v1): what left toward the
 * next hop, per (egress port, dst). */
struct sl_fg_tx {
	__u64 direct_bytes; /* passed with window, default queue */
	__u64 direct_pkts;
	__u64 voq_bytes; /* put into a VOQ (held until credits release them) */
	__u64 voq_pkts;
	__u32 voq_q; /* the VOQ (queue) BPF last chose */
	__u32 pad;
};

/* sl_fg_ag_v1 (agent): per (egress port, dst). */
struct sl_fg_ag {
	__u64 credit_psn; /* bytes the downstream has credited (cumulative) */
	__u64 voq_out;    /* bytes that left the VOQ (agent's estimate; exact with voq_agent) */
	__u32 voq;        /* queue of the VOQ the dst is held in, 0 = none (voq_agent: 1 while held) */
	__u32 pad;
	__u64 voq_done; /* voq_agent: stolen bytes the agent finished (sent again or dropped) */
};

/* voq_agent, per port (fg_voq_cnt[port_id] in .bss, BPF's): frames. */
struct sl_fg_voq_cnt {
	__u64 stolen;     /* copied to the agent and stolen */
	__u64 too_big;    /* held or out of window but too big to copy: passed */
	__u64 ring_full;  /* held or out of window, ring full: passed */
	__u64 reinjected; /* the agent's re-sent frames seen at egress */
};

/* fg_rx[slot] (BPF .bss; its slot in sl_fg_rx_v1): forwarded per
 * (ingress port, dst), for credits. */
struct sl_fg_rx {
	__u64 bytes;
	__u64 pkts;
	__u32 out_port; /* egress port_id the dst's packets last took */
	__u32 pad;
};

/* sl_fg_keys_v1 (BPF ring): a key fg_egress has just added to sl_fg_tx_v1
 * or sl_fg_rx_v1, with its slot. The counters (struct sl_fg_tx, sl_fg_rx)
 * live in .bss arrays fg_tx[slot] / fg_rx[slot], which the agent reads
 * through the skeleton's mapping every T: no syscall, no walk of the
 * tables' SL_FG_SW_TABLE buckets (walked every T, that cost the agents
 * most of their time). A key the ring could not take is counted in
 * fg_keys_lost (.bss); the agent then walks the tables (key -> slot) once. */
#define SL_FG_KEY_TX 1
#define SL_FG_KEY_RX 2
struct sl_fg_new_key {
	__u32 table; /* SL_FG_KEY_TX or SL_FG_KEY_RX */
	__u32 slot;  /* index into fg_tx / fg_rx */
	struct sl_fg_key key;
};

SLUICE_STATIC_ASSERT(sizeof(struct sl_fg_port) == 32, "sl_fg_port size");
SLUICE_STATIC_ASSERT(sizeof(struct sl_fg_key) == 20, "sl_fg_key size");
SLUICE_STATIC_ASSERT(sizeof(struct sl_fg_tx) == 40, "sl_fg_tx size");
SLUICE_STATIC_ASSERT(sizeof(struct sl_fg_ag) == 32, "sl_fg_ag size");
SLUICE_STATIC_ASSERT(sizeof(struct sl_fg_voq_cnt) == 32, "sl_fg_voq_cnt size");
SLUICE_STATIC_ASSERT(sizeof(struct sl_fg_rx) == 24, "sl_fg_rx size");
SLUICE_STATIC_ASSERT(sizeof(struct sl_fg_new_key) == 28, "sl_fg_new_key size");

#endif
