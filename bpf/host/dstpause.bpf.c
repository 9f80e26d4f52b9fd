// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Floodgate §4.3 on a host: per-destination PAUSE (sluice/dstpause.h).
 *
 * dp_ingress (tc ingress of the host's interfaces): a hop-by-hop control
 *   frame (EtherType 0x88B5) is ours and never reaches the stack. It goes to
 *   the agent only when it arrived on the configured uplink (role
 *   SL_PORT_HOST_UPLINK: the link to the first-hop ToR), is a dstPause or
 *   dstResume, and passes every check of the shared parser; anything else
 *   is dropped and counted by reason. Other traffic: TC_NEXT.
 * dp_egress (tc egress of the uplink, clsact: it returns TC_ACT_STOLEN): a
 *   frame to a destination the agent holds is copied to sl_fg_hring_v1 and
 *   stolen; the agent's own re-sent frames (skb->mark = reinject_mark),
 *   frames that are not IP, IPv6 neighbour discovery and every other frame
 *   pass. When a held frame cannot be copied (too big, ring full) it
 *   passes: the host fails open. So does every frame once the agent is not
 *   alive (lib/liveness.h: its heartbeat older than fail_open_ns and its
 *   heartbeat thread gone or stopped): a killed or stopped agent leaves
 *   its held destinations in sl_fg_held_v1 and the filters attached, and
 *   nobody would read what dp_egress stole. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "sluice/dstpause.h"
#include "sluice/switch.h"
#include "lib/count.h"
#include "lib/ctrl.h"
#include "lib/flow.h"
#include "lib/liveness.h"
#include "lib/verdict.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32); /* ifindex */
	__type(value, struct sl_dp_port);
} sl_fg_ports_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SLUICE_DP_MAX_HELD);
	__type(key, struct sl_dp_dst);
	__type(value, __u32);
} sl_fg_held_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 * 1024 * 1024);
} sl_fg_hring_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SL_DP_CNT_SLOTS);
	__type(key, __u32);
	__type(value, struct sl_sw_counter);
} sl_fg_cnt_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} sl_fg_ctrl_v1 SEC(".maps");

/* Set before load (0 = never fail open); the agent writes its liveness
 * record through the mmap'ed .bss. */
const volatile __u64 fail_open_ns = 0;
struct sluice_liveness dp_live = {};

static __always_inline void dp_count(__u32 slot, struct __sk_buff *skb)
{
	sl_count_skb_in(&sl_fg_cnt_v1, slot, skb);
}

SEC("tc")
int dp_ingress(struct __sk_buff *skb)
{
	long off = sl_ctrl_payload_off(skb);
	if (off < 0)
		return SL_TC_NEXT;
	__u32 ifindex = skb->ifindex;
	struct sl_dp_port *port = bpf_map_lookup_elem(&sl_fg_ports_v1, &ifindex);
	if (!port || port->role != SL_PORT_HOST_UPLINK) {
		/* Only the configured ToR port may pause us (§4.3: dstPause is
		 * sent by the first-hop ToR to the hosts connected to it). */
		dp_count(port ? SL_CTRL_R_WRONG_PORT : SL_CTRL_R_UNKNOWN_PORT, skb);
		return SL_TC_SHOT;
	}
	dp_count(sl_ctrl_ingress(skb, &sl_fg_ctrl_v1, (__u32)off, port->role, 0, SL_DP_CNT_CTRL_RING_FULL, 0), skb);
	return SL_TC_SHOT;
}

SEC("tc")
int dp_egress(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	struct sl_dp_port *port = bpf_map_lookup_elem(&sl_fg_ports_v1, &ifindex);
	if (!port || port->role != SL_PORT_HOST_UPLINK || !port->reinject_mark)
		return SL_TC_NEXT;
	if (skb->mark == port->reinject_mark) {
		dp_count(SL_DP_CNT_REINJECTED, skb);
		return SL_TC_NEXT;
	}
	struct sl_pkt p = {};
	if (!sl_skb_parse_ip(skb, &p, NULL) || sl_skb_is_nd(skb, &p)) {
		/* ARP and IPv6 neighbour discovery are never held: a unicast
		 * neighbour solicitation to a paused destination (NUD) held
		 * until the timeout could fail the neighbour entry. */
		dp_count(SL_DP_CNT_NET_CONTROL, skb);
		return SL_TC_NEXT;
	}
	struct sl_dp_dst key = {};
	sl_addr16(key.addr, &p, p.daddr);
	__u32 *held = bpf_map_lookup_elem(&sl_fg_held_v1, &key);
	if (!held || !*held) {
		dp_count(SL_DP_CNT_PASSED, skb);
		return SL_TC_NEXT;
	}
	if (!sl_agent_alive(&dp_live, bpf_ktime_get_ns(), fail_open_ns)) {
		dp_count(SL_DP_CNT_FAIL_OPEN, skb);
		return SL_TC_NEXT;
	}
	__u32 len = skb->len;
	if (len > SLUICE_DP_FRAME_MAX || len < 14 || skb->gso_segs > 1) {
		dp_count(SL_DP_CNT_TOO_BIG, skb);
		return SL_TC_NEXT;
	}
	struct sl_dp_frame *ev = bpf_ringbuf_reserve(&sl_fg_hring_v1, sizeof(*ev), 0);
	if (!ev) {
		dp_count(SL_DP_CNT_HELD_RING_FULL, skb);
		return SL_TC_NEXT;
	}
	if (bpf_skb_load_bytes(skb, 0, ev->frame, len)) {
		bpf_ringbuf_discard(ev, 0);
		dp_count(SL_DP_CNT_TOO_BIG, skb);
		return SL_TC_NEXT;
	}
	ev->dst = key;
	ev->ifindex = ifindex;
	ev->len = len;
	ev->tx_ns = bpf_ktime_get_ns();
	bpf_ringbuf_submit(ev, 0);
	dp_count(SL_DP_CNT_HELD, skb);
	return SL_TC_STOLEN;
}
