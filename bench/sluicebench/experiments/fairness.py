"""fairness: long-lived flows join one by one and leave in reverse order
(the staircase of PAC Fig. 12); throughput per flow, aggregate and Jain's
fairness index in every phase.

Topology: star, --flows sender hosts -> switch -> receiver. Flow i (from
sender i) starts at i * --stagger seconds; the flows leave in reverse order
from (flows + i) * --stagger, so there are 2 * flows - 1 phases with 1, 2,
..., N, ..., 2, 1 active flows. One row per phase per variant (the first and
last --settle seconds of each phase are left out).
"""

from __future__ import annotations

import json
import os

import sluicelab

from .. import core
from ..core import BenchError, Experiment, experiment
from .. import util


@experiment
class Fairness(Experiment):
    name = "fairness"
    help = "long flows joining and leaving: per-flow throughput, aggregate, Jain's index"
    default_variants = "baseline"
    # Bulk senders under SCHED_FIFO starve ksoftirqd on 2 cores (phases with
    # no throughput at all were measured): ordinary scheduling here.
    default_sched = "normal"
    point_keys = ("phase", "active")
    key_figures = ("aggregate_mbps", "jain")

    @classmethod
    def add_args(cls, p):
        p.add_argument("--flows", type=int, default=4, help="long-lived flows (one per sender)")
        p.add_argument("--stagger", type=float, default=5.0, help="seconds between joins (and leaves)")
        p.add_argument("--settle", type=float, default=1.0,
                       help="seconds left out at the start and end of each phase")
        p.add_argument("--interval-ms", type=float, default=100, help="throughput sampling interval")
        p.add_argument("--rate", type=util.rate, default=100,
                       help="link rate in Mbit/s (at 1 Gbit/s four bulk flows keep a core busy in "
                            "softirq and the result measures CPU scheduling, not TCP)")
        p.add_argument("--buffer", type=util.size, default=131072, help="switch port buffer in bytes")
        p.add_argument("--mode", choices=("gso", "mtu"), default="gso")
        p.add_argument("--switch", choices=("bridge", "router"), default="bridge")
        p.add_argument("--shaper", choices=("tbf", "htb"), default="tbf")
        p.add_argument("--burst", type=util.size, default=0)

    def run(self, ctx, variants):
        a = self.args
        if a.flows < 1 or a.stagger <= 2 * a.settle:
            raise BenchError("need --flows >= 1 and --stagger > 2 * --settle")
        topo = sluicelab.star(ctx.lab, senders=a.flows, rate=a.rate, buffer=a.buffer, mode=a.mode,
                              switch=a.switch, shaper=a.shaper, burst=a.burst or None)
        by_name = {v.name: v for v in variants}

        def measure(_, name, rep):
            rs = self.point(ctx, topo, by_name[name], rep)
            for r in rs:
                ctx.log(f"rep {rep} {name:10s} phase {r['phase']:2d} ({r['active']} flows): aggregate "
                        f"{r['aggregate_mbps']:7.1f} Mbit/s, Jain {r['jain']:.3f}")
            return rs

        rows = core.sweep(ctx, [None], list(by_name), measure)
        return {"experiment": "fairness",
                "params": {"flows": a.flows, "stagger_s": a.stagger, "settle_s": a.settle,
                           "interval_ms": a.interval_ms, "rate_mbit": a.rate, "buffer": a.buffer,
                           "mode": a.mode, "switch": a.switch, "shaper": a.shaper,
                           "burst": a.burst or sluicelab.Shape(a.rate).default_burst()},
                "topology": topo.describe(), "variants": rows}

    def point(self, ctx, topo, v, rep=0) -> list:
        a = self.args
        n = a.flows
        starts = [i * a.stagger for i in range(n)]
        stops = [(2 * n - 1 - i) * a.stagger for i in range(n)]
        duration = (2 * n - 1) * a.stagger
        recv = topo.receivers[0]
        ctx.point = {"senders": n, "sender_hosts": topo.senders, "receiver": recv}
        topo.set_host_sysctl({"net.ipv4.tcp_ecn": 1 if v.ecn else 0})
        tag = f"long-{v.name}-r{rep}"
        out = os.path.join(ctx.tmp, f"{tag}.json")
        with core.Measurement(ctx, topo, v, tag) as m:
            m.start(topo.senders, [topo.bottleneck])
            argv = ctx.tg() + ["long", "--to", ",".join(h.ip for h in topo.senders), "--conns", str(n),
                               "--duration", str(duration), "--interval-ms", str(a.interval_ms),
                               "--starts", ",".join(f"{s:g}" for s in starts),
                               "--stops", ",".join(f"{s:g}" for s in stops),
                               "--link-mbps", str(a.rate), "--json", out]
            if v.cc:
                argv += ["--cc", v.cc]
            ctx.run_tool(recv.ns, argv, f"tg-{tag}", timeout=duration + 60)
            ctx.save_artifacts(f"{tag}.json", f"tg-{tag}.log")
            m.finish()
        qmon = m.qmon
        with open(out) as f:
            tg = json.load(f)
        rows = []
        for k in range(2 * n - 1):
            lo, hi = k * a.stagger + a.settle, (k + 1) * a.stagger - a.settle
            samples = [s for s in tg["series"] if lo <= s["t_s"] <= hi]
            active = [i for i in range(n) if starts[i] <= k * a.stagger and stops[i] > k * a.stagger]
            per_flow = []
            for i in active:
                vals = [s["mbps"][i] for s in samples if s["mbps"][i] is not None]
                per_flow.append(sum(vals) / len(vals) if vals else 0.0)
            agg = sum(per_flow)
            sq = sum(x * x for x in per_flow)
            jain = agg * agg / (len(per_flow) * sq) if sq > 0 else 0.0
            row = {"phase": k, "active": len(active), "aggregate_mbps": round(agg, 1),
                   "utilisation": round(agg / a.rate, 4), "jain": round(jain, 4),
                   "flow_mbps": [round(x, 1) for x in per_flow], "samples": len(samples),
                   "drops": m.bottleneck_delta("drops"),
                   "max_queue_bytes": qmon["ports"][0]["max_backlog_bytes"] if qmon else None,
                   "mean_queue_bytes": round(qmon["ports"][0]["mean_backlog_bytes"], 1) if qmon else None}
            row.update(m.faults)
            row.update(m.extra)
            rows.append(row)
        return rows

    def table(self, result) -> str:
        p = result["params"]
        lines = [f"fairness: {p['flows']} long flows joining every {p['stagger_s']:g} s, "
                 f"{p['rate_mbit']:g} Mbit/s, buffer {p['buffer']} B, {p['mode']} mode",
                 f"{'phase':>5} {'flows':>5} {'variant':12} {'aggregate':>9} {'%link':>6} {'jain':>6}  per-flow Mbit/s"]
        for _, v, r in self.points(result):
            mark = "!" if "aggregate_mbps" in r.get("flags", {}) else " "
            lines.append(f"{r['phase']:>5} {r['active']:>5} {v:12} {r['aggregate_mbps']:>9.1f} "
                         f"{100 * r['utilisation']:>5.1f}%{mark}{r['jain']:>6.3f}  "
                         + " ".join(f"{x:.0f}" for x in r["flow_mbps"]))
        return "\n".join(lines)

    def plot(self, result, path):
        p = result["params"]
        fig, (ax1, ax2) = self.subplots(1, 2, figsize=(11, 4))
        for v, rows in result["variants"].items():
            xs = [r["phase"] for r in rows]
            self.errorbar(ax1, xs, rows, "aggregate_mbps", marker="o", label=v)
            self.errorbar(ax2, xs, rows, "jain", marker="s", label=v)
        ax1.axhline(p["rate_mbit"], ls="--", color="k", lw=0.8, label="link")
        rows0 = next(iter(result["variants"].values()))
        for ax in (ax1, ax2):
            ax.set_xticks([r["phase"] for r in rows0])
            ax.set_xticklabels([str(r["active"]) for r in rows0])
            ax.set_xlabel("active flows (phases in time order)")
            ax.grid(True, alpha=0.3)
            ax.legend()
        ax1.set_ylabel("aggregate throughput (Mbit/s)")
        ax1.set_ylim(0, p["rate_mbit"] * 1.05)
        ax2.set_ylabel("Jain's fairness index")
        ax2.set_ylim(0, 1.05)
        ax1.set_title(f"{p['flows']} long flows, {p['rate_mbit']:g} Mbit/s, buffer {p['buffer'] // 1024} KB")
        ax2.set_title(f"joins/leaves every {p['stagger_s']:g} s")
        self.save(fig, path)
