// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Design B of the switch substrate's data path (docs/switch.md): held
 * queues in the agent.
 *
 * sw_hold_egress (tc egress of the switch port): a frame re-injected by the
 *   agent (skb->mark == reinject_mark) goes on to the port's qdisc; any other
 *   frame up to SLUICE_SW_HOLD_FRAME_MAX bytes is copied to the agent with
 *   the queue the logic chose (sl_swh_flowq_v1, else 0) and dropped here.
 *   Larger frames and a full ring pass (fail open).
 * sw_hold_enqueue / sw_hold_dequeue (tp_btf qdisc_enqueue / qdisc_dequeue):
 *   for the port's root qdisc only (ifindex, netns and dev->qdisc), record
 *   the qdisc's own qlen, sent and drop counters and the agent's agent_sent
 *   at that moment (sl_sw_hold_state in sluice/switch.h: the backlog is
 *   read from the qdisc, not counted from events, because not every
 *   dequeue fires the tracepoint); when the agent asked (want_wake) and a
 *   dequeue left at most low_water packets, a wake-up record goes to
 *   sl_swh_wake_v1.
 * sw_hold_ingress (tc ingress of the port, before the swport gate, only
 *   with --bpf-pause): applies a valid PAUSE/RESUME frame's records to
 *   hold_paused[] at once (serial-number order per queue, sluice/wire.h),
 *   and passes the frame on to the gate, which hands it to the agent as
 *   before. The agent checks hold_paused[] before releasing each frame, so
 *   after a PAUSE only what is already in the kernel leaves, however late
 *   the agent is woken.
 * sw_hold_sync (syscall program, run by the agent with BPF_PROG_TEST_RUN):
 *   the same record, read from the qdisc the last event saw, without an
 *   event: the agent's watchdog when no event came for several packet
 *   times. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "sluice/switch.h"
#include "lib/ctrl.h"
#include "lib/flow.h"
#include "lib/verdict.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile __u32 port_ifindex = 0;
const volatile __u32 port_netns_ino = 0;
const volatile __u32 reinject_mark = 0x5e1d;
const volatile __u32 low_water = 1;
const volatile __u32 num_queues = 1;

struct sl_sw_hold_state hold = {};
/* The port's root qdisc as the last event saw it, for sw_hold_sync (read
 * with bpf_probe_read_kernel only: a qdisc replaced since then gives a
 * wrong number, never a fault; the agent owns the port's qdisc for the
 * run). */
__u64 hold_qdisc = 0;
__u64 last_event = 0;
/* sw_hold_ingress: per queue paused (1) or not, the seq last applied, and
 * a generation counter the agent polls (bumped after every change). */
__u8 hold_paused[SLUICE_SW_MAX_QUEUES] = {};
__u32 hold_pause_seq[SLUICE_SW_MAX_QUEUES] = {};
__u8 hold_pause_seen[SLUICE_SW_MAX_QUEUES] = {};
__u64 hold_pause_gen = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SLUICE_SW_FLOW_TABLE_SIZE);
	__type(key, __u32); /* sl_sw_flow_hash */
	__type(value, __u32);
} sl_swh_flowq_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 * 1024 * 1024);
} sl_swh_ring_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} sl_swh_wake_v1 SEC(".maps");

SEC("tc")
int sw_hold_egress(struct __sk_buff *skb)
{
	if (skb->mark == reinject_mark)
		return SL_TC_NEXT;
	__u32 len = skb->len;
	if (len > SLUICE_SW_HOLD_FRAME_MAX || len < 14) {
		__sync_fetch_and_add(&hold.passed_big, 1);
		return SL_TC_NEXT;
	}
	__u32 h = sl_sw_skb_flow_hash(skb);
	__u32 *q = bpf_map_lookup_elem(&sl_swh_flowq_v1, &h);
	struct sl_sw_hold_event *ev = bpf_ringbuf_reserve(&sl_swh_ring_v1, sizeof(*ev), 0);
	if (!ev) {
		__sync_fetch_and_add(&hold.ring_full, 1);
		return SL_TC_NEXT;
	}
	if (bpf_skb_load_bytes(skb, 0, ev->frame, len)) {
		bpf_ringbuf_discard(ev, 0);
		__sync_fetch_and_add(&hold.passed_big, 1);
		return SL_TC_NEXT;
	}
	ev->queue = q && *q < num_queues ? *q : 0;
	ev->len = len;
	ev->wire_len = skb->len;
	ev->rx_ns = bpf_ktime_get_ns();
	bpf_ringbuf_submit(ev, 0);
	__sync_fetch_and_add(&hold.diverted, 1);
	return SL_TC_SHOT;
}

