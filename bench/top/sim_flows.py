#!/usr/bin/python3
"""Per-flow files of `sluice-top-sim-bench --flows-out` (lines: sender
receiver size_bytes start_us fct_us ideal_us): mean FCT and slowdown per
size bucket, how busy the bottleneck was while a flow was open (one sender
host: the lab-like model), and SRPT on the same flows as the reference: a
fluid greedy matching of senders' and receivers' links in order of
remaining bytes at a slot's payload rate (1440 B per 98 + 1538 B on the
wire), plus the base delay and one slot per flow, no handshake.

    bench/top/sim_flows.py --rate-mbit 100 tokens.txt top.txt [--srpt tokens.txt]
"""
import argparse
import math

BUCKETS = [(0, 10e3, "< 10 KB"), (10e3, 100e3, "10-100 KB"), (100e3, 1e6, "0.1-1 MB"), (1e6, 10e6, "1-10 MB"),
           (10e6, 1e18, "> 10 MB")]


def load(path):
    out = []
    for line in open(path):
        s, d, sz, st, f, i = line.split()[:6]
        out.append((int(s), int(d), int(sz), float(st), float(f), float(i)))
    return out


def srpt(flows, rate, base_us):
    """FCT per flow (same order as flows) under fluid SRPT; rate in payload bytes per us."""
    order = sorted(range(len(flows)), key=lambda k: flows[k][3])
    res, active, i, t = {}, [], 0, 0.0
    while i < len(order) or active:
        if not active:
            t = max(t, flows[order[i]][3])
        while i < len(order) and flows[order[i]][3] <= t + 1e-9:
            k = order[i]
            active.append([math.ceil(flows[k][2] / 1440) * 1440.0, k])
            i += 1
        active.sort(key=lambda a: (a[0], flows[a[1]][3]))
        busy, run = set(), []
        for a in active:
            s, d = flows[a[1]][0], flows[a[1]][1]
            if ("s", s) in busy or ("d", d) in busy:
                continue
            busy |= {("s", s), ("d", d)}
            run.append(a)
        dt = min(a[0] / rate for a in run)
        if i < len(order):
            dt = min(dt, flows[order[i]][3] - t)
        t += dt
        for a in run:
            a[0] -= dt * rate
        for a in [a for a in active if a[0] <= 1e-6]:
            res[a[1]] = t - flows[a[1]][3] + base_us
            active.remove(a)
    return [res[k] for k in range(len(flows))]


def open_time_us(intervals):
    """The time at least one of the (start, end) intervals is open: the length of their union."""
    iv = sorted(intervals)
    open_us, (cs, ce) = 0.0, iv[0]
    for s, e in iv[1:]:
        if s > ce:
            open_us += ce - cs
            cs, ce = s, e
        else:
            ce = max(ce, e)
    return open_us + ce - cs


def report(name, sizes, fcts, ideals, busy=None):
    n = len(sizes)
    print(f"{name}: {n} flows, mean FCT {sum(fcts) / n / 1e3:.1f} ms, mean slowdown "
          f"{sum(f / i for f, i in zip(fcts, ideals)) / n:.2f}" + (f", bottleneck busy {busy:.1%}" if busy else ""))
    for lo, hi, label in BUCKETS:
        k = [j for j in range(n) if lo <= sizes[j] < hi]
        if k:
            print(f"  {label:>10}: {len(k):5d} flows, mean FCT {sum(fcts[j] for j in k) / len(k) / 1e3:9.2f} ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--rate-mbit", type=float, default=1000)
    ap.add_argument("--base-us", type=float, default=20, help="added to every SRPT FCT (besides one slot)")
    ap.add_argument("--srpt", help="flows file whose schedule SRPT runs on (default: the first)")
    a = ap.parse_args()
    slot_us = (98 + 1538) * 8 / a.rate_mbit
    rate = 1440 / slot_us
    for p in a.files:
        fl = load(p)
        open_us = open_time_us((f[3], f[3] + f[4]) for f in fl)
        work = sum(math.ceil(f[2] / 1440) * 1440 for f in fl) / rate
        senders = len({f[0] for f in fl})
        report(p, [f[2] for f in fl], [f[4] for f in fl], [f[5] for f in fl],
               work / open_us if senders == 1 else None)
    fl = load(a.srpt or a.files[0])
    report("SRPT", [f[2] for f in fl], srpt(fl, rate, a.base_us + slot_us), [f[5] for f in fl])


if __name__ == "__main__":
    main()
