/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* TOP (token-oriented prioritization, top-tpds20 §4.4) wire format and the
 * maps of the sender's XDP token-expiry program (bpf/host/top_expiry.bpf.c).
 *
 * Every TOP packet is UDP (IPv4 or IPv6) to or from the TOP port, with one
 * fixed header at the start of the UDP payload. Multi-byte fields are in
 * network byte order. Token, data and signal packets share the header:
 *
 *   TOKEN   receiver -> sender. seq = token number of the flow (1, 2, ...),
 *           priority = token class (0 highest), tstamp_ns = receiver's
 *           synced clock (TAI) when the token was paced out.
 *   DATA    sender -> receiver. seq = data packet ID (0-based),
 *           aux = the token number it answers (credit-loss feedback),
 *           tstamp_ns = the answered token's timestamp, len = payload bytes.
 *   SYNC    sender -> receiver, opens a flow; struct sluice_top_sync follows.
 *   FIN     sender -> receiver, non-clairvoyant end (§4.4): sluice_top_sync
 *           follows with the final size; also a probe once all data is sent.
 *   NACK    receiver -> sender: aux IDs starting at seq are missing (§4.4
 *           "Packet Loss"); the sender resends them on the flow's next tokens.
 *   DONE    receiver -> sender: every packet arrived, the flow is closed.
 *
 * Which qdisc class a packet takes is its DSCP: tokens carry
 * SLUICE_TOP_DSCP_TOKEN0 + priority, signals SLUICE_TOP_DSCP_SIGNAL,
 * data SLUICE_TOP_DSCP_DATA (tc-scripts/top-switch.sh classifies on them). */
#ifndef SLUICE_TOP_H
#define SLUICE_TOP_H

#include "sluice/types.h"

#define SLUICE_TOP_MAGIC 0x5354 /* "ST" */
#define SLUICE_TOP_VERSION 1
#define SLUICE_TOP_DEFAULT_PORT 7217
/* §3.1/§5.2: six physical queues carry tokens. */
#define SLUICE_TOP_PRIORITIES 6

#define SLUICE_TOP_DSCP_SIGNAL 46
#define SLUICE_TOP_DSCP_TOKEN0 40 /* 40..45: token priority 0..5 */
#define SLUICE_TOP_DSCP_DATA 8

enum sluice_top_type {
	SLUICE_TOP_TOKEN = 1,
	SLUICE_TOP_DATA = 2,
	SLUICE_TOP_SYNC = 3,
	SLUICE_TOP_FIN = 4,
	SLUICE_TOP_NACK = 5,
	SLUICE_TOP_DONE = 6,
};

struct sluice_top_hdr {
	__u16 magic;   /* SLUICE_TOP_MAGIC */
	__u8 version;  /* SLUICE_TOP_VERSION */
	__u8 type;     /* enum sluice_top_type */
	__u8 priority; /* token class, 0 .. SLUICE_TOP_PRIORITIES-1 */
	__u8 flags;
	__u16 len; /* DATA: payload bytes after this header */
	__u64 flow_id;
	__u32 seq;
	__u32 aux;
	__u64 tstamp_ns; /* TAI nanoseconds */
};
SLUICE_STATIC_ASSERT(sizeof(struct sluice_top_hdr) == 32, "sluice_top_hdr is 32 bytes on the wire");

#define SLUICE_TOP_SYNC_SIZED 0x01 /* size_bytes is the flow size (clairvoyant) */

/* After the header of SYNC and FIN. */
struct sluice_top_sync {
	__u64 size_bytes;  /* flow size (SYNC with SIZED, FIN: final size) */
	__u64 deadline_ns; /* relative to the SYNC's tstamp_ns; 0 = none */
	__u16 mss;         /* payload bytes of a full data packet */
	__u8 sync_flags;   /* SLUICE_TOP_SYNC_* */
	__u8 prio_class;   /* 0xff: the receiver's objective decides */
	__u32 reserved;
};
SLUICE_STATIC_ASSERT(sizeof(struct sluice_top_sync) == 24, "sluice_top_sync is 24 bytes on the wire");

