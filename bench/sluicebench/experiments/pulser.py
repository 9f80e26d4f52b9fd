"""pulser: Pulser's evaluation (pulser-ein §IV-V) on the star.

Traffic, all toward one receiver through the marking switch port:
  - Poisson flows at --loads of the link (sluice-tg flows): sizes from
    bench/cdf/pulser.cdf, short flows uniform in 8-32 KB and 1 MB long
    flows carrying 80% of the bytes (§IV);
  - periodic incast bursts (sluice-tg incast): --incast-degree connections
    spread over the sender hosts each answer --incast-bytes at once, every
    --incast-gap-ms, for as long as the flows run.
--delay-us gives the receiver's link a propagation delay (sluice-wire), so
the bandwidth-delay product can be like the paper's instead of one frame.
Every variant runs at every load in the same invocation (loads outer,
variants inner), on the same topology and the same seeded workload.

With --fan-in-reference a last row per load, 'dctcp-one-conn', runs dctcp
with each burst's bytes sent by one connection at the same times: the
workload without the fan-in, so dctcp-one-conn/dctcp is what the fan-in
itself costs the baseline here.

One row per variant and load:
  short_fct_p50_us, short_fct_p99_us   Poisson flows <= 32 KB (request to last byte)
  long_throughput_mbps                 mean over 1 MB flows of size / FCT
  queue_max_bytes, queue_mean_bytes    bottleneck root qdisc (sluice-qmon, exact)
  ce_marks, ein_marks                  packets the switch marked
and detail: counts, drops, retransmissions, incast round times, the CC and
echo counters of the variant.
"""

from __future__ import annotations

import csv
import json
import os
import statistics

import sluicelab

from .. import core
from ..core import TOP, Experiment, experiment
from .. import util

# Row name of --fan-in-reference.
REF = "dctcp-one-conn"


def finish_row(row: dict, m: "core.Measurement", extra: dict) -> dict:
    """The bottleneck queue's mean and maximum (sluice-qmon), then the
    faults' and the variant's fields, into a row of a pulser experiment."""
    qmon = m.qmon
    if qmon and qmon["ports"]:
        row["queue_max_bytes"] = qmon["ports"][0]["max_backlog_bytes"]
        row["queue_mean_bytes"] = round(qmon["ports"][0]["mean_backlog_bytes"], 1)
    row.update(m.faults)
    row.update(extra)
    return row


