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
 * The agent is only involved while something is held. If its heartbeat is
 * older than fail_open_ns, nothing is diverted (fail open). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "sluice/pac.h"
#include "lib/parse.h"
#include "lib/counters.h"
#include "lib/verdict.h"

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
} pac_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SLUICE_PAC_FLOW_TABLE_SIZE);
	__type(key, struct sluice_pac_flow_key);
	__type(value, struct sluice_pac_flow_ctl);
} pac_flow_ctl SEC(".maps");

/* Flows whose response is in progress and still counted in pac.bound:
 * watched for its end, one slot per arriving data segment (bound_watch()). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLUICE_PAC_WATCH_SLOTS);
	__type(key, __u32);
	__type(value, struct sluice_pac_flow_key);
} pac_watch SEC(".maps");
__u32 watch_next = 0, watch_scan = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22); /* ~14k held ACK records */
} pac_events SEC(".maps");

static __always_inline int port_in(const volatile struct sluice_pac_port_range *r, __u32 n, __u16 port)
{
	__u16 p = bpf_ntohs(port);
	for (int i = 0; i < SLUICE_PAC_MAX_PORT_RANGES; i++) {
		if ((__u32)i >= n)
			break;
		if (p >= r[i].lo && p <= r[i].hi)
			return 1;
	}
	return 0;
}

static __always_inline int prefix_match(const struct sluice_pac_flow_key *k)
{
	for (int i = 0; i < SLUICE_PAC_MAX_PREFIXES; i++) {
		if ((__u32)i >= n_prefixes)
			break;
		if (prefixes[i].family != k->family)
			continue;
		__u32 len = prefixes[i].len;
		int ok = 1;
		for (int w = 0; w < 4; w++) {
			if (len == 0)
				break;
			__u32 bits = len >= 32 ? 32 : len;
			__u32 mask = bits == 32 ? 0xffffffffu : ~(0xffffffffu >> bits);
			if ((bpf_ntohl(k->raddr[w]) & mask) != (bpf_ntohl(prefixes[i].addr[w]) & mask)) {
				ok = 0;
				break;
			}
			len -= bits;
		}
		if (ok)
			return 1;
	}
	return 0;
}

static __always_inline int managed(const struct sluice_pac_flow_key *k)
{
	if (n_local_ports && !port_in(local_ports, n_local_ports, k->lport))
		return 0;
	if (n_remote_ports && !port_in(remote_ports, n_remote_ports, k->rport))
		return 0;
	if (n_prefixes && !prefix_match(k))
		return 0;
	return 1;
}

static __always_inline void make_key(struct sluice_pac_flow_key *k, const struct sl_pkt *p, int egress)
{
	if (egress) {
		__builtin_memcpy(k->laddr, p->saddr, sizeof(k->laddr));
		__builtin_memcpy(k->raddr, p->daddr, sizeof(k->raddr));
		k->lport = p->sport;
		k->rport = p->dport;
	} else {
		__builtin_memcpy(k->raddr, p->saddr, sizeof(k->raddr));
		__builtin_memcpy(k->laddr, p->daddr, sizeof(k->laddr));
		k->rport = p->sport;
		k->lport = p->dport;
	}
	k->family = p->family;
}

static __always_inline int agent_alive(__u64 now)
{
	__u64 hb = pac.heartbeat_ns;
	return hb && now - hb <= fail_open_ns;
}

/* TCP options as Linux lays them out on established segments:
 * NOP NOP TS(8,10) [NOP NOP SACK(5,n)]. Other layouts yield no TS. */
struct tcp_opts {
	__u32 tsval;
	__u32 tsecr;
	__u8 has_ts;
	__u8 has_sack;
};

