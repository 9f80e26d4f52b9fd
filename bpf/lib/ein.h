/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Reading and writing the EIN bit of an IP header (include/sluice/pulser.h
 * says where it lives). Shared by the switch-side marker and the host echo.
 * The field and mask are read-only globals of the including program. */
#ifndef SLUICE_BPF_EIN_H
#define SLUICE_BPF_EIN_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "sluice/pulser.h"
#include "lib/parse.h"

/* Which bit (set by the agent before load from [ein] bit). */
const volatile __u8 ein_field = SLUICE_EIN_FIELD_TOS;
const volatile __u16 ein_mask = 0x04;

/* Whether the parsed packet carries EIN. */
static __always_inline int sl_ein_get(struct __sk_buff *skb, const struct sl_pkt *p)
{
	if (ein_field == SLUICE_EIN_FIELD_TOS)
		return (p->tos & ein_mask) != 0;
	if (p->family != 4)
		return 0;
	__be16 frag = 0;
	if (bpf_skb_load_bytes(skb, p->l3_off + 6, &frag, sizeof(frag)))
		return 0;
	return (bpf_ntohs(frag) & ein_mask) != 0;
}

/* Sets EIN; returns 0, 1 if the packet cannot carry it (IPv6 with the
 * IPv4-only bit), or a negative error. IPv4 header checksum is fixed
 * incrementally; IPv6 has none. */
static __always_inline int sl_ein_set(struct __sk_buff *skb, const struct sl_pkt *p)
{
	__u32 off = p->l3_off;

	if (ein_field == SLUICE_EIN_FIELD_TOS) {
		if (p->family == 4) {
			/* Word 0 of the IPv4 header: version/IHL, TOS. */
			__be16 oldw, neww;
			if (bpf_skb_load_bytes(skb, off, &oldw, sizeof(oldw)))
				return -1;
			neww = oldw | bpf_htons((__u16)(ein_mask & 0xff));
			if (neww == oldw)
				return 0;
			if (bpf_l3_csum_replace(skb, off + 10, oldw, neww, sizeof(neww)))
				return -1;
			return bpf_skb_store_bytes(skb, off, &neww, sizeof(neww), 0) ? -1 : 0;
		}
		/* IPv6: traffic class spans the low nibble of byte 0 and the
		 * high nibble of byte 1. */
		__be16 w;
		if (bpf_skb_load_bytes(skb, off, &w, sizeof(w)))
			return -1;
		w |= bpf_htons((__u16)((ein_mask & 0xff) << 4));
		return bpf_skb_store_bytes(skb, off, &w, sizeof(w), 0) ? -1 : 0;
	}
	if (p->family != 4)
		return 1;
	__be16 oldf, newf;
	if (bpf_skb_load_bytes(skb, off + 6, &oldf, sizeof(oldf)))
		return -1;
	newf = oldf | bpf_htons(ein_mask);
	if (newf == oldf)
		return 0;
	if (bpf_l3_csum_replace(skb, off + 10, oldf, newf, sizeof(newf)))
		return -1;
	return bpf_skb_store_bytes(skb, off + 6, &newf, sizeof(newf), 0) ? -1 : 0;
}

#endif
