#!/bin/bash
# sluiced's switch mode with [switch] datapath = "hold" (the queues held in
# sluiced) on this kernel: integration_switch_hold_test, the topology of
# 45-switch-mode. A PAUSE frame stops one queue at once (no datagram of it
# arrives) while the other flows, RESUME restarts it, SIGTERM sends the held
# datagrams on exit (nothing lost), the frame on the host-facing port is
# rejected, sluiced killed with a queue paused does not blackhole it. Needs
# the qdisc tracepoints (5.17+); the test skips with the reason before. tcx
# cases on 6.6+ as in 45-switch-mode. The BPF side (bpf_swhold_test: two
# ports, divert, pause flags) runs in 30-bpf-tables.
# vm-timeout: 300
. "$SLUICE_VM_STEPLIB"

t=$BUILD/tests/integration/integration_switch_hold_test
[ -x "$t" ] || vm_fail "$t is not built"
log=/tmp/switch-hold-test.log
"$t" --gtest_color=no >"$log" 2>&1
rc=$?
grep -E '^\[ *(RUN|OK|SKIPPED|FAILED|PASSED) *\]|needs Linux|\[ info \]' "$log"
[ $rc -eq 0 ] || { cat "$log"; vm_fail "integration_switch_hold_test failed on $(uname -r): $(vm_gtest_why "$log")"; }

if ! vm_kernel_at_least 5 17; then
  vm_note "held data path skipped (qdisc tracepoints need Linux 5.17+)"
  exit 0
fi
# Every case the binary has runs once per attach mode (/1 clsact, /0 tcx).
cases=$(vm_gtest_count "$log" ran AttachModes/SwitchHold 1)
[ "$cases" -ge 3 ] || { cat "$log"; vm_fail "only $cases clsact cases ran (expected at least 3)"; }
passed=$(vm_gtest_count "$log" ok AttachModes/SwitchHold 1)
# A case skips (printed reason) only when sluiced's event loop stalled long
# enough to withdraw its heartbeat: the port failed open, as designed, and a
# held queue passes traffic; the 1-vCPU emulated guest does that now and
# then. Such a case counts, with a note; any other skip or failure does not.
starved_in() {  # starved skips among the cases of parameter $1 (0 tcx, 1 clsact)
  awk -v p="/$1" '/^\[ RUN/ { t = $NF } /HEARTBEAT_PAUSED: a starved machine/ && substr(t, length(t) - 1) == p { n++ } END { print n + 0 }' "$log"
}
starved=$(starved_in 1)
[ $((passed + starved)) -eq "$cases" ] || { cat "$log"; vm_fail "the clsact cases did not all pass ($passed of $cases, $starved skipped on a failed-open port)"; }
[ "$starved" -eq 0 ] || vm_note "$starved clsact case(s) skipped: sluiced stalled, the port failed open (as designed);"
tcx_ok=$(vm_gtest_count "$log" ok AttachModes/SwitchHold 0)
if vm_kernel_at_least 6 6; then
  tcx_starved=$(starved_in 0)
  [ $((tcx_ok + tcx_starved)) -eq "$cases" ] || { cat "$log"; vm_fail "tcx cases did not run on $(uname -r) ($tcx_ok of $cases passed)"; }
  [ "$tcx_starved" -eq 0 ] || vm_note "$tcx_starved tcx case(s) skipped: sluiced stalled, the port failed open (as designed);"
else
  vm_note "held data path on clsact; tcx cases skipped (tcx needs Linux 6.6+)"
fi