static __always_inline void parse_opts(struct __sk_buff *skb, const struct sl_pkt *p, struct tcp_opts *o)
{
	__u8 b[16];
	if (p->tcp_doff < 32)
		return;
	if (bpf_skb_load_bytes(skb, p->l4_off + 20, b, 12))
		return;
	if (b[0] == 1 && b[1] == 1 && b[2] == 8 && b[3] == 10) {
		o->has_ts = 1;
		o->tsval = ((__u32)b[4] << 24) | ((__u32)b[5] << 16) | ((__u32)b[6] << 8) | b[7];
		o->tsecr = ((__u32)b[8] << 24) | ((__u32)b[9] << 16) | ((__u32)b[10] << 8) | b[11];
		if (p->tcp_doff >= 44 && !bpf_skb_load_bytes(skb, p->l4_off + 32, b, 4) && b[0] == 1 &&
		    b[1] == 1 && b[2] == 5)
			o->has_sack = 1;
	} else if (b[0] == 1 && b[1] == 1 && b[2] == 5) {
		o->has_sack = 1;
	}
}

static __always_inline __u64 held_of(const struct sluice_pac_flow *f, const struct sluice_pac_flow_ctl *c)
{
	__u64 out = f->reinjected + (c ? c->dropped : 0);
	return f->diverted > out ? f->diverted - out : 0;
}

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

/* Our window scale (RFC 7323 §2.2) from the options of a SYN or SYN-ACK
 * (`n` bytes at `off`): shift + 1, or 1 when the option is absent (windows
 * unscaled); 0 when unreadable. A global function: the verifier checks its
 * option walk once, not at every call site. */
__noinline int sl_syn_wscale(struct __sk_buff *skb, __u32 off, __u32 n)
{
	__u8 b[40] = {};
	__u32 skip = 0;

	if (!skb || !n)
		return 1;
	if (n > sizeof(b))
		n = sizeof(b);
	/* Options come in 4-byte words: load them word by word, each load of
	 * constant size (the 6.1 verifier loses the bounds of a variable
	 * length that clang range-checks through a copy). */
#pragma unroll
	for (int w = 0; w < 10; w++) {
		if ((__u32)w * 4 >= n)
			break;
		if (bpf_skb_load_bytes(skb, off + w * 4, &b[w * 4], 4))
			return 0;
	}
	for (int i = 0; i < 38; i++) {
		if ((__u32)i >= n)
			break;
		if (skip) {
			skip--;
			continue;
		}
		__u8 kind = b[i];
		if (kind == 0)
			break;
		if (kind == 1)
			continue;
		__u8 len = b[i + 1];
		if (kind == 3 && len == 3 && (__u32)i + 2 < n)
			return (b[i + 2] > 14 ? 14 : b[i + 2]) + 1;
		if (len < 2)
			break;
		skip = len - 1;
	}
	return 1;
}

static __always_inline __u8 syn_wscale(struct __sk_buff *skb, const struct sl_pkt *p)
{
	return (__u8)sl_syn_wscale(skb, p->l4_off + 20, p->tcp_doff > 20 ? p->tcp_doff - 20 : 0);
}

/* pac.bound (rwnd_cap_bytes with cap_to_response): this flow's share is
 * min(edge - highest byte received, what is left of its response), 0 for
 * flows without a request (bulk: in_flight alone covers them) or after its
 * FIN/RST. The exchange keeps Σ shares == pac.bound whatever interleaves. */
static __always_inline void bound_set(struct sluice_pac_flow *f, __s64 c)
{
	__u8 be = (__u8)pac.bound_epoch;
	if (f->bepoch != be) {
		/* The agent cleared pac.bound (idle pipe) since this share was
		 * added: it is no longer in the sum. */
		f->bepoch = be;
		f->contrib = 0;
	}
	__u64 old = __sync_lock_test_and_set(&f->contrib, (__u64)c);
	if ((__s64)old != c)
		__sync_fetch_and_add(&pac.bound, c - (__s64)old);
	/* Nothing counted: no longer watched (its next response lists it anew,
	 * even if a stale slot of pac_watch still names it). */
	if (!c)
		f->bflags &= ~SLUICE_PAC_BF_LISTED;
}

