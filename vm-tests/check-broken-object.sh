#!/usr/bin/env bash
# sluice-objcheck on the deliberately broken object must fail, and say which
# object and which field.
set -u
objcheck=$1 manifest=$2
out=$("$objcheck" --manifest "$manifest" 2>&1)
rc=$?
printf '%s\n' "$out"
fail() { echo "check-broken-object: $*" >&2; exit 1; }
[ "$rc" -eq 1 ] || fail "expected exit 1 from sluice-objcheck, got $rc"
grep -q '^FAIL  *vm_broken_core: ' <<<"$out" || fail "no FAIL line naming vm_broken_core"
grep -q 'sl_no_such_field' <<<"$out" || fail "the failure does not name the missing field sl_no_such_field"
echo "check-broken-object: ok (failed, naming the object and the field)"
