#!/bin/bash
# PAC on this kernel, end to end at small N: a receiver namespace runs
# sluiced with pac on its interface; 8 parallel TCP flows from a sender
# namespace cross a 50 Mbit/s TBF bottleneck with a 32 KB buffer (the
# "switch" port toward the receiver). PAC's threshold starts at that buffer,
# so ACKs must be both admitted in the kernel and held and released by the
# agent (re-injected), no connection may stall, and SIGTERM
# must leave no filter behind. Goodput against a baseline is a benchmark
# (bench/run incast --variants baseline,pac), not asserted here.
# vm-timeout: 180
. "$SLUICE_VM_STEPLIB"

rate_mbit=50
s=slvmps r=slvmpr ifs=slvmps0 ifr=slvmpr0
vm_netns $s
vm_netns $r
vm_veth $s $ifs 10.79.0.1/24 $r $ifr 10.79.0.2/24
ip netns exec $s ethtool -K $ifs tso off gso off >/dev/null 2>&1
tc -n $s qdisc add dev $ifs root tbf rate ${rate_mbit}mbit burst 32k limit 32768 ||
  vm_fail "tbf bottleneck"

run=/tmp/pac-smoke
mkdir -p $run
cat > $run/sluiced.toml <<TOML
[agent]
pin_root = "/sys/fs/bpf/sluice-pac"
state_dir = "$run/state"
control_socket = "$run/sluiced.sock"
[metrics]
enabled = false
[pac]
buffer_bytes = 32768
[[interface]]
name = "$ifr"
role = "host"
mechanisms = ["pac"]
TOML
vm_bg sluiced ip netns exec $r "$BUILD/agent/sluiced" --config $run/sluiced.toml
agent=$VM_BG_PID
ctl() { "$BUILD/agent/sluicectl" --socket $run/sluiced.sock "$@"; }
vm_wait_for 90 ctl status || { cat /tmp/sluiced.log; vm_fail "sluiced with pac did not come up"; }

vm_bg iperf3s ip netns exec $r iperf3 -s -1 -B 10.79.0.2
listening() { ip netns exec $r ss -ltnH 'sport = :5201' | grep -q .; }
vm_wait_for 20 listening || vm_fail "iperf3 server did not listen"
ip netns exec $s iperf3 -c 10.79.0.2 -P 8 -t 3 -J > $run/iperf.json ||
  { tail -20 /tmp/sluiced.log; vm_fail "iperf3 with 8 flows failed under pac"; }

pac() { ctl stats --json | jq ".interfaces[].modules[] | select(.name == \"pac\") | $1"; }
verdict() { ctl stats --json | jq "[.interfaces[].modules[] | select(.name == \"pac\") | .programs[].verdicts[] | select(.reason == \"$1\") | .packets] | add // 0"; }
ctl stats
gp=$(jq '.end.sum_received.bits_per_second / 1e6 | floor' $run/iperf.json)
admitted=$(verdict PAC_ADMIT)
diverted=$(verdict PAC_DIVERT)
held=$(pac .stats.held_events)
released=$(pac .stats.released)
stalls=$(pac .stats.stalls)
vm_log "8 flows: ${gp} Mbit/s of ${rate_mbit}; ACKs admitted in the kernel $admitted, diverted $diverted, held $held, released $released, stalls $stalls"

[ "$admitted" -gt 0 ] || vm_fail "no ACK was admitted in the kernel"
[ "$diverted" -gt 0 ] && [ "$held" -gt 0 ] || vm_fail "no ACK was held (diverted $diverted, held $held) with a 32 KB threshold and 8 flows"
[ "$released" -gt 0 ] || vm_fail "held ACKs were never released"
# A stalled connection would show as near zero; TCG and a busy host make
# anything finer noisy (the agent's heartbeat can lag: see PAC_FAIL_OPEN).
awk -v gp="$gp" -v r=$rate_mbit 'BEGIN { exit !(gp >= 0.25 * r) }' ||
  vm_fail "8 flows under pac reached only ${gp} of ${rate_mbit} Mbit/s"

kill -TERM $agent
for _ in $(seq 50); do kill -0 $agent 2>/dev/null || break; sleep 0.1; done
kill -0 $agent 2>/dev/null && vm_fail "sluiced did not exit within 5 s of SIGTERM"
wait $agent
rc=$?
[ $rc -eq 0 ] || { tail -20 /tmp/sluiced.log; vm_fail "sluiced exited $rc on SIGTERM"; }
left=$(tc -n $r filter show dev $ifr ingress; tc -n $r filter show dev $ifr egress)
[ -z "$left" ] || vm_fail "filters left on $ifr after SIGTERM: $left"
