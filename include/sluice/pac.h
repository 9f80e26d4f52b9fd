/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* PAC (proactive ACK control, pac-icnp14 §III): ABI shared by
 * bpf/host/pac.bpf.c and the agent (agent/mechanisms/pac/).
 *
 * Division of labour (docs/pac.md, "How it is built"):
 *  - tc ingress: every data segment of a managed flow lowers the in-flight
 *    estimate by its payload (eq. 5) and feeds per-flow bytes (MLFQ level),
 *    ECN CE counts (α) and an RTT sample.
 *  - tc egress: a pure ACK whose flow has nothing held and whose trigger
 *    (eq. 3) fits under the threshold is admitted in the kernel (eq. 4);
 *    otherwise a copy goes to the agent through a ring buffer and the skb is
 *    dropped. The agent holds it in the MLFQ and re-injects it through an
 *    AF_PACKET socket whose SO_MARK makes the egress program admit it and
 *    account its trigger.
 *  - Per-flow state is split by writer: `sl_pac_flows_v2` is written by BPF only,
 *    `sl_pac_ctl_v2` by the agent only (an array: slot = the flow's id, so
 *    the fast path finds it without a second hash lookup); the global `struct sluice_pac_state`
 *    lives in the program's .bss, which the agent maps and updates with
 *    atomic instructions.
 *
 * The trigger arithmetic is a static inline function here so the BPF
 * program, the agent and the unit tests run the very same code. */
#ifndef SLUICE_PAC_H
#define SLUICE_PAC_H

#include "sluice/types.h"
#if !defined(__bpf__) && !defined(__VMLINUX_H__)
#include <linux/bpf.h> /* struct bpf_timer */
#endif
#include "sluice/liveness.h"

/* Largest ACK frame the egress program copies for the agent: Ethernet (+VLAN)
 * + IPv4 with options or IPv6 + TCP with 40 bytes of options. */
#define SLUICE_PAC_FRAME_MAX 192
#define SLUICE_PAC_FLOW_TABLE_SIZE 65536
#define SLUICE_PAC_MAX_PORT_RANGES 8
#define SLUICE_PAC_MAX_PREFIXES 8
#define SLUICE_PAC_DEFAULT_MSS 1448
/* Linux initial window (RFC 6928): what a new flow's first request or our
 * SYN-ACK lets the sender put in flight before any ACK. */
#define SLUICE_PAC_IW_SEGS 10

/* Canonical flow key, from the receiver's point of view: `r` = remote (the
 * data sender), `l` = local (the PAC receiver). Network byte order. */
struct sluice_pac_flow_key {
	__u32 raddr[4];
	__u32 laddr[4];
	__u16 rport;
	__u16 lport;
	__u8 family; /* 4 or 6 */
	__u8 pad[3];
};

