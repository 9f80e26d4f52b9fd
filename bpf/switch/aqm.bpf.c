// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* aqm: ECN and EIN marking on a switch egress port (tc egress).
 *
 * Queue length: the real backlog of the port's root qdisc (bytes, or
 * packets) as the packet arrives at the qdisc. Two objects are built from
 * this file and differ only in read_qlen()'s source of it:
 *   aqm         reads the qdisc through bpf_cast_to_kern_ctx (6.2+);
 *   aqm_compat  (-DSLUICE_AQM_QDISC_TP, for 6.1) keeps the backlog the
 *               root qdisc reports after every enqueue and dequeue, from
 *               tp_btf/qdisc_enqueue and qdisc_dequeue, in sl_aqm_bklog_v1.
 * The agent loads aqm where the kfunc exists, else aqm_compat.
 *
 * ECN (DCTCP §3.1): step marking, CE when the queue exceeds K on arrival;
 * only ECT(0)/ECT(1) packets are marked (RFC 3168: never CE a Not-ECT
 * packet, which is counted instead).
 *
 * EIN (Pulser §III-A, Algorithm 1), run on every packet of the port:
 *   gradient of the queue length between samples, averaged over the last N
 *   samples; EIN ← 1 when the average exceeds EIN_threshold; otherwise EIN
 *   stays 1 while it was 1 and the queue exceeds HighWaterMark.
 * The average over N samples is taken as Σ ΔQ / Σ ΔT over them, the
 * interval-weighted mean of the per-sample gradients (equal weights when
 * samples are evenly spaced, as dequeues at line rate are in the paper):
 * on Linux samples arrive unevenly and a plain mean would be dominated by
 * two packets a nanosecond apart.
 * Linux difference (docs/pulser.md "EIN on Linux"): Algorithm 1 runs at dequeue; a
 * tc program cannot touch a packet at dequeue, so samples are taken as
 * packets enter the qdisc. The EIN mark goes on TCP segments carrying data,
 * either there (ein_at_departure = 0: the mark then waits behind the queue
 * it reports) or, like the paper's marking at dequeue, on the packets
 * leaving the queue while EIN is set: aqm_departure runs at the first hook
 * after the qdisc, tc ingress at the far end of the port's link, and marks
 * with the state Algorithm 1 holds as the packet arrives there.
 *
 * The verdict is always the neutral one: marking never drops. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#ifdef SLUICE_AQM_QDISC_TP
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#endif
#include "sluice/pulser.h"
#include "lib/parse.h"
#include "lib/counters.h"
#include "lib/verdict.h"
#include "lib/ein.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set by the agent before load. */
const volatile __u8 ecn_enabled = 1;
const volatile __u8 ein_enabled = 1;
const volatile __u8 qlen_unit = SLUICE_AQM_UNIT_PACKETS;
const volatile __u64 ecn_k = 20;              /* K */
const volatile __u64 ein_high_water = 20;     /* HighWaterMark, K's unit */
const volatile __u32 ein_samples = 50;        /* N */
const volatile __u64 ein_threshold_per_s = 0; /* EIN_threshold, qlen units per second */
const volatile __u8 sample_source = SLUICE_AQM_SRC_QDISC;
/* 1: EIN is written by aqm_departure at the far end, not on arrival. */
const volatile __u8 ein_at_departure = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sluice_aqm_state);
} sl_aqm_state_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sluice_aqm_script);
} sl_aqm_scr_v1 SEC(".maps");

#ifdef SLUICE_AQM_QDISC_TP
/* The port whose root qdisc the tracepoints follow (set by the agent). */
const volatile __u32 port_ifindex = 0;
const volatile __u32 port_netns_ino = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sluice_aqm_backlog);
} sl_aqm_bklog_v1 SEC(".maps");

/* Called after the root qdisc enqueued or dequeued (the kernel fires both
 * tracepoints for the root qdisc of a device only): the backlog it now
 * holds is the one the next packet arriving at the port will see. */
static __always_inline void track_backlog(struct Qdisc *q)
{
	struct net_device *dev = BPF_CORE_READ(q, dev_queue, dev);
	if (!dev || BPF_CORE_READ(dev, ifindex) != port_ifindex ||
	    BPF_CORE_READ(dev, nd_net.net, ns.inum) != port_netns_ino || BPF_CORE_READ(dev, qdisc) != q)
		return;
	__u32 k = 0;
	struct sluice_aqm_backlog *b = bpf_map_lookup_elem(&sl_aqm_bklog_v1, &k);
	if (!b)
		return;
	b->bytes = BPF_CORE_READ(q, qstats.backlog);
	b->packets = BPF_CORE_READ(q, q.qlen);
	__sync_fetch_and_add(&b->events, 1);
}

