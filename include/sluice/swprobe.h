/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Lab instrument for the switch data-path benchmark (bench/switch/): the
 * receiving end's tc ingress counts the benchmark's UDP flows, stamps when
 * each flow's last packet arrived and histograms one-way latency from the
 * CLOCK_MONOTONIC stamp the generator puts in the payload. */
#ifndef SLUICE_SWPROBE_H
#define SLUICE_SWPROBE_H

#include "sluice/types.h"

#define SLUICE_SWPROBE_MAX_FLOWS 128
#define SLUICE_SWPROBE_LAT_BUCKETS 8192 /* 1 us each; the last one collects the rest */

struct sl_swprobe_flow {
	__u64 pkts;
	__u64 bytes;   /* skb->len: Ethernet header onward */
	__u64 last_ns; /* bpf_ktime_get_ns() of the last packet */
};

#endif
