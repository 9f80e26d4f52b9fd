#!/usr/bin/env bash
# The runner's failure paths: a guest kernel panic, a hung guest and a
# failing suite step must each make run-vm.sh fail, with the right status
# and message. Never a pass. Usage: vm-tests/selftest.sh BUILD_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: selftest.sh BUILD_DIR}
bad=0

# expect NAME STATUS PATTERN -- run-vm.sh args...
expect() {
  local name=$1 want=$2 pattern=$3 out rc
  shift 4
  echo "=== $name: run-vm.sh $*"
  out=$("$here/run-vm.sh" --build "$build" --quiet --log "$build/vm-tests/console-selftest-$name.log" "$@" 2>&1)
  rc=$?
  printf '%s\n' "$out" | sed 's/^/    /'
  if [ "$rc" -ne "$want" ]; then
    echo "--- $name: FAIL: exit status $rc, expected $want"
    bad=$((bad + 1))
  elif ! grep -Eq -- "$pattern" <<<"$out"; then
    echo "--- $name: FAIL: output does not match /$pattern/"
    bad=$((bad + 1))
  else
    echo "--- $name: ok (status $rc)"
  fi
}

steps=$(mktemp -d /tmp/sluice-vm-selftest.XXXXXX)
trap 'rm -rf "$steps"' EXIT
cat > "$steps/01-selftest-passes.sh" <<'STEP'
. "$SLUICE_VM_STEPLIB"
vm_log "a step that passes"
STEP
cat > "$steps/02-selftest-fails.sh" <<'STEP'
. "$SLUICE_VM_STEPLIB"
vm_fail "a step that fails on purpose"
STEP
cat > "$steps/03-selftest-skips-silently.sh" <<'STEP'
exit 77
STEP

expect panic 2 'FAIL: guest kernel crashed: .*Kernel panic' -- --init-test panic --timeout 60
expect hang 3 'FAIL: the guest did not finish within 8s' -- --init-test hang --timeout 8
expect failing-step 1 'FAIL: guest suite failed: FAIL \(2 of 3 steps failed: 02-selftest-fails \(exit 1: a step that fails on purpose.*03-selftest-skips-silently' -- \
  --steps-dir "$steps" --steps '^0[0-9]-selftest' --timeout 90

if [ "$bad" -ne 0 ]; then
  echo "selftest: $bad failure path(s) not reported as failures"
  exit 1
fi
echo "selftest: panic, hang and a failing step are all reported as failures"
