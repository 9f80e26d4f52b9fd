// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* flowstat: per-interface, per-flow counters (packets, bytes, ECN, TCP
 * retransmission hints) at tc ingress and egress. Every mechanism's agent
 * view starts here. It never changes a packet and always returns the neutral
 * verdict. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "sluice/flow.h"
#include "lib/parse.h"
#include "lib/counters.h"
#include "lib/verdict.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set by the agent before load. 0 = count reasons only. */
const volatile __u8 track_flows = 1;

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SLUICE_FLOW_TABLE_SIZE);
	__type(key, struct sluice_flow_key);
	__type(value, struct sluice_flow_stats);
} sl_fs_flows_v1 SEC(".maps");

static __always_inline __u32 segs_of(struct __sk_buff *skb)
{
	__u32 segs = skb->gso_segs;
	return segs ? segs : 1;
}

static __always_inline void account(struct sluice_flow_stats *st, const struct sl_pkt *p, struct __sk_buff *skb,
				    __u64 now)
{
	__sync_fetch_and_add(&st->packets, segs_of(skb));
	__sync_fetch_and_add(&st->bytes, skb->len);
	__sync_fetch_and_add(&st->payload_bytes, p->payload_len);
	if (p->ecn == SL_ECN_CE)
		__sync_fetch_and_add(&st->ce_packets, 1);
	else if (p->ecn != SL_ECN_NOT_ECT)
		__sync_fetch_and_add(&st->ect_packets, 1);
	st->last_ns = now;
	if (p->proto == IPPROTO_TCP_NUM) {
		st->tcp_flags |= p->tcp_flags;
		if (p->payload_len) {
			/* A hint, not a count: concurrent CPUs may race on
			 * highest_seq_end, and a reordered segment looks the
			 * same as a retransmitted one. */
			__u32 end = p->seq + p->payload_len;
			if (st->highest_seq_end && !sl_seq_before(st->highest_seq_end, end))
				__sync_fetch_and_add(&st->retrans_hints, 1);
			else
				st->highest_seq_end = end;
		}
	}
}

static __always_inline int flowstat(struct __sk_buff *skb, __u8 dir)
{
	struct sl_cursor c;
	struct sl_pkt p = {};
	sl_cursor_init(&c, (void *)(long)skb->data, (void *)(long)skb->data_end);

	int r = sl_parse(&c, &p);
	if (r != SL_PARSE_OK) {
		sl_count_skb(sl_parse_reason(r), skb);
		return SL_TC_NEXT;
	}

	if (!track_flows) {
		sl_count_skb(SLUICE_R_PASS_COUNTED, skb);
		return SL_TC_NEXT;
	}

	struct sluice_flow_key k = {};
	__builtin_memcpy(k.saddr, p.saddr, sizeof(k.saddr));
	__builtin_memcpy(k.daddr, p.daddr, sizeof(k.daddr));
	k.sport = p.sport;
	k.dport = p.dport;
	k.proto = p.proto;
	k.family = p.family;
	k.dir = dir;

	__u64 now = bpf_ktime_get_ns();
	struct sluice_flow_stats *st = bpf_map_lookup_elem(&sl_fs_flows_v1, &k);
	if (!st) {
		struct sluice_flow_stats init = { .first_ns = now };
		/* BPF_NOEXIST: another CPU may have created it meanwhile. */
		if (bpf_map_update_elem(&sl_fs_flows_v1, &k, &init, BPF_NOEXIST) &&
		    !bpf_map_lookup_elem(&sl_fs_flows_v1, &k)) {
			sl_count_skb(SLUICE_R_PASS_FLOW_TABLE_FULL, skb);
			return SL_TC_NEXT;
		}
		st = bpf_map_lookup_elem(&sl_fs_flows_v1, &k);
		if (!st) {
			sl_count_skb(SLUICE_R_PASS_FLOW_TABLE_FULL, skb);
			return SL_TC_NEXT;
		}
	}
	account(st, &p, skb, now);
	sl_count_skb(SLUICE_R_PASS_COUNTED, skb);
	return SL_TC_NEXT;
}

SEC("tc")
int flowstat_in(struct __sk_buff *skb)
{
	return flowstat(skb, SLUICE_DIR_INGRESS);
}

SEC("tc")
int flowstat_out(struct __sk_buff *skb)
{
	return flowstat(skb, SLUICE_DIR_EGRESS);
}
