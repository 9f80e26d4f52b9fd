#!/bin/bash
# Pulser on this kernel, end to end in a tiny star: two sender namespaces
# and a receiver behind a switch namespace whose port to the receiver is a
# 50 Mbit/s TBF (bfifo child). sluiced on the switch registers sluice_dctcp
# and sluice_pulser and marks that port with aqm (on kernels before 6.2 the
# aqm_compat object, queue length from the qdisc tracepoints; the step
# checks the agent chose the right one); sluiced on every host runs ein.
# A long sluice_pulser flow from the first sender, then an incast burst
# from both senders: the switch must set EIN, the receiver echo it, the
# long flow's sender see the echoes and sluice_pulser brake (cwnd to
# cwnd_safe, counted by the congestion control) and restore.
# vm-timeout: 150
. "$SLUICE_VM_STEPLIB"

rate_mbit=50
run=/tmp/slvm-pulser
mkdir -p $run/bpf
# One bpffs for every agent: sl_ein_sk_v1 (per-socket EIN state) is shared by
# the congestion control (switch agent) and the hosts' ein programs.
# `ip netns exec` hides /sys/fs/bpf, not mounts under /tmp.
mount -t bpf bpf $run/bpf || vm_fail "mount bpffs"
cleanup() {
  vm_cleanup
  umount $run/bpf 2>/dev/null
}
trap cleanup EXIT

grep -qw slvm_pulser /proc/sys/net/ipv4/tcp_available_congestion_control &&
  vm_fail "slvm_pulser already registered before the step"

s1=slvmus1 s2=slvmus2 w=slvmuw r=slvmur
for n in $s1 $s2 $w $r; do vm_netns $n; done
link() {  # ns_a if_a addr_a ns_b if_b addr_b
  vm_veth "$@"
  # MTU-sized frames: per-packet queue samples and marks, as at a switch.
  ip netns exec "$1" ethtool -K "$2" tso off gso off gro off >/dev/null 2>&1
  ip netns exec "$4" ethtool -K "$5" tso off gso off gro off >/dev/null 2>&1
}
link $s1 slvmus1a 10.77.1.2/24 $w slvmuw1 10.77.1.1/24
link $s2 slvmus2a 10.77.2.2/24 $w slvmuw2 10.77.2.1/24
link $r slvmura 10.77.9.2/24 $w slvmuwr 10.77.9.1/24
ip -n $s1 route add default via 10.77.1.1
ip -n $s2 route add default via 10.77.2.1
ip -n $r route add default via 10.77.9.1
ip netns exec $w sysctl -qw net.ipv4.ip_forward=1
for n in $s1 $s2 $r; do ip netns exec $n sysctl -qw net.ipv4.tcp_ecn=1; done
tc -n $w qdisc add dev slvmuwr root handle 1: tbf rate ${rate_mbit}mbit burst 15k limit 400000 ||
  vm_fail "tbf bottleneck"
tc -n $w qdisc add dev slvmuwr parent 1:1 bfifo limit 400000 || vm_fail "bfifo under tbf"