/* Per-flow state written only by the BPF programs. */
struct sluice_pac_flow {
	__u64 first_ns;
	__u64 last_ns;      /* last packet either way */
	__u64 bytes_rcvd;   /* payload received: MLFQ level (§III-D) */
	__u64 data_pkts;    /* wire segments received */
	__u64 ce_pkts;      /* of which CE-marked */
	__u64 diverted;     /* ACKs handed to the agent */
	__u64 reinjected;   /* of which came back (marked) and were sent */
	__u64 admitted;     /* ACKs admitted in the kernel */
	__u64 ts_sent_ns;   /* when an ACK carrying ts_val_sent last left */
	__u64 cur_burst;    /* payload received since our last data segment */
	__u64 burst_bytes;  /* ...and between the two data segments before */
	__u64 trig_sum;     /* triggers accounted for this flow (eq. 3 summed) */
	__u32 last_ack;     /* ACK_prev of eq. (3): last ACK number released */
	__u32 last_win;     /* raw window of that ACK */
	__u32 ack_high;     /* highest ACK number our stack generated (held or not) */
	__u32 mss;          /* largest segment seen (GSO: gso_size) */
	__u32 ts_val_sent;  /* our TSval on the last ACK released */
	__u32 srtt_us;      /* RTT from TCP timestamps, EWMA 1/8; 0 = none */
	__u32 retrans_segs; /* RTO duplicates: already-acked data starting at last_ack */
	__u8 ack_valid;     /* last_ack holds a released ACK */
	__u8 ce_seen;       /* a CE mark puts the flow in CA (§III-C) */
	__u8 fin_rst;       /* bit 0: FIN seen, bit 1: RST seen */
	__u8 rcv_valid;     /* rcv_high holds a value */
	__u32 rcv_high;     /* highest seq + len received (host order) */
	__u8 ca_inferred;   /* §III-C CA, inferred here: triggered bytes that never came */
	__u8 wscale;        /* our window scale + 1, from our SYN/SYN-ACK (rwnd_cap_bytes); 0 = unknown */
	__u8 bflags;        /* SLUICE_PAC_BF_* */
	__u8 bepoch;        /* low byte of pac.bound_epoch when contrib was last valid */
	__u64 gap_bytes;    /* sequence space skipped by arriving data (lost) */
	__u64 expect;       /* this flow's share of in_flight: triggered, not yet arrived */
	/* Trigger age (docs/pac.md, the per-flow correction): triggers released in the
	 * current and the previous age window; expected bytes beyond their sum
	 * were triggered at least one window ago and did not come. */
	__u64 age_start_ns;
	__u64 trig_cur;
	__u64 trig_prev;
	__u64 phantom_bytes; /* expected bytes written off as never coming */
	__u32 epoch;         /* pac.epoch when expect was last valid */
	__u32 edge;          /* right edge of the windows released: ACK + window (rwnd_cap_bytes) */
	__u64 contrib;       /* this flow's share of pac.bound */
	__u32 req_end;       /* end (seq + len) of the last request handed to the agent */
	__u32 id;            /* >= 1, unique per flow entry: its control in sl_pac_ctl_v2[id % SLUICE_PAC_CTL_SLOTS] */
	/* Fires once the flow was quiet for max(2 x its RTT, the age floor)
	 * while it still holds a share of the estimate or the bound
	 * (flow_watch(), docs/pac.md "New connections"). BPF only; reads as
	 * zeros in user space. */
	struct bpf_timer quiet_timer;
};

/* Per-flow control written only by the agent (the BPF side reads it), in
 * slot `id % SLUICE_PAC_CTL_SLOTS` of an array; valid for the flow whose
 * sluice_pac_flow.id equals `id` (0: the slot is free). Two live flows
 * share a slot only when 65,536 flows were created while the older one
 * lived; the older then reads no control (as before the agent wrote any). */
struct sluice_pac_flow_ctl {
	__u64 dropped; /* held ACKs the agent dropped (stale/teardown) */
	__u32 window;  /* estimated sender window in bytes (CA increment) */
	__u32 id;      /* the flow this slot belongs to */
	__u8 ca;       /* inferred congestion avoidance (§III-C) */
	__u8 pad[7];
};
#define SLUICE_PAC_CTL_SLOTS SLUICE_PAC_FLOW_TABLE_SIZE

/* Global state in the program's .bss, shared with the agent through the
 * mmapped map. Fields both sides modify are changed with atomic adds /
 * compare-and-swap only. */
