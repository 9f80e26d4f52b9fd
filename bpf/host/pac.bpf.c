// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* PAC (pac-icnp14 §III) datapath on the receiver's interface.
 *
 * pac_ingress: data segments of managed flows lower the in-flight estimate
 *   (eq. 5) and feed per-flow bytes (MLFQ), CE counts (α), RTT samples.
 * pac_egress:  pure ACKs of managed flows are admitted when the flow has no
 *   ACK held and in_flight + trigger <= threshold (Algorithm 1 lines 11-14,
 *   eq. 3/4); otherwise a copy goes to the agent (ring buffer) and the skb is
 *   dropped. The agent re-injects released ACKs with skb->mark ==
 *   reinject_mark; those are admitted here and their trigger accounted.
 *
 * The agent is only involved while something is held. If it is not alive
 * (lib/liveness.h: heartbeat older than fail_open_ns and the agent's
 * heartbeat thread gone or stopped), nothing is diverted (fail open).
 *
 * This file holds the configuration (read-only globals the agent sets
 * before load), the state shared with the agent (.bss), the maps and the
 * two programs. The logic they call lives beside it, in headers that are
 * part of this one translation unit: pac_flow.h (which flows, keys, TCP
 * options), pac_window.h (window scale, clamp and the in-flight bound) and
 * pac_estimate.h (eq. 3-5 and the trigger age). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "sluice/pac.h"
#include "lib/parse.h"
#include "lib/counters.h"
#include "lib/verdict.h"
#include "lib/liveness.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set by the agent before load. */
const volatile __u32 reinject_mark = 0x50ac;
const volatile __u64 fail_open_ns = 60000000ULL;
/* Count a request's response as in flight (request_burst()). */
const volatile __u8 account_requests = 1;
/* Never expect more from a request/response flow than its response size. */
const volatile __u8 cap_to_response = 0;
/* Hold requests (data segments we send) like ACKs, their trigger being the
 * expected response (an extension beyond the paper, off by default). */
const volatile __u8 hold_requests = 0;
/* A data segment we send is a request (its response accounted, and held with
 * hold_requests) only up to this payload; larger ones are bulk data: never
 * held, their ACK field accounted like any ACK's. */
const volatile __u32 request_max_bytes = 1024;
/* Trigger age: expected bytes triggered longer ago than
 * max(2 x the flow's RTT, trigger_age_min_ns) that have not arrived are
 * written off (0 disables). */
const volatile __u64 trigger_age_min_ns = 1000000ULL;
/* Receive-window cap (an extension beyond the paper, 0 = off): the window
 * our segments advertise is clamped to this many bytes, so no sender can
 * have more of one flow in flight, and no trigger (an ACK's or a request's)
 * can exceed what the window lets out. Needs the connection's window scale:
 * only connections whose SYN or SYN-ACK of ours this program saw are capped. */
const volatile __u32 rwnd_cap_bytes = 0;
const volatile __u32 n_local_ports = 0;
const volatile struct sluice_pac_port_range local_ports[SLUICE_PAC_MAX_PORT_RANGES] = {};
const volatile __u32 n_remote_ports = 0;
const volatile struct sluice_pac_port_range remote_ports[SLUICE_PAC_MAX_PORT_RANGES] = {};
const volatile __u32 n_prefixes = 0;
const volatile struct sluice_pac_prefix prefixes[SLUICE_PAC_MAX_PREFIXES] = {};

/* Shared with the agent through the mmapped .bss. */
struct sluice_pac_state pac = {};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SLUICE_PAC_FLOW_TABLE_SIZE);
	__type(key, struct sluice_pac_flow_key);
	__type(value, struct sluice_pac_flow);
} sl_pac_flows_v2 SEC(".maps");

