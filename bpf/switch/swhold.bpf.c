// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Design B of the switch substrate's data path (docs/switch.md): held
 * queues in the agent. One object serves every held port of the switch;
 * each port is an entry of sl_swh_ports_v1 (ifindex -> port id) and its
 * state is hold[port id] in .bss.
 *
 * sw_hold_egress (tc egress of each held port): a frame re-injected by the
 *   agent (skb->mark == reinject_mark) and the agent's own control frames
 *   go on to the port's qdisc; any other frame up to
 *   SLUICE_SW_HOLD_FRAME_MAX bytes is copied to the agent with its parsed
 *   5-tuple, flow hash, TOS, ingress interface and the queue
 *   sl_swh_flowq_v1 names (else 0), and dropped here. Larger frames, a full
 *   ring and a dead agent (lib/liveness.h: heartbeat older than
 *   fail_open_ns, its heartbeat thread gone) pass (fail open): the port's
 *   qdisc is a plain shaper at the link rate.
 *   A frame whose skb->mark is SLUICE_SW_UQ_MARK | q (sw_hold_uq_ingress
 *   popped its upstreamQ tag) carries q in the event's upstream_q, and the
 *   mark is cleared on a frame that passes.
 * sw_hold_uq_ingress (tc ingress of each held port, only for a logic that
 *   reads upstreamQ: sluice/bfc.h's tag, BFC §3.3.2): an 802.1Q tag with
 *   VID SLUICE_BFC_VID_BASE + q is popped and q kept in skb->mark for the
 *   egress divert; any other tag, and a frame too short to hold one, is
 *   left alone and counted. The frame is never dropped here.
 * sw_hold_enqueue / sw_hold_dequeue (tp_btf qdisc_enqueue / qdisc_dequeue):
 *   for a held port's root qdisc only (ifindex, netns and dev->qdisc),
 *   record the qdisc's own qlen, sent and drop counters and the agent's
 *   agent_sent at that moment (sl_sw_hold_state in sluice/switch.h: the
 *   backlog is read from the qdisc, not counted from events, because not
 *   every dequeue fires the tracepoint); when the agent asked (want_wake)
 *   and a dequeue left at most the port's low_water packets, a wake-up
 *   record (the port id) goes to sl_swh_wake_v1.
 * sw_hold_ingress (tc ingress of a held port, before the swport gate, only
 *   with sluice-swbench --bpf-pause): applies a valid PAUSE/RESUME frame's
 *   records to hold_paused[port][] at once (serial-number order per
 *   queue, sluice/wire.h), and passes the frame on to the gate, which
 *   hands it to the agent as before. The agent checks hold_paused[] before
 *   releasing each frame, so after a PAUSE only what is already in the
 *   kernel leaves, however late the agent is woken.
 * sw_hold_sync (syscall program, run by the agent with BPF_PROG_TEST_RUN
 *   and a struct sl_sw_hold_sync_ctx): the same record for one port, read
 *   from the qdisc the last event saw, without an event: the agent's
 *   watchdog when no event came for several packet times. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "sluice/switch.h"
#include "sluice/bfc.h"
#include "lib/ctrl.h"
#include "lib/flow.h"
#include "lib/verdict.h"
#include "lib/liveness.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile __u32 reinject_mark = 0x5e1d;
/* The verdict for a frame the agent took: SL_TC_STOLEN under clsact (the
 * sender sees NET_XMIT_SUCCESS: a host's own TCP segment taken by its NIC's
 * agent counts as sent; a drop would make TCP send it again and again),
 * SL_TC_SHOT under tcx (which has no such verdict: there a host's TCP sees
 * every held segment as a failed send). */
const volatile __s32 divert_verdict = SL_TC_SHOT;
/* 0 = never fail open (sluice-swbench); sluiced sets [switch] fail_open_ms
 * and writes its liveness record through the mmap'ed .bss. */
const volatile __u64 fail_open_ns = 0;
struct sluice_liveness sw_live = {};

struct sl_sw_hold_state hold[SLUICE_SW_MAX_PORTS] = {};
/* sw_hold_ingress: per port and queue paused (1) or not, the seq last
 * applied, and per port a generation counter the agent polls (bumped
 * after every change). */
__u8 hold_paused[SLUICE_SW_MAX_PORTS][SLUICE_SW_MAX_QUEUES] = {};
__u32 hold_pause_seq[SLUICE_SW_MAX_PORTS][SLUICE_SW_MAX_QUEUES] = {};
__u8 hold_pause_seen[SLUICE_SW_MAX_PORTS][SLUICE_SW_MAX_QUEUES] = {};
__u64 hold_pause_gen[SLUICE_SW_MAX_PORTS] = {};
/* Set when a frame went to the ring without a wake-up; the agent clears it
 * before each consume (submit_frame). */
__u32 hold_quiet_pending = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SLUICE_SW_MAX_PORTS);
	__type(key, __u32); /* ifindex */
	__type(value, struct sl_sw_hold_port);
} sl_swh_ports_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SLUICE_SW_FLOW_TABLE_SIZE);
	__type(key, struct sl_sw_flow_key); /* (egress port id, sl_sw_flow_hash) */
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

