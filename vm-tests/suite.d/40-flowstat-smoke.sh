#!/bin/bash
# flowstat on this kernel, end to end: sluiced attached to a veth inside a
# network namespace, real TCP traffic to a second namespace, and the
# counters `sluicectl stats --json` reports must move and agree with the
# kernel's own interface counters. SIGTERM must leave no filter behind.
# vm-timeout: 180
. "$SLUICE_VM_STEPLIB"

a=slvmfa b=slvmfb ifa=slvmfa0 ifb=slvmfb0
vm_netns $a
vm_netns $b
vm_veth $a $ifa 10.77.0.1/24 $b $ifb 10.77.0.2/24

run=/tmp/flowstat-smoke
mkdir -p $run
cat > $run/sluiced.toml <<TOML
[agent]
pin_root = "/sys/fs/bpf/sluice-smoke"
state_dir = "$run/state"
control_socket = "$run/sluiced.sock"
[metrics]
enabled = false
[[interface]]
name = "$ifa"
role = "host"
mechanisms = ["flowstat"]
TOML
vm_bg sluiced ip netns exec $a "$BUILD/agent/sluiced" --config $run/sluiced.toml
agent=$VM_BG_PID
ctl() { "$BUILD/agent/sluicectl" --socket $run/sluiced.sock "$@"; }
vm_wait_for 90 ctl status || { cat /tmp/sluiced.log; vm_fail "sluiced did not come up"; }
ctl status

# auto attach mode: tcx where the kernel has it (6.6+), clsact otherwise.
modes=$(ctl status --json | jq -r '.interfaces[].modules[].status.attachments[].mode' | sort -u)
if vm_kernel_at_least 6 6; then want=tcx; else want=clsact; fi
[ "$modes" = "$want" ] || vm_fail "attach mode '$modes', expected $want on $(uname -r)"

txb() { ip -n $a -j -s link show dev $ifa | jq '.[0].stats64.tx.bytes'; }
rxb() { ip -n $a -j -s link show dev $ifa | jq '.[0].stats64.rx.bytes'; }
st() { ctl stats --json | jq ".interfaces[] | select(.name == \"$ifa\") | .modules[] | select(.name == \"flowstat\") | .stats.$1"; }

vm_bg iperf3s ip netns exec $b iperf3 -s -1 -B 10.77.0.2
listening() { ip netns exec $b ss -ltnH 'sport = :5201' | grep -q .; }
vm_wait_for 20 listening || vm_fail "iperf3 server did not listen"
tx0=$(txb) rx0=$(rxb) e0=$(st egress.bytes) i0=$(st ingress.bytes)
ip netns exec $a iperf3 -c 10.77.0.2 -t 2 -J > $run/iperf.json || { cat /tmp/iperf3s.log; vm_fail "iperf3 failed"; }
# Received, not sent: iperf3 counts what it wrote, and discards what is
# still buffered when the test ends.
sent=$(jq '.end.sum_received.bytes' $run/iperf.json)
sleep 0.3
tx1=$(txb) rx1=$(rxb) e1=$(st egress.bytes) i1=$(st ingress.bytes)
flows=$(ctl flows --json | jq "[.interfaces[].flows[] | select(.proto == \"tcp\" and (.dport == 5201 or .sport == 5201))] | length")
ctl stats
vm_log "iperf3 delivered $sent B; veth tx $((tx1 - tx0)) B rx $((rx1 - rx0)) B; flowstat egress $((e1 - e0)) B ingress $((i1 - i0)) B; iperf3 flows $flows"

[ "$sent" -gt 0 ] || vm_fail "iperf3 delivered nothing"
[ "$flows" -ge 2 ] || vm_fail "flowstat shows $flows TCP flows to/from port 5201 (want the control and the data connection)"
# Same packets, counted by our tc programs and by the veth driver.
within() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(b > 0 && a >= 0.95 * b && a <= 1.05 * b) }'; }
within $((e1 - e0)) $((tx1 - tx0)) || vm_fail "flowstat egress bytes $((e1 - e0)) differ from veth tx bytes $((tx1 - tx0)) by more than 5%"
within $((i1 - i0)) $((rx1 - rx0)) || vm_fail "flowstat ingress bytes $((i1 - i0)) differ from veth rx bytes $((rx1 - rx0)) by more than 5%"
[ $((e1 - e0)) -ge "$sent" ] || vm_fail "flowstat egress bytes $((e1 - e0)) < payload bytes iperf3 delivered ($sent)"

kill -TERM $agent
for _ in $(seq 50); do kill -0 $agent 2>/dev/null || break; sleep 0.1; done
kill -0 $agent 2>/dev/null && vm_fail "sluiced did not exit within 5 s of SIGTERM"
wait $agent
rc=$?
[ $rc -eq 0 ] || { cat /tmp/sluiced.log; vm_fail "sluiced exited $rc on SIGTERM"; }
left=$(ip netns exec $a tc filter show dev $ifa ingress; ip netns exec $a tc filter show dev $ifa egress)
[ -z "$left" ] || vm_fail "filters left on $ifa after SIGTERM: $left"
vm_log "flowstat counted the traffic on $(uname -r); detached cleanly"
