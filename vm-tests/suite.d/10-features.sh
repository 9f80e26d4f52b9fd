#!/bin/bash
# `sluiced --check` on this kernel, with a configuration that puts flowstat
# on a veth: it must say flowstat can run (exit 0), and every probed feature
# must be there when the kernel is new enough to have it (a feature newer
# than the kernel is reported, not failed).
# vm-timeout: 90
. "$SLUICE_VM_STEPLIB"

vm_netns slvmck
ip -n slvmck link add slvmck0 type veth peer name slvmck1
ip -n slvmck link set slvmck0 up
ip -n slvmck link set slvmck1 up
cat > /tmp/check.toml <<TOML
[agent]
pin_root = "/sys/fs/bpf/sluice-check"
state_dir = "/tmp/sluice-check"
control_socket = "/tmp/sluice-check/sock"
[metrics]
enabled = false
[[interface]]
name = "slvmck0"
mechanisms = ["flowstat"]
TOML
out=$(ip netns exec slvmck "$BUILD/agent/sluiced" --check --config /tmp/check.toml)
rc=$?
echo "$out"
[ $rc -eq 0 ] || vm_fail "sluiced --check --config (flowstat on a veth) exited $rc"
grep -Eq '^    flowstat +can run' <<<"$out" || vm_fail "sluiced --check does not say flowstat can run"

# feature  first mainline kernel that has it
expect=(
  "btf 5.4"
  "ringbuf 5.8"
  "tc-clsact 4.5"
  "struct-ops-tcp-cc 5.6"
  "tp-btf-qdisc 5.17"
  "xdp 4.19"
  "bpf-cast-to-kern-ctx 6.2"
  "bpf-task-from-pid 6.2"
  "bpf-task-from-pid-xdp 6.8"
  "tcx 6.6"
)
bad=()
for e in "${expect[@]}"; do
  read -r f v <<<"$e"
  line=$(grep -E "^  $f +" <<<"$out") || { bad+=("$f: not in the --check output"); continue; }
  state=$(awk '{print $2}' <<<"$line")
  if vm_kernel_at_least "${v%%.*}" "${v#*.}"; then
    [ "$state" = yes ] || bad+=("$f: missing although this kernel (>= $v) should have it: ${line#*NO }")
  else
    [ "$state" = yes ] && vm_log "note: $f present before $v (backported)"
    [ "$state" = NO ] && vm_log "expected on $(uname -r): $f needs $v+"
  fi
done
[ ${#bad[@]} -eq 0 ] || vm_fail "$(IFS='; '; echo "${bad[*]}")"