/* A flow whose share of in flight is its pac.bound share (a request/response
 * flow with a capped window): eq. (4)/(5) leave pac.in_flight to the others. */
static __always_inline int covered(const struct sluice_pac_flow *f)
{
	return rwnd_cap_bytes && cap_to_response && f->wscale && (f->bflags & SLUICE_PAC_BF_EDGE) && f->rcv_valid &&
	       f->burst_bytes;
}

/* This flow's share of pac.bound as the sum still counts it. */
static __always_inline __s64 cur_contrib(const struct sluice_pac_flow *f)
{
	return f->bepoch == (__u8)pac.bound_epoch ? (__s64)f->contrib : 0;
}

/* What a Linux sender can still send into `room` bytes of window beyond the
 * highest byte received: whole segments only (tcp_snd_wnd_test() sends a
 * segment only when all of it fits; a shorter one is only the tail of what
 * it has to send, which the response's rest bounds). Counting the part of a
 * window no segment fits would make k capped windows look larger than the
 * k x cap of room they really take. */
static __always_inline __s64 usable_window(const struct sluice_pac_flow *f, __s64 room)
{
	__u32 mss = f->mss ? f->mss : SLUICE_PAC_DEFAULT_MSS;
	if (room <= 0)
		return room;
	return room - (__s64)((__u64)room % mss);
}

static __always_inline void bound_update(struct sluice_pac_flow *f)
{
	if (!rwnd_cap_bytes || !cap_to_response || !f->wscale || !(f->bflags & SLUICE_PAC_BF_EDGE) ||
	    !f->rcv_valid || !f->burst_bytes)
		return;
	__s64 c = f->fin_rst ? 0 : usable_window(f, sluice_pac_seq_delta(f->rcv_high, f->edge));
	__s64 rem = (__s64)f->burst_bytes - (__s64)f->cur_burst;
	/* A response larger than the last one: its size is unknown again. */
	if (rem < 0)
		f->bflags |= SLUICE_PAC_BF_GUESS;
	/* The first response's size is a guess (one initial window): bound
	 * by the window alone, or a response larger than the guess would drop
	 * out of the sum while it still comes. Once it ends the flow's open
	 * window counts until the next request or bound_watch() clears it. */
	if (!(f->bflags & SLUICE_PAC_BF_GUESS) && c > rem)
		c = rem;
	bound_set(f, c < 0 ? 0 : c);
}

/* A flow's share can outlive its response: a first response (size unknown,
 * the whole window counts) or one shorter than the last ends without the
 * share reaching 0. Rather than wait for the agent's idle reset (which
 * needs the whole pipe quiet, i.e. every other flow done too), each data
 * segment that arrives checks one watched flow: a flow whose response began
 * and that was quiet for max(2 x its RTT, trigger_age_min_ns) (nothing
 * either way) is done; its share goes. A flow is listed by a segment of its
 * response and unlisted by its next request (request_burst()), so one still
 * waiting for the first byte of its response keeps its share: the response
 * will come, however late the sender's application answers. A flow that
 * sends again is counted again by its next segment. */
