#!/bin/bash
# Load and attach every BPF object the build produced (the manifest written
# by bpf_object()): CO-RE relocations must resolve against this kernel's BTF.
# Objects that REQUIRE a feature this kernel lacks are reported as
# unsupported with the probe's reason; any other failure fails the step and
# names the object and why. struct_ops maps are registered and unregistered.
# vm-timeout: 120
. "$SLUICE_VM_STEPLIB"

[ -s "$MANIFEST" ] || vm_fail "no manifest $MANIFEST"
"$BUILD/vm-tests/sluice-objcheck" --register-struct-ops --manifest "$MANIFEST" | tee /tmp/objcheck.out
rc=$?
if [ $rc -ne 0 ]; then
  failed=$(sed -n 's/^FAIL  *\([^:]*\): \(.*\)/\1: \2/p' /tmp/objcheck.out | cut -c1-200 | paste -sd';')
  vm_fail "BPF object(s) failed on $(uname -r): ${failed:-sluice-objcheck exited $rc}"
fi
unsupported=$(sed -n 's/^UNSUPPORTED  *\([^:]*\): needs \([^ ]*\).*/\1 (\2)/p' /tmp/objcheck.out | paste -sd' ')
[ -z "$unsupported" ] || vm_note "unsupported on $(uname -r): $unsupported"
