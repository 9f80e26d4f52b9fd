// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* qmon: exact backlog of chosen root qdiscs, from the qdisc_enqueue and
 * qdisc_dequeue tracepoints (the kernel fires both for the root qdisc of a
 * device, after the operation: the backlog read here is the one the packet
 * left behind). Only watched (netns, ifindex) pairs are recorded; every other
 * qdisc on the machine costs one hash lookup. Never changes anything. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "sluice/qmon.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Sampling epoch, advanced by sluice-qmon once per interval. */
volatile __u64 epoch = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SLUICE_QMON_MAX_PORTS);
	__type(key, struct sluice_qmon_key);
	__type(value, __u32); /* slot */
} sl_qm_ports_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SLUICE_QMON_MAX_PORTS);
	__type(key, __u32);
	__type(value, struct sluice_qmon_max);
} sl_qm_max_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2 * SLUICE_QMON_MAX_PORTS);
	__type(key, __u32);
	__type(value, struct sluice_qmon_interval);
} sl_qm_ival_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLUICE_QMON_MAX_PORTS);
	__type(key, __u32);
	__type(value, struct sluice_qmon_state);
} sl_qm_state_v1 SEC(".maps");

static __always_inline void record(struct Qdisc *q, int enq)
{
	struct sluice_qmon_key k = {};
	struct net_device *dev = BPF_CORE_READ(q, dev_queue, dev);
	if (!dev)
		return;
	k.ifindex = BPF_CORE_READ(dev, ifindex);
	k.netns_ino = BPF_CORE_READ(dev, nd_net.net, ns.inum);
	__u32 *slot = bpf_map_lookup_elem(&sl_qm_ports_v1, &k);
	if (!slot)
		return;
	__u32 s = *slot;
	__u64 bytes = BPF_CORE_READ(q, qstats.backlog);
	__u64 pkts = BPF_CORE_READ(q, q.qlen);
	__u64 now = bpf_ktime_get_ns();

	struct sluice_qmon_max *m = bpf_map_lookup_elem(&sl_qm_max_v1, &s);
	if (m) {
		if (bytes > m->max_bytes)
			m->max_bytes = bytes;
		if (pkts > m->max_pkts)
			m->max_pkts = pkts;
		m->events++;
	}
	__u64 e = epoch;
	__u32 idx = s + (__u32)(e & 1) * SLUICE_QMON_MAX_PORTS;
	struct sluice_qmon_interval *iv = bpf_map_lookup_elem(&sl_qm_ival_v1, &idx);
	if (iv) {
		if (iv->epoch != e) {
			iv->epoch = e;
			iv->max_bytes = bytes;
			iv->max_pkts = pkts;
			iv->events = 1;
		} else {
			if (bytes > iv->max_bytes)
				iv->max_bytes = bytes;
			if (pkts > iv->max_pkts)
				iv->max_pkts = pkts;
			iv->events++;
		}
	}
	struct sluice_qmon_state *st = bpf_map_lookup_elem(&sl_qm_state_v1, &s);
	if (st) {
		if (!st->first_ns)
			st->first_ns = now;
		else
			st->integral_bytes_ns += st->backlog_bytes * (now - st->last_ns);
		st->last_ns = now;
		st->backlog_bytes = bytes;
		st->backlog_pkts = pkts;
		if (enq)
			st->enqueues++;
		else
			st->dequeues++;
	}
}

SEC("tp_btf/qdisc_enqueue")
int BPF_PROG(qmon_enqueue, struct Qdisc *q, const struct netdev_queue *txq, struct sk_buff *skb)
{
	record(q, 1);
	return 0;
}

SEC("tp_btf/qdisc_dequeue")
int BPF_PROG(qmon_dequeue, struct Qdisc *q, const struct netdev_queue *txq, int packets, struct sk_buff *skb)
{
	record(q, 0);
	return 0;
}
