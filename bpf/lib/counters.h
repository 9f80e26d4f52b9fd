/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Per-CPU {packets, bytes} per reason code. Every program that includes this
 * gets one `sl_counters` map; the agent sums CPUs and names the slots from
 * include/sluice/reasons.h. */
#ifndef SLUICE_BPF_COUNTERS_H
#define SLUICE_BPF_COUNTERS_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "sluice/reasons.h"
#include "lib/count.h"
#include "lib/parse.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SLUICE_REASON_SLOTS);
	__type(key, __u32);
	__type(value, struct sluice_counter);
} sl_counters SEC(".maps");

static __always_inline void sl_count(__u32 reason, __u64 bytes)
{
	struct sluice_counter *c = bpf_map_lookup_elem(&sl_counters, &reason);
	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

/* Same, for a tc program: a GSO skb counts as its wire segments. */
static __always_inline void sl_count_skb(__u32 reason, struct __sk_buff *skb)
{
	sl_count_skb_in(&sl_counters, reason, skb);
}

/* Parses a tc program's packet as TCP: 0, or -1 after counting the packet
 * (its parse reason when it does not parse, `not_tcp` for another L4). */
static __always_inline int sl_parse_tcp_counted(struct __sk_buff *skb, struct sl_pkt *p, __u32 not_tcp)
{
	struct sl_cursor c;
	sl_cursor_init(&c, (void *)(long)skb->data, (void *)(long)skb->data_end);
	int r = sl_parse(&c, p);
	if (r != SL_PARSE_OK) {
		sl_count(sl_parse_reason(r), skb->len);
		return -1;
	}
	if (p->proto != IPPROTO_TCP_NUM) {
		sl_count(not_tcp, skb->len);
		return -1;
	}
	return 0;
}

#endif
