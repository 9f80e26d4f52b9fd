// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Probe: tp_btf qdisc tracepoints (exact per-packet backlog for the queue
 * monitor). Each program is loaded on its own. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

__u64 probe_events = 0;

SEC("tp_btf/qdisc_enqueue")
int BPF_PROG(probe_qdisc_enqueue, struct Qdisc *q, const struct netdev_queue *txq, struct sk_buff *skb)
{
	probe_events++;
	return 0;
}

SEC("tp_btf/qdisc_dequeue")
int BPF_PROG(probe_qdisc_dequeue, struct Qdisc *q, const struct netdev_queue *txq, int packets, struct sk_buff *skb)
{
	probe_events++;
	return 0;
}
