/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Lab fault injection (bpf/lab/fault.bpf.c, sluice-fault): which packets are
 * candidates, and how a candidate's fate is drawn. */
#ifndef SLUICE_FAULT_H
#define SLUICE_FAULT_H

#include "sluice/types.h"

/* Fractions are in parts per million of candidate skbs. */
#define SLUICE_FAULT_PPM 1000000u

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

static inline enum sluice_fault_fate sluice_fault_draw(__u64 seed, __u64 n, __u32 drop_ppm,
						       __u32 corrupt_ppm, __u32 delay_ppm)
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

#endif
