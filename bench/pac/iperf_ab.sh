#!/usr/bin/env bash
# iperf3 through a TBF link (1 Gbit/s, 128 KB by default), with PAC on the
# receiver and without, alternating (same run, same machine):
#   bench/pac/iperf_ab.sh [ROUNDS] [SECONDS]
# RATE=100mbit BUFFER=32768 MTU=1 selects the 100 Mbit/s MTU-frame profile
# (TSO/GSO/GRO off); BURST overrides the token bucket. Prints one line per run, retransmissions and bottleneck
# drops, and the ratio of the medians. Namespaces slkip-*.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${SLUICE_BUILD_DIR:-$top/build}
rounds=${1:-3} secs=${2:-5}
p=slkip$$
tmp=$(mktemp -d /tmp/sluice-pac-iperf-XXXXXX)
cleanup() {
  for n in $p-s $p-r; do ip netns pids $n 2>/dev/null | xargs -r kill -9 2>/dev/null || true; ip netns del $n 2>/dev/null || true; done
  umount "$tmp/bpffs" 2>/dev/null || true; rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
ip netns add $p-s; ip netns add $p-r
ip link add ${p}a netns $p-s type veth peer name ${p}b netns $p-r
ip -n $p-s addr add 10.99.0.1/24 dev ${p}a; ip -n $p-r addr add 10.99.0.2/24 dev ${p}b
for n in s r; do ip -n $p-$n link set lo up; done
ip -n $p-s link set ${p}a up; ip -n $p-r link set ${p}b up
rate=${RATE:-1gbit} buffer=${BUFFER:-131072}
# 1 Gbit/s: 64 KB of tokens, as the incast 1g-gso profile (a 12.5 KB bucket
# delivered ~80% of the rate on this 2-core machine; bench/README.md).
case $rate in *mbit) burst=3000 ;; *gbit) burst=65536 ;; esac
burst=${BURST:-$burst}
ip netns exec $p-s tc qdisc add dev ${p}a root tbf rate $rate burst $burst limit $buffer
if [ -n "${MTU:-}" ]; then
  ip netns exec $p-s ethtool -K ${p}a tso off gso off gro off >/dev/null 2>&1 || true
  ip netns exec $p-r ethtool -K ${p}b tso off gso off gro off >/dev/null 2>&1 || true
  ip -n $p-s link set ${p}a gso_max_segs 1 2>/dev/null || true
fi
mkdir -p "$tmp/bpffs" && mount -t bpf bpf "$tmp/bpffs"
cat > "$tmp/pac.toml" <<EOT
[agent]
pin_root = "$tmp/bpffs/sluice"
state_dir = "$tmp/state"
control_socket = "$tmp/state/sock"
[metrics]
enabled = false
[pac]
buffer_bytes = ${PAC_BUFFER:-$buffer}
${PAC_EXTRA:-}
[[interface]]
name = "${p}b"
mechanisms = ["pac"]
EOT
drops() { ip netns exec $p-s tc -s qdisc show dev ${p}a | awk '/dropped/ {gsub(",","",$7); print $7; exit}'; }
run() {  # $1 = port; prints Mbit/s received (retransmissions and bottleneck drops on stderr)
  ip netns exec $p-r iperf3 -s -1 -p $1 >/dev/null 2>&1 & local srv=$!
  local d0; d0=$(drops)
  sleep 0.3
  ip netns exec $p-s iperf3 -c 10.99.0.2 -p $1 -t $secs -C cubic -J 2>/dev/null |
    python3 -c "import json,sys; e=json.load(sys.stdin)['end']; print('%.1f' % (e['sum_received']['bits_per_second']/1e6)); print('retransmits %d' % e['sum_sent'].get('retransmits', -1), file=sys.stderr)"
  wait $srv 2>/dev/null || true
  echo "bottleneck drops $(( $(drops) - d0 ))" >&2
}
base=() pac=()
for i in $(seq 1 $rounds); do
  b=$(run $((5300 + 2 * i))); base+=($b); echo "baseline run $i: $b Mbit/s"
  ip netns exec $p-r ${PAC_CHRT:-} "$build/agent/sluiced" -c "$tmp/pac.toml" > "$tmp/agent.log" 2>&1 & agent=$!
  for _ in $(seq 50); do grep -q PAC_STARTED "$tmp/agent.log" && break; sleep 0.1; done
  a=$(run $((5301 + 2 * i))); pac+=($a); echo "pac      run $i: $a Mbit/s"
  [ -n "${PAC_STATS:-}" ] && ip netns exec $p-r "$build/agent/sluicectl" --socket "$tmp/state/sock" stats --json > "$PAC_STATS.$i" 2>/dev/null || true
  kill $agent; wait $agent 2>/dev/null || true
done
python3 - "${base[*]}" "${pac[*]}" <<'PY'
import statistics, sys
b = [float(x) for x in sys.argv[1].split()]; p = [float(x) for x in sys.argv[2].split()]
print("median baseline %.1f Mbit/s, median pac %.1f Mbit/s, pac/baseline %.3f (runs: base %s, pac %s)"
      % (statistics.median(b), statistics.median(p), statistics.median(p) / statistics.median(b), b, p))
PY
