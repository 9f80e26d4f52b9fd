/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Pulser's brake (Pulser §III-B) as a pure state machine over one ACK, so
 * the same code runs inside sluice_pulser and in a BPF test program that
 * feeds it scripted ACKs.
 *
 *   EIN echoed:  cwnd_prev ← cwnd; cwnd ← cwnd_safe        (eq. 1, 2)
 *   a window of ACKs with no echo:  cwnd ← cwnd_prev       (eq. 3)
 *
 * cwnd_prev is the window the flow was using: cwnd, or the data in flight
 * when that is smaller (a flow limited by its host or by TCP small queues
 * grows a cwnd it never fills; on these hosts it reaches hundreds of
 * segments more than in flight).
 *
 * "A window" is the data that was outstanding when the last echo arrived:
 * the brake ends on the first echo-free ACK that acknowledges snd_nxt as it
 * was then.
 *
 * Linux specifics (docs/pulser.md "Pulser on Linux TCP"): the kernel reduces cwnd
 * with PRR while it is in CWR/Recovery and sets cwnd = ssthresh when that
 * state ends, so a cwnd written there would be overwritten. In those states
 * the brake and the restore therefore go through ssthresh, which PRR steers
 * cwnd to within the same round trip. An ECE in Open starts CWR on this very
 * ACK with PRR scaling from the current cwnd; while braking, cwnd is raised
 * to the data in flight first so the reduction runs from there down to
 * cwnd_safe instead of keeping the data in flight constant. A timeout
 * (Loss) abandons the brake: recovery from an RTO is left to TCP. */
#ifndef SLUICE_BPF_CC_PULSER_CORE_H
#define SLUICE_BPF_CC_PULSER_CORE_H

#include "vmlinux.h"

#define SL_PULSER_CA_CWR 2
#define SL_PULSER_CA_LOSS 4
#define SL_PULSER_INFINITE_SSTHRESH 0x7fffffff

struct sl_pulser_brake {
	__u32 braking;
	__u32 prev_cwnd; /* cwnd_prev: the window before the incast */
	__u32 brake_end; /* snd_nxt when the last echo arrived */
	__u32 echo_seen; /* sluice_ein_sk.echo_acks already acted on */
};

/* One ACK as Pulser sees it, before TCP updates cwnd for it. */
struct sl_pulser_ack {
	__u32 ein;      /* an EIN echo arrived with this ACK (or since the last) */
	__u32 ece;      /* the ACK carries ECE (CA_ACK_ECE) */
	__u32 ca_state; /* TCP_CA_Open .. TCP_CA_Loss */
	__u32 cwnd;
	__u32 ssthresh;
	__u32 in_flight;
	__u32 snd_una; /* after this ACK */
	__u32 snd_nxt;
};

enum sl_pulser_event {
	SL_PULSER_NONE = 0,
	SL_PULSER_BRAKE = 1,   /* brake engaged */
	SL_PULSER_EXTEND = 2,  /* echo while braking: window restarts */
	SL_PULSER_RESTORE = 3, /* window without echo: cwnd_prev restored */
	SL_PULSER_ABANDON = 4, /* RTO while braking */
};

struct sl_pulser_action {
	__u32 event;
	__u32 set_cwnd;     /* 0: leave cwnd */
	__u32 set_ssthresh; /* 0: leave ssthresh */
};

static __always_inline int sl_pulser_before(__u32 a, __u32 b)
{
	return (__s32)(a - b) < 0;
}

static __always_inline void sl_pulser_on_ack(struct sl_pulser_brake *b, const struct sl_pulser_ack *a, __u32 cwnd_safe,
					     struct sl_pulser_action *out)
{
	out->event = SL_PULSER_NONE;
	out->set_cwnd = 0;
	out->set_ssthresh = 0;
	if (cwnd_safe < 1)
		cwnd_safe = 1;

	if (a->ca_state >= SL_PULSER_CA_LOSS) {
		if (b->braking) {
			b->braking = 0;
			out->event = SL_PULSER_ABANDON;
		}
		return;
	}

	if (a->ein) {
		/* A brake never raises the window. */
		__u32 target = a->cwnd < cwnd_safe ? a->cwnd : cwnd_safe;
		if (!b->braking) {
			/* In CWR/Recovery the window TCP is heading to is
			 * ssthresh when that is above cwnd (a restore in
			 * progress): that is the window to save. */
			__u32 window = a->cwnd;
			if (a->ca_state >= SL_PULSER_CA_CWR && a->ssthresh > window &&
			    a->ssthresh < SL_PULSER_INFINITE_SSTHRESH)
				window = a->ssthresh;
			else if (a->in_flight < window)
				/* The window in use (RFC 7661's pipe): a cwnd
				 * the flow never filled is not a rate it had,
				 * and restoring it would be a burst. */
				window = a->in_flight > cwnd_safe ? a->in_flight : cwnd_safe;
			b->braking = 1;
			b->prev_cwnd = window;
			out->event = SL_PULSER_BRAKE;
		} else {
			out->event = SL_PULSER_EXTEND;
		}
		b->brake_end = a->snd_nxt;
		if (a->ca_state >= SL_PULSER_CA_CWR) {
			if (a->ssthresh != target)
				out->set_ssthresh = target ? target : 1;
		} else if (a->ece) {
			if (a->in_flight > a->cwnd)
				out->set_cwnd = a->in_flight;
		} else if (a->cwnd != target) {
			out->set_cwnd = target ? target : 1;
		}
		return;
	}

	if (!b->braking)
		return;

	if (!sl_pulser_before(a->snd_una, b->brake_end)) {
		__u32 restore = b->prev_cwnd ? b->prev_cwnd : 1;
		b->braking = 0;
		out->event = SL_PULSER_RESTORE;
		if (a->ca_state >= SL_PULSER_CA_CWR)
			out->set_ssthresh = restore;
		else
			out->set_cwnd = restore;
		return;
	}

	if (a->ece && a->ca_state < SL_PULSER_CA_CWR && a->in_flight > a->cwnd)
		out->set_cwnd = a->in_flight;
}

#endif