/* The held port an interface is, with its state; NULL if it is none. */
static __always_inline struct sl_sw_hold_port *hold_port(__u32 ifindex, struct sl_sw_hold_state **st)
{
	struct sl_sw_hold_port *p = bpf_map_lookup_elem(&sl_swh_ports_v1, &ifindex);
	if (!p || p->port_id >= SLUICE_SW_MAX_PORTS)
		return 0;
	*st = &hold[p->port_id];
	return p;
}

/* The upstreamQ sw_hold_uq_ingress left in the mark (SLUICE_SW_UQ_NONE
 * if none); a frame that passes unheld has the mark cleared. */
static __always_inline __u16 take_uq(struct __sk_buff *skb, int passes)
{
	__u32 m = skb->mark;
	if ((m & SLUICE_SW_UQ_MARK_MASK) != SLUICE_SW_UQ_MARK)
		return SLUICE_SW_UQ_NONE;
	if (passes)
		skb->mark = 0;
	return (__u16)(m & 0xff);
}

/* Hands a frame to the agent, waking it only when it needs the frame now.
 * While the agent waits for this port's qdisc to drain (arrival_quiet: it
 * asked the dequeue hook for a wake-up, the qdisc is at its target) the
 * frame can wait in the ring for that wake-up: it could not be sent
 * earlier anyway. That spares a sleep and wake-up of the agent per frame
 * (docs/switch.md "The held path's cost"). Otherwise, and once the ring
 * holds SLUICE_SW_HOLD_QUIET_MAX_BYTES, the kernel's usual rule: wake the
 * agent if it had consumed everything, or at once if a quiet frame may be
 * waiting unseen (hold_quiet_pending, which the agent clears before each
 * consume). */
#define SL_READ_ONCE(x) (*(volatile typeof(x) *)&(x))

static __always_inline void submit_frame(struct sl_sw_hold_event *ev, struct sl_sw_hold_state *st, __u32 port_id)
{
	if (SL_READ_ONCE(st->arrival_quiet) &&
	    bpf_ringbuf_query(&sl_swh_ring_v1, BPF_RB_AVAIL_DATA) < SLUICE_SW_HOLD_QUIET_MAX_BYTES) {
		SL_READ_ONCE(hold_quiet_pending) = 1;
		bpf_ringbuf_submit(ev, BPF_RB_NO_WAKEUP);
		/* Fully ordered (a fetching atomic): the submit is visible
		 * before the load below, against the agent's store of
		 * arrival_quiet = 0 and its consume. One of the two sees
		 * the other: the frame is consumed, or woken for here. */
		__sync_fetch_and_add(&st->quiet, 1);
		if (!SL_READ_ONCE(st->arrival_quiet)) {
			__u32 id = port_id;
			if (!bpf_ringbuf_output(&sl_swh_wake_v1, &id, sizeof(id), BPF_RB_FORCE_WAKEUP))
				__sync_fetch_and_add(&st->late_wakes, 1);
		}
		return;
	}
	bpf_ringbuf_submit(ev, SL_READ_ONCE(hold_quiet_pending) ? BPF_RB_FORCE_WAKEUP : 0);
}

