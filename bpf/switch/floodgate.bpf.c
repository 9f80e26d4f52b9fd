// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Floodgate's per-packet part on a sluice switch port (floodgate-conext21
 * §3.2, §4.1; include/sluice/floodgate_sw.h, docs/floodgate.md).
 *
 * fg_egress (tc egress of every switch port, after the substrate's
 * classifier sw_egress):
 *  - credits: a packet that came in on a switch port is counted per
 *    (ingress port, dst) in sl_fg_rx_v1; the agent returns what came from
 *    switch-facing ports upstream every T;
 *  - window: on a windowed (switch-facing) egress port, a destination held
 *    in a VOQ (sl_fg_ag_v1.voq) keeps using it; otherwise a packet passes
 *    while init_window - (direct + voq_out - credit_psn) > 0 (it may take
 *    the window below zero by itself) and is counted as direct; a packet
 *    that finds the window exhausted goes to VOQ 1 + crc(dst) % nvoq, a
 *    queue the agent keeps paused and releases by credits.
 *  - VOQs in the agent (the port's voq_agent, [floodgate] voq = "agent"):
 *    the same window, but a packet that finds it exhausted, or whose
 *    destination still has stolen bytes the agent has not finished (the
 *    order), is copied to sl_fg_voq_v1 and stolen; the agent sends it again
 *    with reinject_mark when credits reopen the window, and such a frame
 *    passes here untouched (counted by the agent). A frame that cannot be
 *    copied (too big, ring full) passes and counts as direct.
 * Fail open: a packet the substrate's classifier put into the fallback
 * class (agent heartbeat stale) is left there, never stolen. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "sluice/dstpause.h"
#include "sluice/floodgate_sw.h"
#include "sluice/switch.h"
#include "lib/parse.h"
#include "lib/verdict.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* voq_agent: skb->mark of the agent's re-sent frames (0: none), and the
 * verdict for a stolen frame (SL_TC_STOLEN under clsact, SL_TC_SHOT under
 * tcx, which has no such verdict), both set before load. */
const volatile __u32 reinject_mark = 0;
const volatile __s32 divert_verdict = SL_TC_SHOT;

struct sl_fg_voq_cnt fg_voq_cnt[SLUICE_SW_MAX_PORTS] = {};
/* New keys the ring sl_fg_keys_v1 could not take (the agent then walks). */
__u64 fg_keys_lost = 0;
/* The counters, in .bss (the agent reads them through the skeleton's
 * mapping, no syscall): a key's slot is in sl_fg_tx_v1 / sl_fg_rx_v1,
 * taken from fg_tx_used / fg_rx_used when the key is added. */
struct sl_fg_tx fg_tx[SL_FG_SW_TABLE] = {};
struct sl_fg_rx fg_rx[SL_FG_SW_TABLE] = {};
__u32 fg_tx_used = 0;
__u32 fg_rx_used = 0;
_Static_assert((SL_FG_SW_TABLE & (SL_FG_SW_TABLE - 1)) == 0, "slots are masked");
_Static_assert((SLUICE_SW_MAX_PORTS & (SLUICE_SW_MAX_PORTS - 1)) == 0, "fg_cnt masks the port id");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 * 1024 * 1024);
} sl_fg_voq_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} sl_fg_keys_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SLUICE_SW_MAX_PORTS);
	__type(key, __u32); /* ifindex */
	__type(value, struct sl_fg_port);
} sl_fg_port_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SL_FG_SW_TABLE);
	__type(key, struct sl_fg_key);
	__type(value, __u32); /* slot in fg_tx */
} sl_fg_tx_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SL_FG_SW_TABLE);
	__type(key, struct sl_fg_key);
	__type(value, struct sl_fg_ag);
} sl_fg_ag_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SL_FG_SW_TABLE);
	__type(key, struct sl_fg_key);
	__type(value, __u32); /* slot in fg_rx */
} sl_fg_rx_v1 SEC(".maps");

static __always_inline __u32 fg_dst_hash(const __u8 *d)
{
	__u32 h = 2166136261u;
	for (int i = 0; i < 16; i++) {
		h ^= d[i];
		h *= 16777619u;
	}
	return h;
}

/* A key this program just added to a table, for the agent (it reads the
 * tables by key; floodgate_sw.h sl_fg_new_key). Polled every T: no wake-up. */
