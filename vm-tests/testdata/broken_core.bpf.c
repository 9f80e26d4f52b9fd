// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Deliberately broken object for sluice-objcheck's own test: a CO-RE read of
 * a field no kernel has, the same failure an object meets when it reads a
 * field that is newer than the kernel it runs on (e.g. a 6.6 field on 6.1).
 * libbpf cannot relocate it, poisons the instruction, and the load fails;
 * the checker must name this object and the field. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct net_device___sl_future {
	__u32 sl_no_such_field;
} __attribute__((preserve_access_index));

/* Not a constant, so the compiler keeps the access. */
volatile __u64 sl_dev_addr = 0;
__u32 sl_seen = 0;

SEC("tc")
int vm_broken_core(struct __sk_buff *skb)
{
	struct net_device___sl_future *dev = (void *)sl_dev_addr;

	sl_seen = BPF_CORE_READ(dev, sl_no_such_field);
	return -1; /* TC_ACT_UNSPEC */
}
