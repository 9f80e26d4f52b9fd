// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* BFC at the source (bfc-nsdi22 §3.3.2 upstreamQ; §3.3.1 at the NIC), tc
 * egress of a host's uplink to its first-hop sluice switch. Every IP packet
 * gets its flow's queue: as an 802.1Q tag whose VID names it (the upstreamQ
 * the switch counts pauses by, include/sluice/bfc.h) and as skb->priority =
 * the HTB class of that queue, which the host agent holds while the switch
 * has it paused. A flow keeps its queue until it has been idle for
 * sticky_ns (§3.3.2 sticky assignment: a flow must not slip out of a pause
 * by changing queue); a new or idle flow takes the next queue round robin,
 * skipping paused ones. Everything else passes untouched (TC_NEXT). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "sluice/bfc.h"
#include "lib/count.h"
#include "lib/flow.h"
#include "lib/verdict.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set before load. */
const volatile __u32 num_queues = 32;     /* 1..SLUICE_BFC_MAX_QUEUES */
const volatile __u32 htb_major = 0;       /* 0: do not steer into classes */
const volatile __u64 sticky_ns = 1000000; /* idle time after which a flow may move */

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SLUICE_BFC_SRC_FLOWS);
	__type(key, struct sl_sw_flow_tuple);
	__type(value, struct sl_bfc_flow);
} sl_bfc_flows_v1 SEC(".maps");

/* Queue -> 1 while the first-hop switch has it paused (written by the agent
 * from PAUSE/RESUME/bitmap frames). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLUICE_BFC_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} sl_bfc_pause_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} sl_bfc_cur_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SL_BFC_SRC_SLOTS);
	__type(key, __u32);
	__type(value, struct sl_bfc_counter);
} sl_bfc_cnt_v1 SEC(".maps");

static __always_inline void bfc_count(__u32 slot, struct __sk_buff *skb)
{
	sl_count_skb_in(&sl_bfc_cnt_v1, slot, skb);
}

static __always_inline int bfc_paused(__u32 q)
{
	__u32 *p = bpf_map_lookup_elem(&sl_bfc_pause_v1, &q);
	return p && *p;
}

static __always_inline __u32 bfc_nq(void)
{
	__u32 n = num_queues;
	if (n < 1)
		n = 1;
	if (n > SLUICE_BFC_MAX_QUEUES)
		n = SLUICE_BFC_MAX_QUEUES;
	return n;
}

/* The next queue round robin that the switch has not paused (all paused:
 * the next one anyway; it is held in its class until resumed). */
static __always_inline __u32 bfc_choose(void)
{
	__u32 zero = 0, nq = bfc_nq();
	__u32 *cur = bpf_map_lookup_elem(&sl_bfc_cur_v1, &zero);
	__u32 start = cur ? __sync_fetch_and_add(cur, 1) : 0;
	for (__u32 i = 0; i < SLUICE_BFC_MAX_QUEUES; i++) {
		if (i >= nq)
			break;
		__u32 q = (start + i) % nq;
		if (!bfc_paused(q)) {
			if (cur && i)
				__sync_fetch_and_add(cur, i);
			return q;
		}
	}
	return start % nq;
}

SEC("tc")
int bfc_src_egress(struct __sk_buff *skb)
{
	if (skb->vlan_present) {
		bfc_count(SL_BFC_SRC_PASS_TAGGED, skb);
		return SL_TC_NEXT;
	}
	struct sl_pkt p = {};
	if (!sl_skb_parse_ip(skb, &p, NULL)) {
		bfc_count(p.has_vlan ? SL_BFC_SRC_PASS_TAGGED : SL_BFC_SRC_PASS_NOT_IP, skb);
		return SL_TC_NEXT;
	}
	if (p.has_vlan) {
		bfc_count(SL_BFC_SRC_PASS_TAGGED, skb);
		return SL_TC_NEXT;
	}
	struct sl_sw_flow_tuple key = {};
	sl_flow_tuple_fill(&key, &p);

	__u64 now = bpf_ktime_get_ns();
	__u32 queue;
	struct sl_bfc_flow *f = bpf_map_lookup_elem(&sl_bfc_flows_v1, &key);
	if (f && now - f->last_ns <= sticky_ns && f->queue < bfc_nq()) {
		queue = f->queue;
		f->last_ns = now;
	} else {
		queue = bfc_choose();
		struct sl_bfc_flow nf = { .queue = queue, .tci = sl_bfc_queue_tci(queue), .last_ns = now };
		bpf_map_update_elem(&sl_bfc_flows_v1, &key, &nf, BPF_ANY);
		bfc_count(SL_BFC_SRC_NEW_FLOW, skb);
	}
	if (bfc_paused(queue))
		bfc_count(SL_BFC_SRC_TO_PAUSED, skb);
	if (bpf_skb_vlan_push(skb, bpf_htons(SLUICE_BFC_TPID), sl_bfc_queue_tci(queue))) {
		bfc_count(SL_BFC_SRC_TAG_FAILED, skb);
		return SL_TC_NEXT;
	}
	if (htb_major)
		skb->priority = (htb_major << 16) | (queue + 1);
	bfc_count(SL_BFC_SRC_TAGGED, skb);
	return SL_TC_NEXT;
}
