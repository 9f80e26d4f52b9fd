/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Context of the cc_model test program: one step of Pulser's brake state
 * machine or of DCTCP's α update, driven from a BPF test through
 * BPF_PROG_TEST_RUN (the same C code the congestion controls run). */
#ifndef SLUICE_TEST_CC_MODEL_H
#define SLUICE_TEST_CC_MODEL_H

#include "sluice/types.h"

#define SL_CC_MODEL_PULSER_ACK 0
#define SL_CC_MODEL_DCTCP_ALPHA 1

struct sl_cc_model {
	__u32 op;
	__u32 cwnd_safe;
	/* struct sl_pulser_brake */
	__u32 braking, prev_cwnd, brake_end, echo_seen;
	/* struct sl_pulser_ack */
	__u32 ein, ece, ca_state, cwnd, ssthresh, in_flight, snd_una, snd_nxt;
	/* struct sl_pulser_action (out) */
	__u32 event, set_cwnd, set_ssthresh;
	/* DCTCP: in alpha, delivered, delivered_ce, shift_g; out alpha */
	__u32 alpha, delivered, delivered_ce, shift_g;
};

#endif
