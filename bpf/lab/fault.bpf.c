// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* fault: lab fault injection on one link (tc ingress or egress), because this
 * kernel has no netem. A chosen fraction of the candidate packets is
 *   dropped    (TC_ACT_SHOT),
 *   corrupted  (IPv4 header checksum broken: the next IP hop discards the
 *               packet and counts it in Ip.InCsumErrors, as a receiver drops
 *               a frame with a bad FCS),
 *   delayed    (skb->priority set to a class id, so an HTB on this link puts
 *               it in a slow class: delay by marking).
 * Candidates are IP packets (by protocol, port, TCP payload), or with
 * match_ethertype the frames of that EtherType (skb->protocol), e.g. the
 * sluice switches' control frames (credits, PAUSE): those are dropped or
 * delayed, never corrupted.
 * Fates are drawn from a seeded generator indexed by the candidate's number,
 * so a run with the same seed and packet order repeats exactly. A GSO skb is
 * one candidate: in GSO mode a fate hits all its segments (use MTU mode for
 * per-frame faults). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "sluice/fault.h"
#include "lib/parse.h"
#include "lib/counters.h"
#include "lib/verdict.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set by sluice-fault before load. */
const volatile struct sluice_fault_plan plan = { .seed = 1 };

/* Candidates seen so far (the index of the generator). */
__u64 candidates = 0;

SEC("tc")
int fault_inject(struct __sk_buff *skb)
{
	struct sl_cursor c;
	struct sl_pkt p = {};
	int r = SL_PARSE_OK;
	if (plan.match_ethertype) {
		/* Frames of one EtherType (a switch's control frames): not IP,
		 * never corrupted (there is no IPv4 checksum to break). */
		if (skb->protocol != bpf_htons(plan.match_ethertype)) {
			sl_count_skb(SLUICE_R_PASS_FAULT_NO_MATCH, skb);
			return SL_TC_NEXT;
		}
		goto candidate;
	}
	sl_cursor_init(&c, (void *)(long)skb->data, (void *)(long)skb->data_end);
	r = sl_parse(&c, &p);
	if (r != SL_PARSE_OK || (plan.match_proto && p.proto != plan.match_proto) ||
	    (plan.match_port && p.sport != bpf_htons(plan.match_port) && p.dport != bpf_htons(plan.match_port)) ||
	    (plan.match_tcp_payload && (p.proto != IPPROTO_TCP_NUM || !p.payload_len))) {
		sl_count_skb(SLUICE_R_PASS_FAULT_NO_MATCH, skb);
		return SL_TC_NEXT;
	}
candidate:;
	__u64 n = __sync_fetch_and_add(&candidates, 1) + 1;
	switch (sluice_fault_draw(plan.seed, n, plan.drop_ppm, plan.corrupt_ppm, plan.delay_ppm)) {
	case SLUICE_FAULT_DROP:
		sl_count_skb(SLUICE_R_DROP_FAULT, skb);
		return SL_TC_SHOT;
	case SLUICE_FAULT_CORRUPT: {
		if (plan.match_ethertype || p.family != 4) {
			sl_count_skb(SLUICE_R_PASS_FAULT_NO_CORRUPT, skb);
			return SL_TC_NEXT;
		}
		__u16 check;
		__u32 off = p.l3_off + offsetof(struct iphdr, check);
		if (bpf_skb_load_bytes(skb, off, &check, sizeof(check)))
			return SL_TC_NEXT;
		check ^= bpf_htons(0x5a5a);
		if (bpf_skb_store_bytes(skb, off, &check, sizeof(check), 0))
			return SL_TC_NEXT;
		sl_count_skb(SLUICE_R_PASS_FAULT_CORRUPTED, skb);
		return SL_TC_NEXT;
	}
	case SLUICE_FAULT_DELAY:
		skb->priority = plan.delay_priority;
		sl_count_skb(SLUICE_R_PASS_FAULT_DELAYED, skb);
		return SL_TC_NEXT;
	default:
		sl_count_skb(SLUICE_R_PASS_FAULT_SPARED, skb);
		return SL_TC_NEXT;
	}
}