static __always_inline void record(struct Qdisc *q)
{
	hold.sent_at_ev = hold.agent_sent;
	hold.qlen = BPF_CORE_READ(q, q.qlen);
	hold.q_sent = BPF_CORE_READ(q, bstats.packets.v.a.a.counter);
	hold.q_drops = BPF_CORE_READ(q, qstats.drops);
	/* A fetching atomic is fully ordered (BPF memory model; lock xadd on
	 * x86): the stores above are visible before the caller's load of
	 * want_wake, against the agent's store of want_wake and load of this
	 * record (otherwise both can read the old values: a lost wake-up). */
	last_event = __sync_fetch_and_add(&hold.events, 1);
}

/* The port's root qdisc: every qdisc on the host fires these tracepoints. */
static __always_inline int is_port_root(struct Qdisc *q)
{
	struct net_device *dev = BPF_CORE_READ(q, dev_queue, dev);
	return dev && BPF_CORE_READ(dev, ifindex) == (int)port_ifindex &&
	       BPF_CORE_READ(dev, nd_net.net, ns.inum) == port_netns_ino && BPF_CORE_READ(dev, qdisc) == q;
}

SEC("tp_btf/qdisc_enqueue")
int BPF_PROG(sw_hold_enqueue, struct Qdisc *q, const struct netdev_queue *txq, struct sk_buff *skb)
{
	if (!is_port_root(q))
		return 0;
	hold_qdisc = (__u64)q;
	record(q);
	return 0;
}

SEC("tp_btf/qdisc_dequeue")
int BPF_PROG(sw_hold_dequeue, struct Qdisc *q, const struct netdev_queue *txq, int packets, struct sk_buff *skb)
{
	if (!is_port_root(q))
		return 0;
	hold_qdisc = (__u64)q;
	record(q);
	if (skb && packets > 0)
		__sync_fetch_and_add(&hold.dequeued, (__u64)packets);
	if (hold.want_wake && hold.qlen <= low_water) {
		hold.want_wake = 0;
		__u32 one = 1;
		if (!bpf_ringbuf_output(&sl_swh_wake_v1, &one, sizeof(one), BPF_RB_FORCE_WAKEUP))
			__sync_fetch_and_add(&hold.wakeups, 1);
	}
	return 0;
}

SEC("syscall")
int sw_hold_sync(void *ctx)
{
	struct Qdisc *q = (struct Qdisc *)hold_qdisc;
	if (!q)
		return 1;
	record(q);
	__sync_fetch_and_add(&hold.syncs, 1);
	return 0;
}

SEC("tc")
int sw_hold_ingress(struct __sk_buff *skb)
{
	long off = sl_ctrl_payload_off(skb);
	if (off < 0)
		return SL_TC_NEXT;
	__u32 type = 0;
	/* Invalid frames and other types are the gate's to count and drop. */
	if (sl_ctrl_validate_skb(skb, (__u32)off, &type) != SL_CTRL_R_OK ||
	    (type != SL_CTRL_PAUSE && type != SL_CTRL_RESUME) || !sl_ctrl_port_allows(SL_PORT_SWITCH_FACING, type))
		return SL_TC_NEXT;
	struct sl_ctrl_hdr h;
	if (bpf_skb_load_bytes(skb, (__u32)off, &h, sizeof(h)))
		return SL_TC_NEXT;
	__u32 nrec = 0;
	if (sl_ctrl_check_hdr(&h, skb->len - (__u32)off, &nrec) != SL_CTRL_R_OK)
		return SL_TC_NEXT;
	for (__u32 i = 0; i < SLUICE_CTRL_MAX_RECORDS; i++) {
		struct sl_ctrl_queue r;
		if (i >= nrec)
			break;
		if (bpf_skb_load_bytes(skb, (__u32)off + SLUICE_CTRL_HDR_LEN + i * sizeof(r), &r, sizeof(r)))
			break;
		__u32 q = bpf_ntohs(r.queue);
		__u32 seq = bpf_ntohl(r.seq);
		if (q >= SLUICE_SW_MAX_QUEUES)
			continue;
		/* RFC 1982: apply only what is newer than the last applied. */
		if (hold_pause_seen[q] && (__s32)(seq - hold_pause_seq[q]) <= 0)
			continue;
		hold_pause_seen[q] = 1;
		hold_pause_seq[q] = seq;
		hold_paused[q] = type == SL_CTRL_PAUSE;
		__sync_fetch_and_add(&hold_pause_gen, 1);
	}
	return SL_TC_NEXT;
}
