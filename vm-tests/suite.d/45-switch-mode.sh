#!/bin/bash
# sluiced's switch mode on this kernel: integration_switch_mode_test (a
# router h1 -- sw -- h2 whose ports are sluice switch ports, logic pfc, 2
# queues each). A PAUSE control frame from the neighbour stops one queue
# while the other flows, RESUME restarts it, the same frame on the
# host-facing port is rejected and counted, sluiced killed with a queue
# paused does not blackhole it, SIGTERM removes the tree, the router's ARP
# leaves through a paused, backlogged queue 0. The test runs
# once per attach mode: clsact everywhere; tcx only where the kernel has it
# (6.6+), and the test itself skips with the reason otherwise. The BPF
# tables of the control-frame gate and the classifier (bpf_swport_test)
# run in 30-bpf-tables.
# vm-timeout: 240
. "$SLUICE_VM_STEPLIB"

t=$BUILD/tests/integration/integration_switch_mode_test
[ -x "$t" ] || vm_fail "$t is not built"
log=/tmp/switch-mode-test.log
# The lab topologies (python, one sluiced per switch) are a host test.
"$t" --gtest_color=no --gtest_filter='AttachModes/SwitchMode.*' >"$log" 2>&1
rc=$?
grep -E '^\[ *(RUN|OK|SKIPPED|FAILED|PASSED) *\]|needs Linux' "$log"
[ $rc -eq 0 ] || { cat "$log"; vm_fail "integration_switch_mode_test failed on $(uname -r): $(vm_gtest_why "$log")"; }

# Every case the binary has runs once per attach mode (/1 clsact, /0 tcx).
cases=$(vm_gtest_count "$log" ran AttachModes/SwitchMode 1)
[ "$cases" -ge 3 ] || { cat "$log"; vm_fail "only $cases clsact cases ran (expected at least 3)"; }
passed=$(vm_gtest_count "$log" ok AttachModes/SwitchMode 1)
[ "$passed" -eq "$cases" ] || { cat "$log"; vm_fail "the clsact cases did not all pass ($passed of $cases)"; }
tcx_ok=$(vm_gtest_count "$log" ok AttachModes/SwitchMode 0)
if vm_kernel_at_least 6 6; then
  [ "$tcx_ok" -eq "$cases" ] || { cat "$log"; vm_fail "tcx cases did not run on $(uname -r) ($tcx_ok of $cases passed)"; }
else
  vm_note "switch mode on clsact; tcx cases skipped (tcx needs Linux 6.6+)"
fi
