/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Hop-by-hop control frames of the sluice switch substrate (docs/switch.md).
 *
 * These frames travel exactly one link: switch to switch (credits,
 * switchSYN, queue pause/resume, paused-queue bitmap) or first-hop switch to
 * host (dstPause/dstResume). They are never routed, so they are plain
 * Ethernet frames:
 *
 *   Ethernet: dst 01:80:C2:00:00:0E (nearest-bridge group address: a Linux
 *             bridge or 802.1D switch does not forward it) or the receiving
 *             port's own MAC; src = the sending port; EtherType 0x88B5
 *             (IEEE 802 local experimental). One 802.1Q tag is tolerated.
 *   struct sl_ctrl_hdr            8 bytes
 *   N fixed-size records          N * rec_size bytes, all of the header's type
 *   padding                       to the 60-byte Ethernet minimum, ignored
 *
 * Every multi-byte field is big-endian (network order). A frame is valid
 * only if every check in sl_ctrl_check_hdr() and sl_ctrl_check_rec() passes:
 * version, type, length (header + N records, N within
 * [min, SLUICE_CTRL_MAX_RECORDS], within the bytes received), rec_size equal
 * to the type's record size, reserved fields zero, queue numbers below
 * SLUICE_SW_MAX_QUEUES, addresses not unspecified. A frame failing any check
 * is dropped whole and counted under its sl_ctrl_reason; none of its records
 * is applied. Port roles are checked by the receiver with
 * sl_ctrl_port_allows(): switch-to-switch types only on a switch-facing
 * port, dstPause/dstResume only on a host's uplink (the host end of a
 * host-facing link); a switch's host-facing port accepts no control frame.
 *
 * Units. Credits carry both bytes and packets; PSN is a byte sequence number.
 * Wire bytes count the Ethernet header onward (skb->len at tc), and a packet
 * is a wire segment (an skb of gso_segs N counts N), so the numbers mean the
 * same with and without GSO. Why bytes first: agent/switch/logic.h.
 *
 * Sequence numbers (pause/resume/bitmap/dstPause): one 32-bit counter per
 * sending port, incremented on every state change it announces, compared
 * with serial arithmetic (RFC 1982). A receiver applies a record for a queue
 * (or destination) only if its seq is after the last one it applied for that
 * queue; a bitmap carries the counter's value when it was taken, so it never
 * undoes a newer pause/resume that overtook it.
 *
 * TOP tokens are NOT control frames: a token travels end to end from the
 * receiver through every switch to the sender, so it is routed IP/UDP
 * (ARCHITECTURE.md "Wire formats": UDP with flow id, sequence, priority, TAI
 * timestamp) and its header lives with the TOP mechanism. The substrate
 * treats tokens as data packets that a logic classifies into its token
 * queues.
 *
 * Append only: new types get new numbers, a changed record gets a new
 * version. This header is ABI for the BPF classifier and the agent, and the
 * validation below is the one parser both run (bpf/lib/ctrl.h walks an skb
 * with it; agent/switch/control.h walks a byte buffer with it). */
#ifndef SLUICE_WIRE_H
#define SLUICE_WIRE_H

#include "sluice/types.h"

#define SLUICE_CTRL_ETHERTYPE 0x88B5
#define SLUICE_CTRL_VERSION 1
#define SLUICE_CTRL_HDR_LEN 8
/* Bounds the record loop (BPF verifier) and a frame's size: the largest
 * frame is 8 + 32 * 28 = 904 bytes, under any MTU. */
#define SLUICE_CTRL_MAX_RECORDS 32
/* Queues per switch port that frames can name (BFC uses tens per port). */
#define SLUICE_SW_MAX_QUEUES 128
#define SLUICE_CTRL_BITMAP_QUEUES 64 /* queues one bitmap record covers */
/* Ports one switch can have (map sizes, ifindex-independent port ids). */
#define SLUICE_SW_MAX_PORTS 64

