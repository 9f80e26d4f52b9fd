// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* PAC datapath, part of bpf/host/pac.bpf.c (one translation unit): which
 * flows PAC manages (the [pac] local_ports, remote_ports and
 * remote_prefixes), the flow key of a segment, the TCP options eq. (3) and
 * the RTT sample read, and the count of a flow's held ACKs. Included by
 * pac.bpf.c after the read-only globals, the .bss state and the maps it
 * uses; not a library for other programs. */
#ifndef SLUICE_BPF_PAC_FLOW_H
#define SLUICE_BPF_PAC_FLOW_H

static __always_inline int port_in(const volatile struct sluice_pac_port_range *r, __u32 n, __u16 port)
{
	__u16 p = bpf_ntohs(port);
	for (int i = 0; i < SLUICE_PAC_MAX_PORT_RANGES; i++) {
		if ((__u32)i >= n)
			break;
		if (p >= r[i].lo && p <= r[i].hi)
			return 1;
	}
	return 0;
}

static __always_inline int prefix_match(const struct sluice_pac_flow_key *k)
{
	for (int i = 0; i < SLUICE_PAC_MAX_PREFIXES; i++) {
		if ((__u32)i >= n_prefixes)
			break;
		if (prefixes[i].family != k->family)
			continue;
		__u32 len = prefixes[i].len;
		int ok = 1;
		for (int w = 0; w < 4; w++) {
			if (len == 0)
				break;
			__u32 bits = len >= 32 ? 32 : len;
			__u32 mask = bits == 32 ? 0xffffffffu : ~(0xffffffffu >> bits);
			if ((bpf_ntohl(k->raddr[w]) & mask) != (bpf_ntohl(prefixes[i].addr[w]) & mask)) {
				ok = 0;
				break;
			}
			len -= bits;
		}
		if (ok)
			return 1;
	}
	return 0;
}

static __always_inline int managed(const struct sluice_pac_flow_key *k)
{
	if (n_local_ports && !port_in(local_ports, n_local_ports, k->lport))
		return 0;
	if (n_remote_ports && !port_in(remote_ports, n_remote_ports, k->rport))
		return 0;
	if (n_prefixes && !prefix_match(k))
		return 0;
	return 1;
}

static __always_inline void make_key(struct sluice_pac_flow_key *k, const struct sl_pkt *p, int egress)
{
	if (egress) {
		__builtin_memcpy(k->laddr, p->saddr, sizeof(k->laddr));
		__builtin_memcpy(k->raddr, p->daddr, sizeof(k->raddr));
		k->lport = p->sport;
		k->rport = p->dport;
	} else {
		__builtin_memcpy(k->raddr, p->saddr, sizeof(k->raddr));
		__builtin_memcpy(k->laddr, p->daddr, sizeof(k->laddr));
		k->rport = p->sport;
		k->lport = p->dport;
	}
	k->family = p->family;
}

static __always_inline int agent_alive(__u64 now)
{
	return sl_agent_alive(&pac.live, now, fail_open_ns);
}

/* TCP options as Linux lays them out on established segments:
 * NOP NOP TS(8,10) [NOP NOP SACK(5,n)]. Other layouts yield no TS. */
struct tcp_opts {
	__u32 tsval;
	__u32 tsecr;
	__u8 has_ts;
	__u8 has_sack;
};

static __always_inline void parse_opts(struct __sk_buff *skb, const struct sl_pkt *p, struct tcp_opts *o)
{
	__u8 b[16];
	if (p->tcp_doff < 32)
		return;
	if (bpf_skb_load_bytes(skb, p->l4_off + 20, b, 12))
		return;
	if (b[0] == 1 && b[1] == 1 && b[2] == 8 && b[3] == 10) {
		o->has_ts = 1;
		o->tsval = ((__u32)b[4] << 24) | ((__u32)b[5] << 16) | ((__u32)b[6] << 8) | b[7];
		o->tsecr = ((__u32)b[8] << 24) | ((__u32)b[9] << 16) | ((__u32)b[10] << 8) | b[11];
		if (p->tcp_doff >= 44 && !bpf_skb_load_bytes(skb, p->l4_off + 32, b, 4) && b[0] == 1 && b[1] == 1 &&
		    b[2] == 5)
			o->has_sack = 1;
	} else if (b[0] == 1 && b[1] == 1 && b[2] == 5) {
		o->has_sack = 1;
	}
}

static __always_inline __u64 held_of(const struct sluice_pac_flow *f, const struct sluice_pac_flow_ctl *c)
{
	__u64 out = f->reinjected + (c ? c->dropped : 0);
	return f->diverted > out ? f->diverted - out : 0;
}

#endif /* SLUICE_BPF_PAC_FLOW_H */
