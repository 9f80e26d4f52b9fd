#!/usr/bin/env python3
"""Measures the TOP switch port of tc-scripts/top-switch.sh (top-tpds20 R1):
is the token group held to token/(token + data) of the link, do the token
classes get strict priority inside it, and does data get the rest?

Three namespaces, R -> SW -> S, the HTB tree on SW's port toward S. R sends
token-sized UDP frames (74 B, as sluice-top's tokens) with the DSCP of a token
class and full-sized data frames (1514 B, DSCP 8) at fixed offered rates for
--seconds; the kernel's own HTB class counters on SW say what went out.
Every case is repeated --repeat times; JSON on stdout: per case and repeat
the rate of each class, and the mean and min-max over repeats.

    bench/top/htb_check.py [--link-mbit 100] [--seconds 3] [--repeat 3]

Everything it creates is named sltp<pid in base 36>* and removed on exit."""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(TOP, "tc-scripts", "top-switch.sh")


def b36(n):
    s = ""
    while True:
        n, r = divmod(n, 36)
        s = "0123456789abcdefghijklmnopqrstuvwxyz"[r] + s
        if n == 0:
            return s


PFX = "sltp" + b36(os.getpid())


def sh(cmd, check=True):
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    if check and r.returncode:
        raise RuntimeError(f"{cmd}: {r.stderr.strip()}")
    return r.stdout


