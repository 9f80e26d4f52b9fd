#!/usr/bin/env python3
"""The TOP transport's own floor: flows alone, one after another, on the
`bench/run top` dumbbell (sluicelab.dumbbell, 100 Mbit/s HTB links, the
tc-scripts/top-switch.sh tree on every switch port), so nothing competes
for a token or a data slot and what is left is what sluice-top itself costs.

Per repeat and per build (interleaved: every build in turn inside a repeat,
so a noisy moment of the shared machine hits each), one `sluice-top recv`
and one `sluice-top send --schedule` run:
  --long flows of U[1, 4] MB, then --short flows below --short-bytes drawn
  from the web search CDF, each started once the one before should long be
  done (size at --space-mbit + a gap); a flow that still overlapped the next
  is counted (`overlaps`) and left out.
Figures per run: long flows' throughput (size / FCT, Mbit/s; median, min,
max), short flows' slowdown (FCT / (base RTT + size at the link rate);
median, mean, p99 with n), CPU seconds (user + sys) of the receiver and
the sender per flow, and the transport's counters (resends, tokens).

    sudo bench/top/floor.py --builds build,/tmp/base --labels new,base \\
        --trees tc-scripts/top-switch.sh,/tmp/base/top-switch.sh \\
        --repeat 3 --long 20 --short 1000 --json bench/results/top/floor.json

Everything it creates is named sltf<pid>-* and removed on exit (sluicelab)."""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(TOP, "bench"))
sys.path.insert(0, os.path.join(TOP, "tc-scripts", "lab"))

import sluicelab  # noqa: E402
from sluicebench.experiments.top import read_cdf, sample_size, udp_echo_rtt_us  # noqa: E402
from sluicebench.variants.top import _qdisc_drops  # noqa: E402

MSS = 1440


def pct(v, q):
    """Nearest-rank percentile."""
    s = sorted(v)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * len(s) + 0.5)) - 1))]


class LabCtx:
    """What udp_echo_rtt_us needs of a bench Context, over a bare Lab."""

    def __init__(self, lab):
        self.lab = lab
        self.spawn, self.stop = lab.spawn, lab.stop

    def wait_for_log(self, p, text, timeout):
        end = time.monotonic() + timeout
        while text not in self.lab.log_of(p):
            if time.monotonic() > end or p.poll() is not None:
                raise SystemExit(f"{p.name} did not report '{text}'")
            time.sleep(0.02)


