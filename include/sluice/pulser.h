/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Pulser (EIN) and DCTCP: what the switch-side marker (bpf/switch/aqm.bpf.c),
 * the host-side echo (bpf/host/ein.bpf.c), the congestion controls
 * (bpf/cc/) and the agent share. */
#ifndef SLUICE_PULSER_H
#define SLUICE_PULSER_H

#include "sluice/types.h"
#if !defined(__bpf__) && !defined(__VMLINUX_H__)
#include <linux/bpf.h> /* struct bpf_spin_lock */
#endif

/* ---- Wire: where EIN lives ------------------------------------------------
 * EIN (Pulser §III-A) is one IP-header bit distinct from ECN, chosen in the
 * configuration:
 *   SLUICE_EIN_FIELD_TOS      one of the six DSCP bits of the IPv4 TOS /
 *                             IPv6 traffic class byte (mask 0x04..0x80);
 *   SLUICE_EIN_FIELD_IPV4_RSV the reserved flag bit of the IPv4 fragment
 *                             field (0x8000); IPv6 packets are not marked.
 * The receiver echoes it in TCP reserved bit 0x02 of header byte 12 (0x01 is
 * AccECN's AE bit). */
#define SLUICE_EIN_FIELD_TOS 0
#define SLUICE_EIN_FIELD_IPV4_RSV 1
#define SLUICE_EIN_ECHO_BIT 0x02 /* in TCP header byte 12 */
#define SLUICE_EIN_IPV4_RSV_FLAG 0x8000

/* ---- Host: per-socket EIN state (BPF_MAP_TYPE_SK_STORAGE) -----------------
 * Created by the sluice_pulser congestion control when it takes a socket
 * (its init), so "the socket has an entry" means "the flow is managed by
 * Pulser". The tc programs never create entries: EIN and echo bits on other
 * flows are ignored and counted. The map is pinned at
 * <pin_root>/cc/sl_ein_sk_v1 and shared by the ein programs of every interface
 * and the congestion control. */
struct sluice_ein_sk {
	/* sender half: ACKs that arrived carrying the EIN echo. Bumped at tc
	 * ingress before TCP processes the ACK; sluice_pulser compares it with
	 * the value it saw last. */
	__u32 echo_acks;
	/* receiver half: end sequence (host order) of the newest EIN-marked
	 * data segment, and whether it still has to be echoed */
	__u32 ein_end_seq;
	__u64 ein_ns;      /* bpf_ktime_get_ns() when it arrived */
	__u32 ein_pending; /* 1 while an EIN mark waits for its echo */
	__u32 pad;
	/* statistics */
	__u64 ein_data;  /* EIN-marked data segments received */
	__u64 echo_sent; /* ACKs sent with the echo bit */
	__u64 brakes;    /* sluice_pulser: cwnd set to cwnd_safe */
	__u64 restores;  /* sluice_pulser: saved cwnd restored */
};

/* ---- Congestion control counters (global, in the CC object's .bss) ------ */
struct sluice_cc_stats {
	__u64 sockets;          /* init calls (sockets that took this CC) */
	__u64 reno_fallback;    /* sockets without ECN: Reno behaviour */
	__u64 alpha_updates;    /* DCTCP α updates (one per window) */
	__u64 ecn_cuts;         /* ssthresh calls while ECN is on (CWR/loss) */
	__u64 loss_events;      /* Recovery entries and RTOs */
	__u64 brakes;           /* Pulser: EIN seen, cwnd -> cwnd_safe */
	__u64 brake_extends;    /* Pulser: EIN seen again while braking */
	__u64 restores;         /* Pulser: window without EIN, cwnd restored */
	__u64 brakes_abandoned; /* Pulser: RTO while braking, no restore */
	__u64 ein_acks;         /* Pulser: ACKs on which a new echo was seen */
	__u64 repairs;          /* impossible ssthresh/cwnd jumps undone (docs/pulser.md "A kernel anomaly") */
	/* The latest repair: what was found (before it was undone). */
	__u32 repair_ssthresh;  /* snd_ssthresh */
	__u32 repair_cwnd;      /* snd_cwnd */
	__u32 repair_bound;     /* the bound it crossed */
	__u32 repair_ca_state;  /* icsk_ca_state */
	__u64 braked_tx_starts; /* Pulser: sending resumed from nothing in flight while braking */
};

/* ---- Switch: AQM marking state (one per port, array map of 1) ----------- */
#define SLUICE_AQM_RING 256 /* max N (ein_samples) + 1 */

struct sluice_aqm_sample {
	__u64 t_ns;
	__u64 qlen; /* bytes or packets, the unit of K */
};

struct sluice_aqm_state {
	struct bpf_spin_lock lock;
	__u32 head;  /* next ring slot to write */
	__u32 count; /* samples in the ring (<= SLUICE_AQM_RING) */
	__u32 ein;   /* Algorithm 1's EIN state after the last sample */
	__u32 pad;
	__s64 avg_gradient; /* last average gradient, units per second */
	__u64 qlen;         /* last sampled queue length */
	__u64 samples;      /* samples taken */
	__u64 ein_on;       /* EIN 0 -> 1 transitions (incasts detected) */
	__u64 ein_hold;     /* samples where EIN was kept by HighWaterMark */
	struct sluice_aqm_sample ring[SLUICE_AQM_RING];
};

/* Unit of K and HighWaterMark. */
#define SLUICE_AQM_UNIT_BYTES 0
#define SLUICE_AQM_UNIT_PACKETS 1

/* Where the marker reads the queue length from. */
#define SLUICE_AQM_SRC_QDISC                                                              \
	0                         /* root qdisc backlog: bpf_cast_to_kern_ctx (aqm, 6.2+) \
				    or the qdisc tracepoints (aqm_compat) */
#define SLUICE_AQM_SRC_SCRIPTED 1 /* sluice_aqm_script map (tests: scripted samples) */

/* One scripted sample (SLUICE_AQM_SRC_SCRIPTED): the next packet sees this
 * queue length at this time. Index 0 of the sl_aqm_scr_v1 array. */
struct sluice_aqm_script {
	__u64 t_ns;
	__u64 qlen;
};

/* aqm_compat: the port's root qdisc backlog after its latest enqueue or
 * dequeue (tp_btf/qdisc_enqueue, qdisc_dequeue). Index 0 of the
 * sl_aqm_bklog_v1 array. */
struct sluice_aqm_backlog {
	__u64 bytes;   /* qstats.backlog */
	__u64 packets; /* q.qlen */
	__u64 events;  /* enqueue + dequeue events seen on the port */
};

#ifdef __cplusplus
#include <cstddef>
static_assert(sizeof(sluice_aqm_backlog) == 24, "sluice_aqm_backlog ABI");
static_assert(sizeof(sluice_ein_sk) == 56, "sluice_ein_sk ABI");
static_assert(offsetof(sluice_ein_sk, ein_ns) == 8, "sluice_ein_sk ABI");
static_assert(offsetof(sluice_ein_sk, restores) == 48, "sluice_ein_sk ABI");
static_assert(sizeof(sluice_cc_stats) == 112, "sluice_cc_stats ABI");
static_assert(offsetof(sluice_aqm_state, avg_gradient) == 24, "sluice_aqm_state ABI");
static_assert(offsetof(sluice_aqm_state, ring) == 64, "sluice_aqm_state ABI");
static_assert(sizeof(sluice_aqm_state) == 64 + 16 * SLUICE_AQM_RING, "sluice_aqm_state ABI");
#endif

#endif
