// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Probe: the kfunc bpf_task_from_pid (6.2+) called from a tc program, as
 * lib/liveness.h does in PAC's and the switch classifier's programs. Run
 * through BPF_PROG_TEST_RUN, it returns sl_liveness() of `live` (enum
 * sluice_liveness_verdict): the decision tests (tests/bpf/liveness_test.cc)
 * and sluice-liveness-bench's kernel-side source use it. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "lib/liveness.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile __u64 fail_open_ns = 60000000ULL;
struct sluice_liveness live = {};

SEC("tc")
int probe_liveness(struct __sk_buff *skb)
{
	return sl_liveness(&live, bpf_ktime_get_ns(), fail_open_ns);
}