SEC("tc")
int sw_hold_egress(struct __sk_buff *skb)
{
	if (skb->mark == reinject_mark || skb->protocol == bpf_htons(SLUICE_CTRL_ETHERTYPE))
		return SL_TC_NEXT;
	struct sl_sw_hold_state *st;
	struct sl_sw_hold_port *port = hold_port(skb->ifindex, &st);
	if (!port)
		return SL_TC_NEXT;
	if (!sl_agent_alive(&sw_live, bpf_ktime_get_ns(), fail_open_ns)) {
		take_uq(skb, 1);
		__sync_fetch_and_add(&st->fail_open, 1);
		return SL_TC_NEXT;
	}
	__u32 len = skb->len;
	if (len > SLUICE_SW_HOLD_FRAME_MAX || len < 14) {
		take_uq(skb, 1);
		__sync_fetch_and_add(&st->passed_big, 1);
		return SL_TC_NEXT;
	}
	struct sl_sw_hold_event *ev = bpf_ringbuf_reserve(&sl_swh_ring_v1, sizeof(*ev), 0);
	if (!ev) {
		take_uq(skb, 1);
		__sync_fetch_and_add(&st->ring_full, 1);
		return SL_TC_NEXT;
	}
	if (bpf_skb_load_bytes(skb, 0, ev->frame, len)) {
		bpf_ringbuf_discard(ev, 0);
		take_uq(skb, 1);
		__sync_fetch_and_add(&st->passed_big, 1);
		return SL_TC_NEXT;
	}
	ev->upstream_q = take_uq(skb, 0);
	struct sl_pkt p = {};
	__builtin_memset(&ev->tuple, 0, sizeof(ev->tuple));
	ev->is_ip = sl_skb_parse_ip(skb, &p, NULL);
	ev->tos = ev->is_ip ? p.tos : 0;
	ev->family = ev->is_ip ? p.family : 0;
	ev->l3_off = ev->is_ip ? p.l3_off : 0;
	ev->l4_off = ev->is_ip ? p.l4_off : 0;
	ev->flow_hash = 0;
	if (ev->is_ip) {
		sl_flow_tuple_fill(&ev->tuple, &p);
		ev->flow_hash = sl_sw_flow_hash(&ev->tuple);
	}
	struct sl_sw_flow_key key = { .port_id = port->port_id, .flow_hash = ev->flow_hash };
	__u32 *q = bpf_map_lookup_elem(&sl_swh_flowq_v1, &key);
	ev->queue = q && *q < port->num_queues ? *q : 0;
	ev->len = len;
	ev->port_id = port->port_id;
	ev->in_ifindex = skb->ingress_ifindex;
	ev->pad = 0;
	ev->pad2 = 0;
	ev->rx_ns = bpf_ktime_get_ns();
	submit_frame(ev, st, port->port_id);
	__sync_fetch_and_add(&st->diverted, 1);
	return divert_verdict;
}

/* Stores the record; the caller has read the qdisc's counters. */
static __always_inline void record_vals(struct sl_sw_hold_state *st, __u32 qlen, __u64 sent, __u64 drops)
{
	st->sent_at_ev = st->agent_sent;
	st->qlen = qlen;
	st->q_sent = sent;
	st->q_drops = drops;
	/* A fetching atomic is fully ordered (BPF memory model; lock xadd on
	 * x86): the stores above are visible before the caller's load of
	 * want_wake, against the agent's store of want_wake and load of this
	 * record (otherwise both can read the old values: a lost wake-up). */
	__sync_fetch_and_add(&st->events, 1);
}

/* sw_hold_sync: q is a number the last event left, read through
 * bpf_probe_read_kernel. */
static __always_inline void record(struct sl_sw_hold_state *st, struct Qdisc *q)
{
	record_vals(st, BPF_CORE_READ(q, q.qlen), BPF_CORE_READ(q, bstats.packets.v.a.a.counter),
		    BPF_CORE_READ(q, qstats.drops));
}

/* A held port's root qdisc: every qdisc on the host fires these
 * tracepoints, so this runs for all of them. The tracepoints' arguments
 * are BTF pointers: plain loads (CO-RE relocated), no helper call per
 * field (the helper calls were ~12% of the agent's time at 1 Gbit/s,
 * docs/switch.md "The held path's cost"). */
static __always_inline struct sl_sw_hold_port *port_root(struct Qdisc *q, struct sl_sw_hold_state **st)
{
	struct netdev_queue *txq = q->dev_queue;
	if (!txq)
		return 0;
	struct net_device *dev = txq->dev;
	if (!dev)
		return 0;
	struct sl_sw_hold_port *p = hold_port((__u32)dev->ifindex, st);
	if (!p || dev->qdisc != q)
		return 0;
	struct net *net = dev->nd_net.net;
	if (!net || net->ns.inum != p->netns_ino)
		return 0;
	return p;
}

static __always_inline void record_btf(struct sl_sw_hold_state *st, struct Qdisc *q)
{
	record_vals(st, q->q.qlen, q->bstats.packets.v.a.a.counter, q->qstats.drops);
}

