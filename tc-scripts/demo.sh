#!/usr/bin/env bash
# sluice demo (README command 1). Builds what is missing, then, on this one
# machine (network namespaces, no real network needed):
#
#   demo.sh [incast]   the main job: N synchronized senders (default 32)
#                      answer one receiver through a 1 Gbit/s switch port with
#                      a 128 KB buffer, first with plain kernel TCP, then with
#                      sluiced running PAC on the receiver; prints goodput,
#                      rounds that hit a retransmission timeout, held ACKs and
#                      the ACK delay PAC added, side by side.
#   demo.sh counters   sluiced on a veth pair between two namespaces, real
#                      iperf3 traffic, the live per-flow counters it reports.
#
# Environment: DEMO_SENDERS (32), DEMO_ROUNDS (10), DEMO_PAC_VARIANT (the
# bench/run variant used for PAC), DEMO_SECONDS (counters: 8).
# Everything it creates carries a unique prefix (sll<id>- for the incast lab,
# sld<pid> for counters) and is removed on exit, error or Ctrl-C.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${SLUICE_BUILD_DIR:-$top/build}
secs=${DEMO_SECONDS:-8}
mode=${1:-incast}

case $mode in
  incast | counters) ;;
  -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "demo: unknown mode '$mode' (want incast or counters; --help)" >&2; exit 2 ;;
esac
if [ "$(id -u)" -ne 0 ]; then echo "demo: run as root (network namespaces, BPF)" >&2; exit 1; fi
"$top/tc-scripts/install-deps.sh"

if [ "$mode" = incast ]; then
  senders=${DEMO_SENDERS:-32}
  rounds=${DEMO_ROUNDS:-10}
  pac=${DEMO_PAC_VARIANT:-pac-req}
  [[ $senders =~ ^[0-9]+$ && $senders -ge 1 && $senders -le 256 ]] || { echo "demo: DEMO_SENDERS=$senders: want 1..256" >&2; exit 2; }
  [[ $rounds =~ ^[0-9]+$ && $rounds -ge 1 ]] || { echo "demo: DEMO_ROUNDS=$rounds: want a positive number" >&2; exit 2; }
  out=$(mktemp -d /tmp/sluice-demo.XXXXXX)
  echo "== incast: $senders senders x 64 KB per round, $rounds rounds, 1 Gbit/s bottleneck, 128 KB buffer"
  echo "   plain kernel TCP (cubic), then PAC ($pac) on the receiver; results in $out"
  SLUICE_BUILD_DIR=$build "$top/bench/run" incast --variants "baseline,$pac" --senders "$senders" \
    --rounds "$rounds" --profile 1g-gso --json "$out/incast.json" --png "$out/incast.png"
  python3 - "$out/incast.json" "$pac" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
pac = sys.argv[2]
def row(v):
    rows = d["variants"].get(v) or [{}]
    return rows[-1]
b, p = row("baseline"), row(pac)
print("== summary")
for name, r in (("plain TCP", b), ("PAC", p)):
    if not r:
        print(f"   {name:9s}: no result"); continue
    line = (f"   {name:9s}: {r['goodput_mbps']:7.1f} Mbit/s = {100 * r['goodput_mbps'] / r['link_mbps']:4.1f}% of the link,"
            f" median round {r.get('round_ms_p50', 0):.1f} ms, {r['rto_rounds']}/{r['rounds']} rounds hit an RTO, {r.get('drops', 0)} drops at the switch")
    if "held_acks" in r:
        line += f"; {r['held_acks']} ACKs held, p99 added ACK delay {r.get('p99_ack_delay_us', 0)} us"
    print(line)
if b and p and b.get("goodput_mbps"):
    print(f"   PAC / plain TCP goodput: {p['goodput_mbps'] / b['goodput_mbps']:.2f}x")
PY
  echo "== the full experiment and what it measures: docs/pac.md and docs/lab.md"
  exit 0
fi

# counters mode
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