/* The agent's per-flow control, slot = the flow's id (an array lookup is
 * an address computation; a second hash lookup was a quarter of an admitted
 * ACK's cost, docs/pac.md "The fast path, measured"). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLUICE_PAC_CTL_SLOTS);
	__type(key, __u32);
	__type(value, struct sluice_pac_flow_ctl);
} sl_pac_ctl_v2 SEC(".maps");

/* A new flow entry's id (never 0). */
static __always_inline __u32 new_flow_id(void)
{
	__u32 id = __sync_fetch_and_add(&pac.next_id, 1) + 1;
	return id ? id : __sync_fetch_and_add(&pac.next_id, 1) + 1;
}

/* The agent's control of flow `f`, NULL when it wrote none. */
static __always_inline struct sluice_pac_flow_ctl *ctl_of(const struct sluice_pac_flow *f)
{
	__u32 slot = f->id % SLUICE_PAC_CTL_SLOTS;
	struct sluice_pac_flow_ctl *c = bpf_map_lookup_elem(&sl_pac_ctl_v2, &slot);
	return c && f->id && c->id == f->id ? c : 0;
}

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22); /* ~14k held ACK records */
} sl_pac_evt_v1 SEC(".maps");

/* The datapath logic, in the order it depends on itself (see above). */
#include "pac_flow.h"
#include "pac_window.h"
#include "pac_estimate.h"

static __always_inline void emit_segment(const struct sluice_pac_flow_key *k, const struct sluice_pac_flow *f,
					 const struct sl_pkt *p, __u8 flags, __u64 now)
{
	struct sluice_pac_event *ev = bpf_ringbuf_reserve(&sl_pac_evt_v1, sizeof(*ev), 0);
	if (!ev)
		return;
	ev->ts_ns = now;
	ev->bytes_rcvd = f->bytes_rcvd;
	ev->key = *k;
	ev->ack = p->ack_seq;
	ev->last_ack = f->last_ack;
	ev->mss = f->mss;
	ev->retrans_segs = f->retrans_segs;
	ev->window = p->window;
	ev->frame_len = 0;
	ev->type = SLUICE_PAC_EV_SEGMENT;
	ev->tcp_flags = p->tcp_flags;
	ev->flags = flags;
	ev->ack_valid = f->ack_valid;
	bpf_ringbuf_submit(ev, 0);
}