SEC("tp_btf/qdisc_enqueue")
int BPF_PROG(sw_hold_enqueue, struct Qdisc *q, const struct netdev_queue *txq, struct sk_buff *skb)
{
	struct sl_sw_hold_state *st;
	if (!port_root(q, &st))
		return 0;
	st->qdisc = (__u64)q;
	record_btf(st, q);
	return 0;
}

SEC("tp_btf/qdisc_dequeue")
int BPF_PROG(sw_hold_dequeue, struct Qdisc *q, const struct netdev_queue *txq, int packets, struct sk_buff *skb)
{
	struct sl_sw_hold_state *st;
	struct sl_sw_hold_port *p = port_root(q, &st);
	if (!p)
		return 0;
	st->qdisc = (__u64)q;
	record_btf(st, q);
	if (skb && packets > 0)
		__sync_fetch_and_add(&st->dequeued, (__u64)packets);
	if (st->want_wake && st->qlen <= p->low_water) {
		st->want_wake = 0;
		__u32 id = p->port_id;
		if (!bpf_ringbuf_output(&sl_swh_wake_v1, &id, sizeof(id), BPF_RB_FORCE_WAKEUP))
			__sync_fetch_and_add(&st->wakeups, 1);
	}
	return 0;
}

/* The port's root qdisc as the last event saw it (read with
 * bpf_probe_read_kernel only: a qdisc replaced since then gives a wrong
 * number, never a fault; the agent owns the port's qdisc for the run). */
SEC("syscall")
int sw_hold_sync(struct sl_sw_hold_sync_ctx *ctx)
{
	__u32 id = ctx->port_id;
	if (id >= SLUICE_SW_MAX_PORTS)
		return 2;
	struct sl_sw_hold_state *st = &hold[id];
	struct Qdisc *q = (struct Qdisc *)st->qdisc;
	if (!q)
		return 1;
	record(st, q);
	__sync_fetch_and_add(&st->syncs, 1);
	return 0;
}

SEC("tc")
int sw_hold_ingress(struct __sk_buff *skb)
{
	long off = sl_ctrl_payload_off(skb);
	if (off < 0)
		return SL_TC_NEXT;
	struct sl_sw_hold_state *st;
	struct sl_sw_hold_port *port = hold_port(skb->ifindex, &st);
	if (!port)
		return SL_TC_NEXT;
	__u32 pid = port->port_id;
	if (pid >= SLUICE_SW_MAX_PORTS)
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
		if (hold_pause_seen[pid][q] && (__s32)(seq - hold_pause_seq[pid][q]) <= 0)
			continue;
		hold_pause_seen[pid][q] = 1;
		hold_pause_seq[pid][q] = seq;
		hold_paused[pid][q] = type == SL_CTRL_PAUSE;
		__sync_fetch_and_add(&hold_pause_gen[pid], 1);
	}
	return SL_TC_NEXT;
}

SEC("tc")
int sw_hold_uq_ingress(struct __sk_buff *skb)
{
	struct sl_sw_hold_state *st;
	if (!hold_port(skb->ifindex, &st))
		return SL_TC_NEXT;
	__u32 tci;
	if (skb->vlan_present) {
		/* The receive path moved the outer tag into the skb's metadata
		 * before tc (skb_vlan_untag), the usual case. */
		if (skb->vlan_proto != bpf_htons(SLUICE_BFC_TPID)) {
			__sync_fetch_and_add(&st->uq_foreign, 1);
			return SL_TC_NEXT;
		}
		tci = skb->vlan_tci;
	} else if (skb->protocol == bpf_htons(SLUICE_BFC_TPID)) {
		__be16 t;
		if (bpf_skb_load_bytes(skb, 14, &t, sizeof(t))) {
			__sync_fetch_and_add(&st->uq_bad, 1);
			return SL_TC_NEXT;
		}
		tci = bpf_ntohs(t);
	} else {
		return SL_TC_NEXT;
	}
	int q = sl_bfc_tci_queue((__u16)tci);
	if (q < 0) {
		__sync_fetch_and_add(&st->uq_foreign, 1);
		return SL_TC_NEXT;
	}
	if (bpf_skb_vlan_pop(skb)) {
		__sync_fetch_and_add(&st->uq_failed, 1);
		return SL_TC_NEXT;
	}
	skb->mark = SLUICE_SW_UQ_MARK | (__u32)q;
	__sync_fetch_and_add(&st->uq_popped, 1);
	return SL_TC_NEXT;
}