#define SLUICE_TOP_PRIO_BY_OBJECTIVE 0xff

/* ---- XDP token expiry (§4.3, R2) ---- */

/* sl_top_cfg_v1[0]. The agent writes it; the program reads it per token. */
struct sluice_top_expiry_config {
	__u64 threshold_ns;    /* T = base one-way delay + 2 x max per-hop token queueing (§5.1) */
	__u64 widen_ns;        /* added to T while the clock is unsynced or off by more than the bound */
	__s64 local_offset_ns; /* added to this host's clock reading: the lab's injected skew */
	__u32 enabled;         /* 0: count tokens, never drop (top-noexpiry) */
	__u32 reserved;
};

/* sl_top_corr_v1: per token source (the receiver host), the correction
 * added to a token's sojourn time: how far that host's clock runs ahead of
 * ours (offset_peer - offset_local, both against the PTP master). Absent: 0. */
struct sluice_top_peer_key {
	__u32 family;  /* 4 or 6 */
	__u32 addr[4]; /* network order; IPv4 in addr[0] */
};

/* sl_top_stats_v1: per-CPU, index priority * SLUICE_TOP_EXPIRY_VERDICTS + verdict. */
enum sluice_top_expiry_verdict {
	SLUICE_TOP_X_VALID = 0,
	SLUICE_TOP_X_EXPIRED = 1,
	SLUICE_TOP_X_FUTURE = 2, /* timestamp ahead of now: passed, counted */
	SLUICE_TOP_X_SENT = 3,   /* tokens this host paced out (tc egress, receiver side) */
	SLUICE_TOP_EXPIRY_VERDICTS = 4,
};
#define SLUICE_TOP_STATS_SLOTS (SLUICE_TOP_PRIORITIES * SLUICE_TOP_EXPIRY_VERDICTS)

/* sl_top_flows_v1: what this host's interface saw of each TOP flow, keyed
 * by the peer (the other end) and the flow id; LRU, for `sluicectl top`.
 * Tokens sent (egress) on the receiver host; tokens valid/expired (XDP)
 * and data sent on the sender host; data received on the receiver host. */
struct sluice_top_flow_key {
	__u32 family;  /* 4 or 6 */
	__u32 addr[4]; /* the peer, network order; IPv4 in addr[0] */
	__u32 pad;
	__u64 flow_id;
};
SLUICE_STATIC_ASSERT(sizeof(struct sluice_top_flow_key) == 32, "sluice_top_flow_key layout");

struct sluice_top_flow_stats {
	__u64 tokens_sent;
	__u64 tokens_valid;   /* passed by the expiry test (incl. "future") */
	__u64 tokens_expired; /* failed it (dropped unless expiry is off) */
	__u64 data_sent;
	__u64 data_received;
	__u64 last_ns;       /* bpf_ktime_get_ns() of the last packet */
	__u32 last_priority; /* token class of the last token */
	__u32 pad;
};
SLUICE_STATIC_ASSERT(sizeof(struct sluice_top_flow_stats) == 56, "sluice_top_flow_stats layout");

/* The §4.3 test: a token has expired when its sojourn time, measured on the
 * synced clock and corrected by the offsets, exceeds the threshold. Signed
 * arithmetic: a token stamped "in the future" (clock skew) has a negative
 * sojourn and is never dropped. Shared by the XDP program and the C++ model. */
static inline __s64 sluice_top_sojourn_ns(__u64 now_ns, __u64 tstamp_ns, __s64 correction_ns)
{
	return (__s64)(now_ns - tstamp_ns + (__u64)correction_ns);
}

static inline int sluice_top_token_expired(__s64 sojourn_ns, __u64 threshold_ns, __u64 widen_ns)
{
	return sojourn_ns > 0 && (__u64)sojourn_ns > threshold_ns + widen_ns;
}

#endif