static __always_inline void bound_watch(const struct sluice_pac_flow_key *k, struct sluice_pac_flow *f, __u64 now)
{
	if (!rwnd_cap_bytes || !cap_to_response)
		return;
	if (!(f->bflags & SLUICE_PAC_BF_LISTED) && cur_contrib(f) > 0) {
		__u32 slot = __sync_fetch_and_add(&watch_next, 1) % SLUICE_PAC_WATCH_SLOTS;
		bpf_map_update_elem(&pac_watch, &slot, k, BPF_ANY);
		f->bflags |= SLUICE_PAC_BF_LISTED;
	}
	__u32 idx = __sync_fetch_and_add(&watch_scan, 1) % SLUICE_PAC_WATCH_SLOTS;
	struct sluice_pac_flow_key *gk = bpf_map_lookup_elem(&pac_watch, &idx);
	if (!gk || !gk->family)
		return;
	struct sluice_pac_flow *g = bpf_map_lookup_elem(&pac_flows, gk);
	if (!g || g == f || !(g->bflags & SLUICE_PAC_BF_LISTED))
		return;
	if (cur_contrib(g) <= 0)
		return;
	__u64 quiet = (__u64)g->srtt_us * 2000;
	__u64 floor = trigger_age_min_ns ? trigger_age_min_ns : 1000000ULL;
	if (quiet < floor)
		quiet = floor;
	if (now > g->last_ns && now - g->last_ns > quiet) {
		/* A response of unknown size ended: now it is measured. */
		if (g->bflags & SLUICE_PAC_BF_GUESS)
			pac.resp_guess = g->cur_burst;
		g->bflags &= ~SLUICE_PAC_BF_LISTED;
		bound_set(g, 0);
	}
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

/* With rwnd_cap_bytes: bytes the window of the segment `p` lets the sender
 * send beyond what it has sent already (eq. 3 cannot trigger more): the
 * right edge ACK + window less the highest byte received and this flow's
 * triggered bytes not yet arrived. -1: no bound known. */
static __always_inline __s64 window_room(const struct sluice_pac_flow *f, const struct sl_pkt *p, __u64 expect)
{
	if (!rwnd_cap_bytes || !f->wscale || !(p->tcp_flags & SL_TCP_ACK))
		return -1;
	__s64 room = (__s64)((__u64)p->window << (f->wscale - 1));
	if (f->rcv_valid)
		room += sluice_pac_seq_delta(f->rcv_high, p->ack_seq);
	room = usable_window(f, room) - (__s64)expect;
	/* A covered flow: what the release adds to its bound share. */
	if (covered(f))
		room -= cur_contrib(f);
	return room < 0 ? 0 : room;
}

/* `expect`: the flow's bytes already expected in flight when `t` is
 * accounted (a request's own accounting voids them first). */
static __always_inline __u32 cap_to_window(__u32 t, const struct sluice_pac_flow *f, const struct sl_pkt *p,
					   __u64 expect)
{
	__s64 room = window_room(f, p, expect);
	return room >= 0 && (__s64)t > room ? (__u32)room : t;
}

/* Clamp the window our segment advertises to rwnd_cap_bytes (never to 0
 * from non-zero, never a SYN's, which is unscaled), fixing the checksum
 * incrementally as set_echo() does in ein.bpf.c. */
static __always_inline void clamp_window(struct __sk_buff *skb, struct sl_pkt *p, const struct sluice_pac_flow *f)
{
	if (!rwnd_cap_bytes || !f->wscale || !p->window || (p->tcp_flags & SL_TCP_SYN))
		return;
	__u32 cap = rwnd_cap_bytes >> (f->wscale - 1);
	if (!cap)
		cap = 1;
	if (p->window <= cap)
		return;
	__be16 oldw = bpf_htons(p->window), neww = bpf_htons((__u16)cap);
	if (bpf_l4_csum_replace(skb, p->l4_off + 16, oldw, neww, sizeof(neww)) ||
	    bpf_skb_store_bytes(skb, p->l4_off + 14, &neww, sizeof(neww), 0))
		return;
	p->window = (__u16)cap;
	__sync_fetch_and_add(&pac.rwnd_clamped, 1);
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
	if (cap_to_response && f->burst_bytes) {
		__s64 room = (__s64)f->burst_bytes - (__s64)f->cur_burst - (__s64)f->expect;
		if (room < 0)
			room = 0;
		if ((__s64)t > room)
			t = (__u32)room;
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
			b = (__u64)SLUICE_PAC_IW_SEGS * (f->mss ? f->mss : SLUICE_PAC_DEFAULT_MSS);
			f->bflags |= SLUICE_PAC_BF_GUESS;
		}
	} else if (!b) {
		b = f->burst_bytes;
	} else {
		f->bflags &= ~SLUICE_PAC_BF_GUESS;
		pac.resp_guess = b;
	}
	/* Unwatched until its response's first segment lists it again
	 * (bound_watch()): a flow waiting for its response is never cleared. */
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
			b = (__u64)SLUICE_PAC_IW_SEGS * (f->mss ? f->mss : SLUICE_PAC_DEFAULT_MSS);
	}
	__u32 t = trigger_of(f, c, p, sack);
	if (!account_requests)
		return t;
	if (b > (1u << 30))
		b = 1u << 30;
	/* Peeked or consumed, the same bound: when it leaves, the request
	 * voids what the flow still expected (the agent releases a held one
	 * on the peeked value, the kernel accounts the consumed one). */
	return cap_to_window(b > t ? (__u32)b : t, f, p, 0);
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
			__sync_fetch_and_add(&f->expect, trig);
			age_rotate(f, now);
			f->trig_cur += trig;
		}
		__sync_fetch_and_add(&f->trig_sum, trig);
		pac.last_trigger_ns = now;
	}
	if (!f->ack_valid || sluice_pac_seq_delta(f->last_ack, p->ack_seq) > 0)
		f->last_ack = p->ack_seq;
	f->ack_valid = 1;
	f->last_win = p->window;
	f->last_ns = now;
	bound_update(f);
	/* RTT sample: from the first release carrying a TSval to the first data
	 * echoing it. Linux's TSval ticks every ms, so later ACKs of the same
	 * tick keep the first time: a sample may be long by up to a tick, never
	 * short (the trigger age must not fire on data still in flight). */
	if (o->has_ts && o->tsval != f->ts_val_sent) {
		f->ts_val_sent = o->tsval;
		f->ts_sent_ns = now;
	}
}

