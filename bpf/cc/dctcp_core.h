/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* DCTCP (Alizadeh et al., SIGCOMM 2010) as tcp_congestion_ops callbacks,
 * shared by sluice_dctcp and sluice_pulser. Behaviour follows the paper and
 * the Linux DCTCP module it is compared with:
 *  - sender (§3.1): α ← (1 − g)·α + g·F once per window of data, F = the
 *    fraction of delivered segments that were CE-marked (tp->delivered_ce);
 *    on ECE the window is cut to cwnd·(1 − α/2), at most once per window
 *    (the kernel's CWR state gives the "once per window");
 *  - receiver (§3.1, Fig. 10): ECE mirrors the CE state of the last data
 *    segment; a CE state change sends the pending delayed ACK for the old
 *    state first, then ACKs at once;
 *  - loss: like Reno (ssthresh = cwnd/2), undo restores the cwnd before;
 *  - a peer that did not negotiate ECN gets Reno.
 * α is kept in 1/1024 units (SL_DCTCP_MAX_ALPHA = 1.0). */
#ifndef SLUICE_BPF_CC_DCTCP_CORE_H
#define SLUICE_BPF_CC_DCTCP_CORE_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "sluice/pulser.h"

#define SL_DCTCP_MAX_ALPHA 1024U

/* tp->ecn_flags bits. Bits 0-3 mean the same on 6.1 and 6.18; bit 4 is the
 * AccECN mode on kernels that have it (unused before). */
#define SL_TCP_ECN_OK 0x01
#define SL_TCP_ECN_DEMAND_CWR 0x04
#define SL_TCP_ECN_MODE_ACCECN 0x10

/* struct tcp_congestion_ops.flags */
#define SL_TCP_CONG_NON_RESTRICTED 0x1
#define SL_TCP_CONG_NEEDS_ECN 0x2

#define SL_TCP_CA_OPEN 0
#define SL_TCP_CA_CWR 2
#define SL_TCP_CA_RECOVERY 3
#define SL_TCP_CA_LOSS 4

#define SL_ICSK_ACK_TIMER 2
#define SL_ICSK_ACK_NOW 16

#define SL_CA_ACK_ECE 4

/* Set by the agent before load (rodata). */
const volatile __u32 dctcp_shift_g = 4;                        /* g = 1/2^shift_g */
const volatile __u32 dctcp_alpha_on_init = SL_DCTCP_MAX_ALPHA; /* α at start, 1/1024 */

/* Global counters, read by the agent from .bss. */
struct sluice_cc_stats sl_cc_stats = {};

#define sl_cc_count(field) __sync_fetch_and_add(&sl_cc_stats.field, 1)

extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;

struct sl_dctcp {
	__u32 old_delivered;
	__u32 old_delivered_ce;
	__u32 prior_rcv_nxt;
	__u32 alpha;
	__u32 next_seq;
	__u32 ce_state;
	__u32 loss_cwnd;
	__u32 reno;           /* no ECN on this connection: plain Reno */
	__u32 last_cwnd;      /* cwnd when one of our callbacks last ran */
	__u32 known_ssthresh; /* the last ssthresh we returned, wrote or accepted */
};

static __always_inline struct tcp_sock *sl_tp(struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct inet_connection_sock *sl_icsk(struct sock *sk)
{
	return (struct inet_connection_sock *)sk;
}

static __always_inline __u32 sl_max_u32(__u32 a, __u32 b)
{
	return a > b ? a : b;
}

static __always_inline __u32 sl_min_u32(__u32 a, __u32 b)
{
	return a < b ? a : b;
}

static __always_inline int sl_before(__u32 a, __u32 b)
{
	return (__s32)(a - b) < 0;
}

static __always_inline int sl_ecn_ok(const struct tcp_sock *tp)
{
	return (tp->ecn_flags & (SL_TCP_ECN_OK | SL_TCP_ECN_MODE_ACCECN)) != 0;
}

static __always_inline __u32 sl_packets_in_flight(const struct tcp_sock *tp)
{
	return tp->packets_out - (tp->sacked_out + tp->lost_out) + tp->retrans_out;
}

static __always_inline void sl_dctcp_reset(const struct tcp_sock *tp, struct sl_dctcp *ca)
{
	ca->next_seq = tp->snd_nxt;
	ca->old_delivered = tp->delivered;
	ca->old_delivered_ce = tp->delivered_ce;
}

static __always_inline void sl_dctcp_init(struct sock *sk, struct sl_dctcp *ca)
{
	struct tcp_sock *tp = sl_tp(sk);
	int state = sk->__sk_common.skc_state;

	sl_cc_count(sockets);
	/* A listener or a socket not yet connected has not negotiated
	 * anything; it is initialised again when it becomes a connection. */
	if (sl_ecn_ok(tp) || state == TCP_LISTEN || state == TCP_CLOSE) {
		ca->prior_rcv_nxt = tp->rcv_nxt;
		ca->alpha = sl_min_u32(dctcp_alpha_on_init, SL_DCTCP_MAX_ALPHA);
		ca->loss_cwnd = 0;
		ca->ce_state = 0;
		ca->reno = 0;
		ca->last_cwnd = tp->snd_cwnd;
		ca->known_ssthresh = tp->snd_ssthresh;
		sl_dctcp_reset(tp, ca);
		return;
	}
	/* The kernel's DCTCP also clears ECT from the socket here. A BPF
	 * congestion control cannot write inet->tos, so the segments of such
	 * a connection keep the ECT(0) TCP set at the SYN for an ECN-needing
	 * control; the peer ignores CE on them and loss still works (docs/pulser.md,
	 * "DCTCP without ECN"). */
	ca->reno = 1;
	ca->loss_cwnd = 0;
	ca->last_cwnd = tp->snd_cwnd;
	ca->known_ssthresh = tp->snd_ssthresh;
	sl_cc_count(reno_fallback);
}

/* DCTCP §3.1: α ← (1 − g)·α + g·F with g = 1/2^shift_g and F =
 * delivered_ce / delivered over the last window, in 1/1024 units. α·(1 − g)
 * is never stuck at a small value: when α >> shift_g rounds to zero the
 * remainder is dropped at once. */
static __always_inline __u32 sl_dctcp_alpha_next(__u32 alpha, __u32 delivered, __u32 delivered_ce, __u32 shift)
{
	__u32 decay;

	shift &= 31;
	if (shift > 10)
		shift = 10;
	decay = alpha >> shift;
	alpha -= decay ? decay : alpha;
	if (delivered_ce) {
		/* + g·F */
		delivered_ce <<= (10 - shift);
		delivered_ce /= sl_max_u32(1, delivered);
		alpha = sl_min_u32(alpha + delivered_ce, SL_DCTCP_MAX_ALPHA);
	}
	return alpha;
}

/* Once per window: when snd_una passes the snd_nxt remembered at the last
 * update. */
static __always_inline void sl_dctcp_update_alpha(struct sock *sk, struct sl_dctcp *ca)
{
	struct tcp_sock *tp = sl_tp(sk);

	if (ca->reno || sl_before(tp->snd_una, ca->next_seq))
		return;
	ca->alpha = sl_dctcp_alpha_next(ca->alpha, tp->delivered - ca->old_delivered,
					tp->delivered_ce - ca->old_delivered_ce, dctcp_shift_g);
	sl_dctcp_reset(tp, ca);
	sl_cc_count(alpha_updates);
}

/* A guard against values no callback of ours produced. On the 6.18 host
 * TCP occasionally entered CWR with an ssthresh that sluice_dctcp never
 * returned (always 0x81100010, the low half of a kernel text address), and
 * PRR then grew cwnd toward it by millions of segments in one ACK (docs/pulser.md,
 * "A kernel anomaly"). No legitimate path moves cwnd or ssthresh past twice
 * the largest window seen since our last callback (`extra`: a Pulser
 * restore target), so anything beyond is put back: ssthresh to the DCTCP
 * cut of the last sane window, cwnd to at most that window. */
static __always_inline void sl_dctcp_sanitize(struct sock *sk, struct sl_dctcp *ca, __u32 extra)
{
	struct tcp_sock *tp = sl_tp(sk);
	__u32 known = ca->known_ssthresh == 0x7fffffff ? 0 : ca->known_ssthresh;
	__u32 ref = sl_max_u32(sl_max_u32(ca->last_cwnd, tp->prior_cwnd), sl_max_u32(extra, known));
	__u32 bound;
	__u32 ssthresh = tp->snd_ssthresh;
	__u32 cwnd = tp->snd_cwnd;
	int repaired = 0;

	ref = sl_max_u32(ref, 10);
	bound = ref < 0x10000000 ? 2 * ref + 64 : 0x7ffffff0;
	if (ssthresh != ca->known_ssthresh && ssthresh != 0x7fffffff) {
		if (ssthresh > bound) {
			tp->snd_ssthresh = sl_max_u32(ref - ((ref * (ca->alpha & 2047)) >> 11), 2);
			repaired = 1;
		}
		ca->known_ssthresh = tp->snd_ssthresh;
	}
	if (tp->snd_cwnd > bound) {
		tp->snd_cwnd = ref;
		repaired = 1;
	}
	if (repaired) {
		sl_cc_count(repairs);
		sl_cc_stats.repair_ssthresh = ssthresh;
		sl_cc_stats.repair_cwnd = cwnd;
		sl_cc_stats.repair_bound = bound;
		sl_cc_stats.repair_ca_state = sl_icsk(sk)->icsk_ca_state;
	}
	ca->last_cwnd = tp->snd_cwnd;
}

/* Window after an ECN cut: cwnd·(1 − α/2). Also the ssthresh for a loss
 * entering Recovery, which set_state turns into Reno's halving. */
static __always_inline __u32 sl_dctcp_ssthresh(struct sock *sk, struct sl_dctcp *ca)
{
	struct tcp_sock *tp = sl_tp(sk);
	__u32 cwnd = tp->snd_cwnd;

	ca->loss_cwnd = cwnd;
	if (ca->reno) {
		ca->known_ssthresh = sl_max_u32(cwnd >> 1, 2);
		return ca->known_ssthresh;
	}
	sl_cc_count(ecn_cuts);
	ca->known_ssthresh = sl_max_u32(cwnd - ((cwnd * ca->alpha) >> 11), 2);
	return ca->known_ssthresh;
}

static __always_inline void sl_dctcp_react_to_loss(struct sock *sk, struct sl_dctcp *ca)
{
	struct tcp_sock *tp = sl_tp(sk);

	ca->loss_cwnd = tp->snd_cwnd;
	tp->snd_ssthresh = sl_max_u32(tp->snd_cwnd >> 1, 2);
	ca->known_ssthresh = tp->snd_ssthresh;
	sl_cc_count(loss_events);
}

static __always_inline void sl_dctcp_set_state(struct sock *sk, struct sl_dctcp *ca, __u8 new_state)
{
	if (new_state == SL_TCP_CA_RECOVERY && new_state != sl_icsk(sk)->icsk_ca_state)
		sl_dctcp_react_to_loss(sk, ca);
}

static __always_inline void sl_dctcp_ece_demand(struct tcp_sock *tp, __u32 ce_state)
{
	if (ce_state)
		tp->ecn_flags |= SL_TCP_ECN_DEMAND_CWR;
	else
		tp->ecn_flags &= ~SL_TCP_ECN_DEMAND_CWR;
}

/* DCTCP receiver (§3.1): ECE follows the CE state of the last segment. On a
 * change, a delayed ACK still owed for the old state goes out first with the
 * old ECE, then this segment is ACKed at once. */
static __always_inline void sl_dctcp_ce_event(struct sock *sk, struct sl_dctcp *ca, __u32 is_ce)
{
	struct tcp_sock *tp = sl_tp(sk);
	struct inet_connection_sock *icsk = sl_icsk(sk);

	/* AccECN counts CE in the ACE field instead; nothing to do. */
	if (tp->ecn_flags & SL_TCP_ECN_MODE_ACCECN)
		return;
	if (ca->ce_state != is_ce) {
		if (icsk->icsk_ack.pending & SL_ICSK_ACK_TIMER) {
			sl_dctcp_ece_demand(tp, ca->ce_state);
			bpf_tcp_send_ack(tp, ca->prior_rcv_nxt);
		}
		icsk->icsk_ack.pending |= SL_ICSK_ACK_NOW;
	}
	ca->prior_rcv_nxt = tp->rcv_nxt;
	ca->ce_state = is_ce;
	sl_dctcp_ece_demand(tp, is_ce);
}

static __always_inline void sl_dctcp_cwnd_event(struct sock *sk, struct sl_dctcp *ca, enum tcp_ca_event ev)
{
	switch (ev) {
	case CA_EVENT_ECN_IS_CE:
	case CA_EVENT_ECN_NO_CE:
		if (!ca->reno)
			sl_dctcp_ce_event(sk, ca, ev == CA_EVENT_ECN_IS_CE);
		break;
	case CA_EVENT_LOSS:
		/* RTO: ssthresh was just set by ssthresh(); a timeout halves
		 * like Reno. */
		sl_dctcp_react_to_loss(sk, ca);
		break;
	default:
		break;
	}
}

static __always_inline __u32 sl_dctcp_undo_cwnd(struct sock *sk, struct sl_dctcp *ca)
{
	struct tcp_sock *tp = sl_tp(sk);

	if (ca->reno)
		return sl_max_u32(tp->snd_cwnd, tp->prior_cwnd);
	return sl_max_u32(tp->snd_cwnd, ca->loss_cwnd);
}

#endif
