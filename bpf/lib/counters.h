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

#endif
