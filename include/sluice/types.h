/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Fixed-width types for the ABI headers: from vmlinux.h inside BPF objects,
 * from the UAPI headers in user space. */
#ifndef SLUICE_TYPES_H
#define SLUICE_TYPES_H

#if defined(__bpf__) || defined(__VMLINUX_H__)
/* vmlinux.h is included first by every BPF object and defines __u8..__u64. */
#else
#include <linux/types.h>
#endif

#ifdef __cplusplus
#define SLUICE_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define SLUICE_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

#endif
