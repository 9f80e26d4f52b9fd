/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The agent's liveness as a BPF program that diverts packets to the agent
 * reads it (PAC's held ACKs, the switch classifier's paused classes): one
 * record in the program's .bss, written by the agent's heartbeat thread
 * (agent/core/heartbeat.h), read by bpf/lib/liveness.h. docs/operations.md
 * "Liveness under load".
 *
 * A heartbeat older than the program's fail-open limit alone does not tell
 * a dead agent from a machine that ran nothing for a while (a VM stopped by
 * its host for up to 1.6 s was measured). Where the kernel has the kfunc
 * bpf_task_from_pid (6.2+), the program then looks at the heartbeat thread
 * itself: gone, exiting, stopped (SIGSTOP, ptrace) or frozen fails open at
 * the limit as before; a thread that still exists and may run is given up
 * to stall_ns. On older kernels (the *_compat objects) the heartbeat alone
 * decides, as before. */
#ifndef SLUICE_LIVENESS_H
#define SLUICE_LIVENESS_H

#include "sluice/types.h"

struct sluice_liveness {
	__u64 heartbeat_ns; /* agent alive at this bpf_ktime_get_ns() (0: never) */
	/* With the thread alive and runnable the heartbeat may be this old
	 * before the program fails open anyway (0: the thread is not looked
	 * at). */
	__u64 stall_ns;
	/* The heartbeat thread: its id in the initial PID namespace and its
	 * start in clock ticks since boot (/proc/<tid>/stat field 22, i.e.
	 * task->start_boottime / tick_ns): a recycled id has another start. */
	__u64 task_start;
	__u64 tick_ns;
	__s32 task_tid;
	/* Nonzero while the agent says it is not serving (its event loop
	 * stalled, or the mechanism is stopping): the limit applies whatever
	 * the thread does. */
	__u32 withdrawn;
};

/* What sl_liveness() found (bpf/lib/liveness.h), in the order it looks. */
enum sluice_liveness_verdict {
	SLUICE_LIVE_FRESH = 0,    /* heartbeat within the limit */
	SLUICE_LIVE_TASK = 1,     /* heartbeat stale, the thread exists and may run */
	SLUICE_DEAD_NO_HEARTBEAT, /* never written */
	SLUICE_DEAD_STALE,        /* stale, the thread not looked at (no kfunc, or not recorded) */
	SLUICE_DEAD_WITHDRAWN,    /* stale, the agent withdrew (loop stalled, stopping) */
	SLUICE_DEAD_STALL,        /* older than stall_ns */
	SLUICE_DEAD_TASK_GONE,    /* no such thread, another thread with its id, or exiting */
	SLUICE_DEAD_TASK_STOPPED, /* stopped, traced or frozen */
};

#ifdef __cplusplus
#include <cstddef>
static_assert(sizeof(sluice_liveness) == 40, "sluice_liveness ABI");
static_assert(offsetof(sluice_liveness, task_tid) == 32, "sluice_liveness ABI");
#endif

#endif /* SLUICE_LIVENESS_H */