config() {  # who body
  cat > $run/$1.toml <<TOML
[agent]
pin_root = "$run/bpf/sluice"
state_dir = "$run/state-$1"
control_socket = "$run/$1.sock"
[metrics]
enabled = false
$2
TOML
}
config w "[cc]
register = [\"dctcp\", \"pulser\"]
dctcp_name = \"slvm_dctcp\"
pulser_name = \"slvm_pulser\"
[aqm]
ecn_threshold_packets = 20
[[interface]]
name = \"slvmuwr\"
role = \"switch-port\"
mechanisms = [\"aqm\"]
line_rate_mbps = $rate_mbit"
for h in s1:$s1:slvmus1a s2:$s2:slvmus2a r:$r:slvmura; do
  IFS=: read -r who ns dev <<<"$h"
  config "$who" "[[interface]]
name = \"$dev\"
role = \"host\"
mechanisms = [\"ein\"]"
done
ctl() { "$BUILD/agent/sluicectl" --socket "$run/$1.sock" "${@:2}"; }
start_agent() {  # who ns
  vm_bg "sluiced-$1" ip netns exec "$2" "$BUILD/agent/sluiced" --config "$run/$1.toml"
  vm_wait_for 90 ctl "$1" status || { tail -20 "/tmp/sluiced-$1.log"; vm_fail "sluiced ($1) did not come up"; }
}
start_agent w $w
agent_w=$VM_BG_PID
for h in s1:$s1 s2:$s2 r:$r; do start_agent "${h%%:*}" "${h#*:}"; done

aqm_status() { ctl w status --json | jq -r ".interfaces[].modules[] | select(.name == \"aqm\") | .status.$1"; }
src=$(aqm_status queue_source)
vm_log "aqm on $(uname -r): object $(aqm_status object), queue source $src ($(aqm_status queue_source_why))"
if vm_kernel_at_least 6 2; then want=kern-ctx; else want=tracepoint; fi
[ "$src" = "$want" ] || vm_fail "aqm reads the queue from '$src' on $(uname -r), expected $want"

# A long Pulser flow s1 -> r (window above cwnd_safe to brake), then a
# barrier-synchronized incast into r from both senders (16 connections,
# 32 KB each, 3 rounds) while it runs.
vm_bg iperf3s ip netns exec $r iperf3 -s -1 -B 10.77.9.2
for h in s1:$s1:10.77.1.2 s2:$s2:10.77.2.2; do
  IFS=: read -r who ns ip <<<"$h"
  vm_bg "incast-$who" ip netns exec "$ns" "$BUILD/tests/integration/incast_tool" server 5300 slvm_pulser
done
listening() { ip netns exec "$1" ss -ltnH "sport = :$2" | grep -q .; }
vm_wait_for 20 listening $r 5201 || vm_fail "iperf3 server did not listen"
vm_wait_for 20 listening $s1 5300 || vm_fail "incast server on s1 did not listen"
vm_wait_for 20 listening $s2 5300 || vm_fail "incast server on s2 did not listen"

ip netns exec $s1 iperf3 -c 10.77.9.2 -C slvm_pulser -t 5 -J > $run/long.json &
long=$!
sleep 2
ip netns exec $r "$BUILD/tests/integration/incast_tool" client 16 32768 3 slvm_pulser \
  10.77.1.2:5300 10.77.2.2:5300 > $run/incast.json 2> $run/incast.err ||
  { cat $run/incast.err; vm_fail "incast failed"; }
# cwnd of the long flow from ss while it runs (shown, not asserted: the
# brake lasts about an RTT)
ss_cwnd=$(ip netns exec $s1 ss -tinH 'dport = :5201' | grep -o 'cwnd:[0-9]*' | tr '\n' ' ')
wait $long || vm_fail "long iperf3 flow failed"

module() { ctl "$1" stats --json | jq ".interfaces[].modules[] | select(.name == \"$2\") | .stats.$3 // 0"; }
cc() { ctl w status --json | jq ".congestion_control[] | select(.name == \"slvm_pulser\") | .$1 // 0"; }
ctl w stats
marks=$(module w aqm ein_marks)
ce=$(module w aqm ce_marks)
incasts=$(module w aqm incasts_detected)
events=$(module w aqm qdisc_events)
echo_set=$(module r ein echoes_set)
echo_rx=$(module s1 ein echoes_received)
brakes=$(cc brakes)
restores=$(cc restores)
sockets=$(cc sockets)
gp=$(jq '.end.sum_received.bits_per_second / 1e6 | floor' $run/long.json)
vm_log "incast: $(tail -1 $run/incast.json); long flow ${gp} Mbit/s of ${rate_mbit}; cwnd now ${ss_cwnd:-?}"
vm_log "switch: EIN marks $marks, CE marks $ce, incasts detected $incasts, qdisc events $events; receiver echoes set $echo_set; sender s1 echoes received $echo_rx; sluice_pulser sockets $sockets, brakes $brakes, restores $restores"

[ "$sockets" -gt 0 ] || vm_fail "no socket took slvm_pulser"
[ "$marks" -gt 0 ] || vm_fail "the switch set no EIN mark during the incast (incasts detected $incasts)"
[ "$echo_set" -gt 0 ] || vm_fail "the receiver echoed no EIN"
[ "$echo_rx" -gt 0 ] || vm_fail "sender s1 received no EIN echo"
[ "$brakes" -gt 0 ] || vm_fail "sluice_pulser never braked although echoes arrived"
[ "$restores" -gt 0 ] || vm_note "no restore counted yet ($brakes brakes)"
vm_note "EIN marks $marks, echoes $echo_set/$echo_rx, brakes $brakes, restores $restores (queue source $src)"

kill -TERM $agent_w
for _ in $(seq 50); do kill -0 $agent_w 2>/dev/null || break; sleep 0.1; done
wait $agent_w
grep -qw slvm_pulser /proc/sys/net/ipv4/tcp_available_congestion_control &&
  vm_fail "slvm_pulser still registered after the switch agent's SIGTERM"
exit 0
