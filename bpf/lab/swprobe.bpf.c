// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Receiver-side probe of the switch data-path benchmark (bench/switch/):
 * IPv4 UDP to dport in [dport_base, dport_base + n_flows) is counted per
 * flow, timestamped, its latency histogrammed, and dropped here (the
 * benchmark measures the switch, not the receiver's stack). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "sluice/swprobe.h"
#include "lib/parse.h"
#include "lib/verdict.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile __u16 dport_base = 5000;
const volatile __u32 n_flows = 32;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLUICE_SWPROBE_MAX_FLOWS);
	__type(key, __u32);
	__type(value, struct sl_swprobe_flow);
} sl_swp_flows_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLUICE_SWPROBE_LAT_BUCKETS);
	__type(key, __u32);
	__type(value, __u64);
} sl_swp_lat_v1 SEC(".maps");

SEC("tc")
int swprobe_ingress(struct __sk_buff *skb)
{
	struct sl_cursor c;
	struct sl_pkt p = {};
	sl_cursor_init(&c, (void *)(long)skb->data, (void *)(long)skb->data_end);
	if (sl_parse(&c, &p) != SL_PARSE_OK || p.family != 4 || p.proto != IPPROTO_UDP_NUM)
		return SL_TC_NEXT;
	__u32 idx = (__u32)bpf_ntohs(p.dport) - dport_base;
	if (idx >= n_flows || idx >= SLUICE_SWPROBE_MAX_FLOWS)
		return SL_TC_NEXT;
	__u64 now = bpf_ktime_get_ns();
	struct sl_swprobe_flow *f = bpf_map_lookup_elem(&sl_swp_flows_v1, &idx);
	if (f) {
		__sync_fetch_and_add(&f->pkts, 1);
		__sync_fetch_and_add(&f->bytes, skb->len);
		f->last_ns = now;
	}
	__u64 sent = 0;
	if (p.payload_len >= 8 && !bpf_skb_load_bytes(skb, p.l4_off + 8, &sent, sizeof(sent)) && sent && sent <= now) {
		__u64 us = (now - sent) / 1000;
		__u32 b = us >= SLUICE_SWPROBE_LAT_BUCKETS ? SLUICE_SWPROBE_LAT_BUCKETS - 1 : (__u32)us;
		__u64 *h = bpf_map_lookup_elem(&sl_swp_lat_v1, &b);
		if (h)
			__sync_fetch_and_add(h, 1);
	}
	return SL_TC_SHOT;
}