@experiment
class PulserExp(Experiment):
    name = "pulser"
    help = "Pulser vs DCTCP vs cubic: short-flow FCT and long-flow throughput with incast bursts (pulser-ein)"
    default_variants = "cubic,dctcp,pulser"
    point_keys = ("load",)
    key_figures = ("short_fct_p99_us", "short_fct_p50_us", "long_throughput_mbps", "queue_max_bytes",
                   "queue_mean_bytes")
    ratio_to = "dctcp"
    # 5: the min-max of 5 per-repeat ratios holds their median with 94%
    # probability (3 repeats: 75%), and back-to-back runs of 3 repeats
    # disagreed beyond their pooled intervals (docs/pulser.md).
    default_repeat = 5
    build_targets = ["sluice-tg", "sluice-qmon", "sluice-fault", "sluice-wire", "sluiced", "sluicectl"]

    @classmethod
    def add_args(cls, p):
        p.add_argument("--loads", default="0.6", help="offered loads of the Poisson flows, fractions of --rate")
        p.add_argument("--flows", type=int, default=1200,
                       help="Poisson flows per variant, load and repeat (1200: about 1110 short flows, so "
                            "a short-flow p99 rests on more than 1000 samples in every run)")
        p.add_argument("--seed", type=int, default=1, help="arrivals, sizes and servers (same for every variant)")
        p.add_argument("--workload", default="pulser", help="CDF in bench/cdf/ or a path")
        p.add_argument("--short-max", type=util.size, default=32768, help="largest short flow (bytes)")
        p.add_argument("--long-min", type=util.size, default=1 << 20, help="smallest long flow (bytes)")
        p.add_argument("--incast-degree", type=int, default=16, help="connections per incast burst (0: none)")
        p.add_argument("--incast-bytes", type=util.size, default=20480, help="bytes per connection per burst")
        p.add_argument("--incast-gap-ms", type=int, default=200, help="idle time between bursts")
        p.add_argument("--hosts", type=int, default=16, help="sender hosts")
        p.add_argument("--rate", type=util.rate, default=100, help="link rate in Mbit/s")
        p.add_argument("--buffer", type=util.size, default=256 * 1024, help="switch port buffer in bytes")
        p.add_argument("--mode", choices=("gso", "mtu"), default="mtu",
                       help="mtu: one frame per skb (per-packet marking and EIN samples)")
        p.add_argument("--switch", choices=("bridge", "router"), default="bridge")
        p.add_argument("--burst", type=util.size, default=0,
                       help="bottleneck token bucket in bytes (0 = the lab's 100 us at the rate, >= 2 frames; "
                            "at 1 Gbit/s give 64K, docs/lab.md \"Token bucket\")")
        p.add_argument("--delay-us", type=float, default=0,
                       help="one-way propagation delay of the receiver's link, after the bottleneck queue "
                            "(sluice-wire; 0 = none)")
        p.add_argument("--initcwnd", type=int, default=0,
                       help="TCP initial window of the senders in segments (route attribute; 0 = the kernel's 10)")
        p.add_argument("--pool", type=int, default=2, help="connections opened per sender up front")
        p.add_argument("--host-sysctl", type=util.tcp_sysctl, action="append", default=[], metavar="KEY=VAL",
                       help="a TCP sysctl of every lab host's namespace (net.ipv4.tcp_*; repeatable), "
                            "e.g. net.ipv4.tcp_recovery=0 for a diagnostic run")
        p.add_argument("--fan-in-reference", action="store_true",
                       help="also run dctcp with each burst's bytes sent by one connection (same bytes, same "
                            "times, no fan-in): row 'dctcp-one-conn', what the fan-in itself costs dctcp")
        p.add_argument("--timeout", type=float, default=600, help="seconds per variant and load")

    def params(self) -> dict:
        a = self.args
        return {"loads": self.loads, "flows": a.flows, "seed": a.seed,
                "workload": os.path.relpath(self.cdf_path(), TOP), "short_max": a.short_max,
                "long_min": a.long_min, "incast_degree": a.incast_degree, "incast_bytes": a.incast_bytes,
                "incast_gap_ms": a.incast_gap_ms, "hosts": a.hosts, "rate_mbit": a.rate, "buffer": a.buffer,
                "mode": a.mode, "switch": a.switch, "delay_us": a.delay_us,
                "initcwnd": a.initcwnd,
                "host_sysctl": dict(a.host_sysctl),
                "burst": a.burst or sluicelab.Shape(a.rate).default_burst(),
                "aqm_k_packets": getattr(a, "aqm_k", None),
                "ein_samples": getattr(a, "aqm_ein_samples", None),
                "ein_threshold": getattr(a, "aqm_ein_threshold", None),
                "cwnd_safe": getattr(a, "pulser_cwnd_safe", None),
                "ein_mark": getattr(a, "ein_mark", None),
                "fan_in_reference": a.fan_in_reference}

    def run(self, ctx, variants):
        a = self.args
        self.loads = [float(x) for x in a.loads.split(",") if x.strip()]
        # The fan-in reference: the baseline with every burst's bytes from
        # one connection at the same times. What separates it from the
        # baseline's own row is the fan-in alone, so the ratio of the two is
        # what the fan-in itself costs the baseline on this workload.
        points = [(v, v.name, a.incast_degree, a.incast_bytes) for v in variants]
        if a.fan_in_reference:
            base = next((v for v in variants if v.name == "dctcp"), None)
            if base is None or a.incast_degree < 2:
                raise core.BenchError("--fan-in-reference needs the dctcp variant and --incast-degree >= 2")
            points.append((base, REF, 1, a.incast_degree * a.incast_bytes))
        cdf = self.cdf_path()
        ctx.log(f"building star: {a.hosts} senders, {a.rate:g} Mbit/s, buffer {a.buffer} B, mode {a.mode}")
        topo = sluicelab.star(ctx.lab, senders=a.hosts, rate=a.rate, buffer=a.buffer, mode=a.mode,
                              switch=a.switch, burst=a.burst or None, delay_us=a.delay_us,
                              wire=ctx.tool("sluice-wire") if a.delay_us > 0 else None)
        if a.initcwnd:
            topo.set_initcwnd(a.initcwnd, topo.senders)
        if a.host_sysctl:
            try:
                topo.set_host_sysctl(dict(a.host_sysctl))
            except OSError as e:
                raise core.BenchError(f"--host-sysctl: {e}") from None
        by_name = {name: (v, degree, nbytes) for v, name, degree, nbytes in points}

        def measure(load, name, rep):
            v, degree, nbytes = by_name[name]
            r = self.point(ctx, topo, v, cdf, load, name, degree, nbytes, rep)
            topo.check_wires()
            ctx.log(f"load {load:.0%} rep {rep} {name:7s} short FCT p50 {r['short_fct_p50_us']:.0f} us "
                    f"p99 {r['short_fct_p99_us']:.0f} us (n={r['short_fct_n']}), long {r['long_throughput_mbps']} "
                    f"Mbit/s, queue mean {r['queue_mean_bytes']} max {r['queue_max_bytes']} B, "
                    f"CE {r['ce_marks']} EIN {r['ein_marks']}")
            return r

        rows = core.sweep(ctx, self.loads, list(by_name), measure)
        out = {"experiment": "pulser", "params": self.params(), "topology": topo.describe(), "variants": rows}
        if topo.wires:
            out["wires"] = topo.wire_stats()
        return out

    def point(self, ctx, topo, v, cdf, load, name, degree, nbytes, rep=0) -> dict:
        a = self.args
        senders, recv = topo.senders, topo.receivers[0]
        ctx.point = {"load": load, "repeat": rep, "sender_hosts": senders, "receiver": recv}
        topo.set_host_sysctl({"net.ipv4.tcp_ecn": 1 if v.ecn else 0})
        tag = f"{name}-{int(load * 100)}-r{rep}"
        # Repeat k draws the workload with seed + k: every variant of a
        # repeat sees the same flows, and the repeats sample the workload too.
        seed = a.seed + rep
        out = os.path.join(ctx.tmp, f"pulser-flows-{tag}.json")
        rec = os.path.join(ctx.tmp, f"pulser-flows-{tag}.csv")
        iout = os.path.join(ctx.tmp, f"pulser-incast-{tag}.json")
        # Bursts for as long as the Poisson flows run (estimated from the
        # workload's mean size).
        mean = self._cdf_mean(cdf)
        est_s = a.flows * mean * 8 / (load * a.rate * 1e6)
        burst_ms = degree * nbytes * 8 / (a.rate * 1e3)
        rounds = max(3, int(est_s * 1000 / (a.incast_gap_ms + burst_ms * 2)))
        incast = None
        with core.Measurement(ctx, topo, v, tag) as m:
            m.start(senders, [topo.bottleneck])
            inc = None
            if degree > 0:
                iargv = ctx.tg() + ["incast", "--to", ",".join(h.ip for h in senders),
                         "--conns", str(degree), "--bytes", str(nbytes),
                         "--rounds", str(rounds), "--warmup", "0", "--gap-ms", str(a.incast_gap_ms),
                         "--link-mbps", str(a.rate), "--json", iout, "--timeout", str(a.timeout)]
                if v.cc:
                    iargv += ["--cc", v.cc]
                inc = ctx.spawn(recv.ns, iargv, f"tg-incast-{tag}")
                m.stop_on_finish("incast", lambda: ctx.stop(inc))
            argv = ctx.tg() + ["flows", "--to", ",".join(h.ip for h in senders),
                    "--cdf", cdf, "--load", str(load), "--count", str(a.flows), "--seed", str(seed),
                    "--link-mbps", str(a.rate), "--pool", str(a.pool), "--records", rec, "--json", out,
                    "--timeout", str(a.timeout)]
            if v.cc:
                argv += ["--cc", v.cc]
            ctx.run_tool(recv.ns, argv, f"tg-flows-{tag}", timeout=a.timeout + 60)
            if inc is not None:
                try:
                    inc.wait(timeout=60)
                except Exception:
                    ctx.log(f"{tag}: incast bursts outlasted the flows by 60 s; stopped")
                ctx.stop(inc)
                if os.path.exists(iout):
                    with open(iout) as f:
                        incast = json.load(f)
            m.finish()
            ctx.save_artifacts(os.path.basename(out), os.path.basename(rec), os.path.basename(iout))
        return self.row(load, rec, out, incast, m)

    @staticmethod
    def _cdf_mean(path: str) -> float:
        pts = []
        with open(path) as f:
            for line in f:
                line = line.split("#")[0].split()
                if len(line) == 2:
                    pts.append((float(line[0]), float(line[1])))
        m = pts[0][0] * pts[0][1]
        for (b0, p0), (b1, p1) in zip(pts, pts[1:]):
            m += (p1 - p0) * (b0 + b1) / 2
        return m

    def row(self, load, rec, out, incast, m: "core.Measurement") -> dict:
        extra = dict(m.extra)
        a = self.args
        short, long_tput, n_long = [], [], 0
        with open(rec) as f:
            for r in csv.DictReader(f):
                size, fct = int(r["size"]), float(r["fct_us"])
                if size <= a.short_max:
                    short.append(fct)
                elif size >= a.long_min and fct > 0:
                    n_long += 1
                    long_tput.append(size * 8 / fct)  # bits per us = Mbit/s
        with open(out) as f:
            tg = json.load(f)
        row = {"load": load}
        core.add_percentiles(row, short, "short_fct", unit="us")
        row.update({
            "long_throughput_mbps": round(statistics.mean(long_tput), 2) if long_tput else None,
            "queue_max_bytes": None,
            "queue_mean_bytes": None,
            "ce_marks": extra.pop("ce_marks", None),
            "ein_marks": extra.pop("ein_marks", None),
            "short_flows": len(short),
            "long_flows": n_long,
            "short_fct_mean_us": round(statistics.mean(short), 1) if short else None,
            "drops": m.bottleneck_delta("drops"),
            "retrans_segs": tg["summary"]["retrans_segs"],
            "rto_flows": tg["summary"]["rto_flows"],
            "achieved_load": round(tg["summary"]["achieved_load"], 4),
        })
        if incast:
            rms = [r["duration_us"] / 1e3 for r in incast.get("per_round", [])]
            row["incast_rounds"] = len(rms)
            core.add_percentiles(row, rms, "incast_round_ms", qs=(50,), digits=2)
        return finish_row(row, m, extra)

    # -- presentation ----------------------------------------------------------
    def table(self, result) -> str:
        p = result["params"]
        names = list(result["variants"])
        w = max([8] + [len(n) for n in names])
        n = result.get("repeat", 1)
        lines = [f"pulser: {p['hosts']} senders, {p['rate_mbit']:g} Mbit/s, buffer {p['buffer']} B, "
                 f"{p['flows']} flows/point, incast {p['incast_degree']} x {p['incast_bytes']} B "
                 f"every {p['incast_gap_ms']} ms"
                 + (f", receiver link +{p['delay_us']:g} us each way" if p.get("delay_us") else "")
                 + (f", initial window {p['initcwnd']}" if p.get("initcwnd") else "")
                 + (f", EIN on {p['ein_mark']}" if p.get("ein_mark") == "departure" else "")
                 + (f"; {n} repeats: medians, percentiles pooled" if n > 1 else ""),
                 f"{'load':>5} {'variant':{w}} {'short p50 us':>12} {'short p99 us':>13} {'n short':>7} "
                 f"{'long Mbit/s':>11} {'q mean B':>9} {'q max B':>8} {'CE':>7} {'EIN':>7} {'incast p50 ms':>13}"]
        for i, v, r in self.points(result):
            load = p["loads"][i]
            fl = r.get("flags", {})
            lines.append(f"{load:>5.0%} {v:{w}} {r['short_fct_p50_us'] or 0:>12.0f} "
                         f"{r['short_fct_p99_us'] or 0:>12.0f}{'!' if 'short_fct_p99_us' in fl else ' '} "
                         f"{r.get('short_fct_n', r.get('short_flows', '?')):>7} "
                         f"{r['long_throughput_mbps'] or 0:>11.2f} "
                         f"{r['queue_mean_bytes'] or 0:>9.0f} {r['queue_max_bytes'] or 0:>8} "
                         f"{r['ce_marks'] or 0:>7} {r['ein_marks'] or 0:>7} "
                         f"{r.get('incast_round_ms_p50') or 0:>13.1f}")
            if v == names[-1] and "dctcp" in names and "ratios" not in result:
                # Results from before per-repeat ratios: the ratio of the rows.
                d = result["variants"]["dctcp"][i]
                for other in ("pulser", REF):
                    q = result["variants"][other][i] if other in result["variants"] else None
                    if q and d["short_fct_p99_us"] and q["short_fct_p99_us"] and d["long_throughput_mbps"]:
                        lines.append(f"      {other}/dctcp: short p99 x{q['short_fct_p99_us'] / d['short_fct_p99_us']:.2f}"
                                     f", long throughput x{q['long_throughput_mbps'] / d['long_throughput_mbps']:.2f}")
        if any("short_fct_p99_us" in r.get("flags", {}) for _, _, r in self.points(result)):
            lines.append("! p99 from fewer than 1000 short flows: a few unlucky flows decide it (--flows, --repeat)")
        return "\n".join(lines)

    def plot(self, result, path):
        p = result["params"]
        names = list(result["variants"])
        loads = [x * 100 for x in p["loads"]]
        fig, axes = self.subplots(1, 3, figsize=(14, 4))
        # Variants side by side at each load, so their error bars do not hide each other.
        step = (min(b - a for a, b in zip(loads, loads[1:])) if len(loads) > 1 else 10) / (4 * len(names))
        for j, v in enumerate(names):
            rows = result["variants"][v]
            xs = [x + (j - (len(names) - 1) / 2) * step for x in loads]
            self.errorbar(axes[0], xs, rows, "short_fct_p99_us", 1e3, marker="o", label=f"{v} p99")
            self.errorbar(axes[0], xs, rows, "short_fct_p50_us", 1e3, marker="x", ls="--", label=f"{v} p50")
            self.errorbar(axes[1], xs, rows, "long_throughput_mbps", marker="o", label=v)
            self.errorbar(axes[2], xs, rows, "queue_mean_bytes", 1e3, marker="o", label=f"{v} mean")
            self.errorbar(axes[2], xs, rows, "queue_max_bytes", 1e3, marker="x", ls="--", label=f"{v} max")
        n = result.get("repeat", 1)
        axes[0].set_ylabel("short-flow FCT (ms)" + (f"; 95% CI over {n} repeats" if n > 1 else "; 95% CI"))
        axes[0].set_yscale("log")
        axes[1].set_ylabel("long-flow throughput (Mbit/s)" + (f"; min-max of {n}" if n > 1 else ""))
        axes[2].set_ylabel("bottleneck queue (KB)" + (f"; min-max of {n}" if n > 1 else ""))
        for ax in axes:
            ax.set_xticks(loads)
            ax.set_xlim(min(loads) - 4 * step * len(names) / 2 - 1, max(loads) + 4 * step * len(names) / 2 + 1)
            ax.set_xlabel("load (%)")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
        axes[1].set_title(f"{p['hosts']} senders, {p['rate_mbit']:g} Mbit/s, incast {p['incast_degree']} x "
                          f"{p['incast_bytes'] // 1024} KB / {p['incast_gap_ms']} ms"
                          + (f", delay {p['delay_us'] / 1e3:g} ms" if p.get("delay_us") else ""))
        self.save(fig, path)