struct sluice_pac_state {
	__s64 in_flight;             /* eq. (4)/(5) estimate, bytes (may dip below 0) */
	__u64 threshold;             /* eq. (2), set by the agent */
	struct sluice_liveness live; /* the agent's heartbeat (lib/liveness.h) */
	__u64 data_pkts;             /* ingress data segments of managed flows */
	__u64 data_bytes;
	__u64 ce_pkts;
	__u64 held;            /* ACKs queued in the agent (agent writes) */
	__u64 wake_room;       /* trigger of the agent's head ACK (agent writes) */
	__u32 wake_pending;    /* 1 while a wake event is unconsumed */
	__u32 epoch;           /* bumped by the agent when it lowers in_flight
				* globally (eq. 6, idle pipe): per-flow expected
				* bytes of older epochs are void */
	__u64 last_data_ns;    /* last data segment of a managed flow arrived */
	__u64 last_trigger_ns; /* last time in_flight was raised (eq. 4) */
	__u64 phantom_bytes;   /* expected bytes written off (trigger age) */
	__u64 phantom_events;
	__u64 rwnd_clamped; /* segments whose receive window was capped (rwnd_cap_bytes) */
	/* With rwnd_cap_bytes and cap_to_response: Σ over request/response
	 * flows of min(edge − highest byte received, what is left of the
	 * response), an upper bound of their data in flight that cannot drift
	 * (recomputed from sequence numbers at every packet). Admission uses
	 * max(in_flight, bound). */
	__s64 bound;
	__u32 bound_epoch;     /* bumped by the agent when it clears bound (idle pipe) */
	__u32 next_id;         /* last flow id given out (sluice_pac_flow.id) */
	__u64 last_request_ns; /* last time a request of ours left (its response may not have begun) */
	__u64 resp_guess;      /* size of the last response measured on any flow: a new flow's first guess */
	/* Trigger of the ACK the agent releases next, 0 when it holds no ACK
	 * or windows are not capped (agent writes): the kernel admits another
	 * flow's ACK only if this one still fits after it, so a flow whose ACKs
	 * wait is not starved by flows whose ACKs never do (Algorithm 1
	 * releases from the queue head). */
	__u64 ack_room;
	/* Diagnostics of new connections (docs/pac.md, "New connections"). */
	__u64 new_flows;    /* flows started by our SYN, SYN-ACK or first data segment */
	__u64 first_window; /* bytes counted for new flows' first windows (SYN-ACK, first request) */
	__u64 resp_cut;     /* eq. (3) trigger bytes removed by the response cap (cap_to_response) */
	__u64 uncounted;    /* payload that arrived while the estimate was already 0: data PAC did not count */
	/* Entries the programs created in sl_pac_flows_v2 (either direction).
	 * The table is an LRU hash: a new flow in a full table evicts the least
	 * recently used one, so evicted = inserts - entries left - entries the
	 * agent removed (sluicectl stats: flows_evicted). An insert the kernel
	 * refuses is PAC_FLOW_TABLE_FULL and its packet passes untouched. */
	__u64 flow_inserts;
	/* Attempts to arm a flow's quiet_timer that failed (a flow tries
	 * again at its next packet): bpf_timer_init allocates, and the
	 * allocation can fail in softirq (-ENOMEM; on Linux 6.18, for most new
	 * flows under load). The agent's flow scan then clears their shares
	 * once quiet (pac_quiet_sweep; docs/pac.md, "New connections"). */
	__u64 timer_fails;
};

#define SLUICE_PAC_BF_EDGE 0x01   /* sluice_pac_flow.edge holds a value */
#define SLUICE_PAC_BF_GUESS 0x02  /* burst_bytes is the initial-window guess, not a measured response */
#define SLUICE_PAC_BF_LISTED 0x04 /* quiet_timer armed: watched for the end of its response */

enum sluice_pac_event_type {
	SLUICE_PAC_EV_HELD = 1,    /* an ACK to hold; frame attached */
	SLUICE_PAC_EV_SEGMENT = 2, /* a non-holdable segment of a flow with held ACKs */
	SLUICE_PAC_EV_WAKE = 3,    /* in_flight dropped enough for the head ACK */
};

#define SLUICE_PAC_EVF_ECE 0x01     /* ACK carries ECE */
#define SLUICE_PAC_EVF_CA 0x02      /* flow saw CE (in CA) */
#define SLUICE_PAC_EVF_SACK 0x04    /* ACK carries a SACK option */
#define SLUICE_PAC_EVF_INGRESS 0x08 /* EV_SEGMENT seen at ingress (from the sender) */

/* Ring buffer record. For EV_SEGMENT `frame_len` is 0. */
struct sluice_pac_event {
	__u64 ts_ns;
	__u64 bytes_rcvd;
	struct sluice_pac_flow_key key;
	__u32 ack;
	__u32 last_ack; /* flow's ACK_prev when diverted */
	__u32 mss;
	__u32 retrans_segs;
	__u32 req_bytes; /* held request (hold_requests): expected response */
	__u16 window;
	__u16 frame_len;
	__u8 type;
	__u8 tcp_flags;
	__u8 flags; /* SLUICE_PAC_EVF_* */
	__u8 ack_valid;
	__u8 frame[SLUICE_PAC_FRAME_MAX];
};

/* One port range [lo, hi] in host order; lo = hi = 0 is an unused slot. */
struct sluice_pac_port_range {
	__u16 lo;
	__u16 hi;
};

/* One remote prefix (IPv4 in addr[0]). */
struct sluice_pac_prefix {
	__u32 addr[4];
	__u8 family;
	__u8 len;
	__u8 pad[2];
};

/* The in-flight estimate counts TCP payload (eq. 4/5); a switch buffer (and
 * a Linux qdisc limit) counts frames. §III-B's threshold = buffer size, in
 * payload: the buffer holds buffer / (MSS + headers) full segments of MSS
 * payload (Ethernet 14 + IPv4 20 + TCP with timestamps 32 = 66 bytes). */
