#!/bin/bash
# The BPF_PROG_TEST_RUN tables (ctest label `bpf`) against this kernel.
# sluice-objcheck ran in the previous step, so its ctest entries are left out.
# vm-timeout: 200
. "$SLUICE_VM_STEPLIB"

cd "$BUILD" || vm_fail "no build directory"
ctest -L bpf -E '^bpf_obj' --no-tests=error --output-on-failure --timeout 150 ||
  vm_fail "ctest -L bpf failed on $(uname -r)"
