// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Feature probes: the smallest programs of each type sluice attaches.
 * Loaded by `sluiced --check` inside a throw-away network namespace. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} sl_probe_rb_v1 SEC(".maps");

SEC("tc")
int probe_tc(struct __sk_buff *skb)
{
	return -1; /* TC_ACT_UNSPEC */
}

SEC("tc")
int probe_ringbuf(struct __sk_buff *skb)
{
	__u32 *v = bpf_ringbuf_reserve(&sl_probe_rb_v1, sizeof(*v), 0);
	if (v) {
		*v = skb->len;
		bpf_ringbuf_submit(v, 0);
	}
	return -1;
}

SEC("xdp")
int probe_xdp(struct xdp_md *ctx)
{
	return XDP_PASS;
}
