/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The per-socket EIN state (struct sluice_ein_sk) that the ein tc programs
 * and the sluice_pulser congestion control share: each object declares the
 * map from here, and the agent pins one instance and reuses it for both. */
#ifndef SLUICE_BPF_EIN_SK_H
#define SLUICE_BPF_EIN_SK_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "sluice/pulser.h"

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sluice_ein_sk);
} sl_ein_sk_v1 SEC(".maps");

#endif
