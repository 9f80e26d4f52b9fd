// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Test-only: runs sl_pulser_on_ack() and sl_dctcp_alpha_next() (the code
 * sluice_pulser and sluice_dctcp run) on a scripted input. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "cc/dctcp_core.h"
#include "cc/pulser_core.h"
#include "cc_model.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("syscall")
int cc_model_step(struct sl_cc_model *m)
{
	if (m->op == SL_CC_MODEL_DCTCP_ALPHA) {
		m->alpha = sl_dctcp_alpha_next(m->alpha, m->delivered, m->delivered_ce, m->shift_g);
		return 0;
	}
	struct sl_pulser_brake b = {
		.braking = m->braking,
		.prev_cwnd = m->prev_cwnd,
		.brake_end = m->brake_end,
		.echo_seen = m->echo_seen,
	};
	struct sl_pulser_ack a = {
		.ein = m->ein,
		.ece = m->ece,
		.ca_state = m->ca_state,
		.cwnd = m->cwnd,
		.ssthresh = m->ssthresh,
		.in_flight = m->in_flight,
		.snd_una = m->snd_una,
		.snd_nxt = m->snd_nxt,
	};
	struct sl_pulser_action out;
	sl_pulser_on_ack(&b, &a, m->cwnd_safe, &out);
	m->braking = b.braking;
	m->prev_cwnd = b.prev_cwnd;
	m->brake_end = b.brake_end;
	m->event = out.event;
	m->set_cwnd = out.set_cwnd;
	m->set_ssthresh = out.set_ssthresh;
	return 0;
}