SEC("tc")
int pac_ingress(struct __sk_buff *skb)
{
	struct sl_pkt p = {};
	if (sl_parse_tcp_counted(skb, &p, SLUICE_R_PAC_UNMANAGED))
		return SL_TC_NEXT;
	struct sluice_pac_flow_key k = {};
	make_key(&k, &p, 0);
	if (!managed(&k)) {
		sl_count(SLUICE_R_PAC_UNMANAGED, skb->len);
		return SL_TC_NEXT;
	}
	__u64 now = bpf_ktime_get_ns();
	struct sluice_pac_flow *f = bpf_map_lookup_elem(&sl_pac_flows_v2, &k);
	if (!f) {
		if (!p.payload_len) {
			/* Flows start with their first data segment. */
			sl_count(SLUICE_R_PAC_NOT_PURE_ACK, skb->len);
			return SL_TC_NEXT;
		}
		struct sluice_pac_flow init = { .first_ns = now, .id = new_flow_id() };
		if (!bpf_map_update_elem(&sl_pac_flows_v2, &k, &init, BPF_NOEXIST))
			__sync_fetch_and_add(&pac.flow_inserts, 1);
		f = bpf_map_lookup_elem(&sl_pac_flows_v2, &k);
		if (!f) {
			sl_count(SLUICE_R_PAC_FLOW_TABLE_FULL, skb->len);
			return SL_TC_NEXT;
		}
	}
	f->last_ns = now;
	sync_epoch(f);
	if (p.tcp_flags & (SL_TCP_FIN | SL_TCP_RST)) {
		response_done(f, p.tcp_flags, p.payload_len);
		f->fin_rst |= (p.tcp_flags & SL_TCP_RST) ? 2 : 1;
		if (f->contrib)
			bound_set(f, 0);
		struct sluice_pac_flow_ctl *c = ctl_of(f);
		if (held_of(f, c))
			emit_segment(&k, f, &p, SLUICE_PAC_EVF_INGRESS, now);
	}
	/* The sender's SYN-ACK without a window scale option: neither side
	 * scales (RFC 7323 §2.2), whatever our SYN offered. */
	if (rwnd_cap_bytes && (p.tcp_flags & SL_TCP_SYN) && f->wscale > 1 && syn_wscale(skb, &p) == 1)
		f->wscale = 1;
	if (!p.payload_len) {
		sl_count(SLUICE_R_PAC_NOT_PURE_ACK, skb->len);
		return SL_TC_NEXT;
	}

	/* PAC §III-C eq. (5): in_flight -= L (a covered flow's data lowers
	 * its bound share instead, below). */
	__u32 len = p.payload_len;
	int cov = covered(f);
	if (!cov) {
		__s64 after = __sync_fetch_and_add(&pac.in_flight, -(__s64)len) - (__s64)len;
		/* In-flight data cannot be negative: more arrived than was
		 * estimated (an unaccounted burst). Clamp so it does not become
		 * credit. */
		if (after < 0) {
			__sync_val_compare_and_swap(&pac.in_flight, after, 0);
			__sync_fetch_and_add(&pac.uncounted, (__u64)(-after < (__s64)len ? -after : (__s64)len));
		}
	}
	/* A covered flow's response is measured by the sequence space it
	 * advanced, not the payload that arrived: a resent segment counted
	 * twice made the next flows' size (pac.resp_guess) too large, and each
	 * finished flow then kept the difference as a share until it was seen
	 * quiet (docs/pac.md, "New connections"). A segment beyond a hole
	 * counts the hole, which its retransmission then does not. */
	__u64 credit = len;
	if (cov && f->rcv_valid) {
		__s32 adv = sluice_pac_seq_delta(f->rcv_high, p.seq + len);
		credit = adv <= 0 ? 0 : (__u32)adv < (16u << 20) ? (__u64)adv : len;
	}
	__sync_fetch_and_add(&f->cur_burst, credit);
	f->expect = f->expect > len ? f->expect - len : 0;
	pac.last_data_ns = now;
	age_expect(f, now, 1);
	__u32 segs = skb->gso_segs ? skb->gso_segs : 1;
	__u32 seg = segs > 1 && skb->gso_size ? skb->gso_size : len;
	__sync_fetch_and_add(&f->bytes_rcvd, len);
	__sync_fetch_and_add(&f->data_pkts, segs);
	__sync_fetch_and_add(&pac.data_pkts, segs);
	__sync_fetch_and_add(&pac.data_bytes, len);
	if (seg > f->mss && seg <= 65535)
		f->mss = seg;
	if (p.ecn == SL_ECN_CE) {
		__sync_fetch_and_add(&f->ce_pkts, 1);
		__sync_fetch_and_add(&pac.ce_pkts, 1);
		/* §III-C: a CE mark means the flow is in congestion avoidance. */
		f->ce_seen = 1;
	}
	/* Loss-aware eq. (5): data that arrives beyond a hole means the bytes in
	 * the hole left the network (dropped; no reordering in one fabric path).
	 * They were counted when their trigger was released and will never
	 * arrive as such (a retransmission is triggered, and counted, anew), so
	 * the estimate drops by the hole at once instead of waiting for eq. (6). */
	if (!f->rcv_valid) {
		f->rcv_high = p.seq + len;
		f->rcv_valid = 1;
	} else if (sl_seq_before(f->rcv_high, p.seq)) {
		__u32 gap = p.seq - f->rcv_high;
		if (gap < (16u << 20)) {
			if (!cov) {
				__s64 a2 = __sync_fetch_and_add(&pac.in_flight, -(__s64)gap) - (__s64)gap;
				if (a2 < 0)
					__sync_val_compare_and_swap(&pac.in_flight, a2, 0);
			}
			__sync_fetch_and_add(&f->gap_bytes, gap);
		}
		f->rcv_high = p.seq + len;
	} else if (sl_seq_before(f->rcv_high, p.seq + len)) {
		f->rcv_high = p.seq + len;
	}
	bound_update(f);
	flow_watch(f);
	/* Data our stack already acknowledged (even if that ACK is still held)
	 * is a duplicate. One that starts at the last ACK we released (the
	 * sender's snd_una) is a retransmission timeout: §III-D's stale case.
	 * (A tail loss probe resends the highest segment instead and does not
	 * count; a segment filling a hole starts at or above ack_high.) */
	__u32 end = p.seq + len;
	if (f->ack_high && !sl_seq_before(f->ack_high, end) && f->ack_valid && p.seq == f->last_ack) {
		__sync_fetch_and_add(&f->retrans_segs, 1);
		/* §III-D: after a timeout the sender is in slow start. */
		f->ca_inferred = 0;
	}

	struct tcp_opts o = {};
	parse_opts(skb, &p, &o);
	if (o.has_ts && f->ts_sent_ns && o.tsecr == f->ts_val_sent && now > f->ts_sent_ns) {
		__u64 us = (now - f->ts_sent_ns) / 1000;
		if (us > 1000000)
			us = 1000000;
		__u32 s = f->srtt_us;
		f->srtt_us = s ? (__u32)((7 * (__u64)s + us) / 8) : (__u32)us;
		f->ts_sent_ns = 0; /* one sample per TSval */
	}

	wake_agent(now);
	sl_count(SLUICE_R_PAC_DATA, skb->len);
	return SL_TC_NEXT;
}

