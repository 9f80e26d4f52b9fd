// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* ein: the host half of Pulser's EIN (Pulser §III-A, §III-B) at tc ingress
 * and egress of a host interface.
 *
 * Receiver: EIN on incoming data of a Pulser flow is remembered in the
 * socket's sl_ein_sk_v1 entry; the ACKs the socket sends while the mark is
 * fresh carry the echo (TCP reserved bit 0x02 of byte 12), until one of them
 * acknowledges the marked segment.
 * Sender: an incoming ACK carrying the echo bumps echo_acks of its socket
 * before TCP processes it, which is where sluice_pulser looks.
 *
 * "A Pulser flow" is a socket with an sl_ein_sk_v1 entry: sluice_pulser creates
 * it for the sockets it runs. Marks and echoes on other flows are ignored
 * and counted. Packets are never dropped or redirected: the verdict is
 * always the neutral one. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "sluice/pulser.h"
#include "lib/parse.h"
#include "lib/counters.h"
#include "lib/verdict.h"
#include "lib/ein.h"
#include "lib/ein_sk.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* A mark older than this is not echoed (set from [ein] echo_fresh_us). */
const volatile __u64 echo_fresh_ns = 2000000;

#define SL_BPF_F_CURRENT_NETNS (-1L)

/* The local socket of a packet. `incoming`: the packet's destination is
 * local; else its source is (an outgoing packet seen without skb->sk). The
 * caller releases it. */
static __always_inline struct bpf_sock *lookup_sock(struct __sk_buff *skb, const struct sl_pkt *p, int incoming)
{
	struct bpf_sock_tuple t = {};
	__u32 len;

	if (p->family == 4) {
		t.ipv4.saddr = incoming ? p->saddr[0] : p->daddr[0];
		t.ipv4.daddr = incoming ? p->daddr[0] : p->saddr[0];
		t.ipv4.sport = incoming ? p->sport : p->dport;
		t.ipv4.dport = incoming ? p->dport : p->sport;
		len = sizeof(t.ipv4);
	} else {
		__builtin_memcpy(t.ipv6.saddr, incoming ? p->saddr : p->daddr, 16);
		__builtin_memcpy(t.ipv6.daddr, incoming ? p->daddr : p->saddr, 16);
		t.ipv6.sport = incoming ? p->sport : p->dport;
		t.ipv6.dport = incoming ? p->dport : p->sport;
		len = sizeof(t.ipv6);
	}
	return bpf_sk_lookup_tcp(skb, &t, len, SL_BPF_F_CURRENT_NETNS, 0);
}

SEC("tc")
int ein_ingress(struct __sk_buff *skb)
{
	struct sl_pkt p = {};

	if (sl_parse_tcp_counted(skb, &p, SLUICE_R_PASS_OTHER_L4))
		return SL_TC_NEXT;

	int echo = (p.tcp_res & (SLUICE_EIN_ECHO_BIT >> 1)) != 0;
	int ein = p.payload_len > 0 && sl_ein_get(skb, &p);
	if (!echo && !ein) {
		sl_count(SLUICE_R_EIN_NONE, skb->len);
		return SL_TC_NEXT;
	}

	struct sluice_ein_sk *st = 0;
	struct bpf_sock *sk = lookup_sock(skb, &p, 1);
	if (sk) {
		st = bpf_sk_storage_get(&sl_ein_sk_v1, sk, 0, 0);
		bpf_sk_release(sk);
	}

	if (ein && st) {
		/* Receiver: remember the newest marked segment. */
		__u32 end = p.seq + p.payload_len;
		if (!st->ein_pending || sl_seq_before(st->ein_end_seq, end))
			st->ein_end_seq = end;
		st->ein_ns = bpf_ktime_get_ns();
		st->ein_pending = 1;
		__sync_fetch_and_add(&st->ein_data, 1);
	}
	if (echo) {
		/* Sender: visible to sluice_pulser's in_ack_event for this ACK. */
		if (st) {
			__sync_fetch_and_add(&st->echo_acks, 1);
			sl_count(SLUICE_R_EIN_ECHO_RECEIVED, skb->len);
		} else {
			sl_count(SLUICE_R_EIN_ECHO_UNMANAGED, skb->len);
		}
		return SL_TC_NEXT;
	}
	sl_count(st ? SLUICE_R_EIN_MARK_RECORDED : SLUICE_R_EIN_MARK_UNMANAGED, skb->len);
	return SL_TC_NEXT;
}

/* Sets the echo bit, fixing the TCP checksum incrementally (for a
 * CHECKSUM_PARTIAL skb the helper leaves the pseudo-header sum alone, which
 * is right: the final sum is computed later over the new header). */
static __always_inline int set_echo(struct __sk_buff *skb, const struct sl_pkt *p)
{
	__u32 off = p->l4_off + 12;
	__be16 oldw, neww;

	if (bpf_skb_load_bytes(skb, off, &oldw, sizeof(oldw)))
		return -1;
	neww = oldw | bpf_htons((__u16)SLUICE_EIN_ECHO_BIT << 8);
	if (neww == oldw)
		return 0;
	if (bpf_l4_csum_replace(skb, p->l4_off + 16, oldw, neww, sizeof(neww)))
		return -1;
	return bpf_skb_store_bytes(skb, off, &neww, sizeof(neww), 0) ? -1 : 0;
}

SEC("tc")
int ein_egress(struct __sk_buff *skb)
{
	struct sl_pkt p = {};

	if (sl_parse_tcp_counted(skb, &p, SLUICE_R_PASS_OTHER_L4))
		return SL_TC_NEXT;
	if (!(p.tcp_flags & SL_TCP_ACK) || (p.tcp_flags & (SL_TCP_SYN | SL_TCP_RST))) {
		sl_count(SLUICE_R_EIN_NONE, skb->len);
		return SL_TC_NEXT;
	}

	struct sluice_ein_sk *st = 0;
	struct bpf_sock *own = skb->sk;
	if (own)
		own = bpf_sk_fullsock(own);
	if (own && own->protocol == IPPROTO_TCP_NUM) {
		st = bpf_sk_storage_get(&sl_ein_sk_v1, own, 0, 0);
	} else {
		struct bpf_sock *sk = lookup_sock(skb, &p, 0);
		if (sk) {
			st = bpf_sk_storage_get(&sl_ein_sk_v1, sk, 0, 0);
			bpf_sk_release(sk);
		}
	}
	if (!st || !st->ein_pending) {
		sl_count(SLUICE_R_EIN_NONE, skb->len);
		return SL_TC_NEXT;
	}

	__u64 now = bpf_ktime_get_ns();
	if (now - st->ein_ns > echo_fresh_ns) {
		st->ein_pending = 0;
		sl_count(SLUICE_R_EIN_ECHO_STALE, skb->len);
		return SL_TC_NEXT;
	}
	if (set_echo(skb, &p)) {
		sl_count(SLUICE_R_EIN_REWRITE_FAILED, skb->len);
		return SL_TC_NEXT;
	}
	__sync_fetch_and_add(&st->echo_sent, 1);
	/* Fresh until an ACK covers the newest marked segment. */
	if (!sl_seq_before(p.ack_seq, st->ein_end_seq))
		st->ein_pending = 0;
	sl_count(SLUICE_R_EIN_ECHO_SET, skb->len);
	return SL_TC_NEXT;
}
