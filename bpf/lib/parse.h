/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Packet parsing through one bounds-checked cursor. Every header access in
 * sluice goes through cursor_pull(), so the verifier sees one pattern and a
 * short packet is rejected in one place. Offsets (not pointers) are kept in
 * struct sl_pkt because helpers that change the packet invalidate pointers. */
#ifndef SLUICE_BPF_PARSE_H
#define SLUICE_BPF_PARSE_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "sluice/reasons.h"

#ifndef ETH_P_IP
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8
#endif
#ifndef IPPROTO_TCP_NUM
#define IPPROTO_TCP_NUM 6
#define IPPROTO_UDP_NUM 17
#endif
#define SL_IP_MF 0x2000
#define SL_IP_OFFSET 0x1FFF

#define SL_ECN_MASK 0x3
#define SL_ECN_NOT_ECT 0x0
#define SL_ECN_ECT1 0x1
#define SL_ECN_ECT0 0x2
#define SL_ECN_CE 0x3

#define SL_TCP_FIN 0x01
#define SL_TCP_SYN 0x02
#define SL_TCP_RST 0x04
#define SL_TCP_PSH 0x08
#define SL_TCP_ACK 0x10
#define SL_TCP_URG 0x20
#define SL_TCP_ECE 0x40
#define SL_TCP_CWR 0x80

struct sl_cursor {
	void *pos;
	void *end;
	void *start;
};

static __always_inline void sl_cursor_init(struct sl_cursor *c, void *data, void *end)
{
	c->pos = data;
	c->start = data;
	c->end = end;
}

/* Returns a pointer to `len` bytes at the cursor and advances it, or NULL
 * when the packet is shorter. */
#define cursor_pull(c, len)                                   \
	({                                                    \
		void *__p = (c)->pos;                         \
		if ((void *)((char *)__p + (len)) > (c)->end) \
			__p = NULL;                           \
		else                                          \
			(c)->pos = (char *)__p + (len);       \
		__p;                                          \
	})

enum sl_parse_result {
	SL_PARSE_OK = 0,
	SL_PARSE_NOT_IP,
	SL_PARSE_MALFORMED,
	SL_PARSE_OTHER_L4,
	SL_PARSE_FRAGMENT,
};

/* The pass-through reason a program counts for a packet sl_parse() did not
 * accept (r != SL_PARSE_OK). */
static __always_inline __u32 sl_parse_reason(int r)
{
	switch (r) {
	case SL_PARSE_NOT_IP:
		return SLUICE_R_PASS_NOT_IP;
	case SL_PARSE_OTHER_L4:
		return SLUICE_R_PASS_OTHER_L4;
	case SL_PARSE_FRAGMENT:
		return SLUICE_R_PASS_IP_FRAGMENT;
	default:
		return SLUICE_R_PASS_MALFORMED;
	}
}

/* What one parse of an Ethernet frame yields. Addresses and ports stay in
 * network order; seq/ack are host order. */
struct sl_pkt {
	__u32 saddr[4];
	__u32 daddr[4];
	__u16 sport;
	__u16 dport;
	__u16 l3_off;
	__u16 l4_off;
	__u32 payload_len; /* L4 payload, from the IP length (not skb length) */
	__u32 seq;
	__u32 ack_seq;
	__u16 window;  /* raw TCP window field (unscaled) */
	__u16 vlan_id; /* 0 when untagged */
	__u8 family;   /* 4 or 6 */
	__u8 proto;
	__u8 tos; /* IPv4 TOS / IPv6 traffic class */
	__u8 ecn; /* tos & 3 */
	__u8 tcp_flags;
	__u8 tcp_doff; /* TCP header length in bytes */
	__u8 tcp_res;  /* the 4 reserved bits of byte 12 (EIN echo lives here) */
	__u8 has_vlan;
};

