/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Per-flow accounting shared by the flowstat program and the agent. */
#ifndef SLUICE_FLOW_H
#define SLUICE_FLOW_H

#include "sluice/types.h"

enum sluice_dir {
	SLUICE_DIR_INGRESS = 0,
	SLUICE_DIR_EGRESS = 1,
};

/* Addresses and ports in network byte order. IPv4 uses addr[0], the other
 * words are zero. `dir` is the hook that saw the packet, so the two halves of
 * one connection on one interface are two entries. */
struct sluice_flow_key {
	__u32 saddr[4];
	__u32 daddr[4];
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 family; /* 4 or 6 */
	__u8 dir;    /* enum sluice_dir */
	__u8 pad;
};

struct sluice_flow_stats {
	__u64 packets;       /* wire segments: a GSO skb counts gso_segs */
	__u64 bytes;         /* skb->len, L2 header included */
	__u64 payload_bytes; /* L4 payload */
	__u64 ce_packets;    /* IP ECN field == CE */
	__u64 ect_packets;   /* ECT(0) or ECT(1) */
	__u64 retrans_hints; /* TCP data whose end is not beyond the highest seen */
	__u64 first_ns;      /* bpf_ktime_get_ns() of the first packet */
	__u64 last_ns;
	__u32 highest_seq_end; /* TCP: highest seq + payload seen (host order) */
	__u8 tcp_flags;        /* OR of every TCP flags byte seen */
	__u8 pad[3];
};

#define SLUICE_FLOW_TABLE_SIZE 65536

#ifdef __cplusplus
#include <cstddef>
static_assert(sizeof(sluice_flow_key) == 40, "sluice_flow_key ABI");
static_assert(offsetof(sluice_flow_key, sport) == 32, "sluice_flow_key ABI");
static_assert(offsetof(sluice_flow_key, dir) == 38, "sluice_flow_key ABI");
static_assert(sizeof(sluice_flow_stats) == 72, "sluice_flow_stats ABI");
static_assert(offsetof(sluice_flow_stats, highest_seq_end) == 64, "sluice_flow_stats ABI");
#endif

#endif
