#!/usr/bin/python3
"""Per-size buckets of a `bench/run top ... --artifacts DIR` run, as
bench/top/sim_flows.py prints them for the model: per variant, load and
repeat, the mean FCT and mean slowdown of each size bucket (and the
bucket's share of the mean slowdown), the bottleneck's busy share while a
flow is open, and what the receivers' and senders' summary lines counted.

The senders' per-flow lines (`top-<variant>-<load>-r<rep>-send<i>.log`)
give size, start and FCT; a sender's clock starts at its own process start,
so flows are put on one time line by the schedule the run used (its first
flow at 50 ms, bench/sluicebench/experiments/top.py); the senders start
within a few ms of each other, which bounds the busy share's error.

    bench/top/lab_flows.py DIR --json RESULT.json [--variants tokens,top] [--per-repeat]
    (RESULT.json gives the base RTT, rate and the schedule's parameters)
"""
import argparse
import glob
import json
import math
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tc-scripts", "lab"))
sys.path.insert(0, HERE)
from sim_flows import open_time_us  # noqa: E402

BUCKETS = [(0, 10e3, "< 10 KB"), (10e3, 100e3, "10-100 KB"), (100e3, 1e6, "0.1-1 MB"), (1e6, 1e18, ">= 1 MB")]
MSS = 1440
SLOT_BYTES = 98 + 1538  # a token and a full data frame: one pacing slot


def read_run(prefix):
    """Flows (size, start_us, fct_us, pair, index) and summary lines of one run."""
    flows, send_sum, recv_sum = [], [], []
    for path in sorted(glob.glob(prefix + "-send*.log")):
        pair = int(re.search(r"-send(\d+)\.log$", path).group(1))
        mine = []
        for line in open(path, errors="replace"):
            if not line.startswith("{"):
                continue
            j = json.loads(line)
            if "fct_us" in j:
                mine.append(j)
            elif j.get("role") == "send":
                send_sum.append(j)
        if mine:
            base = min(j["flow"] for j in mine)
            for j in mine:
                flows.append((j["size"], j["start_us"], j["fct_us"], pair, j["flow"] - base))
    for path in sorted(glob.glob(prefix + "-recv*.log")):
        for line in open(path, errors="replace"):
            if line.startswith("{") and '"role":"recv"' in line:
                recv_sum.append(json.loads(line))
    return flows, send_sum, recv_sum


def schedule_of(params, load, rep):
    """The run's schedule, (start_us, size, pair, deadline_us) per flow, from
    the experiment's own generator."""
    from sluicebench.experiments import top as topexp
    import types
    cdf = os.path.join(HERE, "..", "..", params["cdf"])
    pts = topexp.read_cdf(cdf)
    if params.get("max_size"):
        pts = topexp.cap_cdf(pts, params["max_size"])
    a = types.SimpleNamespace(seed=params["seed"], flows=params["flows"], rate=params["rate_mbit"],
                              size_scale=params["size_scale"], pairs=params["pairs"],
                              deadlines=params.get("deadlines") or "")
    fake = types.SimpleNamespace(args=a, pts=pts, base_rtt_us=100.0)
    fake.deadline_range = lambda: topexp.TopExp.deadline_range(fake)
    fake.ideal_us = lambda s: topexp.TopExp.ideal_us(fake, s)
    return topexp.TopExp.schedule(fake, load, rep)


def schedule_t0(params, load, rep):
    """First flow's start (us) per pair in the run's schedule, or None when
    it cannot be rebuilt."""
    try:
        sched = schedule_of(params, load, rep)
    except Exception:
        return None
    t0 = {}
    for t, _s, p, _d in sched:
        t0.setdefault(p, t)
    return t0


def busy_share(flows, t0, rate_mbit):
    """Data slots the flows needed over the time at least one was open."""
    open_us = open_time_us((f[1] - 50000 + t0.get(f[3], 0), f[1] - 50000 + t0.get(f[3], 0) + f[2]) for f in flows)
    slot_us = SLOT_BYTES * 8 / rate_mbit
    work = sum(math.ceil(f[0] / MSS) for f in flows) * slot_us
    return work / open_us


def stats_of(flows, base_rtt_us, rate_mbit):
    ideal = lambda s: base_rtt_us + s * 8 / rate_mbit
    n = len(flows)
    out = {"n": n, "fct_ms": sum(f[2] for f in flows) / n / 1e3,
           "slowdown": sum(f[2] / ideal(f[0]) for f in flows) / n, "buckets": []}
    for lo, hi, label in BUCKETS:
        k = [f for f in flows if lo <= f[0] < hi]
        if not k:
            continue
        sd = [f[2] / ideal(f[0]) for f in k]
        out["buckets"].append({"bucket": label, "n": len(k), "fct_ms": sum(f[2] for f in k) / len(k) / 1e3,
                               "fct_median_ms": statistics.median(f[2] for f in k) / 1e3,
                               "slowdown": sum(sd) / len(sd), "slowdown_share": sum(sd) / n / out["slowdown"],
                               "fct_share": sum(f[2] for f in k) / n / 1e3 / out["fct_ms"]})
    return out


