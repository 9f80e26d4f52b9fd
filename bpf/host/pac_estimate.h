// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* PAC datapath, part of bpf/host/pac.bpf.c (one translation unit): the
 * in-flight estimate (pac-icnp14 §III-C). Eq. (3) triggers bounded by the
 * response and the window, a request's trigger (its expected response),
 * eq. (4) on release, the per-flow write-off of expected bytes that never
 * came (trigger age, §III-C's sources of over-estimation), and what
 * admission compares with the threshold (Algorithm 1 line 11). Included by
 * pac.bpf.c after pac_flow.h and pac_window.h, whose functions it uses. */
#ifndef SLUICE_BPF_PAC_ESTIMATE_H
#define SLUICE_BPF_PAC_ESTIMATE_H

static __always_inline void lower_in_flight(__s64 by)
{
	if (by <= 0)
		return;
	__s64 after = __sync_fetch_and_add(&pac.in_flight, -by) - by;
	if (after < 0)
		__sync_val_compare_and_swap(&pac.in_flight, after, 0);
}

/* The agent lowered in_flight globally (eq. 6 or an idle pipe) since this
 * flow's expected bytes were counted: they are part of what it removed. */
static __always_inline void sync_epoch(struct sluice_pac_flow *f)
{
	__u32 e = pac.epoch;
	if (f->epoch != e) {
		f->epoch = e;
		f->expect = 0;
		f->trig_cur = 0;
		f->trig_prev = 0;
	}
}

/* Trigger age windows: max(2 RTT, trigger_age_min_ns). The RTT is measured
 * from the release of an ACK to the arrival of the data echoing its TSval,
 * so it includes the sender's reaction and the bottleneck queue. */
static __always_inline void age_rotate(struct sluice_pac_flow *f, __u64 now)
{
	__u64 w = (__u64)f->srtt_us * 2000;
	if (w < trigger_age_min_ns)
		w = trigger_age_min_ns;
	__u64 el = now - f->age_start_ns;
	if (f->age_start_ns && el < w)
		return;
	f->trig_prev = (f->age_start_ns && el < 2 * w) ? f->trig_cur : 0;
	f->trig_cur = 0;
	f->age_start_ns = now;
}

/* PAC §III-C names the sources of over-estimation (the sender's phase is
 * unknown, the last ACKs of a transfer trigger nothing, ECN/flow control
 * shrink the window) and corrects them in aggregate with eq. (6), which
 * reacts only to a throughput drop. Per flow we can do better: data arrive
 * in order, so the bytes still expected are the ones triggered last; if they
 * exceed what the flow's ACKs triggered during the last age window (>= 2
 * RTT), the excess was triggered earlier and never came: it is written off.
 * Written off while data still arrives, it also says the sender grows slower
 * than slow start: §III-C congestion avoidance. Returns the bytes written off. */
static __always_inline __u64 age_expect(struct sluice_pac_flow *f, __u64 now, int infer)
{
	if (!trigger_age_min_ns)
		return 0;
	age_rotate(f, now);
	__u64 recent = f->trig_cur + f->trig_prev;
	if (f->expect <= recent)
		return 0;
	__u64 ph = f->expect - recent;
	f->expect = recent;
	lower_in_flight((__s64)ph);
	f->phantom_bytes += ph;
	__sync_fetch_and_add(&pac.phantom_bytes, ph);
	__sync_fetch_and_add(&pac.phantom_events, 1);
	if (infer && ph > (f->mss ? f->mss : SLUICE_PAC_DEFAULT_MSS))
		f->ca_inferred = 1;
	return ph;
}

/* What admission compares with the threshold: the eq. (4)/(5) estimate of
 * the flows the bound does not cover, plus the bound. */
static __always_inline __s64 admit_in_flight(void)
{
	__s64 a = pac.in_flight;
	if (rwnd_cap_bytes && cap_to_response)
		a += pac.bound;
	return a;
}

/* The response size a trigger is capped by (cap_to_response), 0 = none.
 * A measured one (the flow's previous response) is the size. A flow's first
 * response has no measured size: what its request counted (burst_bytes, one
 * initial window when nothing was measured) is only what the sender may send
 * before any ACK; the rest is ACK-clocked, and eq. (3) in slow start counts
 * it (§III-C: a new flow starts in slow start from its initial window).
 * Capping those triggers at the first window let every new connection's
 * response beyond 10 segments arrive uncounted (docs/pac.md, "New
 * connections"). A peer's measured response (pac.resp_guess) bounds it while
 * the response is no larger; a larger one is uncapped. */
static __always_inline __u64 resp_size(const struct sluice_pac_flow *f)
{
	if (!cap_to_response || !f->burst_bytes)
		return 0;
	if (!(f->bflags & SLUICE_PAC_BF_GUESS))
		return f->burst_bytes;
	__u64 g = pac.resp_guess;
	/* No response measured yet on any flow (the agent's first): the first
	 * window stays the cap, as before. Uncapped, eq. (3) counts the last
	 * flights of every first response as doubling (up to ~80 KB of a 64 KB
	 * response), and that first incast took 3-4x as long (docs/pac.md). */
	if (!g)
		return f->burst_bytes;
	return f->cur_burst <= g ? g : 0;
}

/* What a new connection's sender may send before any ACK: one initial
 * window (RFC 6928), or less when a peer's measured response is smaller. */
static __always_inline __u64 first_window(const struct sluice_pac_flow *f)
{
	__u64 iw = (__u64)SLUICE_PAC_IW_SEGS * (f->mss ? f->mss : SLUICE_PAC_DEFAULT_MSS);
	__u64 g = pac.resp_guess;
	return g && g < iw ? g : iw;
}

/* The first FIN of a flow that made a request (either side's): its response
 * is complete, and its size (plus `extra` payload riding on the FIN) is the
 * next new connection's guess: the servers of an incast answer alike, and a
 * connection that carries one response never makes a second request that
 * would measure it (request_burst()). A reset says nothing of the size. */
static __always_inline void response_done(struct sluice_pac_flow *f, __u8 flags, __u32 extra)
{
	if ((flags & SL_TCP_RST) || !(flags & SL_TCP_FIN) || f->fin_rst || !f->burst_bytes)
		return;
	__u64 b = f->cur_burst + extra;
	if (b)
		pac.resp_guess = b;
}

/* Wake the agent once the estimate has room for its head ACK: data that
 * arrived (eq. 5) or a share its quiet_timer cleared. */
static __always_inline void wake_agent(__u64 now)
{
	if (pac.held && !pac.wake_pending && sluice_pac_fits(admit_in_flight(), pac.wake_room, pac.threshold) &&
	    __sync_val_compare_and_swap(&pac.wake_pending, 0, 1) == 0) {
		struct sluice_pac_event *ev = bpf_ringbuf_reserve(&sl_pac_evt_v1, sizeof(*ev), 0);
		if (ev) {
			__builtin_memset(ev, 0, sizeof(*ev));
			ev->ts_ns = now;
			ev->type = SLUICE_PAC_EV_WAKE;
			bpf_ringbuf_submit(ev, BPF_RB_FORCE_WAKEUP);
		} else {
			pac.wake_pending = 0;
		}
	}
}

/* The quiet time after which a flow that still holds a share is done:
 * max(2 x its RTT, trigger_age_min_ns), 1 ms when the trigger age is off. */
static __always_inline __u64 quiet_ns(const struct sluice_pac_flow *g)
{
	__u64 quiet = (__u64)g->srtt_us * 2000;
	__u64 floor = trigger_age_min_ns ? trigger_age_min_ns : 1000000ULL;
	return quiet < floor ? floor : quiet;
}

/* The end of a flow's response, once it was quiet for quiet_ns() (nothing
 * either way): its share of the bound and its expected bytes go, and a
 * response of unknown size is measured. 0: nothing to clear; 1: cleared;
 * -1: not quiet yet, `*wait` ns left. */
static __always_inline int quiet_clear(struct sluice_pac_flow *g, __u64 now, __u64 *wait)
{
	int bound_on = rwnd_cap_bytes && cap_to_response;
	__s64 gc = bound_on ? cur_contrib(g) : 0;
	sync_epoch(g);
	__u64 ge = trigger_age_min_ns ? g->expect : 0;
	if (gc <= 0 && !ge)
		return 0;
	__u64 quiet = quiet_ns(g), last = g->last_ns;
	if (now <= last || now - last <= quiet) {
		*wait = now <= last ? quiet : quiet - (now - last);
		return -1;
	}
	/* A response of unknown size ended: now it is measured. */
	if (gc > 0 && (g->bflags & SLUICE_PAC_BF_GUESS))
		pac.resp_guess = g->cur_burst;
	g->bflags &= ~SLUICE_PAC_BF_LISTED;
	if (gc > 0)
		bound_set(g, 0);
	if (ge) {
		g->expect = 0;
		lower_in_flight((__s64)ge);
		g->phantom_bytes += ge;
		__sync_fetch_and_add(&pac.phantom_bytes, ge);
		__sync_fetch_and_add(&pac.phantom_events, 1);
	}
	/* The room it leaves may be the only room that appears: the flows
	 * still counted may all be done, and no data would wake the agent. */
	wake_agent(now);
	return 1;
}

/* quiet_timer's callback (softirq, any CPU): the flow armed it when it took
 * a share; if it has been quiet for quiet_ns() since, its response is over
 * and the share goes; if not, check again when it could be. */
static int flow_quiet(void *map, struct sluice_pac_flow_key *k, struct sluice_pac_flow *g)
{
	__u64 wait = 0;
	if (!(g->bflags & SLUICE_PAC_BF_LISTED))
		return 0; /* unlisted meanwhile (a new request, a share gone) */
	int r = quiet_clear(g, bpf_ktime_get_ns(), &wait);
	if (!r)
		g->bflags &= ~SLUICE_PAC_BF_LISTED;
	else if (r < 0)
		bpf_timer_start(&g->quiet_timer, wait + 1000, 0);
	return 0;
}

/* A flow's share can outlive its response: a first response (size unknown,
 * the whole window counts) or one shorter than the last ends without the
 * share reaching 0. Rather than wait for the agent's idle reset (which
 * needs the whole pipe quiet, i.e. every other flow done too), a flow whose
 * response began and that was quiet for quiet_ns() (nothing either way) is
 * done; its share goes. A flow is listed (its quiet_timer armed) by a
 * segment of its response and unlisted by its next request
 * (request_burst()), so one still waiting for the first byte of its
 * response keeps its share: the response will come, however late the
 * sender's application answers.
 *
 * The same holds for a flow's expected bytes in the eq. (4)/(5) estimate
 * (with the trigger age on): eq. (3) in slow start counts the last ACKs of a
 * response of unknown size (a new connection's first) as doubling the
 * window, and that data never comes. age_expect() writes such bytes off only
 * when the flow's own next segment arrives, which a finished flow never
 * sends: they stayed until the whole pipe went idle.
 *
 * One timer per flow, not a shared list checked by other flows' data: a
 * list of 32 slots lost finished flows whenever more than 32 held shares
 * (N > 32 new connections), and when the finished flows' shares filled the
 * threshold no data arrived that would have checked them (the pipe stalled
 * until the agent's idle reset; docs/pac.md, "New connections"). */
static __always_inline void flow_watch(struct sluice_pac_flow *f)
{
	int bound_on = rwnd_cap_bytes && cap_to_response;
	if (!bound_on && !trigger_age_min_ns)
		return;
	if ((f->bflags & SLUICE_PAC_BF_LISTED) ||
	    !((bound_on && cur_contrib(f) > 0) || (trigger_age_min_ns && f->expect)))
		return;
	/* -EBUSY once initialised: the callback is set again, the same one.
	 * Initialising allocates the timer, which can fail (-ENOMEM): the
	 * flow then stays unlisted, tried again by its next packet, and the
	 * agent's flow scan clears it once quiet (pac_quiet_sweep). */
	bpf_timer_init(&f->quiet_timer, &sl_pac_flows_v2, 1 /* CLOCK_MONOTONIC */);
	if (bpf_timer_set_callback(&f->quiet_timer, flow_quiet) ||
	    bpf_timer_start(&f->quiet_timer, quiet_ns(f) + 1000, 0)) {
		__sync_fetch_and_add(&pac.timer_fails, 1);
		return;
	}
	f->bflags |= SLUICE_PAC_BF_LISTED;
}

/* Eq. (3), bounded for request/response flows: a sender cannot send more
 * than it was asked for, and the last ACKs of a response trigger nothing
 * (§III-C names the end of a transfer as a source of over-estimation).
 * Once a flow's response size is known (burst_bytes, from the previous
 * request) a trigger is capped by what is left of the response beyond what
 * is already expected in flight. Bulk flows (no request seen) are not
 * capped; eq. (6) corrects them. With rwnd_cap_bytes, every trigger is also
 * bounded by the room the window leaves. */
static __always_inline __u32 trigger_of(const struct sluice_pac_flow *f, const struct sluice_pac_flow_ctl *c,
					const struct sl_pkt *p, __u8 sack)
{
	/* Eq. (3) for an ACK that does not advance: a duplicate ACK clocks out
	 * a segment, but one without SACK whose window changed is a window
	 * update, which the sender does not count as a duplicate (RFC 5681
	 * §2): it sends new data only if it was window limited. */
	if (f->ack_valid && p->ack_seq == f->last_ack && !sack && p->window != f->last_win)
		return 0;
	__u8 ca = f->ce_seen || f->ca_inferred || (c && c->ca);
	__u32 t = sluice_pac_trigger(f->last_ack, f->ack_valid, p->ack_seq, f->mss, c ? c->window : 0, ca,
				     (p->tcp_flags & SL_TCP_ECE) ? 1 : 0);
	__u64 size = resp_size(f);
	if (size) {
		__s64 room = (__s64)size - (__s64)f->cur_burst - (__s64)f->expect;
		if (room < 0)
			room = 0;
		if ((__s64)t > room) {
			__sync_fetch_and_add(&pac.resp_cut, (__u64)t - (__u64)room);
			t = (__u32)room;
		}
	}
	return cap_to_window(t, f, p, f->expect);
}

/* A data segment from the receiver (a request) is what sets the sender's
 * next response going, ACK-clocked by nothing: count it as the bytes the flow
 * sent between our two previous data segments (the last response). A flow's
 * first request takes the last response measured on any flow (the servers
 * of an incast answer alike), or one initial window when none was measured
 * yet; a first response larger than that counts its whole window from then
 * on (bound_update()). With neither measured, the size is unknown (GUESS):
 * the whole window counts. */
static __always_inline __u32 request_burst(struct sluice_pac_flow *f)
{
	__u64 b = f->cur_burst;
	f->cur_burst = 0;
	if (!b && !f->burst_bytes) {
		/* The bound's flows only (a capped window bounds a wrong guess):
		 * the eq. (4)/(5) estimate keeps one initial window, as measured
		 * at 1 Gbit/s before (docs/pac.md); the peer guess was not
		 * measured to help it. */
		b = rwnd_cap_bytes && cap_to_response ? pac.resp_guess : 0;
		if (!b) {
			b = first_window(f);
			f->bflags |= SLUICE_PAC_BF_GUESS;
		}
	} else if (!b) {
		b = f->burst_bytes;
	} else {
		f->bflags &= ~SLUICE_PAC_BF_GUESS;
		pac.resp_guess = b;
	}
	/* Unwatched until its response's first segment lists it again
	 * (flow_watch()): a flow waiting for its response is never cleared. */
	f->bflags &= ~SLUICE_PAC_BF_LISTED;
	f->burst_bytes = b;
	return b > (1u << 30) ? (1u << 30) : (__u32)b;
}

/* Trigger of a request (a data segment we send): its ACK part (eq. 3) or
 * the response it sets going (the previous response's size), whichever is
 * larger. With cap_to_response the ACKs of the response then trigger nothing
 * beyond it. `consume`: the request really leaves now (resets the
 * per-response counters); otherwise only a peek. */
static __always_inline __u32 request_trigger(struct sluice_pac_flow *f, const struct sluice_pac_flow_ctl *c,
					     const struct sl_pkt *p, int consume, __u8 sack)
{
	__u64 b;
	int first = consume && !f->burst_bytes && !f->cur_burst;
	if (consume) {
		/* A new request: the previous response is complete, and what is
		 * still expected of it will not come (§III-C: the last ACKs of a
		 * transfer trigger nothing). */
		lower_in_flight((__s64)f->expect);
		f->phantom_bytes += f->expect;
		f->expect = 0;
		b = request_burst(f);
		pac.last_request_ns = bpf_ktime_get_ns();
	} else {
		b = f->cur_burst ? f->cur_burst : f->burst_bytes;
		if (!b && rwnd_cap_bytes && cap_to_response)
			b = pac.resp_guess;
		if (!b)
			b = first_window(f);
	}
	__u32 t = trigger_of(f, c, p, sack);
	if (!account_requests)
		return t;
	if (b > (1u << 30))
		b = 1u << 30;
	/* Peeked or consumed, the same bound: when it leaves, the request
	 * voids what the flow still expected (the agent releases a held one
	 * on the peeked value, the kernel accounts the consumed one). */
	t = cap_to_window(b > t ? (__u32)b : t, f, p, 0);
	if (first)
		__sync_fetch_and_add(&pac.first_window, t);
	return t;
}

/* An ACK leaves: eq. (4) in_flight += trigger, and it becomes ACK_prev. */
static __always_inline void released(struct sluice_pac_flow *f, const struct sl_pkt *p, __u32 trig,
				     const struct tcp_opts *o, __u64 now)
{
	if (rwnd_cap_bytes && f->wscale && (p->tcp_flags & SL_TCP_ACK)) {
		__u32 edge = p->ack_seq + ((__u32)p->window << (f->wscale - 1));
		if (!(f->bflags & SLUICE_PAC_BF_EDGE) || sluice_pac_seq_delta(f->edge, edge) > 0)
			f->edge = edge;
		f->bflags |= SLUICE_PAC_BF_EDGE;
		if (!f->rcv_valid) {
			/* Nothing received yet: the sender's next byte is our ACK. */
			f->rcv_high = p->ack_seq;
			f->rcv_valid = 1;
		}
	}
	int cov = covered(f);
	if (cov && f->expect) {
		/* Covered from now on: its estimate leaves pac.in_flight. */
		lower_in_flight((__s64)f->expect);
		f->expect = 0;
	}
	if (trig) {
		if (!cov) {
			__sync_fetch_and_add(&pac.in_flight, (__s64)trig);
			/* Plain adds: the flow's other writers (ingress) use
			 * plain stores too; in_flight is what must not lose an
			 * update. */
			f->expect += trig;
			age_rotate(f, now);
			f->trig_cur += trig;
		}
		f->trig_sum += trig;
		pac.last_trigger_ns = now;
	}
	if (!f->ack_valid || sluice_pac_seq_delta(f->last_ack, p->ack_seq) > 0)
		f->last_ack = p->ack_seq;
	f->ack_valid = 1;
	f->last_win = p->window;
	f->last_ns = now;
	bound_update(f);
	/* An ACK can give a flow a share (its window's edge moves beyond what
	 * arrived; eq. 3 expects more) after its last segment came: the last
	 * ACK of a response does exactly that. Watched only from ingress, such a
	 * share had no timer and stayed until the agent's idle reset, at least
	 * 20 ms after the last request (docs/pac.md, "New connections"). A flow
	 * still waiting for its response's first byte (cur_burst 0) is not
	 * watched: its response will come. */
	if (f->cur_burst)
		flow_watch(f);
	/* RTT sample: from the first release carrying a TSval to the first data
	 * echoing it. Linux's TSval ticks every ms, so later ACKs of the same
	 * tick keep the first time: a sample may be long by up to a tick, never
	 * short (the trigger age must not fire on data still in flight). */
	if (o->has_ts && o->tsval != f->ts_val_sent) {
		f->ts_val_sent = o->tsval;
		f->ts_sent_ns = now;
	}
}

#endif /* SLUICE_BPF_PAC_ESTIMATE_H */