static __always_inline int sl_parse_eth(struct sl_cursor *c, struct sl_pkt *p, __u16 *proto)
{
	struct ethhdr *eth = cursor_pull(c, sizeof(*eth));
	if (!eth)
		return SL_PARSE_MALFORMED;
	*proto = eth->h_proto;
	if (*proto == bpf_htons(ETH_P_8021Q) || *proto == bpf_htons(ETH_P_8021AD)) {
		struct vlan_hdr *vh = cursor_pull(c, sizeof(*vh));
		if (!vh)
			return SL_PARSE_MALFORMED;
		p->has_vlan = 1;
		p->vlan_id = bpf_ntohs(vh->h_vlan_TCI) & 0x0fff;
		*proto = vh->h_vlan_encapsulated_proto;
	}
	return SL_PARSE_OK;
}

static __always_inline int sl_parse_l4(struct sl_cursor *c, struct sl_pkt *p, __u32 l4_len)
{
	p->l4_off = (__u16)(c->pos - c->start);
	if (p->proto == IPPROTO_TCP_NUM) {
		struct tcphdr *th = cursor_pull(c, sizeof(*th));
		if (!th)
			return SL_PARSE_MALFORMED;
		__u32 doff = (__u32)th->doff * 4;
		if (doff < sizeof(*th) || doff > l4_len)
			return SL_PARSE_MALFORMED;
		__u8 *b = (__u8 *)th;
		p->tcp_doff = (__u8)doff;
		p->tcp_flags = b[13];
		p->tcp_res = (b[12] >> 1) & 0x7;
		p->sport = th->source;
		p->dport = th->dest;
		p->seq = bpf_ntohl(th->seq);
		p->ack_seq = bpf_ntohl(th->ack_seq);
		p->window = bpf_ntohs(th->window);
		p->payload_len = l4_len - doff;
		return SL_PARSE_OK;
	}
	if (p->proto == IPPROTO_UDP_NUM) {
		struct udphdr *uh = cursor_pull(c, sizeof(*uh));
		if (!uh || l4_len < sizeof(*uh))
			return SL_PARSE_MALFORMED;
		p->sport = uh->source;
		p->dport = uh->dest;
		p->payload_len = l4_len - sizeof(*uh);
		return SL_PARSE_OK;
	}
	return SL_PARSE_OTHER_L4;
}

/* Parses Ethernet (+ one VLAN tag), IPv4 or IPv6 (no extension headers
 * beyond the fixed header), and TCP/UDP. */
static __always_inline int sl_parse(struct sl_cursor *c, struct sl_pkt *p)
{
	__u16 proto = 0;
	int r = sl_parse_eth(c, p, &proto);
	if (r)
		return r;
	p->l3_off = (__u16)(c->pos - c->start);
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = cursor_pull(c, sizeof(*ip));
		if (!ip)
			return SL_PARSE_MALFORMED;
		__u32 ihl = (__u32)ip->ihl * 4;
		__u32 tot = bpf_ntohs(ip->tot_len);
		if (ip->version != 4 || ihl < sizeof(*ip) || tot < ihl)
			return SL_PARSE_MALFORMED;
		if (ihl > sizeof(*ip) && !cursor_pull(c, ihl - sizeof(*ip)))
			return SL_PARSE_MALFORMED;
		p->family = 4;
		p->proto = ip->protocol;
		p->tos = ip->tos;
		p->ecn = ip->tos & SL_ECN_MASK;
		p->saddr[0] = ip->saddr;
		p->daddr[0] = ip->daddr;
		if (ip->frag_off & bpf_htons(SL_IP_OFFSET))
			return SL_PARSE_FRAGMENT;
		return sl_parse_l4(c, p, tot - ihl);
	}
	if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = cursor_pull(c, sizeof(*ip6));
		if (!ip6)
			return SL_PARSE_MALFORMED;
		if (ip6->version != 6)
			return SL_PARSE_MALFORMED;
		p->family = 6;
		p->proto = ip6->nexthdr;
		p->tos = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
		p->ecn = p->tos & SL_ECN_MASK;
		__builtin_memcpy(p->saddr, &ip6->saddr, 16);
		__builtin_memcpy(p->daddr, &ip6->daddr, 16);
		return sl_parse_l4(c, p, bpf_ntohs(ip6->payload_len));
	}
	return SL_PARSE_NOT_IP;
}

/* Sequence-space comparison (RFC 1982 serial arithmetic). */
static __always_inline int sl_seq_before(__u32 a, __u32 b)
{
	return (__s32)(a - b) < 0;
}

#endif