SEC("tc")
int pac_egress(struct __sk_buff *skb)
{
	struct sl_pkt p = {};
	if (sl_parse_tcp_counted(skb, &p, SLUICE_R_PAC_UNMANAGED))
		return SL_TC_NEXT;
	struct sluice_pac_flow_key k = {};
	make_key(&k, &p, 1);
	if (!managed(&k)) {
		sl_count(SLUICE_R_PAC_UNMANAGED, skb->len);
		return SL_TC_NEXT;
	}
	__u64 now = bpf_ktime_get_ns();
	struct sluice_pac_flow *f = bpf_map_lookup_elem(&sl_pac_flows_v2, &k);
	if (!f) {
		/* Our SYN-ACK or first request lets the sender send an initial
		 * window unprompted by any ACK: the flow starts here. A bare ACK
		 * of a flow without data (handshake) passes untouched. */
		int synack = (p.tcp_flags & (SL_TCP_SYN | SL_TCP_ACK)) == (SL_TCP_SYN | SL_TCP_ACK);
		/* With rwnd_cap_bytes our SYN starts the flow too: it carries the
		 * window scale every later window of ours is read with. */
		int syn = (p.tcp_flags & (SL_TCP_SYN | SL_TCP_ACK)) == SL_TCP_SYN && rwnd_cap_bytes;
		if (!synack && !syn && !p.payload_len) {
			sl_count(SLUICE_R_PAC_UNKNOWN_FLOW, skb->len);
			return SL_TC_NEXT;
		}
		struct sluice_pac_flow init = { .first_ns = now, .last_ns = now, .id = new_flow_id() };
		if (!bpf_map_update_elem(&sl_pac_flows_v2, &k, &init, BPF_NOEXIST))
			__sync_fetch_and_add(&pac.flow_inserts, 1);
		f = bpf_map_lookup_elem(&sl_pac_flows_v2, &k);
		if (!f) {
			sl_count(SLUICE_R_PAC_FLOW_TABLE_FULL, skb->len);
			return SL_TC_NEXT;
		}
		__sync_fetch_and_add(&pac.new_flows, 1);
		if (syn) {
			f->wscale = syn_wscale(skb, &p);
			sl_count(SLUICE_R_PAC_NOT_PURE_ACK, skb->len);
			return SL_TC_NEXT;
		}
		if (synack) {
			if (rwnd_cap_bytes)
				f->wscale = syn_wscale(skb, &p);
			__sync_fetch_and_add(&pac.in_flight, (__s64)SLUICE_PAC_IW_SEGS * SLUICE_PAC_DEFAULT_MSS);
			__sync_fetch_and_add(&pac.first_window, (__u64)SLUICE_PAC_IW_SEGS * SLUICE_PAC_DEFAULT_MSS);
			pac.last_trigger_ns = now;
			sl_count(SLUICE_R_PAC_NOT_PURE_ACK, skb->len);
			return SL_TC_NEXT;
		}
	}
	struct sluice_pac_flow_ctl *c = ctl_of(f);
	struct tcp_opts o = {};
	__u32 trig;

	sync_epoch(f);
	if (rwnd_cap_bytes) {
		/* A SYN of ours on a known key (the port reused) starts over. */
		if (p.tcp_flags & SL_TCP_SYN)
			f->wscale = syn_wscale(skb, &p);
		else
			clamp_window(skb, &p, f);
	}
	/* A request: a small data segment of ours. Bulk data we send is never
	 * held and sets no response going; its ACK field counts like an ACK's. */
	int request = p.payload_len && p.payload_len <= request_max_bytes && (p.tcp_flags & SL_TCP_ACK) &&
		      !(p.tcp_flags & (SL_TCP_SYN | SL_TCP_FIN | SL_TCP_RST));
	if (skb->mark == reinject_mark) {
		/* Released by the agent: account it (eq. 4) and let it go. */
		parse_opts(skb, &p, &o);
		trig = request ? request_trigger(f, c, &p, 1, o.has_sack) : trigger_of(f, c, &p, o.has_sack);
		__sync_fetch_and_add(&f->reinjected, 1);
		released(f, &p, trig, &o, now);
		sl_count(SLUICE_R_PAC_REINJECTED, skb->len);
		return SL_TC_NEXT;
	}

	if ((p.tcp_flags & SL_TCP_ACK) && (!f->ack_high || sl_seq_before(f->ack_high, p.ack_seq)))
		f->ack_high = p.ack_seq;
	__u64 held = held_of(f, c);
	int pure =
		!p.payload_len && (p.tcp_flags & SL_TCP_ACK) && !(p.tcp_flags & (SL_TCP_SYN | SL_TCP_FIN | SL_TCP_RST));
	if (pure && !f->rcv_valid && !f->ack_valid) {
		/* Our handshake's last ACK (the flow started at our SYN): it
		 * acknowledges no data and lets nothing out. */
		sl_count(SLUICE_R_PAC_UNKNOWN_FLOW, skb->len);
		return SL_TC_NEXT;
	}
	if (!pure && !(hold_requests && request)) {
		/* Never held. Its ACK field still releases data: account it. */
		if ((p.tcp_flags & SL_TCP_ACK) && !(p.tcp_flags & SL_TCP_SYN)) {
			parse_opts(skb, &p, &o);
			trig = request ? request_trigger(f, c, &p, 1, o.has_sack) : trigger_of(f, c, &p, o.has_sack);
			released(f, &p, trig, &o, now);
		}
		if (p.tcp_flags & (SL_TCP_FIN | SL_TCP_RST)) {
			response_done(f, p.tcp_flags, 0);
			f->fin_rst |= (p.tcp_flags & SL_TCP_RST) ? 2 : 1;
		}
		if (held)
			emit_segment(&k, f, &p, 0, now);
		sl_count(SLUICE_R_PAC_NOT_PURE_ACK, skb->len);
		return SL_TC_NEXT;
	}

	parse_opts(skb, &p, &o);
	trig = request ? request_trigger(f, c, &p, 0, o.has_sack) : trigger_of(f, c, &p, o.has_sack);
	if (!agent_alive(now)) {
		if (request)
			trig = request_trigger(f, c, &p, 1, o.has_sack);
		released(f, &p, trig, &o, now);
		sl_count(SLUICE_R_PAC_FAIL_OPEN, skb->len);
		return SL_TC_NEXT;
	}
	/* Our TCP resends a request the agent still holds once its RTO passes
	 * (the original looks sent but nothing answers it). The copy would be
	 * held as a second request, and both released: absorb it; the held
	 * original leaves in its turn. (RTOs back off, so it also stops.) */
	if (request && held && f->req_end && !sl_seq_before(f->req_end, p.seq + p.payload_len)) {
		sl_count(SLUICE_R_PAC_REQUEST_DUP, skb->len);
		return SL_TC_STOLEN;
	}
	/* A window update after a zero window is never held: holding it could
	 * leave the sender in persist mode. Held ACKs it overtakes are stale. */
	if (f->ack_valid && f->last_win == 0 && p.window != 0) {
		released(f, &p, trig, &o, now);
		if (held)
			emit_segment(&k, f, &p, 0, now);
		sl_count(SLUICE_R_PAC_WINDOW_REOPEN, skb->len);
		return SL_TC_NEXT;
	}
	/* Algorithm 1 line 11, in the kernel: admit when nothing of this flow
	 * waits ahead of it and the trigger fits. */
	__s64 infl = admit_in_flight();
	int fits = sluice_pac_fits(infl, trig, pac.threshold);
	/* Release without the agent: our stack generates a new cumulative ACK
	 * right when data arrives, i.e. right when eq. (5) makes room. If it
	 * advances past the last released ACK, carries no SACK, and its flow is
	 * the only one holding (no other flow's ACK waits for the room, so the
	 * MLFQ order is not bypassed), it goes now: its eq. (3) trigger is
	 * counted from the last released ACK and covers the held ones, which
	 * the agent then drops as superseded (it is told below). This takes the
	 * agent's wake-up latency off the ACK clock of a long flow. */
	if (held && fits && !request && !o.has_sack && f->ack_valid &&
	    sluice_pac_seq_delta(f->last_ack, p.ack_seq) > 0 && held >= pac.held) {
		f->admitted++;
		released(f, &p, trig, &o, now);
		emit_segment(&k, f, &p, 0, now);
		sl_count(SLUICE_R_PAC_SUPERSEDE, skb->len);
		return SL_TC_NEXT;
	}
	/* Nothing of this flow waits, but another flow's ACK may: it goes
	 * first (Algorithm 1 releases from the queue head), so this one is
	 * admitted only if the waiting ACK still fits after it. Otherwise a
	 * flow whose ACK once had to wait would wait for good, its room taken
	 * by every flow whose ACKs arrive as their data makes room. */
	__u64 reserve = pac.ack_room;
	if (reserve && fits)
		fits = sluice_pac_fits(infl + (__s64)reserve, trig, pac.threshold);
	if (!held && fits) {
		if (request)
			trig = request_trigger(f, c, &p, 1, o.has_sack);
		f->admitted++;
		released(f, &p, trig, &o, now);
		sl_count(SLUICE_R_PAC_ADMIT, skb->len);
		return SL_TC_NEXT;
	}

	__u32 len = skb->len;
	if (len > SLUICE_PAC_FRAME_MAX || len < 14) {
		released(f, &p, trig, &o, now);
		sl_count(SLUICE_R_PAC_FRAME_TOO_BIG, skb->len);
		return SL_TC_NEXT;
	}
	struct sluice_pac_event *ev = bpf_ringbuf_reserve(&sl_pac_evt_v1, sizeof(*ev), 0);
	if (!ev) {
		released(f, &p, trig, &o, now);
		sl_count(SLUICE_R_PAC_RING_FULL, skb->len);
		return SL_TC_NEXT;
	}
	/* Bound the length again at the call: clang may spill `len`, and the
	 * 6.1 verifier forgets a spilled u32's range ("R4 min value is outside
	 * of the allowed memory range"); newer kernels keep it. */
	barrier_var(len);
	if (len > SLUICE_PAC_FRAME_MAX || len < 14) {
		bpf_ringbuf_discard(ev, 0);
		released(f, &p, trig, &o, now);
		sl_count(SLUICE_R_PAC_FRAME_TOO_BIG, skb->len);
		return SL_TC_NEXT;
	}
	if (bpf_skb_load_bytes(skb, 0, ev->frame, len)) {
		bpf_ringbuf_discard(ev, 0);
		released(f, &p, trig, &o, now);
		sl_count(SLUICE_R_PAC_FRAME_TOO_BIG, skb->len);
		return SL_TC_NEXT;
	}
	ev->ts_ns = now;
	ev->bytes_rcvd = f->bytes_rcvd;
	ev->key = k;
	ev->ack = p.ack_seq;
	ev->last_ack = f->last_ack;
	ev->mss = f->mss;
	ev->retrans_segs = f->retrans_segs;
	ev->req_bytes = request ? trig : 0;
	if (request && (!f->req_end || sl_seq_before(f->req_end, p.seq + p.payload_len)))
		f->req_end = p.seq + p.payload_len;
	ev->window = p.window;
	ev->frame_len = (__u16)len;
	ev->type = SLUICE_PAC_EV_HELD;
	ev->tcp_flags = p.tcp_flags;
	ev->flags = ((p.tcp_flags & SL_TCP_ECE) ? SLUICE_PAC_EVF_ECE : 0) |
		    ((f->ce_seen || f->ca_inferred || (c && c->ca)) ? SLUICE_PAC_EVF_CA : 0) |
		    (o.has_sack ? SLUICE_PAC_EVF_SACK : 0);
	ev->ack_valid = f->ack_valid;
	__sync_fetch_and_add(&f->diverted, 1);
	bpf_ringbuf_submit(ev, 0);
	sl_count(SLUICE_R_PAC_DIVERT, skb->len);
	/* A dropped pure ACK is forgotten by TCP. A dropped data segment is not
	 * (NET_XMIT_DROP: TCP sends it again later, after a timer): a held
	 * request must look sent, TC_ACT_STOLEN (honoured by cls_bpf only; tcx
	 * turns it into NEXT, so hold_requests requires clsact). */
	return request ? SL_TC_STOLEN : SL_TC_SHOT;
}

/* The agent's half of the quiet check (quiet_clear()), run through
 * BPF_PROG_TEST_RUN on a flow its table scan found quiet while it still
 * holds a share and has no quiet_timer armed (bpf_timer_init failed, or
 * the flag was lost to a race). Without it such a share stayed until the
 * agent's idle reset, at least 20 ms after the last request: with the
 * window cap, held requests waited behind it (docs/pac.md, "New
 * connections"). A flow still waiting for its response's first byte
 * (cur_burst 0) is left alone, as by the timer. The key is a global, not
 * the context, so the program also runs without one (sluice-objcheck).
 * Returns 1 when a share went. */
struct sluice_pac_flow_key sweep_key = {}; /* the flow to check: the agent writes it before each run */

SEC("syscall")
int pac_quiet_sweep(void *ctx)
{
	struct sluice_pac_flow_key k = sweep_key;
	__u64 wait = 0;
	struct sluice_pac_flow *f = bpf_map_lookup_elem(&sl_pac_flows_v2, &k);
	if (!f || !f->cur_burst)
		return 0;
	return quiet_clear(f, bpf_ktime_get_ns(), &wait) > 0;
}
