"""fct: Poisson flow arrivals with sizes from a workload CDF, at a target
load of the receiver's link; flow completion times by size bucket.

Topology: star, --hosts sender hosts -> switch -> receiver. Every flow is a
request from the receiver to a uniformly chosen sender, answered with the
drawn number of bytes over a pooled persistent connection (sluice-tg flows);
all flows converge on the switch port toward the receiver. FCT runs from the
request to the last byte; slowdown = FCT / (base RTT + size at link rate).
One row per size bucket (and one for all flows) per variant.
"""

from __future__ import annotations

import json
import os

import sluicelab

from .. import core
from ..core import TOP, Experiment, experiment
from .. import traffic, util


@experiment
class Fct(Experiment):
    name = "fct"
    help = "flow completion times of a Poisson workload (web search, ...) on the star"
    default_variants = "baseline"
    point_keys = ("bucket",)
    key_figures = ("fct_p99_us", "fct_p50_us", "slowdown_p99")

    @classmethod
    def add_args(cls, p):
        p.add_argument("--workload", default="websearch",
                       help="CDF name in bench/cdf/ (websearch, datamining, hadoop, webserver, memcached, "
                            "google) or a path to a CDF file")
        p.add_argument("--load", type=float, default=0.6, help="offered load, fraction of --rate")
        p.add_argument("--flows", type=int, default=2400,
                       help="flows per variant and repeat (web search: 15.7%% are at most 10 KB, so 3 repeats "
                            "of 2400 pool about 1130 of them behind the smallest bucket's p99)")
        p.add_argument("--seed", type=int, default=1, help="arrivals, sizes and servers (same for every variant)")
        p.add_argument("--size-scale", type=float, default=1.0, help="multiply every flow size")
        p.add_argument("--buckets", default="10K,100K,1M",
                       help="size bucket upper bounds (the last bucket is open)")
        p.add_argument("--hosts", type=int, default=16, help="sender hosts")
        p.add_argument("--rate", type=util.rate, default=1000, help="link rate in Mbit/s")
        p.add_argument("--buffer", type=util.size, default=131072, help="switch port buffer in bytes")
        p.add_argument("--mode", choices=("gso", "mtu"), default="gso")
        p.add_argument("--switch", choices=("bridge", "router"), default="bridge")
        p.add_argument("--shaper", choices=("tbf", "htb"), default="tbf")
        p.add_argument("--burst", type=util.size, default=0)
        p.add_argument("--pool", type=int, default=2, help="connections opened per sender up front")
        p.add_argument("--timeout", type=float, default=900, help="seconds per variant")

    def params(self) -> dict:
        a = self.args
        return {"workload": a.workload, "cdf": os.path.relpath(self.cdf_path(), TOP), "load": a.load,
                "flows": a.flows, "seed": a.seed, "size_scale": a.size_scale, "buckets": self.bounds,
                "hosts": a.hosts, "rate_mbit": a.rate, "buffer": a.buffer, "mode": a.mode,
                "switch": a.switch, "shaper": a.shaper,
                "burst": a.burst or sluicelab.Shape(a.rate).default_burst()}

    def run(self, ctx, variants):
        a = self.args
        self.bounds = [util.size(b) for b in a.buckets.split(",") if b.strip()]
        cdf = self.cdf_path()
        ctx.log(f"building star: {a.hosts} senders, {a.rate:g} Mbit/s, buffer {a.buffer} B, mode {a.mode}")
        topo = sluicelab.star(ctx.lab, senders=a.hosts, rate=a.rate, buffer=a.buffer, mode=a.mode,
                              switch=a.switch, shaper=a.shaper, burst=a.burst or None)
        by_name = {v.name: v for v in variants}

        def measure(_, name, rep):
            rs = self.point(ctx, topo, by_name[name], cdf, rep)
            allrow = rs[-1]
            ctx.log(f"rep {rep} {name:10s} {allrow['count']} flows  FCT p50 {allrow['fct_p50_us']:.0f} us "
                    f"p99 {allrow['fct_p99_us']:.0f} us  slowdown p99 {allrow['slowdown_p99']:.1f}")
            return rs

        rows = core.sweep(ctx, [None], list(by_name), measure)
        return {"experiment": "fct", "params": self.params(), "topology": topo.describe(), "variants": rows}

    def point(self, ctx, topo, v, cdf, rep=0) -> list:
        a = self.args
        senders, recv = topo.senders, topo.receivers[0]
        ctx.point = {"senders": len(senders), "repeat": rep, "sender_hosts": senders, "receiver": recv}
        topo.set_host_sysctl({"net.ipv4.tcp_ecn": 1 if v.ecn else 0})
        tag = f"fct-{v.name}-r{rep}"
        out = os.path.join(ctx.tmp, f"{tag}.json")
        rec = os.path.join(ctx.tmp, f"{tag}.csv")
        with core.Measurement(ctx, topo, v, tag) as m:
            m.start(senders, [topo.bottleneck])
            argv = traffic.flows_argv(ctx, senders, cdf, a.load, a.flows, a.seed + rep, a.rate, rec, out,
                                      a.timeout, cc=v.cc, pool=a.pool, scale=a.size_scale, buckets=self.bounds)
            ctx.run_tool(recv.ns, argv, f"tg-flows-{tag}", timeout=a.timeout + 60)
            ctx.save_artifacts(f"{tag}.json", f"{tag}.csv", f"tg-flows-{tag}.log")
            m.finish()
        qmon = m.qmon
        with open(out) as f:
            tg = json.load(f)
        common = {"drops": m.bottleneck_delta("drops"),
                  "retrans_segs": tg["summary"]["retrans_segs"],
                  "rto_flows": tg["summary"]["rto_flows"],
                  "achieved_load": round(tg["summary"]["achieved_load"], 4),
                  "base_rtt_us": round(tg["base_rtt_us"], 1),
                  "max_queue_bytes": None, "mean_queue_bytes": None}
        if qmon and qmon["ports"]:
            common["max_queue_bytes"] = qmon["ports"][0]["max_backlog_bytes"]
            common["mean_queue_bytes"] = round(qmon["ports"][0]["mean_backlog_bytes"], 1)
        common.update(m.faults)
        common.update(m.extra)
        recs = traffic.read_records(rec)
        rows = []
        for b in tg["buckets"]:
            lo, hi = b["min_bytes"], b["max_bytes"]
            sel = [x for x in recs if x[0] >= lo and (hi is None or x[0] <= hi)]
            rows.append(self.row(b, lo, hi, sel, common))
        rows.append(self.row(tg["summary"]["all"], 1, None, recs, common))
        return rows

    @staticmethod
    def _label(lo, hi) -> str:
        def h(x):
            for unit, d in (("M", 1 << 20), ("K", 1 << 10)):
                if x >= d and x % d == 0:
                    return f"{x // d}{unit}"
            for unit, d in (("MB", 1e6), ("KB", 1e3)):
                if x >= d:
                    return f"{x / d:g}{unit}"
            return f"{x}B"
        if hi is None:
            return "all" if lo <= 1 else f">{h(lo - 1)}"
        return f"<={h(hi)}" if lo <= 1 else f"{h(lo - 1)}-{h(hi)}"

    def row(self, s, lo, hi, recs, common) -> dict:
        """One bucket's row; percentiles from the per-flow records (the same
        nearest rank as sluice-tg's), with their samples for pooling."""
        r = {"bucket": self._label(lo, hi), "min_bytes": lo, "max_bytes": hi, "count": s["count"],
             "fct_mean_us": round(s["fct_us_mean"], 1)}
        core.add_percentiles(r, [x[1] for x in recs], "fct", unit="us")
        core.add_percentiles(r, [x[2] for x in recs], "slowdown", digits=3)
        r.update(common)
        return r

    # -- presentation ----------------------------------------------------------
    def table(self, result) -> str:
        p = result["params"]
        lines = [f"fct: {p['workload']} at {p['load']:.0%} of {p['rate_mbit']:g} Mbit/s, {p['flows']} flows, "
                 f"{p['hosts']} senders, buffer {p['buffer']} B, {p['mode']} mode",
                 f"{'bucket':>12} {'variant':12} {'flows':>6} {'p50_us':>10} {'p99_us':>11} "
                 f"{'slow_p50':>8} {'slow_p99':>9}"]
        low = False
        for _, v, r in self.points(result):
            fl = r.get("flags", {})
            m99, ms99 = ("!" if "fct_p99_us" in fl else " "), ("!" if "slowdown_p99" in fl else " ")
            low |= "!" in (m99 + ms99)
            lines.append(f"{r['bucket']:>12} {v:12} {r.get('fct_n', r['count']):>6} {r['fct_p50_us']:>10.0f} "
                         f"{r['fct_p99_us']:>10.0f}{m99} {r['slowdown_p50']:>8.2f} {r['slowdown_p99']:>8.2f}{ms99}")
        if low:
            lines.append("! p99 from fewer than 1000 flows of the bucket: a few flows decide it (--flows, --repeat)")
        for v in result["variants"]:
            r = result["variants"][v][-1]
            lines.append(f"{v}: drops {r['drops']}, retrans {r['retrans_segs']}, flows with RTO {r['rto_flows']}, "
                         f"achieved load {r['achieved_load']:.2f}, queue max {r['max_queue_bytes']} B "
                         f"mean {r['mean_queue_bytes']} B")
        return "\n".join(lines)

    def plot(self, result, path):
        p = result["params"]
        names = list(result["variants"])
        buckets = [r["bucket"] for r in result["variants"][names[0]]]
        fig, axes = self.subplots(1, 2, figsize=(11, 4))
        width = 0.8 / (2 * len(names))
        for k, (metric, ax, ylabel) in enumerate((("fct", axes[0], "FCT (ms)"),
                                                    ("slowdown", axes[1], "FCT slowdown"))):
            for j, v in enumerate(names):
                rows = result["variants"][v]
                key50 = "fct_p50_us" if metric == "fct" else "slowdown_p50"
                key99 = "fct_p99_us" if metric == "fct" else "slowdown_p99"
                scale = 1e3 if metric == "fct" else 1
                xs = [i + (2 * j) * width - 0.4 + width / 2 for i in range(len(buckets))]
                ax.bar(xs, [r[key50] / scale for r in rows], width, label=f"{v} p50")
                ax.bar([x + width for x in xs], [r[key99] / scale for r in rows], width, label=f"{v} p99")
                self.errorbar(ax, xs, rows, key50, scale, fmt="none", color="k")
                self.errorbar(ax, [x + width for x in xs], rows, key99, scale, fmt="none", color="k")
            ax.set_xticks(range(len(buckets)))
            ax.set_xticklabels(buckets)
            ax.set_yscale("log")
            ax.set_ylabel(ylabel)
            ax.set_xlabel("flow size")
            ax.grid(True, axis="y", alpha=0.3)
            ax.legend(fontsize=8)
        axes[0].set_title(f"{p['workload']} at {p['load']:.0%} of {p['rate_mbit']:g} Mbit/s, {p['flows']} flows")
        axes[1].set_title(f"{p['hosts']} senders, buffer {p['buffer'] // 1024} KB, {p['mode']}")
        self.save(fig, path)
