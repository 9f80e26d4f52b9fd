// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sluice_pulser: DCTCP plus Pulser's brake (Pulser §III-B). On an ACK that
 * echoes EIN the window drops to cwnd_safe after being saved; after a
 * window of ACKs without the echo the saved window comes back at once.
 *
 * The echo is not visible to a congestion control (tcp_congestion_ops
 * callbacks get no packet), so the ein tc program (bpf/host/ein.bpf.c)
 * counts echoed ACKs per socket in sl_ein_sk_v1 before TCP processes them, and
 * in_ack_event compares the count with the last one it saw. init creates
 * the socket's sl_ein_sk_v1 entry: that is what makes a flow "managed" for the
 * ein programs on both ends. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "cc/dctcp_core.h"
#include "cc/pulser_core.h"
#include "lib/ein_sk.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* cwnd_safe in segments (Pulser §III-B: 4 × MSS). */
const volatile __u32 pulser_cwnd_safe = 4;

struct sl_pulser {
	struct sl_dctcp d;
	struct sl_pulser_brake b;
};

static __always_inline struct sl_pulser *ca_of(struct sock *sk)
{
	return (struct sl_pulser *)sl_icsk(sk)->icsk_ca_priv;
}

static __always_inline __u32 ca_state_of(struct sock *sk)
{
	struct inet_connection_sock *icsk = sl_icsk(sk);
	return BPF_CORE_READ_BITFIELD(icsk, icsk_ca_state);
}

SEC("struct_ops")
void BPF_PROG(sl_pulser_init_cb, struct sock *sk)
{
	struct sl_pulser *ca = ca_of(sk);
	struct sluice_ein_sk *st;

	sl_dctcp_init(sk, &ca->d);
	ca->b.braking = 0;
	ca->b.prev_cwnd = 0;
	ca->b.brake_end = 0;
	st = bpf_sk_storage_get(&sl_ein_sk_v1, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	ca->b.echo_seen = st ? st->echo_acks : 0;
}

SEC("struct_ops")
__u32 BPF_PROG(sl_pulser_ssthresh_cb, struct sock *sk)
{
	struct sl_pulser *ca = ca_of(sk);
	__u32 s = sl_dctcp_ssthresh(sk, &ca->d);

	/* While braking, any reduction aims at cwnd_safe (see pulser_core.h). */
	if (ca->b.braking) {
		ca->d.known_ssthresh = pulser_cwnd_safe > 1 ? pulser_cwnd_safe : 1;
		return ca->d.known_ssthresh;
	}
	return s;
}

SEC("struct_ops")
void BPF_PROG(sl_pulser_in_ack_event_cb, struct sock *sk, __u32 flags)
{
	struct sl_pulser *ca = ca_of(sk);
	struct tcp_sock *tp = sl_tp(sk);
	struct sluice_ein_sk *st;
	struct sl_pulser_ack a = {};
	struct sl_pulser_action act;

	sl_dctcp_sanitize(sk, &ca->d, ca->b.braking ? ca->b.prev_cwnd : 0);
	sl_dctcp_update_alpha(sk, &ca->d);

	st = bpf_sk_storage_get(&sl_ein_sk_v1, sk, 0, 0);
	if (st) {
		__u32 echoes = st->echo_acks;
		a.ein = echoes != ca->b.echo_seen;
		ca->b.echo_seen = echoes;
	}
	if (a.ein)
		sl_cc_count(ein_acks);
	a.ece = (flags & SL_CA_ACK_ECE) != 0;
	a.ca_state = ca_state_of(sk);
	a.cwnd = tp->snd_cwnd;
	a.ssthresh = tp->snd_ssthresh;
	a.in_flight = sl_packets_in_flight(tp);
	a.snd_una = tp->snd_una;
	a.snd_nxt = tp->snd_nxt;

	sl_pulser_on_ack(&ca->b, &a, pulser_cwnd_safe, &act);
	if (act.set_cwnd)
		tp->snd_cwnd = sl_min_u32(act.set_cwnd, tp->snd_cwnd_clamp);
	if (act.set_ssthresh) {
		tp->snd_ssthresh = act.set_ssthresh;
		ca->d.known_ssthresh = act.set_ssthresh;
	}
	/* A restore's target is a window we saw: the guard's reference. */
	ca->d.last_cwnd = sl_max_u32(tp->snd_cwnd, act.set_ssthresh);
	switch (act.event) {
	case SL_PULSER_BRAKE:
		sl_cc_count(brakes);
		if (st)
			__sync_fetch_and_add(&st->brakes, 1);
		break;
	case SL_PULSER_EXTEND:
		sl_cc_count(brake_extends);
		break;
	case SL_PULSER_RESTORE:
		sl_cc_count(restores);
		if (st)
			__sync_fetch_and_add(&st->restores, 1);
		break;
	case SL_PULSER_ABANDON:
		sl_cc_count(brakes_abandoned);
		break;
	}
}

SEC("struct_ops")
void BPF_PROG(sl_pulser_cong_avoid_cb, struct sock *sk, __u32 ack, __u32 acked)
{
	/* Braking holds the window at cwnd_safe until the restore. */
	if (ca_of(sk)->b.braking)
		return;
	tcp_reno_cong_avoid(sk, ack, acked);
	ca_of(sk)->d.last_cwnd = sl_tp(sk)->snd_cwnd;
}

SEC("struct_ops")
void BPF_PROG(sl_pulser_set_state_cb, struct sock *sk, __u8 new_state)
{
	sl_dctcp_set_state(sk, &ca_of(sk)->d, new_state);
}

SEC("struct_ops")
void BPF_PROG(sl_pulser_cwnd_event_cb, struct sock *sk, enum tcp_ca_event ev)
{
	if (ev == CA_EVENT_TX_START && ca_of(sk)->b.braking)
		sl_cc_count(braked_tx_starts);
	sl_dctcp_cwnd_event(sk, &ca_of(sk)->d, ev);
}

SEC("struct_ops")
__u32 BPF_PROG(sl_pulser_undo_cwnd_cb, struct sock *sk)
{
	struct sl_pulser *ca = ca_of(sk);

	/* An undo (spurious loss) must not lift a brake. */
	if (ca->b.braking)
		return sl_tp(sk)->snd_cwnd;
	return sl_dctcp_undo_cwnd(sk, &ca->d);
}

/* See sluice_dctcp's min_tso_segs: the guard before transmission. */
SEC("struct_ops")
__u32 BPF_PROG(sl_pulser_min_tso_segs_cb, struct sock *sk)
{
	struct sl_pulser *ca = ca_of(sk);

	sl_dctcp_sanitize(sk, &ca->d, ca->b.braking ? ca->b.prev_cwnd : 0);
	return 2;
}

SEC(".struct_ops")
struct tcp_congestion_ops sluice_pulser = {
	.init = (void *)sl_pulser_init_cb,
	.in_ack_event = (void *)sl_pulser_in_ack_event_cb,
	.cwnd_event = (void *)sl_pulser_cwnd_event_cb,
	.ssthresh = (void *)sl_pulser_ssthresh_cb,
	.cong_avoid = (void *)sl_pulser_cong_avoid_cb,
	.undo_cwnd = (void *)sl_pulser_undo_cwnd_cb,
	.set_state = (void *)sl_pulser_set_state_cb,
	.min_tso_segs = (void *)sl_pulser_min_tso_segs_cb,
	.flags = SL_TCP_CONG_NON_RESTRICTED | SL_TCP_CONG_NEEDS_ECN,
	.name = "sluice_pulser",
};
