// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* PAC datapath, part of bpf/host/pac.bpf.c (one translation unit): the
 * receive window, an extension beyond the paper (rwnd_cap_bytes,
 * docs/pac.md "Receive-window cap and the in-flight bound"). Our window
 * scale from the SYN or SYN-ACK (RFC 7323 §2.2), the clamp of the window
 * our segments advertise, the room a window leaves a sender (whole
 * segments), and pac.bound: the exact in-flight bound of request/response
 * flows whose windows are capped, kept per flow and watched for the end of
 * each response. Included by pac.bpf.c after the globals, the .bss state
 * and the map (sl_pac_flows_v2) it uses. */
#ifndef SLUICE_BPF_PAC_WINDOW_H
#define SLUICE_BPF_PAC_WINDOW_H

/* Our window scale (RFC 7323 §2.2) from the options of a SYN or SYN-ACK
 * (`n` bytes at `off`): shift + 1, or 1 when the option is absent (windows
 * unscaled); 0 when unreadable. A global function: the verifier checks its
 * option walk once, not at every call site. The walk reads the option bytes
 * it needs one load at a time, so its frame stays within 32 bytes: on 6.1
 * the verifier adds this frame to pac_egress's (and counts the timer
 * callback's as a call), and their sum must stay within 512 bytes. Each
 * load has a constant size (the 6.1 verifier loses the bounds of a variable
 * length that clang range-checks through a copy). */
__noinline int sl_syn_wscale(struct __sk_buff *skb, __u32 off, __u32 n)
{
	__u8 o[3] = {};
	__u32 i = 0;

	if (!skb || !n)
		return 1;
	if (n > 40)
		n = 40;
	for (int it = 0; it < 40; it++) {
		if (i >= n)
			break;
		if (bpf_skb_load_bytes(skb, off + i, o, 1))
			return 0;
		if (o[0] == 0)
			break;
		if (o[0] == 1) {
			i++;
			continue;
		}
		if (i + 1 >= n)
			break;
		if (i + 2 < n) {
			if (bpf_skb_load_bytes(skb, off + i, o, 3))
				return 0;
		} else if (bpf_skb_load_bytes(skb, off + i, o, 2)) {
			return 0;
		}
		if (o[0] == 3 && o[1] == 3 && i + 2 < n)
			return (o[2] > 14 ? 14 : o[2]) + 1;
		if (o[1] < 2)
			break;
		i += o[1];
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
	/* Nothing counted: no longer watched (its next response lists it anew;
	 * a quiet_timer still pending finds it unlisted and does nothing). */
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
	if (!rwnd_cap_bytes || !cap_to_response || !f->wscale || !(f->bflags & SLUICE_PAC_BF_EDGE) || !f->rcv_valid ||
	    !f->burst_bytes)
		return;
	__s64 c = f->fin_rst ? 0 : usable_window(f, sluice_pac_seq_delta(f->rcv_high, f->edge));
	__s64 rem = (__s64)f->burst_bytes - (__s64)f->cur_burst;
	/* A response larger than the last one: its size is unknown again. */
	if (rem < 0)
		f->bflags |= SLUICE_PAC_BF_GUESS;
	/* The first response's size is a guess (one initial window): bound
	 * by the window alone, or a response larger than the guess would drop
	 * out of the sum while it still comes. Once it ends the flow's open
	 * window counts until the next request or flow_watch() clears it. */
	if (!(f->bflags & SLUICE_PAC_BF_GUESS) && c > rem)
		c = rem;
	bound_set(f, c < 0 ? 0 : c);
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

#endif /* SLUICE_BPF_PAC_WINDOW_H */