static __always_inline void emit_segment(const struct sluice_pac_flow_key *k, const struct sluice_pac_flow *f,
					 const struct sl_pkt *p, __u8 flags, __u64 now)
{
	struct sluice_pac_event *ev = bpf_ringbuf_reserve(&pac_events, sizeof(*ev), 0);
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

static __always_inline int parse_tcp(struct __sk_buff *skb, struct sl_pkt *p)
{
	struct sl_cursor c;
	sl_cursor_init(&c, (void *)(long)skb->data, (void *)(long)skb->data_end);
	int r = sl_parse(&c, p);
	if (r != SL_PARSE_OK) {
		sl_count(sl_parse_reason(r), skb->len);
		return -1;
	}
	if (p->proto != IPPROTO_TCP_NUM) {
		sl_count(SLUICE_R_PAC_UNMANAGED, skb->len);
		return -1;
	}
	return 0;
}

SEC("tc")
int pac_ingress(struct __sk_buff *skb)
{
	struct sl_pkt p = {};
	if (parse_tcp(skb, &p))
		return SL_TC_NEXT;
	struct sluice_pac_flow_key k = {};
	make_key(&k, &p, 0);
	if (!managed(&k)) {
		sl_count(SLUICE_R_PAC_UNMANAGED, skb->len);
		return SL_TC_NEXT;
	}
	__u64 now = bpf_ktime_get_ns();
	struct sluice_pac_flow *f = bpf_map_lookup_elem(&pac_flows, &k);
	if (!f) {
		if (!p.payload_len) {
			/* Flows start with their first data segment. */
			sl_count(SLUICE_R_PAC_NOT_PURE_ACK, skb->len);
			return SL_TC_NEXT;
		}
		struct sluice_pac_flow init = { .first_ns = now };
		bpf_map_update_elem(&pac_flows, &k, &init, BPF_NOEXIST);
		f = bpf_map_lookup_elem(&pac_flows, &k);
		if (!f) {
			sl_count(SLUICE_R_PAC_FLOW_TABLE_FULL, skb->len);
			return SL_TC_NEXT;
		}
	}
	f->last_ns = now;
	sync_epoch(f);
	if (p.tcp_flags & (SL_TCP_FIN | SL_TCP_RST)) {
		f->fin_rst |= (p.tcp_flags & SL_TCP_RST) ? 2 : 1;
		if (f->contrib)
			bound_set(f, 0);
		struct sluice_pac_flow_ctl *c = bpf_map_lookup_elem(&pac_flow_ctl, &k);
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
		if (after < 0)
			__sync_val_compare_and_swap(&pac.in_flight, after, 0);
	}
	__sync_fetch_and_add(&f->cur_burst, len);
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
	bound_watch(&k, f, now);
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

	/* Wake the agent once in_flight has room for its head ACK. */
	__s64 infl = admit_in_flight();
	if (pac.held && !pac.wake_pending && sluice_pac_fits(infl, pac.wake_room, pac.threshold) &&
	    __sync_val_compare_and_swap(&pac.wake_pending, 0, 1) == 0) {
		struct sluice_pac_event *ev = bpf_ringbuf_reserve(&pac_events, sizeof(*ev), 0);
		if (ev) {
			__builtin_memset(ev, 0, sizeof(*ev));
			ev->ts_ns = now;
			ev->type = SLUICE_PAC_EV_WAKE;
			bpf_ringbuf_submit(ev, BPF_RB_FORCE_WAKEUP);
		} else {
			pac.wake_pending = 0;
		}
	}
	sl_count(SLUICE_R_PAC_DATA, skb->len);
	return SL_TC_NEXT;
}

SEC("tc")
int pac_egress(struct __sk_buff *skb)
{
	struct sl_pkt p = {};
	if (parse_tcp(skb, &p))
		return SL_TC_NEXT;
	struct sluice_pac_flow_key k = {};
	make_key(&k, &p, 1);
	if (!managed(&k)) {
		sl_count(SLUICE_R_PAC_UNMANAGED, skb->len);
		return SL_TC_NEXT;
	}
	__u64 now = bpf_ktime_get_ns();
	struct sluice_pac_flow *f = bpf_map_lookup_elem(&pac_flows, &k);
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
		struct sluice_pac_flow init = { .first_ns = now, .last_ns = now };
		bpf_map_update_elem(&pac_flows, &k, &init, BPF_NOEXIST);
		f = bpf_map_lookup_elem(&pac_flows, &k);
		if (!f) {
			sl_count(SLUICE_R_PAC_FLOW_TABLE_FULL, skb->len);
			return SL_TC_NEXT;
		}
		if (syn) {
			f->wscale = syn_wscale(skb, &p);
			sl_count(SLUICE_R_PAC_NOT_PURE_ACK, skb->len);
			return SL_TC_NEXT;
		}
		if (synack) {
			if (rwnd_cap_bytes)
				f->wscale = syn_wscale(skb, &p);
			__sync_fetch_and_add(&pac.in_flight, (__s64)SLUICE_PAC_IW_SEGS * SLUICE_PAC_DEFAULT_MSS);
			pac.last_trigger_ns = now;
			sl_count(SLUICE_R_PAC_NOT_PURE_ACK, skb->len);
			return SL_TC_NEXT;
		}
	}
	struct sluice_pac_flow_ctl *c = bpf_map_lookup_elem(&pac_flow_ctl, &k);
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
	int pure = !p.payload_len && (p.tcp_flags & SL_TCP_ACK) &&
		   !(p.tcp_flags & (SL_TCP_SYN | SL_TCP_FIN | SL_TCP_RST));
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
		if (p.tcp_flags & (SL_TCP_FIN | SL_TCP_RST))
			f->fin_rst |= (p.tcp_flags & SL_TCP_RST) ? 2 : 1;
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
		__sync_fetch_and_add(&f->admitted, 1);
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
		__sync_fetch_and_add(&f->admitted, 1);
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
	struct sluice_pac_event *ev = bpf_ringbuf_reserve(&pac_events, sizeof(*ev), 0);
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
