// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* TOP token expiry on the sender (top-tpds20 §4.3, R2), XDP on the
 * interface tokens arrive on. A token whose sojourn time on the synced clock
 * (now - timestamp + the correction for its source host) exceeds
 * T = base one-way delay + 2 x max per-hop token queueing (§5.1) is dropped
 * before the transport sees it, so no data answers a token that waited in a
 * low-priority queue for an unbounded time. Counted per priority in
 * sl_top_stats_v1. Everything that is not a TOP token passes untouched, and so
 * does a malformed TOP header (the transport rejects it with a reason).
 *
 * The threshold, its widening while the clock is unsynced and the local
 * offset are the agent's clock manager's: once the agent is not alive
 * (lib/liveness.h: its heartbeat older than fail_open_ns and, where the
 * kernel can tell, its heartbeat thread gone or stopped), nobody follows the
 * clock any more, so an expired token passes (SLUICE_R_TOP_FAIL_OPEN; still
 * counted expired for its priority and flow): a stale clock state must not
 * stall flows by dropping valid tokens. fail_open_ns = 0 (sluice-top --xdp,
 * which loads the program itself) never fails open.
 *
 * top_egress (tc egress, same interface) only counts: tokens this host paces
 * out (the receiver side) per priority, and per flow tokens and data sent,
 * for `sluicectl top`. It never changes a packet. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "lib/counters.h"
#include "lib/liveness.h"
#include "lib/parse.h"
#include "lib/verdict.h"
#include "sluice/top.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile __u16 top_port = SLUICE_TOP_DEFAULT_PORT; /* host order */
/* Set before load (0 = never fail open); the agent writes its liveness
 * record through the mmap'ed .bss. */
const volatile __u64 fail_open_ns = 0;
struct sluice_liveness top_live = {};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sluice_top_expiry_config);
} sl_top_cfg_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct sluice_top_peer_key);
	__type(value, __s64);
} sl_top_corr_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SLUICE_TOP_STATS_SLOTS);
	__type(key, __u32);
	__type(value, struct sluice_counter);
} sl_top_stats_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct sluice_top_flow_key);
	__type(value, struct sluice_top_flow_stats);
} sl_top_flows_v1 SEC(".maps");

enum top_flow_event { TF_TOKEN_SENT, TF_TOKEN_VALID, TF_TOKEN_EXPIRED, TF_DATA_SENT, TF_DATA_RECEIVED };

static __always_inline void top_flow(const __u32 *peer, __u8 family, __u64 flow_id, __u32 prio, int ev)
{
	struct sluice_top_flow_key k = {};
	k.family = family;
	__builtin_memcpy(k.addr, peer, sizeof(k.addr));
	k.flow_id = flow_id;
	struct sluice_top_flow_stats *st = bpf_map_lookup_elem(&sl_top_flows_v1, &k);
	if (!st) {
		struct sluice_top_flow_stats zero = {};
		bpf_map_update_elem(&sl_top_flows_v1, &k, &zero, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&sl_top_flows_v1, &k);
		if (!st)
			return;
	}
	switch (ev) {
	case TF_TOKEN_SENT:
		__sync_fetch_and_add(&st->tokens_sent, 1);
		break;
	case TF_TOKEN_VALID:
		__sync_fetch_and_add(&st->tokens_valid, 1);
		break;
	case TF_TOKEN_EXPIRED:
		__sync_fetch_and_add(&st->tokens_expired, 1);
		break;
	case TF_DATA_SENT:
		__sync_fetch_and_add(&st->data_sent, 1);
		break;
	default:
		__sync_fetch_and_add(&st->data_received, 1);
		break;
	}
	if (ev <= TF_TOKEN_EXPIRED)
		st->last_priority = prio;
	st->last_ns = bpf_ktime_get_ns();
}