SEC("tp_btf/qdisc_enqueue")
int BPF_PROG(aqm_qdisc_enqueue, struct Qdisc *q, const struct netdev_queue *txq, struct sk_buff *skb)
{
	track_backlog(q);
	return 0;
}

SEC("tp_btf/qdisc_dequeue")
int BPF_PROG(aqm_qdisc_dequeue, struct Qdisc *q, const struct netdev_queue *txq, int packets, struct sk_buff *skb)
{
	track_backlog(q);
	return 0;
}
#else
extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;
#endif

#define SL_NSEC_PER_SEC 1000000000ULL
/* Bound on |ΔQ| so ΔQ·1e9 fits in 64 bits (1 GB / 1 G packets of queue). */
#define SL_AQM_MAX_DQ 1000000000LL

static __always_inline int read_qlen(struct __sk_buff *skb, __u64 *qlen, __u64 *t)
{
	if (sample_source == SLUICE_AQM_SRC_SCRIPTED) {
		__u32 k = 0;
		struct sluice_aqm_script *s = bpf_map_lookup_elem(&sl_aqm_scr_v1, &k);
		if (!s)
			return -1;
		*qlen = s->qlen;
		*t = s->t_ns;
		return 0;
	}
#ifdef SLUICE_AQM_QDISC_TP
	/* Zero until the qdisc's first event: an empty queue, or a bfifo root
	 * bypassed while empty (no enqueue then). */
	__u32 k = 0;
	struct sluice_aqm_backlog *b = bpf_map_lookup_elem(&sl_aqm_bklog_v1, &k);
	if (!b)
		return -1;
	*qlen = qlen_unit == SLUICE_AQM_UNIT_PACKETS ? b->packets : b->bytes;
#else
	struct sk_buff *kskb = bpf_cast_to_kern_ctx(skb);
	struct net_device *dev = kskb->dev;
	if (!dev)
		return -1;
	struct Qdisc *q = dev->qdisc;
	if (!q)
		return -1;
	*qlen = qlen_unit == SLUICE_AQM_UNIT_PACKETS ? q->q.qlen : q->qstats.backlog;
#endif
	*t = bpf_ktime_get_ns();
	return 0;
}

/* Pulser Alg. 1 lines 2-16 for one sample; returns the EIN state. */
static __always_inline __u32 ein_sample(struct sluice_aqm_state *s, __u64 qlen, __u64 t)
{
	__u32 n = ein_samples;
	__s64 dq = 0;
	__u64 dt = 0;
	__u32 ein;

	if (n < 1)
		n = 1;
	if (n > SLUICE_AQM_RING - 1)
		n = SLUICE_AQM_RING - 1;

	bpf_spin_lock(&s->lock);
	/* lines 2-4: this sample becomes Qlen_prev/T_prev of the next one */
	__u32 head = s->head & (SLUICE_AQM_RING - 1);
	s->ring[head].t_ns = t;
	s->ring[head].qlen = qlen;
	s->head = (head + 1) & (SLUICE_AQM_RING - 1);
	if (s->count < SLUICE_AQM_RING)
		s->count++;
	s->samples++;
	s->qlen = qlen;

	/* line 7: average gradient over the last N samples (N gradients span
	 * N+1 queue lengths) */
	__u32 span = s->count - 1;
	if (span > n)
		span = n;
	if (span) {
		__u32 old = (head - span) & (SLUICE_AQM_RING - 1);
		__u64 t0 = s->ring[old].t_ns;
		__u64 q0 = s->ring[old].qlen;
		dq = (__s64)qlen - (__s64)q0;
		dt = t > t0 ? t - t0 : 0;
	}
	if (dq > SL_AQM_MAX_DQ)
		dq = SL_AQM_MAX_DQ;
	if (dq < -SL_AQM_MAX_DQ)
		dq = -SL_AQM_MAX_DQ;

	/* lines 5-16 */
	__u32 ein_prev = s->ein;
	ein = 0;
	if (dt && dq > 0 && (__u64)dq * SL_NSEC_PER_SEC > ein_threshold_per_s * dt) {
		ein = 1;
	} else if (ein_prev && qlen > ein_high_water) {
		ein = 1;
		s->ein_hold++;
	}
	if (ein && !ein_prev)
		s->ein_on++;
	s->ein = ein;
	if (dt) {
		__u64 mag = (__u64)(dq < 0 ? -dq : dq) * SL_NSEC_PER_SEC / dt;
		s->avg_gradient = dq < 0 ? -(__s64)mag : (__s64)mag;
	} else {
		s->avg_gradient = 0;
	}
	bpf_spin_unlock(&s->lock);
	return ein;
}

