// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sluice_dctcp: DCTCP as a BPF tcp_congestion_ops (the host kernel has no
 * DCTCP module). The algorithm is in dctcp_core.h, shared with
 * sluice_pulser. TCP_CONG_NEEDS_ECN makes TCP negotiate ECN and send ECT;
 * TCP_CONG_NON_RESTRICTED lets any socket, in any network namespace, pick
 * it with TCP_CONGESTION. The agent registers it (and can rename it before
 * load) and unregisters it when it exits. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "cc/dctcp_core.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

static __always_inline struct sl_dctcp *ca_of(struct sock *sk)
{
	return (struct sl_dctcp *)sl_icsk(sk)->icsk_ca_priv;
}

SEC("struct_ops")
void BPF_PROG(sl_dctcp_init_cb, struct sock *sk)
{
	sl_dctcp_init(sk, ca_of(sk));
}

SEC("struct_ops")
__u32 BPF_PROG(sl_dctcp_ssthresh_cb, struct sock *sk)
{
	return sl_dctcp_ssthresh(sk, ca_of(sk));
}

SEC("struct_ops")
void BPF_PROG(sl_dctcp_in_ack_event_cb, struct sock *sk, __u32 flags)
{
	sl_dctcp_sanitize(sk, ca_of(sk), 0);
	sl_dctcp_update_alpha(sk, ca_of(sk));
}

SEC("struct_ops")
void BPF_PROG(sl_dctcp_set_state_cb, struct sock *sk, __u8 new_state)
{
	sl_dctcp_set_state(sk, ca_of(sk), new_state);
}

SEC("struct_ops")
void BPF_PROG(sl_dctcp_cwnd_event_cb, struct sock *sk, enum tcp_ca_event ev)
{
	sl_dctcp_cwnd_event(sk, ca_of(sk), ev);
}

SEC("struct_ops")
__u32 BPF_PROG(sl_dctcp_undo_cwnd_cb, struct sock *sk)
{
	return sl_dctcp_undo_cwnd(sk, ca_of(sk));
}

SEC("struct_ops")
void BPF_PROG(sl_dctcp_cong_avoid_cb, struct sock *sk, __u32 ack, __u32 acked)
{
	tcp_reno_cong_avoid(sk, ack, acked);
	ca_of(sk)->last_cwnd = sl_tp(sk)->snd_cwnd;
}

/* Called by TCP on the transmit path (tcp_tso_segs) right after an ACK is
 * processed: the guard runs here too, so a bad cwnd is undone before it can
 * send a burst. Returns the kernel's default tcp_min_tso_segs. */
SEC("struct_ops")
__u32 BPF_PROG(sl_dctcp_min_tso_segs_cb, struct sock *sk)
{
	sl_dctcp_sanitize(sk, ca_of(sk), 0);
	return 2;
}

/* The variable name is the struct_ops map name the agent recognises as
 * sluice's; .name is the congestion control name (TCP_CONGESTION). */
SEC(".struct_ops")
struct tcp_congestion_ops sluice_dctcp = {
	.init = (void *)sl_dctcp_init_cb,
	.in_ack_event = (void *)sl_dctcp_in_ack_event_cb,
	.cwnd_event = (void *)sl_dctcp_cwnd_event_cb,
	.ssthresh = (void *)sl_dctcp_ssthresh_cb,
	.cong_avoid = (void *)sl_dctcp_cong_avoid_cb,
	.undo_cwnd = (void *)sl_dctcp_undo_cwnd_cb,
	.set_state = (void *)sl_dctcp_set_state_cb,
	.min_tso_segs = (void *)sl_dctcp_min_tso_segs_cb,
	.flags = SL_TCP_CONG_NON_RESTRICTED | SL_TCP_CONG_NEEDS_ECN,
	.name = "sluice_dctcp",
};
