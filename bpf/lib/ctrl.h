/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Validates a sluice control frame (sluice/wire.h) in an skb with the same
 * checks the agent runs (sl_ctrl_check_hdr / sl_ctrl_check_rec): records are
 * copied to the stack with bpf_skb_load_bytes, so offsets may vary without
 * pointer arithmetic the verifier has to follow. */
#ifndef SLUICE_BPF_CTRL_H
#define SLUICE_BPF_CTRL_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "sluice/wire.h"

#ifndef ETH_P_8021Q
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8
#endif

/* Offset of the control payload when the frame's EtherType (after at most
 * one VLAN tag) is SLUICE_CTRL_ETHERTYPE, else -1. */
static __always_inline long sl_ctrl_payload_off(struct __sk_buff *skb)
{
	__be16 et;
	__u32 off = 12;
	if (bpf_skb_load_bytes(skb, off, &et, sizeof(et)))
		return -1;
	if (et == bpf_htons(ETH_P_8021Q) || et == bpf_htons(ETH_P_8021AD)) {
		off += 4;
		if (bpf_skb_load_bytes(skb, off, &et, sizeof(et)))
			return -1;
	}
	if (et != bpf_htons(SLUICE_CTRL_ETHERTYPE))
		return -1;
	return off + 2;
}

/* Returns an sl_ctrl_reason; *type is set once the header was read. */
static __always_inline int sl_ctrl_validate_skb(struct __sk_buff *skb, __u32 off, __u32 *type)
{
	struct sl_ctrl_hdr h;
	__u32 nrec = 0;
	*type = 0;
	if (off > skb->len || bpf_skb_load_bytes(skb, off, &h, sizeof(h)))
		return SL_CTRL_R_TRUNCATED;
	*type = h.type;
	int r = sl_ctrl_check_hdr(&h, skb->len - off, &nrec);
	if (r != SL_CTRL_R_OK)
		return r;
	__u32 rs = sl_ctrl_rec_size(h.type) & 31;
	if (rs < sizeof(struct sl_ctrl_queue))
		return SL_CTRL_R_BAD_TYPE;
	for (__u32 i = 0; i < SLUICE_CTRL_MAX_RECORDS; i++) {
		__u8 rec[32] = {};
		if (i >= nrec)
			break;
		if (bpf_skb_load_bytes(skb, off + SLUICE_CTRL_HDR_LEN + i * rs, rec, rs))
			return SL_CTRL_R_TRUNCATED;
		r = sl_ctrl_check_rec(h.type, rec);
		if (r != SL_CTRL_R_OK)
			return r;
	}
	return SL_CTRL_R_OK;
}

#endif