static __always_inline void fg_new_key(__u32 table, __u32 slot, const struct sl_fg_key *k)
{
	struct sl_fg_new_key *ev = bpf_ringbuf_reserve(&sl_fg_keys_v1, sizeof(*ev), 0);
	if (!ev) {
		__sync_fetch_and_add(&fg_keys_lost, 1);
		return;
	}
	ev->table = table;
	ev->slot = slot;
	__builtin_memcpy(&ev->key, k, sizeof(*k));
	bpf_ringbuf_submit(ev, BPF_RB_NO_WAKEUP);
}

/* The key's slot, added (and announced) if new; NULL when the table or the
 * slots are full. Two CPUs adding one key both take a slot: the one whose
 * insert lost leaves its slot unused (zero, never announced). Once the
 * slots are gone the counter is only read: no atomic add per packet of a
 * key that will never get one, and no wrap of the counter back into slots
 * already taken. */
static __always_inline __u32 *fg_slot(void *map, __u32 *used, __u32 table, const struct sl_fg_key *k)
{
	__u32 *s = bpf_map_lookup_elem(map, k);
	if (s)
		return s;
	if (*(volatile __u32 *)used >= SL_FG_SW_TABLE)
		return NULL;
	__u32 n = __sync_fetch_and_add(used, 1);
	if (n >= SL_FG_SW_TABLE)
		return NULL;
	if (!bpf_map_update_elem(map, k, &n, BPF_NOEXIST))
		fg_new_key(table, n, k);
	return bpf_map_lookup_elem(map, k);
}

/* The port's counters. The mask keeps the verifier's bound on the index;
 * the empty asm keeps the compiler from dropping it (it knows the caller's
 * check) and then reloading the id from the map value, unbounded. */
static __always_inline struct sl_fg_voq_cnt *fg_cnt(__u32 port_id)
{
	asm volatile("" : "+r"(port_id));
	return &fg_voq_cnt[port_id & (SLUICE_SW_MAX_PORTS - 1)];
}

/* voq_agent: the frame to the agent's VOQ; 0 when it cannot be copied
 * (the caller lets it pass). The agent polls the ring (every T and on
 * every credit), so no wake-up. */
static __always_inline int fg_steal(struct __sk_buff *skb, const struct sl_fg_key *k, struct sl_fg_voq_cnt *cnt)
{
	__u32 len = skb->len;
	if (len > SLUICE_DP_FRAME_MAX || len < 14) {
		__sync_fetch_and_add(&cnt->too_big, 1);
		return 0;
	}
	struct sl_dp_frame *ev = bpf_ringbuf_reserve(&sl_fg_voq_v1, sizeof(*ev), 0);
	if (!ev) {
		__sync_fetch_and_add(&cnt->ring_full, 1);
		return 0;
	}
	if (bpf_skb_load_bytes(skb, 0, ev->frame, len)) {
		bpf_ringbuf_discard(ev, BPF_RB_NO_WAKEUP);
		__sync_fetch_and_add(&cnt->too_big, 1);
		return 0;
	}
	__builtin_memcpy(ev->dst.addr, k->dst, 16);
	ev->ifindex = skb->ifindex;
	ev->len = len;
	ev->tx_ns = bpf_ktime_get_ns();
	bpf_ringbuf_submit(ev, BPF_RB_NO_WAKEUP);
	__sync_fetch_and_add(&cnt->stolen, 1);
	return 1;
}

