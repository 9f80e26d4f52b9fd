# Helpers for vm-tests suite steps. A step starts with
#   . "$SLUICE_VM_STEPLIB"
# and runs as root inside the guest (bash, the host's tools over read-only
# 9p, writable /tmp, /run and build directory). The guest is thrown away
# after the run, but steps share it: remove what you create (vm_cleanup runs
# at exit).
#
#   BUILD, SRC        the build and source directories (same paths as on the host)
#   MANIFEST          BUILD/vm-tests/bpf-objects.tsv: name, object, REQUIRES
#   vm_fail MSG       fail the step with a reason (exit 1)
#   vm_skip MSG       skip the step with a reason (exit 77); only for what
#                     this kernel or build truly lacks, never to hide a failure
#   vm_note MSG       a remark shown next to PASS in the summary
#   vm_kernel_at_least MAJOR MINOR
#   vm_netns NAME     create a network namespace (removed at exit)
#   vm_veth NS_A IF_A ADDR_A NS_B IF_B ADDR_B
#                     a veth pair between two namespaces, addressed (CIDR) and up
#   vm_bg NAME CMD..  start CMD in the background, log to /tmp/NAME.log,
#                     killed at exit; its PID is in $VM_BG_PID
#   vm_wait_for SEC CMD..   retry CMD every 0.2 s until it succeeds
#   vm_object NAME    path of a built BPF object from the manifest (or "")
#   vm_gtest_why LOG  the first failed assertions of a GoogleTest log on one
#                     line (test, file:line, message), for vm_fail: the suite
#                     summary is what a CI excerpt keeps
set -u
set -o pipefail

BUILD=$SLUICE_BUILD_DIR
SRC=$SLUICE_SRC
MANIFEST=$BUILD/vm-tests/bpf-objects.tsv
_vm_netns=()
_vm_pids=()

vm_log() { echo "[$SLUICE_VM_STEP] $*"; }
vm_fail() {
  echo "[$SLUICE_VM_STEP] FAIL: $*"
  echo "$*" > "$SLUICE_VM_NOTE"
  exit 1
}
vm_skip() {
  echo "[$SLUICE_VM_STEP] SKIP: $*"
  echo "$*" > "$SLUICE_VM_NOTE"
  exit 77
}

vm_note() {
  echo "[$SLUICE_VM_STEP] note: $*"
  echo "$*" >> "$SLUICE_VM_NOTE"
}

vm_kernel_at_least() {
  local r maj min
  r=$(uname -r)
  maj=${r%%.*}
  min=${r#*.}
  min=${min%%[!0-9]*}
  [ "$maj" -gt "$1" ] || { [ "$maj" -eq "$1" ] && [ "$min" -ge "$2" ]; }
}

vm_netns() {
  ip netns add "$1" || vm_fail "ip netns add $1"
  _vm_netns+=("$1")
  ip -n "$1" link set lo up
}

vm_veth() {
  ip link add "$2" netns "$1" type veth peer name "$5" netns "$4" || vm_fail "create veth $2"
  ip -n "$1" addr add "$3" dev "$2" || vm_fail "address $3 on $2"
  ip -n "$4" addr add "$6" dev "$5" || vm_fail "address $6 on $5"
  ip -n "$1" link set "$2" up
  ip -n "$4" link set "$5" up
}

vm_bg() {
  local name=$1
  shift
  "$@" > "/tmp/$name.log" 2>&1 &
  VM_BG_PID=$!
  _vm_pids+=("$VM_BG_PID")
}

vm_wait_for() {
  local deadline=$(( $(date +%s%N) + $1 * 1000000000 ))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s%N)" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}

vm_object() {
  awk -F'\t' -v n="$1" '$1 == n { print $2 }' "$MANIFEST"
}

vm_gtest_why() {
  awk '
    function flush() {
      if (!open) return
      if (length(msg) > 400) msg = substr(msg, 1, 400) "..."
      out = out (n ? "; " : "") test " " loc ": " msg
      n++; open = 0
    }
    /^\[ +(RUN|OK|FAILED|SKIPPED) +\]/ { flush(); if ($2 == "RUN") test = $NF; next }
    / Failure$/ {
      flush()
      if (n < 3) { loc = $1; sub(/.*\//, "", loc); sub(/:$/, "", loc); msg = ""; k = 0; open = 1 }
      next
    }
    open && k < 6 {
      line = $0; gsub(/^ +/, "", line)
      if (line != "") msg = msg (msg == "" ? "" : " / ") line
      k++
    }
    END { flush(); if (n) print out; else print "no assertion failed (crash or timeout?)" }
  ' "$1"
}

# Cases of a parameterized googletest suite in log $1: `vm_gtest_count
# LOG ran|ok SUITE PARAM` counts the cases of SUITE (e.g.
# AttachModes/SwitchMode) with parameter index PARAM that ran or passed,
# so a step follows the cases its binary has instead of a fixed number.
vm_gtest_count() {
  local tag
  case "$2" in ran) tag=' RUN +' ;; ok) tag=' +OK ' ;; *) vm_fail "vm_gtest_count: ran or ok, not $2" ;; esac
  grep -cE "^\[${tag}\] ${3//./\\.}\.[^ ]+/$4([[:space:]]|\$)" "$1"
}

vm_cleanup() {
  local p n
  for p in "${_vm_pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${_vm_pids[@]}"; do wait "$p" 2>/dev/null; done
  for n in "${_vm_netns[@]}"; do ip netns del "$n" 2>/dev/null; done
  return 0
}
trap vm_cleanup EXIT
