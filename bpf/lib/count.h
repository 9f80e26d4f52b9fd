/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Adding a tc packet to a {packets, bytes} counter, the value of every
 * sluice counter map (sl_counters, sl_sw_cnt_v1, sl_fg_cnt_v1, sl_bfc_cnt_v1,
 * ...): a GSO skb counts as its wire segments. No map of its own. */
#ifndef SLUICE_BPF_COUNT_H
#define SLUICE_BPF_COUNT_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "sluice/reasons.h"

SLUICE_STATIC_ASSERT(sizeof(struct sluice_counter) == 16, "sluice_counter size");

static __always_inline void sl_counter_add_skb(struct sluice_counter *c, struct __sk_buff *skb)
{
	__u32 segs = skb->gso_segs;
	c->packets += segs ? segs : 1;
	c->bytes += skb->len;
}

/* Counts skb in slot `slot` of `map`, an array (per-CPU or not) whose value
 * is {__u64 packets; __u64 bytes} (the ABI headers assert 16 bytes). */
static __always_inline void sl_count_skb_in(void *map, __u32 slot, struct __sk_buff *skb)
{
	struct sluice_counter *c = bpf_map_lookup_elem(map, &slot);
	if (c)
		sl_counter_add_skb(c, skb);
}

#endif
