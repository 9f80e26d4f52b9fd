#!/bin/bash
# sluiced's switch mode on this kernel: integration_switch_mode_test (a
# router h1 -- sw -- h2 whose ports are sluice switch ports, logic pfc, 2
# queues each). A PAUSE control frame from the neighbour stops one queue
# while the other flows, RESUME restarts it, the same frame on the
# host-facing port is rejected and counted, sluiced killed with a queue
# paused does not blackhole it, SIGTERM removes the tree. The test runs
# once per attach mode: clsact everywhere; tcx only where the kernel has it
# (6.6+), and the test itself skips with the reason otherwise. The BPF
# tables of the control-frame gate and the classifier (bpf_swport_test)
# run in 30-bpf-tables.
# vm-timeout: 150
. "$SLUICE_VM_STEPLIB"

t=$BUILD/tests/integration/integration_switch_mode_test
[ -x "$t" ] || vm_fail "$t is not built"
log=/tmp/switch-mode-test.log
# The lab topologies (python, one sluiced per switch) are a host test.
"$t" --gtest_color=no --gtest_filter='AttachModes/SwitchMode.*' >"$log" 2>&1
rc=$?
grep -E '^\[ *(RUN|OK|SKIPPED|FAILED|PASSED) *\]|needs Linux' "$log"
[ $rc -eq 0 ] || { cat "$log"; vm_fail "integration_switch_mode_test failed on $(uname -r): $(vm_gtest_why "$log")"; }

passed=$(grep -cE '^\[ +OK \] AttachModes/SwitchMode\.[^ ]+/1 ' "$log")
[ "$passed" -eq 2 ] || { cat "$log"; vm_fail "the clsact cases did not both pass ($passed of 2)"; }
tcx_ok=$(grep -cE '^\[ +OK \] AttachModes/SwitchMode\.[^ ]+/0 ' "$log")
if vm_kernel_at_least 6 6; then
  [ "$tcx_ok" -eq 2 ] || { cat "$log"; vm_fail "tcx cases did not run on $(uname -r) ($tcx_ok of 2 passed)"; }
else
  vm_note "switch mode on clsact; tcx cases skipped (tcx needs Linux 6.6+)"
fi
