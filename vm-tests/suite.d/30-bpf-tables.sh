#!/bin/bash
# The BPF_PROG_TEST_RUN tables (ctest label `bpf`) against this kernel.
# sluice-objcheck ran in the previous step, so its ctest entries are left out.
# Tests for features this kernel predates skip with a reason; the reasons are
# printed here and named in the summary.
# vm-timeout: 440
. "$SLUICE_VM_STEPLIB"

cd "$BUILD" || vm_fail "no build directory"
log=/tmp/bpf-ctest.log
# bpf_random_input_test drives 10^6 frames per program on the host; under
# QEMU's software emulation a few thousand per program prove the same
# invariants on this kernel within the step's time.
export SLUICE_BPF_RANDOM_FRAMES=${SLUICE_BPF_RANDOM_FRAMES:-2000}
# bpf_flow_scale_test: just over flowstat's table size (65,536), so it evicts.
export SLUICE_BPF_SCALE_FLOWS=${SLUICE_BPF_SCALE_FLOWS:-70000}
# Bounded below the step's own limit, so that a slow run still says which
# test it was in and how long the others took.
timeout 410 ctest -L bpf -E '^bpf_obj' --no-tests=error --output-on-failure --timeout 150 -V >"$log" 2>&1
rc=$?
grep -E '^[0-9]+/[0-9]+ Test|^[0-9]+% tests' "$log"
if [ $rc -eq 124 ]; then
  vm_log "ctest -L bpf stopped after 290 s; it was in: $(grep -E '^ *Start +[0-9]+: ' "$log" | tail -1 | sed 's/^ *//')"
fi
skipped=$(grep -cE '^[0-9]+: \[  SKIPPED \] [^ ]+ \([0-9]+ ms\)' "$log")
if [ "$skipped" -gt 0 ]; then
  reasons=$(grep -E '^[0-9]+: .*needs Linux' "$log" | sed 's/^[0-9]*: //; s/; this kernel is.*//' | sort -u)
  while read -r l; do vm_log "skip: $l"; done <<<"$reasons"
  vm_note "$skipped test cases skipped: $(paste -sd, <<<"$reasons")"
fi
if [ $rc -ne 0 ]; then
  cat "$log"
  vm_fail "ctest -L bpf failed on $(uname -r)"
fi
