#!/usr/bin/env bash
# Makes a Linux egress port a TOP switch port (top-tpds20 §3.1 R1, §4.2) with
# one HTB tree, classifying on the DSCP the TOP transport sets
# (include/sluice/top.h):
#
#   1:1   root, the link rate
#   1:10  signals (DSCP 46): prio 0, may use the whole link
#   1:20  token group (DSCP 40..45): rate = ceil = token/(token + data) of
#         the link (98/(98+1538) = 5.99%: sluice-top's token is a 74-byte
#         frame, 98 B on the wire; a data frame 1538 B), never more
#     1:21..1:26  token classes 0..5: a minimal assured rate, ceil = the
#                 group, HTB prio 0..5 (strict order when borrowing from the
#                 group), pfifo of 8 tokens (ExpressPass's queue length)
#   1:30  data (DSCP 8 and everything else): the rest, may borrow to the link
#
#   top-switch.sh add DEV RATE_MBIT [TOKEN_QUEUE=8] [DATA_BUFFER_BYTES=1000000] [TOKEN_BURST=0]
#   top-switch.sh del DEV
#   top-switch.sh show DEV
#
# HTB serves a leaf's assured rate round-robin before any borrowing, so the
# strict priority among token classes is exact only above the leaves' assured
# rates (8 kbit each here); bench/top/htb_check.py measures both properties.
# Frames are charged with 24 bytes of Ethernet overhead (preamble, FCS, gap)
# and at least 84 bytes; the split uses the frames as charged, so the group
# passes exactly one token per receiver pacing slot (wire.h pacing_slot_ns).
# TOKEN_BURST > 0: the group passes at most that many tokens back to back
# (burst = cburst = TOKEN_BURST x 98 B; each class's own assured-rate burst
# one token). 0: HTB's default bursts, 1600 B at these rates: 16 tokens, so
# after a quiet spell the group lets up to 16 tokens through at once and their
# data queues at the bottleneck, where it drains at 6% of the link (docs/top.md
# "Data mining in the lab against the model").
set -euo pipefail
cmd=${1:-}
dev=${2:-}
usage() { sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ -n "$cmd" ] && [ -n "$dev" ] || usage
case $cmd in
  del) tc qdisc del dev "$dev" root 2>/dev/null || true; exit 0 ;;
  show) tc -s class show dev "$dev"; exit 0 ;;
  add) ;;
  *) usage ;;
esac
rate=${3:-}
qlen=${4:-8}
dbuf=${5:-1000000}
tburst=${6:-0}
[[ $rate =~ ^[0-9]+$ && $rate -ge 1 ]] || { echo "top-switch: RATE_MBIT '$rate': want a positive integer" >&2; exit 2; }
[[ $qlen =~ ^[0-9]+$ && $qlen -ge 1 ]] || { echo "top-switch: TOKEN_QUEUE '$qlen': want a positive integer" >&2; exit 2; }
[[ $dbuf =~ ^[0-9]+$ && $dbuf -ge 1600 ]] || { echo "top-switch: DATA_BUFFER_BYTES '$dbuf': want an integer >= 1600" >&2; exit 2; }
[[ $tburst =~ ^[0-9]+$ && $tburst -le 64 ]] || { echo "top-switch: TOKEN_BURST '$tburst': want an integer 0..64" >&2; exit 2; }
ip link show dev "$dev" >/dev/null 2>&1 || { echo "top-switch: no device $dev" >&2; exit 2; }

link_kbit=$((rate * 1000))
tok_kbit=$((link_kbit * 98 / (98 + 1538)))
data_kbit=$((link_kbit - tok_kbit - 100))
ovh="overhead 24 mpu 84"
q=1600  # one full frame per round
gburst="" lburst=""
if [ "$tburst" -gt 0 ]; then
  gburst="burst $((tburst * 98))b cburst $((tburst * 98))b"
  lburst="burst 98b cburst $((tburst * 98))b"
fi

tc qdisc del dev "$dev" root 2>/dev/null || true
set -x
tc qdisc add dev "$dev" root handle 1: htb default 30
tc class add dev "$dev" parent 1: classid 1:1 htb rate ${link_kbit}kbit ceil ${link_kbit}kbit $ovh quantum $q
tc class add dev "$dev" parent 1:1 classid 1:10 htb rate 100kbit ceil ${link_kbit}kbit prio 0 $ovh quantum $q
tc class add dev "$dev" parent 1:1 classid 1:20 htb rate ${tok_kbit}kbit ceil ${tok_kbit}kbit prio 1 $ovh quantum $q $gburst
for p in 0 1 2 3 4 5; do
  tc class add dev "$dev" parent 1:20 classid 1:2$((p + 1)) htb rate 8kbit ceil ${tok_kbit}kbit prio $p $ovh quantum $q $lburst
  tc qdisc add dev "$dev" parent 1:2$((p + 1)) handle 2$((p + 1)): pfifo limit "$qlen"
  tc filter add dev "$dev" parent 1: protocol ip prio 1 u32 match ip dsfield $(((40 + p) << 2)) 0xfc flowid 1:2$((p + 1))
done
tc class add dev "$dev" parent 1:1 classid 1:30 htb rate ${data_kbit}kbit ceil ${link_kbit}kbit prio 2 $ovh quantum $q
tc qdisc add dev "$dev" parent 1:10 handle 10: pfifo limit 1000
tc qdisc add dev "$dev" parent 1:30 handle 30: bfifo limit "$dbuf"
tc filter add dev "$dev" parent 1: protocol ip prio 1 u32 match ip dsfield $((46 << 2)) 0xfc flowid 1:10
