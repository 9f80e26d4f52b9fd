/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Queue monitor ABI (bpf/lab/qmon.bpf.c <-> sluice-qmon): per watched root
 * qdisc, the exact backlog after every enqueue and dequeue. */
#ifndef SLUICE_QMON_H
#define SLUICE_QMON_H

#include "sluice/types.h"

#define SLUICE_QMON_MAX_PORTS 512

/* Which qdisc: the device's network namespace (nsfs inode, as in
 * /proc/<pid>/ns/net) and ifindex. */
struct sluice_qmon_key {
	__u32 netns_ino;
	__u32 ifindex;
};

/* Per CPU, per port: the largest backlog seen by this CPU. */
struct sluice_qmon_max {
	__u64 max_bytes;
	__u64 max_pkts;
	__u64 events;
};

/* Per CPU, per port, per epoch bank: the largest backlog of the current
 * sampling interval. An entry whose epoch is not the bank's current epoch
 * is stale (no event in that interval). */
struct sluice_qmon_interval {
	__u64 epoch;
	__u64 max_bytes;
	__u64 max_pkts;
	__u64 events;
};

/* Per port (one entry, updated under the root qdisc's lock: enqueue and
 * dequeue of one non-lockless qdisc are serialized): the current backlog and
 * its time integral for an exact time-weighted mean. */
struct sluice_qmon_state {
	__u64 first_ns;
	__u64 last_ns;
	__u64 backlog_bytes;
	__u64 backlog_pkts;
	__u64 integral_bytes_ns; /* sum of backlog_bytes x ns until last_ns */
	__u64 enqueues;
	__u64 dequeues;
};

#ifdef __cplusplus
static_assert(sizeof(sluice_qmon_key) == 8, "sluice_qmon_key ABI");
static_assert(sizeof(sluice_qmon_max) == 24, "sluice_qmon_max ABI");
static_assert(sizeof(sluice_qmon_interval) == 32, "sluice_qmon_interval ABI");
static_assert(sizeof(sluice_qmon_state) == 56, "sluice_qmon_state ABI");
#endif

#endif