def med(v):
    v = [x for x in v if x is not None]
    if not v:
        return "–"
    s = sorted(v)
    m = statistics.median(s)
    return f"{m:.3g} [{s[0]:.3g}, {s[-1]:.3g}]" if len(s) > 1 else f"{m:.3g}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--json", help="the run's --json result (base RTT, rate, schedule's parameters)")
    ap.add_argument("--params", help="without --json: the schedule's parameters as JSON, e.g. "
                    "'{\"cdf\": \"bench/cdf/datamining.cdf\", \"max_size\": 10000000, \"seed\": 1, \"flows\": 1000, "
                    "\"rate_mbit\": 100, \"size_scale\": 1, \"pairs\": 3, \"loads\": [0.6]}'")
    ap.add_argument("--base-rtt-us", type=float, help="without --json: the run's base RTT (its log says it)")
    ap.add_argument("--variants", default="")
    ap.add_argument("--per-repeat", action="store_true")
    ap.add_argument("--repeats", type=int, default=3, help="with --schedule-out")
    ap.add_argument("--schedule-out", help="write each repeat's schedule (start_us size pair) to PREFIX-<load>-r<rep>.txt "
                    "for sluice-top-sim-bench --schedule, and stop")
    a = ap.parse_args()
    if a.json:
        res = json.load(open(a.json))
    else:
        if not (a.params and a.base_rtt_us and a.variants):
            ap.error("without --json: --params, --base-rtt-us and --variants")
        pr = json.loads(a.params)
        res = {"params": pr, "variants": {v: [{"load": l, "base_rtt_us": a.base_rtt_us} for l in pr["loads"]]
                                          for v in a.variants.split(",")}}
    params = res["params"]
    rate = params["rate_mbit"]
    if a.schedule_out:
        for load in sorted({row["load"] for rows in res["variants"].values() for row in rows}):
            for rep in range(a.repeats):
                sched = schedule_of(params, load, rep)
                with open(f"{a.schedule_out}-{load}-r{rep}.txt", "w") as f:
                    for t, sz, p, _d in sched:
                        f.write(f"{t} {sz} {p}\n")
        return
    names = [v for v in (a.variants.split(",") if a.variants else res["variants"]) if v in res["variants"]]
    for v in names:
        for row in res["variants"][v]:
            load = row["load"]
            reps = sorted({int(m.group(1)) for p in glob.glob(os.path.join(a.dir, f"top-{v}-{load}-r*-send*.log"))
                           for m in [re.search(r"-r(\d+)-send", p)] if m})
            if not reps:
                continue
            per = []
            for rep in reps:
                flows, ss, rs = read_run(os.path.join(a.dir, f"top-{v}-{load}-r{rep}"))
                if not flows:
                    continue
                rtt = row.get("base_rtt_us") or 100.0
                st = stats_of(flows, rtt, rate)
                t0 = schedule_t0(params, load, rep)
                st["busy"] = busy_share(flows, t0, rate) if t0 else None
                slots = sum(r.get("slots", 0) for r in rs)
                st["recv_idle"] = sum(r.get("slots_idle", 0) for r in rs) / slots if slots else None
                st["recv_spare"] = sum(r.get("slots_spare", 0) for r in rs) / slots if slots else None
                st["recv_missed"] = sum(r.get("slots_missed", 0) for r in rs) / slots if slots else None
                tok = sum(sum(r.get("tokens_sent", [])) for r in rs)
                data = sum(r.get("data_received", 0) for r in rs)
                st["tokens_per_data"] = tok / data if data else None
                st["resent"] = sum(s.get("data_resent", 0) for s in ss)
                st["unused"] = sum(s.get("tokens_unused", 0) for s in ss)
                st["rep"] = rep
                st["q_mean"] = st["q_busy"] = None
                qj = os.path.join(a.dir, f"qmon-top-{v}-{load}-r{rep}.json")
                if os.path.exists(qj):
                    st["q_mean"] = json.load(open(qj))["ports"][0].get("mean_backlog_bytes")
                per.append(st)
            if not per:
                continue
            print(f"\n{v} load {load}: {len(per)} repeats, flows {sum(p['n'] for p in per)}; "
                  f"mean FCT {med([p['fct_ms'] for p in per])} ms, slowdown {med([p['slowdown'] for p in per])}, "
                  f"bottleneck busy while open {med([p['busy'] for p in per])}, receivers' slots idle "
                  f"{med([p['recv_idle'] for p in per])} spare {med([p['recv_spare'] for p in per])} missed "
                  f"{med([p['recv_missed'] for p in per])}, tokens per data packet {med([p['tokens_per_data'] for p in per])}"
                  f", resent {med([p['resent'] for p in per])}, tokens unused {med([p['unused'] for p in per])}"
                  f", bottleneck's mean backlog {med([p['q_mean'] for p in per])} B")
            for lab in [b[2] for b in BUCKETS]:
                bs = [b for p in per for b in p["buckets"] if b["bucket"] == lab]
                if not bs:
                    continue
                print(f"  {lab:>10}: n {sum(b['n'] for b in bs):5d}  FCT mean {med([b['fct_ms'] for b in bs]):>24} ms"
                      f"  median {med([b['fct_median_ms'] for b in bs]):>24} ms  slowdown "
                      f"{med([b['slowdown'] for b in bs]):>22}  share of mean slowdown "
                      f"{med([b['slowdown_share'] for b in bs]):>22}  of mean FCT {med([b['fct_share'] for b in bs])}")
            if a.per_repeat:
                for p in per:
                    print(f"    r{p['rep']}: FCT {p['fct_ms']:.1f} ms slowdown {p['slowdown']:.2f} busy "
                          f"{p['busy'] if p['busy'] is None else round(p['busy'], 3)} " +
                          " ".join(f"{b['bucket']}: {b['fct_ms']:.2f}/{b['slowdown']:.2f}" for b in p["buckets"]))


if __name__ == "__main__":
    main()