def blast(dst, tos, size, pps, seconds):
    """Runs inside R: UDP frames of `size` bytes on the wire at `pps`."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
    payload = bytes(size - 42)
    t0 = time.perf_counter()
    sent = 0
    while True:
        el = time.perf_counter() - t0
        if el >= seconds:
            break
        due = int(el * pps)
        while sent < due:
            try:
                s.sendto(payload, (dst, 9))
            except OSError:
                pass
            sent += 1
        time.sleep(0.0005)
    print(sent)


def setup(link, qlen):
    r, sw, s = PFX + "r", PFX + "w", PFX + "s"
    for ns in (r, sw, s):
        sh(f"ip netns add {ns}")
        sh(f"ip -n {ns} link set lo up")
    sh(f"ip link add {PFX}a netns {r} type veth peer name {PFX}b netns {sw}")
    sh(f"ip link add {PFX}c netns {sw} type veth peer name {PFX}d netns {s}")
    sh(f"ip -n {r} addr add 10.78.1.1/24 dev {PFX}a && ip -n {r} link set {PFX}a up")
    sh(f"ip -n {sw} addr add 10.78.1.254/24 dev {PFX}b && ip -n {sw} link set {PFX}b up")
    sh(f"ip -n {sw} addr add 10.78.2.254/24 dev {PFX}c && ip -n {sw} link set {PFX}c up")
    sh(f"ip -n {s} addr add 10.78.2.1/24 dev {PFX}d && ip -n {s} link set {PFX}d up")
    sh(f"ip -n {r} route add default via 10.78.1.254")
    sh(f"ip -n {s} route add default via 10.78.2.254")
    sh(f"ip netns exec {sw} sysctl -qw net.ipv4.ip_forward=1")
    # The tree counts frames; GSO/TSO off so it sees them one by one.
    for ns, dev in ((r, "a"), (sw, "b"), (sw, "c")):
        sh(f"ip netns exec {ns} ethtool -K {PFX}{dev} tso off gso off gro off >/dev/null 2>&1", check=False)
    sh(f"ip netns exec {sw} {SCRIPT} add {PFX}c {link} {qlen} 2>/dev/null")
    return r, sw, s


def teardown():
    for n in ("r", "w", "s"):
        subprocess.run(["ip", "netns", "del", PFX + n], capture_output=True)


def class_counters(sw):
    """{classid: (bytes, packets, drops)} from `tc -s class show` (this
    iproute2 prints no JSON for classes)."""
    c = {}
    handle = None
    for line in sh(f"ip netns exec {sw} tc -s class show dev {PFX}c").splitlines():
        w = line.split()
        if line.startswith("class htb"):
            handle = w[2]
        elif handle and w and w[0] == "Sent":
            c[handle] = (int(w[1]), int(w[3]), int(w[6].rstrip(",")))
            handle = None
    return c


def shape_source(r, streams):
    """The kernel paces each stream at R's egress (an HTB class per DSCP,
    rate = ceil = the offered rate): the tree under test sees smooth arrivals,
    as from receivers that pace their tokens, whatever the Python sender's
    scheduling jitter. The senders offer 30% more than that."""
    dev = PFX + "a"
    sh(f"ip netns exec {r} tc qdisc del dev {dev} root", check=False)
    sh(f"ip netns exec {r} tc qdisc add dev {dev} root handle 1: htb default 99")
    sh(f"ip netns exec {r} tc class add dev {dev} parent 1: classid 1:99 htb rate 1gbit")
    for i, (tos, size, pps) in enumerate(streams):
        kbit = max(8, int(pps * (size + 24) * 8 / 1000))
        sh(f"ip netns exec {r} tc class add dev {dev} parent 1: classid 1:{i + 1} htb rate {kbit}kbit "
           f"ceil {kbit}kbit overhead 24 quantum 1600")
        sh(f"ip netns exec {r} tc qdisc add dev {dev} parent 1:{i + 1} bfifo limit 200000")
        sh(f"ip netns exec {r} tc filter add dev {dev} parent 1: protocol ip prio 1 u32 "
           f"match ip dsfield {tos} 0xfc flowid 1:{i + 1}")


def run_case(r, sw, streams, seconds):
    shape_source(r, streams)
    procs = []
    for tos, size, pps in streams:
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", r, sys.executable, os.path.abspath(__file__), "--blast",
             "10.78.2.1", str(tos), str(size), str(1.3 * pps), str(seconds + 1.5)],
            stdout=subprocess.PIPE, text=True))
    # Steady state only: counters 1 s after the start and at the end.
    time.sleep(1.0)
    before, t0 = class_counters(sw), time.monotonic()
    time.sleep(seconds)
    after, t1 = class_counters(sw), time.monotonic()
    seconds = t1 - t0
    offered = [int(p.communicate()[0].strip() or 0) for p in procs]
    rates = {}
    for h in after:
        b = after[h][0] - before.get(h, (0, 0, 0))[0]
        p = after[h][1] - before.get(h, (0, 0, 0))[1]
        d = after[h][2] - before.get(h, (0, 0, 0))[2]
        # On-wire bits (24 B overhead per frame), as the tree charges them.
        rates[h] = {"mbit": (b + 24 * p) * 8 / seconds / 1e6, "packets": p, "drops": d}
    return offered, rates


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--blast":
        a = sys.argv[2:]
        blast(a[0], int(a[1]), int(a[2]), float(a[3]), float(a[4]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--link-mbit", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--token-queue", type=int, default=8, help="packets per token class queue")
    args = ap.parse_args()
    if os.geteuid():
        print("htb_check: run as root", file=sys.stderr)
        return 1
    link = args.link_mbit
    tok_mbit = link * 98 / (98 + 1538)  # the group as top-switch.sh sizes it
    tok_pps = tok_mbit * 1e6 / (98 * 8)      # 74 B frame + 24 B overhead
    data_pps = link * 1e6 / (1538 * 8)
    T0, T5, DATA = 40 << 2, 45 << 2, 8 << 2
    cases = {
        # name: [(tos, frame bytes, pps)]
        "class0_2x_with_data": [(T0, 74, 2 * tok_pps), (DATA, 1514, 1.0 * data_pps)],
        "class0_half_class5_2x": [(T0, 74, 0.5 * tok_pps), (T5, 74, 2 * tok_pps)],
        "class0_2x_class5_2x": [(T0, 74, 2 * tok_pps), (T5, 74, 2 * tok_pps)],
        "data_alone": [(DATA, 1514, 1.0 * data_pps)],
    }
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    result = {"link_mbit": link, "token_group_mbit": tok_mbit, "seconds": args.seconds,
              "repeat": args.repeat, "token_queue": args.token_queue, "cases": {}}
    try:
        r, sw, s = setup(link, args.token_queue)
        for rep in range(args.repeat):
            for name, streams in cases.items():  # interleaved per repeat
                offered, rates = run_case(r, sw, streams, args.seconds)
                row = {"offered_pps": [round(st[2]) for st in streams],
                       "class0_mbit": rates.get("1:21", {}).get("mbit", 0),
                       "class5_mbit": rates.get("1:26", {}).get("mbit", 0),
                       "token_group_mbit": rates.get("1:20", {}).get("mbit", 0),
                       "data_mbit": rates.get("1:30", {}).get("mbit", 0),
                       "token_drops": [rates.get(f"1:2{p + 1}", {}).get("drops", 0) for p in range(6)]}
                result["cases"].setdefault(name, {"runs": []})["runs"].append(row)
        for name, c in result["cases"].items():
            for k in ("class0_mbit", "class5_mbit", "token_group_mbit", "data_mbit"):
                v = [x[k] for x in c["runs"]]
                c[k] = {"mean": sum(v) / len(v), "min": min(v), "max": max(v), "n": len(v)}
    finally:
        teardown()
    json.dump(result, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
