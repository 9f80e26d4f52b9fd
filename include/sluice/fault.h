/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Lab fault injection (bpf/lab/fault.bpf.c, sluice-fault): which packets are
 * candidates (IP packets by protocol and port, or frames of one EtherType), and how a candidate's fate is drawn.
 * sluice-fault writes the plan into the program's read-only data before load; both sides read it through this one
 * definition. */
#ifndef SLUICE_FAULT_H
#define SLUICE_FAULT_H

#include "sluice/types.h"

/* Fractions are in parts per million of candidate skbs. */
#define SLUICE_FAULT_PPM 1000000u

/* What to do to which packets: the program's `plan` (.rodata). */
struct sluice_fault_plan {
	__u64 seed;             /* generator seed: the same seed, the same victims */
	__u32 drop_ppm;         /* dropped (TC_ACT_SHOT) */
	__u32 corrupt_ppm;      /* IPv4 header checksum broken */
	__u32 delay_ppm;        /* skb->priority set to delay_priority */
	__u32 delay_priority;   /* HTB class id (major << 16 | minor) */
	__u16 match_port;       /* host order; source or destination; 0 = any */
	__u8 match_proto;       /* 0 = any TCP/UDP, else 6 or 17 */
	__u8 match_tcp_payload; /* 1 = only TCP segments that carry data */
	__u16 match_ethertype;  /* host order; nonzero: frames of this EtherType
				 * (e.g. sluice control frames) instead of IP */
	__u16 pad;
};

/* The fate of the n-th candidate skb (n counts from 1) is drawn from
 * splitmix64(seed + n) % SLUICE_FAULT_PPM: below drop_ppm -> dropped, next
 * corrupt_ppm -> corrupted, next delay_ppm -> delayed, else left alone. The
 * same seed and the same packet order give the same fates. */
static inline __u64 sluice_splitmix64(__u64 x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

enum sluice_fault_fate {
	SLUICE_FAULT_SPARE = 0,
	SLUICE_FAULT_DROP = 1,
	SLUICE_FAULT_CORRUPT = 2,
	SLUICE_FAULT_DELAY = 3,
};

static inline enum sluice_fault_fate sluice_fault_draw(__u64 seed, __u64 n, __u32 drop_ppm, __u32 corrupt_ppm,
						       __u32 delay_ppm)
{
	__u32 x = (__u32)(sluice_splitmix64(seed + n) % SLUICE_FAULT_PPM);
	if (x < drop_ppm)
		return SLUICE_FAULT_DROP;
	x -= drop_ppm;
	if (x < corrupt_ppm)
		return SLUICE_FAULT_CORRUPT;
	x -= corrupt_ppm;
	if (x < delay_ppm)
		return SLUICE_FAULT_DELAY;
	return SLUICE_FAULT_SPARE;
}

#ifdef __cplusplus
#include <cstddef>
static_assert(sizeof(sluice_fault_plan) == 32, "sluice_fault_plan ABI");
static_assert(offsetof(sluice_fault_plan, drop_ppm) == 8, "sluice_fault_plan ABI");
static_assert(offsetof(sluice_fault_plan, delay_priority) == 20, "sluice_fault_plan ABI");
static_assert(offsetof(sluice_fault_plan, match_port) == 24, "sluice_fault_plan ABI");
static_assert(offsetof(sluice_fault_plan, match_proto) == 26, "sluice_fault_plan ABI");
static_assert(offsetof(sluice_fault_plan, match_tcp_payload) == 27, "sluice_fault_plan ABI");
static_assert(offsetof(sluice_fault_plan, match_ethertype) == 28, "sluice_fault_plan ABI");
#endif

#endif
