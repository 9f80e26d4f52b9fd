/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* BFC's upstreamQ on the wire and the host tagger's ABI (docs/bfc.md).
 *
 * upstreamQ (BFC §3.3.2: "Each upstream switch/source NIC inserts its local
 * queue number in a special header field called upstreamQ") travels as one
 * 802.1Q tag, TPID 0x8100, PCP 0, DEI 0, VID = SLUICE_BFC_VID_BASE + queue:
 * pushed by the sending hop's egress (a host's uplink, or a sluice switch
 * port), popped by the next sluice switch's ingress. So it lives for exactly
 * one link, never reaches a receiver's stack, and costs no IP/TCP checksum
 * update. Why not DSCP: six bits name only 64 queues (BFC wants up to 128),
 * and DSCP is end to end, so rewriting it would destroy the sender's own
 * marking. The VID range 0xF00..0xF7F (3840..3967) is picked to stay clear
 * of the low VLAN ids sites use; a port that carries real VLANs keeps them
 * (a frame that is already tagged is left alone and counted).
 *
 * Host side (bpf/host/bfc_src.bpf.c, tc egress of a host's uplink): a flow
 * keeps the queue it was given while it is not idle for longer than the
 * sticky time; a new or idle flow takes the next queue round robin,
 * skipping queues the first-hop switch has paused; every data packet is
 * tagged with its flow's queue and steered (skb->priority) to the HTB class
 * of that queue, which the host agent holds while the queue is paused
 * ("hosts: stop the flows mapped to it"). */
#ifndef SLUICE_BFC_H
#define SLUICE_BFC_H

#include "sluice/types.h"
#include "sluice/switch.h"

#define SLUICE_BFC_VID_BASE 0xF00
#define SLUICE_BFC_MAX_QUEUES 128
#define SLUICE_BFC_TPID 0x8100
#define SLUICE_BFC_SRC_FLOWS 16384

/* The queue a tag's TCI names, or -1 if the tag is not an upstreamQ tag. */
static inline int sl_bfc_tci_queue(__u16 tci)
{
	__u16 vid = tci & 0x0fff;
	if (vid < SLUICE_BFC_VID_BASE || vid >= SLUICE_BFC_VID_BASE + SLUICE_BFC_MAX_QUEUES)
		return -1;
	return vid - SLUICE_BFC_VID_BASE;
}

static inline __u16 sl_bfc_queue_tci(__u32 queue)
{
	return (__u16)(SLUICE_BFC_VID_BASE + (queue & (SLUICE_BFC_MAX_QUEUES - 1)));
}

/* sl_bfc_flows_v1 is keyed by the switch's flow tuple, struct
 * sl_sw_flow_tuple (sluice/switch.h). */

struct sl_bfc_flow {
	__u32 queue; /* this host's queue for the flow = the upstreamQ it sends */
	__u16 tci;   /* the tag it gets */
	__u16 pad;
	__u64 last_ns; /* last packet (bpf_ktime_get_ns) */
};

/* Per-CPU counters, one {packets, bytes} per slot. */
enum sl_bfc_src_slot {
	SL_BFC_SRC_TAGGED = 0,  /* tagged with its flow's queue */
	SL_BFC_SRC_NEW_FLOW,    /* a flow took a (new) queue */
	SL_BFC_SRC_TO_PAUSED,   /* tagged for a queue the switch has paused (held in its class) */
	SL_BFC_SRC_PASS_NOT_IP, /* not IPv4/IPv6, or malformed: untouched */
	SL_BFC_SRC_PASS_TAGGED, /* already carries an 802.1Q tag: untouched */
	SL_BFC_SRC_TAG_FAILED,  /* the kernel refused the tag push: sent untagged */
	SL_BFC_SRC_SLOTS,
};

struct sl_bfc_counter {
	__u64 packets;
	__u64 bytes;
};

SLUICE_STATIC_ASSERT(sizeof(struct sl_bfc_flow) == 16, "sl_bfc_flow size");
SLUICE_STATIC_ASSERT(sizeof(struct sl_bfc_counter) == 16, "sl_bfc_counter size");

#endif
