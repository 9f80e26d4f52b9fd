/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Host side of Floodgate's per-destination PAUSE (Floodgate §4.3, "hosts'
 * support"): the BPF <-> agent ABI of bpf/host/dstpause.bpf.c.
 *
 * The host keeps per-destination queues in the agent: while a destination
 * is held, dp_egress (tc egress of the uplink) copies every frame to it into
 * sl_fg_hring_v1 and steals it (TC_ACT_STOLEN: the sender sees it sent); the
 * agent queues the copies per destination and, on dstResume (or when a
 * pause times out: the host fails open), sends them again in order through
 * an AF_PACKET socket with SO_MARK = reinject_mark, which dp_egress lets
 * pass. Frames to other destinations are never touched. dp_ingress accepts
 * dstPause / dstResume frames (sluice/wire.h) only on the configured uplink
 * (the port to the first-hop ToR), validates them with the shared parser
 * and hands them to the agent (docs/floodgate.md).
 *
 * Why not HTB classes paused by rate: HTB keeps a class's token deficit
 * across a rate change, so one packet let through at a "paused" rate of a
 * few bytes per second leaves the class unable to send for up to a minute
 * after the rate is restored. */
#ifndef SLUICE_DSTPAUSE_H
#define SLUICE_DSTPAUSE_H

#include "sluice/types.h"
#include "sluice/wire.h"

/* Destinations held at once. */
#define SLUICE_DP_MAX_HELD 256
/* Largest frame copied (MTU-sized frames: Ethernet + VLAN + 1500 + slack).
 * A larger skb (GSO) to a held destination is let through (fail open) and
 * counted: run the uplink with GSO off when dstPause is on. */
#define SLUICE_DP_FRAME_MAX 1536

/* sl_fg_ports_v1: ifindex -> the host port's configuration (written by the agent). */
struct sl_dp_port {
	__u32 role;          /* enum sl_port_role: SL_PORT_HOST_UPLINK on the ToR port */
	__u32 reinject_mark; /* skb->mark of the agent's re-sent frames (0: egress off) */
};

/* sl_fg_held_v1: destination (IPv6 or IPv4-mapped, as in control frames) ->
 * __u32 (non-zero: held), written by the agent. */
struct sl_dp_dst {
	__u8 addr[16];
};

/* sl_fg_hring_v1 event: one stolen frame. */
struct sl_dp_frame {
	struct sl_dp_dst dst;
	__u32 ifindex;
	__u32 len;
	__u64 tx_ns;
	__u8 frame[SLUICE_DP_FRAME_MAX];
};

/* Per-CPU counters. Slots 0 .. SL_CTRL_R_COUNT-1: control frames by
 * sl_ctrl_reason (OK = handed to the agent); then data. */
enum sl_dp_slot {
	SL_DP_CNT_HELD = SL_CTRL_R_COUNT, /* egress: copied to the agent and stolen */
	SL_DP_CNT_PASSED,                 /* egress: IP to a destination not held */
	SL_DP_CNT_REINJECTED,             /* egress: the agent's re-sent frame */
	SL_DP_CNT_NET_CONTROL,            /* egress: not IP, or IPv6 ND: left alone */
	SL_DP_CNT_TOO_BIG,                /* egress: held destination, frame too big to copy: passed */
	SL_DP_CNT_HELD_RING_FULL,         /* egress: held destination, ring full: passed */
	SL_DP_CNT_CTRL_RING_FULL,         /* ingress: valid frame, ring full */
	SL_DP_CNT_FAIL_OPEN,              /* egress: held destination, agent not alive: passed */
	SL_DP_CNT_SLOTS,
};

SLUICE_STATIC_ASSERT(sizeof(struct sl_dp_port) == 8, "sl_dp_port size");
SLUICE_STATIC_ASSERT(sizeof(struct sl_dp_dst) == 16, "sl_dp_dst size");
SLUICE_STATIC_ASSERT(sizeof(struct sl_dp_frame) == 32 + SLUICE_DP_FRAME_MAX, "sl_dp_frame size");

#endif