enum sl_ctrl_type {
	SL_CTRL_CREDIT = 1,       /* Floodgate §4.1: aggregated credits per dst */
	SL_CTRL_SWITCH_SYN = 2,   /* Floodgate §4.1 loss recovery: ask for credits with PSN */
	SL_CTRL_PAUSE = 3,        /* BFC §3.3.2: pause an upstream queue */
	SL_CTRL_RESUME = 4,       /* BFC §3.3.2: resume an upstream queue */
	SL_CTRL_PAUSE_BITMAP = 5, /* BFC §3.3.2: periodic bitmap of queues that should be paused */
	SL_CTRL_DST_PAUSE = 6,    /* Floodgate §4.3: first-hop switch to host, per dst */
	SL_CTRL_DST_RESUME = 7,   /* Floodgate §4.3 */
	SL_CTRL_TYPE_MAX = 7,
};

struct sl_ctrl_hdr {
	__u8 version;    /* SLUICE_CTRL_VERSION */
	__u8 type;       /* enum sl_ctrl_type */
	__be16 length;   /* header + records, bytes (padding excluded) */
	__be16 rec_size; /* must equal the type's record size */
	__be16 reserved; /* zero */
};

/* Destinations are IPv6 addresses; IPv4 destinations are IPv4-mapped
 * (::ffff:a.b.c.d). The unspecified address (all zero) is invalid. */

/* SL_CTRL_CREDIT: the downstream returns credits for `dst` on the link the
 * frame arrives on (Floodgate §4.1 "aggregated credits every T").
 * credit_* = what was forwarded since the last credit frame for dst;
 * psn = the byte sequence just after the last data byte for dst received
 * from this upstream, so the upstream's in-flight is next_psn - psn. */
struct sl_ctrl_credit {
	__u8 dst[16];
	__be32 credit_bytes;
	__be32 psn;
	__be16 credit_pkts;
	__be16 reserved;
};

/* SL_CTRL_SWITCH_SYN: the upstream, after a credit timeout, asks the
 * downstream to answer with a credit frame carrying the PSN for dst.
 * next_psn = the upstream's next byte sequence to send for dst. Zero records
 * mean "every destination". */
struct sl_ctrl_switch_syn {
	__u8 dst[16];
	__be32 next_psn;
	__be32 reserved;
};

/* SL_CTRL_PAUSE / SL_CTRL_RESUME: the receiver's egress queue `queue` on
 * the link the frame arrives on (BFC's upstreamQ). */
struct sl_ctrl_queue {
	__be16 queue;
	__be16 reserved;
	__be32 seq;
};

/* SL_CTRL_PAUSE_BITMAP: queues first_queue .. first_queue + 63; bit i of
 * paused[i / 8] (LSB first) set = queue first_queue + i should be paused.
 * first_queue is a multiple of 64; bits for queues >= SLUICE_SW_MAX_QUEUES
 * must be zero. */
struct sl_ctrl_bitmap {
	__be16 first_queue;
	__be16 reserved;
	__be32 seq;
	__u8 paused[8];
};

/* SL_CTRL_DST_PAUSE / SL_CTRL_DST_RESUME: the host pauses / resumes its
 * traffic to dst (Floodgate §4.3 "per-dst PAUSE"). */
struct sl_ctrl_dst {
	__u8 dst[16];
	__be32 seq;
	__be32 reserved;
};

SLUICE_STATIC_ASSERT(sizeof(struct sl_ctrl_hdr) == SLUICE_CTRL_HDR_LEN, "sl_ctrl_hdr size");
SLUICE_STATIC_ASSERT(sizeof(struct sl_ctrl_credit) == 28, "sl_ctrl_credit size");
SLUICE_STATIC_ASSERT(sizeof(struct sl_ctrl_switch_syn) == 24, "sl_ctrl_switch_syn size");
SLUICE_STATIC_ASSERT(sizeof(struct sl_ctrl_queue) == 8, "sl_ctrl_queue size");
SLUICE_STATIC_ASSERT(sizeof(struct sl_ctrl_bitmap) == 16, "sl_ctrl_bitmap size");
SLUICE_STATIC_ASSERT(sizeof(struct sl_ctrl_dst) == 24, "sl_ctrl_dst size");

