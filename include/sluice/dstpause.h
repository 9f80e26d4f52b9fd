/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Host side of Floodgate's per-destination PAUSE (Floodgate §4.3, "hosts'
 * support"): the BPF <-> agent ABI of bpf/host/dstpause.bpf.c.
 *
 * A host keeps per-destination queues on its uplink: an HTB root
 * (handle htb_major:) with the default class major:1 for every destination
 * and one class major:(2 + slot) per destination that was paused; the agent
 * stops a slot's class while its destination is paused and lets it run
 * again on dstResume (docs/floodgate.md). dp_ingress accepts dstPause /
 * dstResume frames (sluice/wire.h) only on the configured uplink (the port
 * to the first-hop ToR), validates them with the shared parser and hands
 * them to the agent; dp_egress steers packets to a paused destination into
 * its slot's class. */
#ifndef SLUICE_DSTPAUSE_H
#define SLUICE_DSTPAUSE_H

#include "sluice/types.h"
#include "sluice/wire.h"

/* Destinations that can hold a slot at once (HTB classes major:2 ..). */
#define SLUICE_DP_MAX_SLOTS 64
#define SLUICE_DP_DEFAULT_MINOR 1
#define SLUICE_DP_SLOT_MINOR(slot) (2 + (slot))

/* dp_ports: ifindex -> the host port's configuration (written by the agent). */
struct sl_dp_port {
	__u32 role;      /* enum sl_port_role: SL_PORT_HOST_UPLINK on the ToR port */
	__u32 htb_major; /* the uplink's HTB root major (0: do not steer) */
};

/* dp_dst_slot: destination (IPv6 or IPv4-mapped, as in control frames) ->
 * slot, written by the agent while the destination is paused or its slot
 * still holds packets. */
struct sl_dp_dst {
	__u8 addr[16];
};

/* Per-CPU counters. Slots 0 .. SL_CTRL_R_COUNT-1: control frames by
 * sl_ctrl_reason (OK = handed to the agent); then data. */
enum sl_dp_slot {
	SL_DP_CNT_STEERED = SL_CTRL_R_COUNT, /* egress: to a destination's slot class */
	SL_DP_CNT_DEFAULT,                   /* egress: default class */
	SL_DP_CNT_NOT_IP,                    /* egress: not IP, left alone */
	SL_DP_CNT_RING_FULL,                 /* ingress: valid frame, ring full */
	SL_DP_CNT_SLOTS,
};

SLUICE_STATIC_ASSERT(sizeof(struct sl_dp_port) == 8, "sl_dp_port size");
SLUICE_STATIC_ASSERT(sizeof(struct sl_dp_dst) == 16, "sl_dp_dst size");

#endif
