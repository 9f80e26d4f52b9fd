// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Probe: the kfunc bpf_task_from_pid called from an XDP program, as
 * lib/liveness.h does in TOP's token expiry (host/top_expiry.bpf.c). The
 * kernel lets tc programs call it from 6.2 on, XDP programs only from 6.8
 * (generic kfuncs registered for BPF_PROG_TYPE_XDP): on 6.2 to 6.7 the tc
 * probe (probe_liveness) passes and this one fails, and XDP programs use
 * their *_compat twin. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "lib/liveness.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile __u64 fail_open_ns = 60000000ULL;
struct sluice_liveness live = {};

SEC("xdp")
int probe_liveness_xdp(struct xdp_md *ctx)
{
	return sl_liveness(&live, bpf_ktime_get_ns(), fail_open_ns) < SLUICE_DEAD_NO_HEARTBEAT ? XDP_PASS : XDP_DROP;
}