/* Why a frame was accepted or rejected. Append only (counters are ABI). */
/* clang-format off: a table, aligned by hand */
#define SLUICE_CTRL_REASONS(X)                                                 \
	X(OK, "valid")                                                         \
	X(TRUNCATED, "shorter than its header or its length field")            \
	X(BAD_VERSION, "unknown version")                                      \
	X(BAD_TYPE, "unknown type")                                            \
	X(BAD_LENGTH, "length not header + whole records")                     \
	X(BAD_REC_SIZE, "record size does not match the type")                 \
	X(BAD_COUNT, "too few or too many records")                            \
	X(BAD_RESERVED, "reserved field not zero")                             \
	X(QUEUE_RANGE, "queue number out of range")                            \
	X(BAD_DST, "unspecified destination address")                          \
	X(BITMAP_RANGE, "bitmap base not aligned or bits past the last queue") \
	X(WRONG_PORT, "type not accepted on this port's role")                 \
	X(UNKNOWN_PORT, "arrived on a port that is not a switch port")
/* clang-format on */

enum sl_ctrl_reason {
#define SL_CTRL_REASON_ENUM(name, text) SL_CTRL_R_##name,
	SLUICE_CTRL_REASONS(SL_CTRL_REASON_ENUM)
#undef SL_CTRL_REASON_ENUM
		SL_CTRL_R_COUNT
};

/* Port roles (sluiced switch config). A link is switch-facing (switch to
 * switch) or host-facing (switch to host); a host's end of a host-facing
 * link is its uplink. */
enum sl_port_role {
	SL_PORT_NONE = 0,          /* not a switch port: every control frame rejected */
	SL_PORT_SWITCH_FACING = 1, /* credits, switchSYN, pause/resume, bitmap */
	SL_PORT_HOST_FACING = 2,   /* a switch's port to a host: accepts nothing
				    * (hosts send no control frames; one that
				    * arrives there is spoofed), sends dstPause */
	SL_PORT_HOST_UPLINK = 3,   /* a host's port to its first-hop switch:
				    * dstPause/dstResume only */
};

/* Byte order without libc: BPF (clang -target bpf) and C++ both see
 * __BYTE_ORDER__. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define SL_CTRL_BE16(x) ((__u16)__builtin_bswap16((__u16)(x)))
#define SL_CTRL_BE32(x) ((__u32)__builtin_bswap32((__u32)(x)))
#else
#define SL_CTRL_BE16(x) ((__u16)(x))
#define SL_CTRL_BE32(x) ((__u32)(x))
#endif

static inline __u32 sl_ctrl_rec_size(__u32 type)
{
	switch (type) {
	case SL_CTRL_CREDIT:
		return sizeof(struct sl_ctrl_credit);
	case SL_CTRL_SWITCH_SYN:
		return sizeof(struct sl_ctrl_switch_syn);
	case SL_CTRL_PAUSE:
	case SL_CTRL_RESUME:
		return sizeof(struct sl_ctrl_queue);
	case SL_CTRL_PAUSE_BITMAP:
		return sizeof(struct sl_ctrl_bitmap);
	case SL_CTRL_DST_PAUSE:
	case SL_CTRL_DST_RESUME:
		return sizeof(struct sl_ctrl_dst);
	default:
		return 0;
	}
}

/* Checks the header against `avail`, the bytes from the header's first byte
 * to the end of the frame. On SL_CTRL_R_OK, *nrec is the record count. */
static inline int sl_ctrl_check_hdr(const struct sl_ctrl_hdr *h, __u32 avail, __u32 *nrec)
{
	*nrec = 0;
	if (avail < SLUICE_CTRL_HDR_LEN)
		return SL_CTRL_R_TRUNCATED;
	if (h->version != SLUICE_CTRL_VERSION)
		return SL_CTRL_R_BAD_VERSION;
	__u32 rs = sl_ctrl_rec_size(h->type);
	if (!rs)
		return SL_CTRL_R_BAD_TYPE;
	if (h->reserved)
		return SL_CTRL_R_BAD_RESERVED;
	if (SL_CTRL_BE16(h->rec_size) != rs)
		return SL_CTRL_R_BAD_REC_SIZE;
	__u32 len = SL_CTRL_BE16(h->length);
	if (len < SLUICE_CTRL_HDR_LEN || (len - SLUICE_CTRL_HDR_LEN) % rs)
		return SL_CTRL_R_BAD_LENGTH;
	if (len > avail)
		return SL_CTRL_R_TRUNCATED;
	__u32 n = (len - SLUICE_CTRL_HDR_LEN) / rs;
	__u32 min = h->type == SL_CTRL_SWITCH_SYN ? 0 : 1;
	if (n < min || n > SLUICE_CTRL_MAX_RECORDS)
		return SL_CTRL_R_BAD_COUNT;
	*nrec = n;
	return SL_CTRL_R_OK;
}