static __always_inline void top_count(__u32 prio, __u32 verdict, __u64 bytes)
{
	__u32 slot = prio * SLUICE_TOP_EXPIRY_VERDICTS + verdict;
	struct sluice_counter *c = bpf_map_lookup_elem(&sl_top_stats_v1, &slot);
	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

SEC("xdp")
int top_expiry(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 bytes = data_end - data;
	struct sl_cursor c;
	struct sl_pkt p = {};

	sl_cursor_init(&c, data, data_end);
	int r = sl_parse(&c, &p);
	if (r) {
		sl_count(sl_parse_reason(r), bytes);
		return XDP_PASS;
	}
	if (p.proto != IPPROTO_UDP_NUM || p.dport != bpf_htons(top_port)) {
		sl_count(SLUICE_R_TOP_NOT_TOP, bytes);
		return XDP_PASS;
	}
	struct sluice_top_hdr *h = cursor_pull(&c, sizeof(*h));
	if (!h || p.payload_len < sizeof(*h) || h->magic != bpf_htons(SLUICE_TOP_MAGIC) ||
	    h->version != SLUICE_TOP_VERSION) {
		sl_count(SLUICE_R_TOP_MALFORMED, bytes);
		return XDP_PASS;
	}
	if (h->type != SLUICE_TOP_TOKEN) {
		if (h->type == SLUICE_TOP_DATA)
			top_flow(p.saddr, p.family, h->flow_id, 0, TF_DATA_RECEIVED);
		sl_count(SLUICE_R_TOP_NOT_TOKEN, bytes);
		return XDP_PASS;
	}
	__u32 prio = h->priority;
	if (prio >= SLUICE_TOP_PRIORITIES) {
		sl_count(SLUICE_R_TOP_MALFORMED, bytes);
		return XDP_PASS;
	}
	__u32 zero = 0;
	struct sluice_top_expiry_config *cfg = bpf_map_lookup_elem(&sl_top_cfg_v1, &zero);
	if (!cfg || !cfg->threshold_ns) {
		sl_count(SLUICE_R_TOP_NO_CONFIG, bytes);
		return XDP_PASS;
	}
	struct sluice_top_peer_key key = {};
	key.family = p.family;
	__builtin_memcpy(key.addr, p.saddr, sizeof(key.addr));
	__s64 corr = 0;
	__s64 *pc = bpf_map_lookup_elem(&sl_top_corr_v1, &key);
	if (pc)
		corr = *pc;
	__u64 now = bpf_ktime_get_tai_ns() + (__u64)cfg->local_offset_ns;
	__s64 sojourn = sluice_top_sojourn_ns(now, bpf_be64_to_cpu(h->tstamp_ns), corr);
	if (sluice_top_token_expired(sojourn, cfg->threshold_ns, cfg->widen_ns)) {
		top_count(prio, SLUICE_TOP_X_EXPIRED, bytes);
		top_flow(p.saddr, p.family, h->flow_id, prio, TF_TOKEN_EXPIRED);
		if (!cfg->enabled) {
			sl_count(SLUICE_R_TOP_EXPIRED_KEPT, bytes);
			return XDP_PASS;
		}
		if (!sl_agent_alive(&top_live, bpf_ktime_get_ns(), fail_open_ns)) {
			sl_count(SLUICE_R_TOP_FAIL_OPEN, bytes);
			return XDP_PASS;
		}
		sl_count(SLUICE_R_TOP_TOKEN_EXPIRED, bytes);
		return XDP_DROP;
	}
	top_count(prio, sojourn < 0 ? SLUICE_TOP_X_FUTURE : SLUICE_TOP_X_VALID, bytes);
	top_flow(p.saddr, p.family, h->flow_id, prio, TF_TOKEN_VALID);
	sl_count(SLUICE_R_TOP_TOKEN_VALID, bytes);
	return XDP_PASS;
}

SEC("tc")
int top_egress(struct __sk_buff *skb)
{
	__u64 bytes = skb->len;
	struct sl_cursor c;
	struct sl_pkt p = {};

	/* Datagrams this host's UDP stack builds (no UDP GSO) are linear up to
	 * the MTU, so the TOP header is in the head; anything else is counted
	 * malformed and left alone. */
	sl_cursor_init(&c, (void *)(long)skb->data, (void *)(long)skb->data_end);
	int r = sl_parse(&c, &p);
	if (r) {
		sl_count_skb(sl_parse_reason(r), skb);
		return SL_TC_NEXT;
	}
	if (p.proto != IPPROTO_UDP_NUM || p.dport != bpf_htons(top_port)) {
		sl_count_skb(SLUICE_R_TOP_NOT_TOP, skb);
		return SL_TC_NEXT;
	}
	struct sluice_top_hdr *h = cursor_pull(&c, sizeof(*h));
	if (!h || p.payload_len < sizeof(*h) || h->magic != bpf_htons(SLUICE_TOP_MAGIC) ||
	    h->version != SLUICE_TOP_VERSION || h->priority >= SLUICE_TOP_PRIORITIES) {
		sl_count_skb(SLUICE_R_TOP_MALFORMED, skb);
		return SL_TC_NEXT;
	}
	if (h->type == SLUICE_TOP_TOKEN) {
		__u32 prio = h->priority;
		top_count(prio, SLUICE_TOP_X_SENT, bytes);
		top_flow(p.daddr, p.family, h->flow_id, prio, TF_TOKEN_SENT);
	} else if (h->type == SLUICE_TOP_DATA) {
		top_flow(p.daddr, p.family, h->flow_id, 0, TF_DATA_SENT);
	} else {
		sl_count_skb(SLUICE_R_TOP_NOT_TOKEN, skb);
		return SL_TC_NEXT;
	}
	sl_count_skb(SLUICE_R_TOP_EGRESS_COUNTED, skb);
	return SL_TC_NEXT;
}
