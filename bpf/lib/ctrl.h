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
#include "sluice/switch.h"

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

/* The ingress of a control frame at payload offset `off` on a port of
 * `role` (SL_PORT_*): validates it, checks that the role accepts its type,
 * and hands it to the agent as an sl_sw_ctrl_event in the ring buffer
 * `ring`. Returns the counter slot the caller counts the frame in (which
 * then drops it: control frames are never forwarded): SL_CTRL_R_OK when
 * handed over, an sl_ctrl_reason (< SL_CTRL_R_COUNT) when refused, or
 * `ring_full_slot`. `wake` is the submit's flag: 0 (the ring's adaptive
 * wake-up) or BPF_RB_NO_WAKEUP (the agent reads it when it next looks). */
static __always_inline __u32 sl_ctrl_ingress(struct __sk_buff *skb, void *ring, __u32 off, __u32 role, __u32 port_id,
					     __u32 ring_full_slot, __u64 wake)
{
	__u32 type = 0;
	int r = sl_ctrl_validate_skb(skb, off, &type);
	if (r == SL_CTRL_R_OK && !sl_ctrl_port_allows(role, type))
		r = SL_CTRL_R_WRONG_PORT;
	if (r != SL_CTRL_R_OK)
		return (__u32)r < SL_CTRL_R_COUNT ? (__u32)r : SL_CTRL_R_BAD_TYPE;
	struct sl_sw_ctrl_event *ev = bpf_ringbuf_reserve(ring, sizeof(*ev), 0);
	if (!ev)
		return ring_full_slot;
	__u32 len = skb->len;
	if (len > SLUICE_SW_CTRL_FRAME_MAX)
		len = SLUICE_SW_CTRL_FRAME_MAX;
	/* A valid frame is at least Ethernet + header; bounded for the verifier,
	 * on the register handed to the helper: the barrier keeps the compiler
	 * from checking a copy it then spills (the 6.1 verifier loses a 32-bit
	 * spill's bounds). */
	asm volatile("" : "+r"(len));
	if (len < 14 + SLUICE_CTRL_HDR_LEN || len > SLUICE_SW_CTRL_FRAME_MAX ||
	    bpf_skb_load_bytes(skb, 0, ev->frame, len)) {
		bpf_ringbuf_discard(ev, 0);
		return SL_CTRL_R_TRUNCATED;
	}
	ev->ifindex = skb->ifindex;
	ev->port_id = port_id;
	ev->len = len;
	ev->payload_off = off;
	ev->rx_ns = bpf_ktime_get_ns();
	bpf_ringbuf_submit(ev, wake);
	return SL_CTRL_R_OK;
}

#endif
