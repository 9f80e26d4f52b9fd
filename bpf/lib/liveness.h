// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Fail open: is the agent alive? One implementation for every program that
 * diverts packets to the agent (include/sluice/liveness.h says what the
 * record holds and why; docs/operations.md "Liveness under load").
 *
 * Objects built with SLUICE_LIVENESS_HEARTBEAT_ONLY (the *_compat twins,
 * for kernels before 6.2) decide by the heartbeat alone; the others call
 * the kfunc bpf_task_from_pid, which the kernel lets tc programs call
 * (generic kfunc set, BPF_PROG_TYPE_SCHED_CLS; probed by `sluiced --check`
 * as bpf-task-from-pid), and only once the heartbeat is stale. */
#ifndef SLUICE_BPF_LIB_LIVENESS_H
#define SLUICE_BPF_LIB_LIVENESS_H

#include "sluice/liveness.h"

#ifndef SLUICE_LIVENESS_HEARTBEAT_ONLY
extern struct task_struct *bpf_task_from_pid(s32 pid) __ksym;
extern void bpf_task_release(struct task_struct *p) __ksym;

/* include/linux/sched.h and sched/jobctl.h; macros, so not in vmlinux.h.
 * The same values from 6.1 to 6.18. */
#define SL_TASK_STOPPED_MASK (0x0004 /* __TASK_STOPPED */ | 0x0008 /* __TASK_TRACED */ | 0x8000 /* TASK_FROZEN */)
#define SL_PF_EXITING 0x00000004
#define SL_JOBCTL_TRAP_FREEZE (1UL << 23) /* cgroup v2 freezer */

/* What the heartbeat thread recorded in *l is doing now. */
static __always_inline int sl_liveness_task(const struct sluice_liveness *l)
{
	__s32 tid = *(volatile __s32 *)&l->task_tid;
	__u64 tick = *(volatile __u64 *)&l->tick_ns;
	__u64 start = *(volatile __u64 *)&l->task_start;
	if (tid <= 0 || !tick)
		return SLUICE_DEAD_STALE;
	struct task_struct *t = bpf_task_from_pid(tid);
	if (!t)
		return SLUICE_DEAD_TASK_GONE;
	int v = SLUICE_LIVE_TASK;
	if (t->start_boottime / tick != start || (t->flags & SL_PF_EXITING) || t->exit_state)
		v = SLUICE_DEAD_TASK_GONE;
	else if ((t->__state & SL_TASK_STOPPED_MASK) || (t->jobctl & SL_JOBCTL_TRAP_FREEZE))
		v = SLUICE_DEAD_TASK_STOPPED;
	bpf_task_release(t);
	return v;
}
#endif

/* enum sluice_liveness_verdict: SLUICE_LIVE_* (below SLUICE_DEAD_NO_HEARTBEAT)
 * means divert as usual, SLUICE_DEAD_* means fail open. `limit_ns` is the
 * program's fail-open limit (0: never fail open). */
static __always_inline int sl_liveness(const struct sluice_liveness *l, __u64 now, __u64 limit_ns)
{
	__u64 hb = *(volatile __u64 *)&l->heartbeat_ns;
	if (!limit_ns)
		return SLUICE_LIVE_FRESH;
	if (!hb)
		return SLUICE_DEAD_NO_HEARTBEAT;
	/* A heartbeat written after `now` was read is fresh. */
	if (hb >= now || now - hb <= limit_ns)
		return SLUICE_LIVE_FRESH;
	if (*(volatile __u32 *)&l->withdrawn)
		return SLUICE_DEAD_WITHDRAWN;
#ifdef SLUICE_LIVENESS_HEARTBEAT_ONLY
	return SLUICE_DEAD_STALE;
#else
	__u64 stall = *(volatile __u64 *)&l->stall_ns;
	if (!stall)
		return SLUICE_DEAD_STALE;
	if (now - hb > stall)
		return SLUICE_DEAD_STALL;
	return sl_liveness_task(l);
#endif
}

static __always_inline int sl_agent_alive(const struct sluice_liveness *l, __u64 now, __u64 limit_ns)
{
	return sl_liveness(l, now, limit_ns) < SLUICE_DEAD_NO_HEARTBEAT;
}

#endif /* SLUICE_BPF_LIB_LIVENESS_H */