def wait_rusage(p, timeout):
    """Waits for p (a process we spawned) and returns its CPU seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            return ru.ru_utime + ru.ru_stime
        time.sleep(0.05)
    return None


def schedule(rng, pts, args):
    """(start_us, size) lines: long flows, then short ones, spaced so that
    each should be done before the next starts."""
    sizes = [int(rng.uniform(1e6, 4e6)) for _ in range(args.long)]
    while len(sizes) < args.long + args.short:
        sz = int(sample_size(pts, rng.random()))
        if 0 < sz < args.short_bytes:
            sizes.append(sz)
    t, out = 50000, []
    for sz in sizes:
        out.append((t, sz))
        t += int(sz * 8 / args.space_mbit + args.gap_us)
    return out


def one_run(lab, topo, build, sched, args, rtt, tag):
    s, r = topo.senders[0], topo.receivers[0]
    exe = os.path.join(build, "agent", "mechanisms", "top", "sluice-top")
    if not os.access(exe, os.X_OK):
        raise SystemExit(f"no sluice-top at {exe}")
    path = os.path.join(lab.tmp, f"{tag}.sched")
    with open(path, "w") as f:
        f.writelines(f"{t} {sz}\n" for t, sz in sched)
    pmax = max(2.0, 30e6 / MSS)  # the web search CDF's largest flow, as bench/run top
    def perf(role):
        if not args.perf:
            return []
        os.makedirs(args.perf, exist_ok=True)
        return ["perf", "record", "-g", "-q", "-o", os.path.join(args.perf, f"{tag}-{role}.data"), "--"]

    recv = lab.spawn(r.ns, perf("recv") + [exe, "recv", "--bind", r.ip, "--link-mbit", f"{args.rate:g}", "--objective",
                            args.objective, "--p-pkts", f"{pmax:.0f}", "--rtt-us", str(args.rtt_us),
                            "--exit-after", str(len(sched))], f"{tag}-recv")
    time.sleep(0.2)
    d0 = {p.ifname: _qdisc_drops(p.ns, p.ifname) for p in topo.switch_ports()}
    t0 = time.monotonic()
    send = lab.spawn(s.ns, perf("send") + [exe, "send", "--bind", s.ip, "--to", r.ip, "--schedule", path, "--rtt-us",
                            str(args.rtt_us), "--timeout-s", str(args.timeout)], f"{tag}-send")
    cpu_send = wait_rusage(send, args.timeout + 30)
    wall = time.monotonic() - t0
    cpu_recv = wait_rusage(recv, 5)
    if cpu_send is None:
        lab.stop(send)
    if cpu_recv is None:
        lab.stop(recv)
    tok_drops = data_drops = 0
    for p in topo.switch_ports():
        for h, n in _qdisc_drops(p.ns, p.ifname).items():
            if h == "30:":
                data_drops += n - d0[p.ifname].get(h, 0)
            elif h in ("21:", "22:", "23:", "24:", "25:", "26:"):
                tok_drops += n - d0[p.ifname].get(h, 0)
    flows, summary = [], {}
    for line in lab.log_of(send).splitlines():
        if line.startswith("{"):
            j = json.loads(line)
            if "fct_us" in j:
                flows.append(j)
            elif j.get("role") == "send":
                summary = j
    flows.sort(key=lambda j: j["start_us"])
    overlaps = 0
    clean = []
    for i, j in enumerate(flows):
        nxt = flows[i + 1]["start_us"] if i + 1 < len(flows) else None
        prv_end = flows[i - 1]["start_us"] + flows[i - 1]["fct_us"] if i else None
        if (nxt is not None and j["start_us"] + j["fct_us"] > nxt) or (prv_end is not None and prv_end > j["start_us"]):
            overlaps += 1
            continue
        clean.append(j)
    long_ = [j["size"] * 8 / j["fct_us"] for j in clean if j["size"] >= 1e6]
    short = [j["fct_us"] / (rtt + j["size"] * 8 / args.rate) for j in clean if j["size"] < args.short_bytes]
    short_fct = [j["fct_us"] for j in clean if j["size"] < args.short_bytes]
    n = len(flows) or 1
    row = {
        "flows": len(sched), "flows_done": len(flows), "overlaps": overlaps,
        "long_mbit_median": round(statistics.median(long_), 2) if long_ else None,
        "long_mbit_min": round(min(long_), 2) if long_ else None,
        "long_mbit_max": round(max(long_), 2) if long_ else None,
        "long_n": len(long_),
        "short_slowdown_median": round(statistics.median(short), 3) if short else None,
        "short_slowdown_mean": round(statistics.fmean(short), 3) if short else None,
        "short_slowdown_p99": round(pct(short, 99), 3) if short else None,
        "short_fct_p99_us": round(pct(short_fct, 99), 1) if short_fct else None,
        "short_n": len(short),
        "cpu_s_send": round(cpu_send, 3) if cpu_send is not None else None,
        "cpu_s_recv": round(cpu_recv, 3) if cpu_recv is not None else None,
        "cpu_ms_per_flow": round(1e3 * ((cpu_send or 0) + (cpu_recv or 0)) / n, 3),
        "wall_s": round(wall, 2),
        "token_drops_switch": tok_drops, "data_drops_switch": data_drops,
        "data_sent": summary.get("data_sent"), "data_resent": summary.get("data_resent"),
        "tokens_unused": summary.get("tokens_unused"), "syncs_sent": summary.get("syncs_sent"),
    }
    # The receiver's own slot; a build from before it printed one paced
    # (84 + MSS + 98) bytes per slot.
    slot_us = (84 + MSS + 98) * 8 / args.rate
    for line in lab.log_of(recv).splitlines():
        if line.startswith("{") and '"role":"recv"' in line:
            j = json.loads(line)
            row["tokens_sent"] = sum(j["tokens_sent"])
            row["nacks_sent"] = j["nacks_sent"]
            # Pacing: slots the receiver ran against those the flows' time
            # held (one per token + data frame time); idle: no flow allowed.
            row["slots"] = j.get("slots")
            row["slots_idle"] = j.get("slots_idle")
            row["slots_missed"] = j.get("slots_missed")
            slot_us = j["slot_ns"] / 1e3 if "slot_ns" in j else slot_us
    row["slots_held"] = int(sum(j["fct_us"] for j in flows) / slot_us)
    return row, clean


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--builds", required=True, help="comma-separated build dirs holding sluice-top")
    ap.add_argument("--labels", default="", help="a name per build (default: the dirs)")
    ap.add_argument("--trees", default="", help="a top-switch.sh per build (default: this tree's, for all)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--long", type=int, default=20, help="flows of U[1, 4] MB per run")
    ap.add_argument("--short", type=int, default=1000, help="flows below --short-bytes per run")
    ap.add_argument("--short-bytes", type=int, default=100000)
    ap.add_argument("--cdf", default=os.path.join(TOP, "bench", "cdf", "websearch.cdf"))
    ap.add_argument("--rate", type=float, default=100, help="every link, Mbit/s")
    ap.add_argument("--rtt-us", type=int, default=500, help="sluice-top --rtt-us (as bench/run top)")
    ap.add_argument("--objective", default="fct")
    ap.add_argument("--space-mbit", type=float, default=40, help="next flow starts after size at this rate...")
    ap.add_argument("--gap-us", type=int, default=6000, help="... plus this")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=int, default=300, help="seconds per run")
    ap.add_argument("--perf", help="run sluice-top under `perf record -g`, profiles to this directory")
    ap.add_argument("--json", help="write every run's row here")
    ap.add_argument("--flows-json", help="write every clean flow (size, fct_us) per run here")
    args = ap.parse_args()
    builds = [b for b in args.builds.split(",") if b]
    labels = [x for x in args.labels.split(",") if x] or builds
    trees = [x for x in args.trees.split(",") if x] or [os.path.join(TOP, "tc-scripts", "top-switch.sh")] * len(builds)
    if len(labels) != len(builds) or len(trees) != len(builds):
        raise SystemExit("--labels, --trees: one per build")
    pts = read_cdf(args.cdf)
    out = {"params": vars(args), "load_avg": [], "runs": []}
    per_flow = []
    with sluicelab.Lab(tag="tf") as lab:
        topo = sluicelab.dumbbell(lab, left=1, right=1, rate=args.rate, buffer=262144, mode="mtu",
                                  switch="bridge", shaper="htb")
        rtt = udp_echo_rtt_us(LabCtx(lab), topo.senders[0], topo.receivers[0])  # before the tree, as bench/run top
        out["base_rtt_us"] = round(rtt, 1)
        print(f"base RTT {rtt:.0f} us; load average {os.getloadavg()}", file=sys.stderr)
        out["load_avg"].append(os.getloadavg())
        for rep in range(args.repeat):
            sched = schedule(random.Random(args.seed * 7919 + rep), pts, args)
            for b, lbl, tree in zip(builds, labels, trees):
                for p in topo.switch_ports():
                    subprocess.run(["ip", "netns", "exec", p.ns, tree, "add", p.ifname, str(int(p.shape.rate_mbit)),
                                    "8", str(p.shape.buffer or 1000000)], check=True, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
                row, clean = one_run(lab, topo, b, sched, args, rtt, f"{lbl}-r{rep}")
                row.update({"build": lbl, "repeat": rep, "load_avg": os.getloadavg()})
                out["runs"].append(row)
                per_flow.append({"build": lbl, "repeat": rep,
                                 "flows": [(j["size"], j["fct_us"]) for j in clean]})
                print(json.dumps(row), flush=True)
        out["load_avg"].append(os.getloadavg())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    if args.flows_json:
        with open(args.flows_json, "w") as f:
            json.dump(per_flow, f)


if __name__ == "__main__":
    main()
