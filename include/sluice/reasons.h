/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Every verdict a sluice BPF program returns carries a reason code, counted
 * per CPU as {packets, bytes} in the program's `sl_counters` array. The list
 * is an X-macro so BPF and C++ expand the same table: X(NAME, verdict, text).
 * Append only: the numeric value of a reason is ABI (pinned maps survive
 * agent upgrades). */
#ifndef SLUICE_REASONS_H
#define SLUICE_REASONS_H

#include "sluice/types.h"

/* clang-format off: a table, aligned by hand */
#define SLUICE_REASONS(X)                                                                                    \
	X(PASS_NOT_IP, "pass", "not IPv4/IPv6")                                                              \
	X(PASS_MALFORMED, "pass", "truncated or malformed header")                                           \
	X(PASS_OTHER_L4, "pass", "L4 protocol other than TCP/UDP")                                           \
	X(PASS_COUNTED, "pass", "flow counted")                                                              \
	X(PASS_FLOW_TABLE_FULL, "pass", "flow table update failed")                                          \
	X(PASS_IP_FRAGMENT, "pass", "non-first IP fragment, no L4 header")                                   \
	X(PAC_UNMANAGED, "pass", "PAC: flow not managed")                                                    \
	X(PAC_NOT_PURE_ACK, "pass", "PAC: SYN/FIN/RST or data, never held")                                  \
	X(PAC_DATA, "pass", "PAC: data segment accounted (eq. 5)")                                           \
	X(PAC_ADMIT, "pass", "PAC: ACK admitted in the kernel")                                              \
	X(PAC_DIVERT, "drop", "PAC: ACK copied to the agent to hold")                                        \
	X(PAC_REINJECTED, "pass", "PAC: held ACK released by the agent")                                     \
	X(PAC_FAIL_OPEN, "pass", "PAC: agent heartbeat stale, ACK passed")                                   \
	X(PAC_RING_FULL, "pass", "PAC: ring buffer full, ACK passed")                                        \
	X(PAC_UNKNOWN_FLOW, "pass", "PAC: ACK of a flow with no data seen")                                  \
	X(PAC_FRAME_TOO_BIG, "pass", "PAC: ACK frame larger than the copy")                                  \
	X(PAC_WINDOW_REOPEN, "pass", "PAC: window update after zero window")                                 \
	X(PAC_FLOW_TABLE_FULL, "pass", "PAC: flow table update failed")                                      \
	X(PASS_FAULT_NO_MATCH, "pass", "fault injection: not a selected packet")                             \
	X(PASS_FAULT_SPARED, "pass", "fault injection: selected, left alone")                                \
	X(DROP_FAULT, "drop", "fault injection: dropped")                                                    \
	X(PASS_FAULT_CORRUPTED, "pass", "fault injection: IPv4 checksum broken")                             \
	X(PASS_FAULT_DELAYED, "pass", "fault injection: steered to delay class")                             \
	X(PASS_FAULT_NO_CORRUPT, "pass", "fault injection: corruption needs IPv4")                           \
	X(AQM_UNMARKED, "pass", "below K and no incast: unmarked")                                           \
	X(AQM_CE, "pass", "queue over K: CE set")                                                            \
	X(AQM_EIN, "pass", "incast (Pulser Alg. 1): EIN set")                                                \
	X(AQM_CE_EIN, "pass", "queue over K and incast: CE and EIN set")                                     \
	X(AQM_NOT_ECT, "pass", "queue over K, not ECN-capable: unmarked (RFC 3168)")                         \
	X(AQM_ALREADY_CE, "pass", "queue over K, already CE")                                                \
	X(AQM_REWRITE_FAILED, "pass", "marking the IP header failed")                                        \
	X(EIN_NONE, "pass", "TCP without EIN mark or echo")                                                  \
	X(EIN_MARK_RECORDED, "pass", "EIN-marked data of a Pulser flow: echo pending")                       \
	X(EIN_MARK_UNMANAGED, "pass", "EIN mark on a flow Pulser does not manage: ignored")                  \
	X(EIN_ECHO_RECEIVED, "pass", "EIN echo on an ACK of a Pulser flow: handed to the CC")                \
	X(EIN_ECHO_UNMANAGED, "pass", "EIN echo on a flow Pulser does not manage: ignored")                  \
	X(EIN_ECHO_SET, "pass", "EIN echo set on an outgoing ACK")                                           \
	X(EIN_ECHO_STALE, "pass", "EIN mark too old to echo: dropped")                                       \
	X(EIN_REWRITE_FAILED, "pass", "setting the echo bit failed")                                         \
	X(PAC_SUPERSEDE, "pass", "PAC: newer cumulative ACK fits, admitted ahead of its flow's held ACKs")   \
	X(PAC_REQUEST_DUP, "drop", "PAC: our TCP resent a request the agent still holds: absorbed")          \
	X(AQM_DEPART_EIN, "pass", "left the queue during an incast (Pulser Alg. 1): EIN set at the far end") \
	X(AQM_DEPART_NONE, "pass", "left the queue, no incast or not TCP data: unmarked at the far end")     \
	X(TOP_NOT_TOP, "pass", "TOP: not UDP to the TOP port")                                               \
	X(TOP_MALFORMED, "pass", "TOP: short or malformed TOP header, left to the transport")                \
	X(TOP_NOT_TOKEN, "pass", "TOP: data or signal packet")                                               \
	X(TOP_TOKEN_VALID, "pass", "TOP: token within the expiry threshold (§4.3)")                          \
	X(TOP_TOKEN_EXPIRED, "drop", "TOP: token sojourn above the threshold (§4.3 R2): dropped")            \
	X(TOP_EXPIRED_KEPT, "pass", "TOP: expired token passed, expiry disabled")                            \
	X(TOP_NO_CONFIG, "pass", "TOP: no expiry config: token passed")                                      \
	X(TOP_EGRESS_COUNTED, "pass", "TOP: token or data leaving, counted for its flow")                    \
	X(TOP_FAIL_OPEN, "pass", "TOP: expired token passed, agent heartbeat stale")
/* clang-format on */

enum sluice_reason {
#define SLUICE_REASON_ENUM(name, verdict, text) SLUICE_R_##name,
	SLUICE_REASONS(SLUICE_REASON_ENUM)
#undef SLUICE_REASON_ENUM
		SLUICE_R__COUNT,
};

/* Size of every sl_counters array: room to append reasons without resizing
 * maps that are already pinned. */
#define SLUICE_REASON_SLOTS 64
SLUICE_STATIC_ASSERT(SLUICE_R__COUNT <= SLUICE_REASON_SLOTS, "too many reason codes for SLUICE_REASON_SLOTS");

/* Value of a per-CPU sl_counters slot. */
struct sluice_counter {
	__u64 packets;
	__u64 bytes;
};

#endif