static inline __u64 sluice_pac_payload_capacity(__u64 buffer_bytes)
{
	return buffer_bytes * SLUICE_PAC_DEFAULT_MSS / (SLUICE_PAC_DEFAULT_MSS + 66);
}

/* Sequence-space delta b - a (RFC 1982), signed. */
static inline __s32 sluice_pac_seq_delta(__u32 a, __u32 b)
{
	return (__s32)(b - a);
}

/* Algorithm 1 line 11: may an ACK (or held request) whose trigger is `trig`
 * leave now? It fits when in_flight + trig <= threshold; an empty pipe
 * admits any single one (a trigger larger than the whole threshold, a
 * GSO-sized delta or a whole response, must not wait forever), and one
 * that triggers nothing cannot overfill anything. One rule for the kernel's
 * admission, its wake-up of the agent and the agent's release. */
static inline int sluice_pac_fits(__s64 in_flight, __u64 trig, __u64 threshold)
{
	return in_flight <= 0 || trig == 0 || in_flight + (__s64)trig <= (__s64)threshold;
}

/* PAC §III-C eq. (3): bytes of new data an ACK is expected to trigger.
 *   delta = ACK_q - ACK_prev (sequence space, wraps)
 *   SS: delta + Increment_SS; CA: delta + MSS*MSS/Window; ECE: delta only.
 * The paper's Reno adds one MSS per ACK in slow start (its testbed disables
 * delayed ACKs). Linux slow start grows cwnd by the number of segments acked
 * (RFC 3465), so with delayed ACKs an ACK covering k segments lets k more
 * out: Increment_SS = max(delta, MSS).
 * A duplicate ACK (delta == 0: SACK dupack, window update, probe answer)
 * signals one segment left the network and may clock one out: MSS.
 * An ACK behind ACK_prev (reordered/stale) triggers nothing: 0.
 * Without an earlier ACK (ack_valid == 0) delta is taken as one MSS. */
static inline __u32 sluice_pac_trigger(__u32 ack_prev, __u8 ack_valid, __u32 ack, __u32 mss, __u32 window, __u8 ca,
				       __u8 ece)
{
	__s32 d;
	__u32 delta, inc;

	if (!mss)
		mss = SLUICE_PAC_DEFAULT_MSS;
	if (!ack_valid) {
		delta = mss;
	} else {
		d = sluice_pac_seq_delta(ack_prev, ack);
		if (d < 0)
			return 0;
		if (d == 0)
			return mss;
		delta = (__u32)d;
	}
	if (ece)
		return delta;
	if (ca) {
		if (window < mss)
			window = mss;
		inc = (__u32)(((__u64)mss * mss) / window);
		if (!inc)
			inc = 1;
	} else {
		inc = delta > mss ? delta : mss;
	}
	return delta + inc;
}

#ifdef __cplusplus
#include <cstddef>
static_assert(sizeof(sluice_pac_flow_key) == 40, "sluice_pac_flow_key ABI");
static_assert(offsetof(sluice_pac_flow_key, rport) == 32, "sluice_pac_flow_key ABI");
static_assert(sizeof(sluice_pac_flow) == 224, "sluice_pac_flow ABI");
static_assert(offsetof(sluice_pac_flow, quiet_timer) == 208, "sluice_pac_flow ABI");
static_assert(offsetof(sluice_pac_flow, age_start_ns) == 152, "sluice_pac_flow ABI");
static_assert(offsetof(sluice_pac_flow, last_ack) == 96, "sluice_pac_flow ABI");
static_assert(sizeof(sluice_pac_flow_ctl) == 24, "sluice_pac_flow_ctl ABI");
static_assert(sizeof(sluice_pac_state) == 232, "sluice_pac_state ABI");
static_assert(offsetof(sluice_pac_state, last_data_ns) == 104, "sluice_pac_state ABI");
static_assert(offsetof(sluice_pac_state, wake_pending) == 96, "sluice_pac_state ABI");
static_assert(offsetof(sluice_pac_event, key) == 16, "sluice_pac_event ABI");
static_assert(offsetof(sluice_pac_event, frame) == 84, "sluice_pac_event ABI");
static_assert(sizeof(sluice_pac_port_range) == 4, "sluice_pac_port_range ABI");
static_assert(sizeof(sluice_pac_prefix) == 20, "sluice_pac_prefix ABI");
#endif

#endif
