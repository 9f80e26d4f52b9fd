// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Probe: a TCP congestion control written in BPF (struct_ops). Loaded and
 * verified by `sluiced --check`, never registered. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("struct_ops/sl_probe_ssthresh")
__u32 BPF_PROG(sl_probe_ssthresh, struct sock *sk)
{
	return 2;
}

SEC("struct_ops/sl_probe_cong_avoid")
void BPF_PROG(sl_probe_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
}

SEC("struct_ops/sl_probe_undo_cwnd")
__u32 BPF_PROG(sl_probe_undo_cwnd, struct sock *sk)
{
	return 2;
}

SEC(".struct_ops")
struct tcp_congestion_ops sl_probe_cc = {
	.ssthresh = (void *)sl_probe_ssthresh,
	.cong_avoid = (void *)sl_probe_cong_avoid,
	.undo_cwnd = (void *)sl_probe_undo_cwnd,
	.name = "sluice_probe",
};
