#!/usr/bin/env bash
# sluice demo (README command 1): builds what is missing, then runs sluiced
# on a veth pair between two network namespaces on this machine, drives real
# TCP traffic through it and prints the live counters sluiced reports.
# Everything it creates carries the prefix sld<pid> and is removed on exit,
# error or Ctrl-C.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${SLUICE_BUILD_DIR:-$top/build}
secs=${DEMO_SECONDS:-8}

if [ "$(id -u)" -ne 0 ]; then echo "demo: run as root (network namespaces, BPF)" >&2; exit 1; fi
"$top/tc-scripts/install-deps.sh"
if [ ! -x "$build/agent/sluiced" ] || [ ! -x "$build/agent/sluicectl" ]; then
  echo "demo: building sluice in $build"
  cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" -j"$(nproc)" --target sluiced sluicectl
fi

p=sld$$
tmp=$(mktemp -d /tmp/sluice-demo.XXXXXX)
agent_pid=""
cleanup() {
  set +e
  [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null
  for ns in ${p}-snd ${p}-rcv; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  mountpoint -q "$tmp/bpffs" && umount "$tmp/bpffs"
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add ${p}-snd
ip netns add ${p}-rcv
ip link add ${p}s0 netns ${p}-snd type veth peer name ${p}r0 netns ${p}-rcv
ip -n ${p}-snd addr add 10.250.0.1/24 dev ${p}s0
ip -n ${p}-rcv addr add 10.250.0.2/24 dev ${p}r0
for ns in snd rcv; do ip -n ${p}-$ns link set lo up; done
ip -n ${p}-snd link set ${p}s0 up
ip -n ${p}-rcv link set ${p}r0 up

mkdir -p "$tmp/bpffs"
mount -t bpf bpf "$tmp/bpffs"
cat > "$tmp/sluiced.toml" <<CFG
[agent]
pin_root = "$tmp/bpffs/sluice"
state_dir = "$tmp/state"
control_socket = "$tmp/sluiced.sock"

[[interface]]
name = "${p}r0"
role = "host"
mechanisms = ["flowstat"]
CFG

echo "== sluiced --check"
"$build/agent/sluiced" --check | sed 's/^/   /'
echo "== starting sluiced in namespace ${p}-rcv on ${p}r0"
ip netns exec ${p}-rcv "$build/agent/sluiced" -c "$tmp/sluiced.toml" >"$tmp/sluiced.log" 2>&1 &
agent_pid=$!
ctl() { "$build/agent/sluicectl" -s "$tmp/sluiced.sock" "$@"; }
for _ in $(seq 50); do ctl status >/dev/null 2>&1 && break; sleep 0.1; done
ctl status

echo "== real TCP: iperf3 ${secs}s from ${p}-snd to ${p}-rcv, 4 streams, counters every second"
ip netns exec ${p}-rcv iperf3 -s -1 >/dev/null 2>&1 &
sleep 0.3
ip netns exec ${p}-snd iperf3 -c 10.250.0.2 -t "$secs" -P 4 -C cubic >"$tmp/iperf.log" 2>&1 &
iperf_pid=$!
for i in $(seq "$secs"); do
  sleep 1
  echo "-- t=${i}s"
  ctl flows -n 6 | sed 's/^/   /'
done
wait "$iperf_pid" || true
grep -E "SUM.*(sender|receiver)" "$tmp/iperf.log" | sed 's/^/   iperf3: /'

echo "== verdict counters (sluicectl stats)"
ctl stats | sed 's/^/   /'
echo "== Prometheus endpoint (http://127.0.0.1:9477/metrics inside ${p}-rcv), sluice_iface_* series"
ip netns exec ${p}-rcv curl -sf http://127.0.0.1:9477/metrics | grep '^sluice_iface' | sed 's/^/   /'
echo "== done; removing namespaces"