/* Loop-free, so the BPF verifier walks it once per record. */
static inline int sl_ctrl_dst_ok(const __u8 *dst)
{
	__u64 a, b;
	__builtin_memcpy(&a, dst, 8);
	__builtin_memcpy(&b, dst + 8, 8);
	return (a | b) != 0;
}

/* The bitmap's 64 bits, bit i = queue first_queue + i. */
static inline __u64 sl_ctrl_bitmap_bits(const __u8 *p)
{
	return (__u64)p[0] | (__u64)p[1] << 8 | (__u64)p[2] << 16 | (__u64)p[3] << 24 | (__u64)p[4] << 32 |
	       (__u64)p[5] << 40 | (__u64)p[6] << 48 | (__u64)p[7] << 56;
}

/* Checks one record of `type` (already validated by sl_ctrl_check_hdr);
 * `rec` points at rec_size bytes. */
static inline int sl_ctrl_check_rec(__u32 type, const void *rec)
{
	switch (type) {
	case SL_CTRL_CREDIT: {
		const struct sl_ctrl_credit *r = (const struct sl_ctrl_credit *)rec;
		if (r->reserved)
			return SL_CTRL_R_BAD_RESERVED;
		return sl_ctrl_dst_ok(r->dst) ? SL_CTRL_R_OK : SL_CTRL_R_BAD_DST;
	}
	case SL_CTRL_SWITCH_SYN: {
		const struct sl_ctrl_switch_syn *r = (const struct sl_ctrl_switch_syn *)rec;
		if (r->reserved)
			return SL_CTRL_R_BAD_RESERVED;
		return sl_ctrl_dst_ok(r->dst) ? SL_CTRL_R_OK : SL_CTRL_R_BAD_DST;
	}
	case SL_CTRL_PAUSE:
	case SL_CTRL_RESUME: {
		const struct sl_ctrl_queue *r = (const struct sl_ctrl_queue *)rec;
		if (r->reserved)
			return SL_CTRL_R_BAD_RESERVED;
		return SL_CTRL_BE16(r->queue) < SLUICE_SW_MAX_QUEUES ? SL_CTRL_R_OK : SL_CTRL_R_QUEUE_RANGE;
	}
	case SL_CTRL_PAUSE_BITMAP: {
		const struct sl_ctrl_bitmap *r = (const struct sl_ctrl_bitmap *)rec;
		if (r->reserved)
			return SL_CTRL_R_BAD_RESERVED;
		__u32 first = SL_CTRL_BE16(r->first_queue);
		if (first % SLUICE_CTRL_BITMAP_QUEUES || first >= SLUICE_SW_MAX_QUEUES)
			return SL_CTRL_R_BITMAP_RANGE;
		/* Bits naming queues past SLUICE_SW_MAX_QUEUES (only possible if
		 * the maximum is not a multiple of 64). */
		__u32 valid = SLUICE_SW_MAX_QUEUES - first;
		if (valid < SLUICE_CTRL_BITMAP_QUEUES && (sl_ctrl_bitmap_bits(r->paused) >> valid))
			return SL_CTRL_R_BITMAP_RANGE;
		return SL_CTRL_R_OK;
	}
	case SL_CTRL_DST_PAUSE:
	case SL_CTRL_DST_RESUME: {
		const struct sl_ctrl_dst *r = (const struct sl_ctrl_dst *)rec;
		if (r->reserved)
			return SL_CTRL_R_BAD_RESERVED;
		return sl_ctrl_dst_ok(r->dst) ? SL_CTRL_R_OK : SL_CTRL_R_BAD_DST;
	}
	default:
		return SL_CTRL_R_BAD_TYPE;
	}
}

/* Whether a frame of `type` may arrive on a port of `role`. */
static inline int sl_ctrl_port_allows(__u32 role, __u32 type)
{
	int dst = type == SL_CTRL_DST_PAUSE || type == SL_CTRL_DST_RESUME;
	if (role == SL_PORT_SWITCH_FACING)
		return !dst;
	if (role == SL_PORT_HOST_UPLINK)
		return dst;
	return 0;
}

#endif
