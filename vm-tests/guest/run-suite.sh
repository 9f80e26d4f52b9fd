#!/bin/bash
# Runs the vm-tests suite inside the guest: every vm-tests/suite.d/*.sh (and
# the extra steps directory, if given) in file-name order, each bounded by a
# timeout, then prints a summary. Exit 0 when no step failed.
#
# A step is a bash script. Exit 0 = PASS, 77 = SKIP (it must say why through
# vm_skip, see steplib.sh), anything else = FAIL. A "# vm-timeout: SEC" line
# in its first 40 lines overrides the default bound.
set -u
: "${SLUICE_SRC:?}" "${SLUICE_BUILD_DIR:?}"
export SLUICE_VM_STEPLIB=$SLUICE_SRC/vm-tests/guest/steplib.sh
default_timeout=${SLUICE_VM_STEP_TIMEOUT:-150}

echo "vm-suite: kernel $(uname -r), $(nproc) CPU(s), build $SLUICE_BUILD_DIR"
[ -z "${SLUICE_VM_MISSING_MODULES// /}" ] ||
  echo "vm-suite: modules this kernel does not have:$SLUICE_VM_MISSING_MODULES"

mapfile -t all < <(
  for f in "$SLUICE_SRC"/vm-tests/suite.d/*.sh ${SLUICE_VM_STEPS_DIR:+"$SLUICE_VM_STEPS_DIR"/*.sh}; do
    [ -f "$f" ] && printf '%s\t%s\n' "$(basename "$f")" "$f"
  done | sort -t$'\t' -k1,1 | cut -f2)

steps=()
for f in "${all[@]}"; do
  name=$(basename "$f" .sh)
  if [ -n "${SLUICE_VM_STEPS:-}" ] && ! grep -Eq -- "$SLUICE_VM_STEPS" <<<"$name"; then continue; fi
  steps+=("$f")
done
if [ ${#steps[@]} -eq 0 ]; then
  echo "vm-suite: no step matches '${SLUICE_VM_STEPS:-}'"
  echo "no step ran" > /tmp/sluice-vm-summary
  exit 1
fi

pass=0 fail=0 skip=0
table=()
failures=()
for f in "${steps[@]}"; do
  name=$(basename "$f" .sh)
  t=$(sed -n '1,40s/^# vm-timeout: *\([0-9][0-9]*\).*/\1/p' "$f" | head -1)
  t=${t:-$default_timeout}
  note=/tmp/sluice-vm-note.$name
  rm -f "$note"
  echo
  echo "=== step $name (timeout ${t}s)"
  start=$(date +%s%N)
  (cd /tmp && SLUICE_VM_STEP=$name SLUICE_VM_NOTE=$note timeout -k 5 "$t" bash "$f")
  rc=$?
  secs=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
  why=$(head -3 "$note" 2>/dev/null | paste -sd' ')
  case $rc in
    0) status="PASS${why:+ ($why)}"; pass=$((pass + 1)) ;;
    77)
      if [ -n "$why" ]; then status="SKIP ($why)"; skip=$((skip + 1))
      else status="FAIL (exit 77 without a reason: use vm_skip)"; fail=$((fail + 1)); fi ;;
    124|137) status="FAIL (timed out after ${t}s)"; fail=$((fail + 1)) ;;
    *) status="FAIL (exit $rc${why:+: $why})"; fail=$((fail + 1)) ;;
  esac
  echo "--- step $name: $status [${secs}s]"
  case $status in FAIL*) failures+=("$name ${status#FAIL }") ;; esac
  table+=("$(printf '  %-28s %6ss  %s' "$name" "$secs" "$status")")
done

echo
echo "vm-suite summary on $(uname -r):"
printf '%s\n' "${table[@]}"
echo "$pass passed, $fail failed, $skip skipped"
# One line for the host's verdict: which steps failed and why.
summary="$fail of $((pass + fail + skip)) steps failed"
[ "$fail" -eq 0 ] || summary="$summary: $(IFS=';'; echo "${failures[*]}")"
echo "${summary:0:600}" > /tmp/sluice-vm-summary
[ "$fail" -eq 0 ]
