// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Probe: bpf_cast_to_kern_ctx (6.2+) and reading the root qdisc backlog of
 * the device through it, which the switch-side marking programs need. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;

__u64 probe_backlog = 0;

SEC("tc")
int probe_kern_ctx(struct __sk_buff *skb)
{
	struct sk_buff *kskb = bpf_cast_to_kern_ctx(skb);
	struct net_device *dev = kskb->dev;
	if (dev) {
		struct Qdisc *q = dev->qdisc;
		if (q)
			probe_backlog = q->qstats.backlog;
	}
	return -1;
}