SEC("tc")
int fg_egress(struct __sk_buff *skb)
{
	if (skb->protocol == bpf_htons(SLUICE_CTRL_ETHERTYPE))
		return SL_TC_NEXT;
	if ((skb->priority & 0xffff) == SL_SW_FALLBACK_MINOR)
		return SL_TC_NEXT;
	if (reinject_mark && skb->mark == reinject_mark) {
		/* The agent's VOQ, sent again: counted when it was stolen. */
		__u32 oi = skb->ifindex;
		struct sl_fg_port *o = bpf_map_lookup_elem(&sl_fg_port_v1, &oi);
		if (o && o->port_id < SLUICE_SW_MAX_PORTS)
			__sync_fetch_and_add(&fg_cnt(o->port_id)->reinjected, 1);
		return SL_TC_NEXT;
	}
	struct sl_cursor c;
	struct sl_pkt p = {};
	sl_cursor_init(&c, (void *)(long)skb->data, (void *)(long)skb->data_end);
	int r = sl_parse(&c, &p);
	if (r != SL_PARSE_OK && r != SL_PARSE_OTHER_L4)
		return SL_TC_NEXT;
	struct sl_fg_key k = {};
	if (p.family == 4) {
		k.dst[10] = k.dst[11] = 0xff;
		__builtin_memcpy(&k.dst[12], &p.daddr[0], 4);
	} else {
		__builtin_memcpy(k.dst, p.daddr, 16);
	}
	__u64 len = skb->len;
	__u32 segs = skb->gso_segs ? skb->gso_segs : 1;

	/* Credits (§4.1): forwarded per ingress port and destination. Every
	 * configured port is counted, a host-facing one too: its bytes share
	 * the egress queues with what came from switches, and the agent splits
	 * a queue by FIFO order over all of them (only switch-facing ports'
	 * are credited). */
	__u32 out_ifindex = skb->ifindex;
	struct sl_fg_port *out = bpf_map_lookup_elem(&sl_fg_port_v1, &out_ifindex);
	__u32 in_ifindex = skb->ingress_ifindex;
	struct sl_fg_port *in = bpf_map_lookup_elem(&sl_fg_port_v1, &in_ifindex);
	if (in) {
		k.port_id = in->port_id;
		__u32 *rs = fg_slot(&sl_fg_rx_v1, &fg_rx_used, SL_FG_KEY_RX, &k);
		if (rs) {
			struct sl_fg_rx *rx = &fg_rx[*rs & (SL_FG_SW_TABLE - 1)];
			__sync_fetch_and_add(&rx->bytes, len);
			__sync_fetch_and_add(&rx->pkts, segs);
			if (out)
				rx->out_port = out->port_id;
		}
	}

	/* Window (§3.2) on a windowed egress port. */
	if (!out || !out->windowed || (!out->nvoq && !out->voq_agent))
		return SL_TC_NEXT;
	k.port_id = out->port_id;
	__u32 *ts = fg_slot(&sl_fg_tx_v1, &fg_tx_used, SL_FG_KEY_TX, &k);
	if (!ts)
		return SL_TC_NEXT; /* table full: fail open */
	struct sl_fg_tx *tx = &fg_tx[*ts & (SL_FG_SW_TABLE - 1)];
	struct sl_fg_ag *ag = bpf_map_lookup_elem(&sl_fg_ag_v1, &k);
	if (out->voq_agent) {
		/* §3.2 with the VOQ in the agent. A destination with stolen bytes
		 * the agent has not finished keeps going there (order, §4.1). */
		__s64 sent = (__s64)tx->direct_bytes;
		__u64 done = 0;
		if (ag) {
			sent += (__s64)ag->voq_out - (__s64)ag->credit_psn;
			done = ag->voq_done;
		}
		if (tx->voq_bytes <= done && (__s64)out->init_window - sent > 0) {
			__sync_fetch_and_add(&tx->direct_bytes, len);
			__sync_fetch_and_add(&tx->direct_pkts, segs);
			return SL_TC_NEXT;
		}
		if (out->port_id >= SLUICE_SW_MAX_PORTS)
			return SL_TC_NEXT;
		/* Counted before the frame is in the ring: the agent reads this
		 * map after the ring, so it never sees a frame it did not count. */
		__sync_fetch_and_add(&tx->voq_bytes, len);
		__sync_fetch_and_add(&tx->voq_pkts, segs);
		if (fg_steal(skb, &k, fg_cnt(out->port_id))) {
			tx->voq_q = 1;
			return divert_verdict;
		}
		/* Not copied: it passes (fail open) and is counted as sent with
		 * the window; the VOQ count is taken back. */
		__sync_fetch_and_add(&tx->voq_bytes, -len);
		__sync_fetch_and_add(&tx->voq_pkts, -(__u64)segs);
		__sync_fetch_and_add(&tx->direct_bytes, len);
		__sync_fetch_and_add(&tx->direct_pkts, segs);
		return SL_TC_NEXT;
	}
	__u32 q = 0;
	if (ag && ag->voq && ag->voq <= out->nvoq) {
		q = ag->voq; /* a destination with a VOQ keeps using it (§4.1) */
	} else {
		__s64 sent = (__s64)tx->direct_bytes;
		if (ag)
			sent += (__s64)ag->voq_out - (__s64)ag->credit_psn;
		if ((__s64)out->init_window - sent > 0) {
			__sync_fetch_and_add(&tx->direct_bytes, len);
			__sync_fetch_and_add(&tx->direct_pkts, segs);
			return SL_TC_NEXT;
		}
		q = 1 + fg_dst_hash(k.dst) % out->nvoq;
	}
	tx->voq_q = q;
	__sync_fetch_and_add(&tx->voq_bytes, len);
	__sync_fetch_and_add(&tx->voq_pkts, segs);
	skb->priority = (out->htb_major << 16) | (q + 1);
	return SL_TC_NEXT;
}