/* EIN goes on TCP segments carrying data (the receiver echoes it on the
 * ACKs of those). */
static __always_inline int sl_carries_ein(int parse_result, const struct sl_pkt *p)
{
	return parse_result == SL_PARSE_OK && p->proto == IPPROTO_TCP_NUM && p->payload_len > 0;
}

SEC("tc")
int aqm_egress(struct __sk_buff *skb)
{
	__u64 qlen = 0, t = 0;
	__u32 ein = 0;

	if (read_qlen(skb, &qlen, &t) == 0 && ein_enabled) {
		__u32 k = 0;
		struct sluice_aqm_state *s = bpf_map_lookup_elem(&sl_aqm_state_v1, &k);
		if (s)
			ein = ein_sample(s, qlen, t);
	}

	struct sl_cursor c;
	struct sl_pkt p = {};
	sl_cursor_init(&c, (void *)(long)skb->data, (void *)(long)skb->data_end);
	int r = sl_parse(&c, &p);
	if (r == SL_PARSE_NOT_IP) {
		sl_count(SLUICE_R_PASS_NOT_IP, skb->len);
		return SL_TC_NEXT;
	}
	if (r == SL_PARSE_MALFORMED) {
		sl_count(SLUICE_R_PASS_MALFORMED, skb->len);
		return SL_TC_NEXT;
	}
	/* OK, other L4 and fragments have a valid IP header: CE applies to any
	 * ECN-capable IP packet, EIN only to TCP data. */
	int over_k = ecn_enabled && qlen > ecn_k;
	int want_ein = ein && !ein_at_departure && sl_carries_ein(r, &p);
	int ein_set = 0, ce_set = 0;

	if (want_ein) {
		int rc = sl_ein_set(skb, &p);
		if (rc < 0) {
			sl_count(SLUICE_R_AQM_REWRITE_FAILED, skb->len);
			return SL_TC_NEXT;
		}
		ein_set = rc == 0;
	}
	if (over_k) {
		if (p.ecn == SL_ECN_NOT_ECT) {
			if (!ein_set) {
				sl_count(SLUICE_R_AQM_NOT_ECT, skb->len);
				return SL_TC_NEXT;
			}
		} else if (p.ecn == SL_ECN_CE) {
			if (!ein_set) {
				sl_count(SLUICE_R_AQM_ALREADY_CE, skb->len);
				return SL_TC_NEXT;
			}
		} else {
			/* Sets CE on ECT(0)/ECT(1) only, fixing the IPv4 checksum. */
			ce_set = bpf_skb_ecn_set_ce(skb) == 1;
			if (!ce_set && !ein_set) {
				sl_count(SLUICE_R_AQM_REWRITE_FAILED, skb->len);
				return SL_TC_NEXT;
			}
		}
	}
	if (ce_set && ein_set)
		sl_count(SLUICE_R_AQM_CE_EIN, skb->len);
	else if (ce_set)
		sl_count(SLUICE_R_AQM_CE, skb->len);
	else if (ein_set)
		sl_count(SLUICE_R_AQM_EIN, skb->len);
	else
		sl_count(SLUICE_R_AQM_UNMARKED, skb->len);
	return SL_TC_NEXT;
}

/* tc ingress at the far end of the port's link: the packet has just left
 * the port's qdisc. While Algorithm 1's state (sampled by aqm_egress) says
 * incast, EIN goes on it here, as the paper marks at dequeue (§III-A). */
SEC("tc")
int aqm_departure(struct __sk_buff *skb)
{
	__u32 k = 0;
	struct sluice_aqm_state *s = bpf_map_lookup_elem(&sl_aqm_state_v1, &k);
	struct sl_cursor c;
	struct sl_pkt p = {};

	if (!s || !ein_enabled || !s->ein) {
		sl_count(SLUICE_R_AQM_DEPART_NONE, skb->len);
		return SL_TC_NEXT;
	}
	sl_cursor_init(&c, (void *)(long)skb->data, (void *)(long)skb->data_end);
	if (!sl_carries_ein(sl_parse(&c, &p), &p)) {
		sl_count(SLUICE_R_AQM_DEPART_NONE, skb->len);
		return SL_TC_NEXT;
	}
	int rc = sl_ein_set(skb, &p);
	if (rc < 0) {
		sl_count(SLUICE_R_AQM_REWRITE_FAILED, skb->len);
		return SL_TC_NEXT;
	}
	/* rc 1: a packet that cannot carry the configured bit (IPv6, IPv4-only bit) */
	sl_count(rc ? SLUICE_R_AQM_DEPART_NONE : SLUICE_R_AQM_DEPART_EIN, skb->len);
	return SL_TC_NEXT;
}
