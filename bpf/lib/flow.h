/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Flow keys from a parsed packet. Every sluice key carries addresses as 16
 * bytes, IPv6 as is and IPv4 mapped (::ffff:a.b.c.d), as control frames do;
 * the 5-tuple key (sl_sw_flow_tuple, also sl_bfc_flows_v1's key) is src[16],
 * dst[16], sport, dport, proto in network order. */
#ifndef SLUICE_BPF_FLOW_H
#define SLUICE_BPF_FLOW_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "sluice/switch.h"
#include "lib/parse.h"

/* Parses skb's frame into *p; true for an IP packet whose addresses and (if
 * any) ports were read (SL_PARSE_OK or SL_PARSE_OTHER_L4). */
static __always_inline bool sl_skb_parse_ip(struct __sk_buff *skb, struct sl_pkt *p, int *result)
{
	struct sl_cursor c;
	sl_cursor_init(&c, (void *)(long)skb->data, (void *)(long)skb->data_end);
	int r = sl_parse(&c, p);
	if (result)
		*result = r;
	return r == SL_PARSE_OK || r == SL_PARSE_OTHER_L4;
}

/* `addr` (p->saddr or p->daddr) as 16 bytes into out. */
static __always_inline void sl_addr16(__u8 *out, const struct sl_pkt *p, const __u32 *addr)
{
	if (p->family == 4) {
		__builtin_memset(out, 0, 10);
		out[10] = out[11] = 0xff;
		__builtin_memcpy(&out[12], &addr[0], 4);
	} else {
		__builtin_memcpy(out, addr, 16);
	}
}

/* Fills the 5-tuple fields of key `k` (any struct with src[16], dst[16],
 * sport, dport and proto) from the parsed packet `p`; other fields are left
 * as they are (zero them first). */
#define sl_flow_tuple_fill(k, p)                      \
	do {                                          \
		sl_addr16((k)->src, (p), (p)->saddr); \
		sl_addr16((k)->dst, (p), (p)->daddr); \
		(k)->sport = (p)->sport;              \
		(k)->dport = (p)->dport;              \
		(k)->proto = (p)->proto;              \
	} while (0)

/* True for IPv6 neighbour discovery (ICMPv6 types 133-137: router
 * solicitation/advertisement, neighbour solicitation/advertisement,
 * redirect, RFC 4861 §4) in skb's parsed packet `p`: the IPv6 counterpart
 * of ARP, which a switch must not hold behind a paused data queue. */
static __always_inline bool sl_skb_is_nd(struct __sk_buff *skb, const struct sl_pkt *p)
{
	__u8 type = 0;
	if (p->family != 6 || p->proto != SLUICE_IPPROTO_ICMPV6)
		return false;
	if (bpf_skb_load_bytes(skb, p->l4_off, &type, 1))
		return false;
	return type >= SLUICE_ND_TYPE_FIRST && type <= SLUICE_ND_TYPE_LAST;
}

/* sl_sw_flow_hash() of a parsed IP packet's 5-tuple, the hash the switch
 * logic writes sl_sw_flowq_v1 / sl_swh_flowq_v1 under. */
static __always_inline __u32 sl_sw_pkt_flow_hash(const struct sl_pkt *p)
{
	struct sl_sw_flow_tuple t = {};
	sl_flow_tuple_fill(&t, p);
	return sl_sw_flow_hash(&t);
}

#endif
