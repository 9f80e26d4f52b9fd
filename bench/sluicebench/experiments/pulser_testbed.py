"""pulser-testbed: Pulser's real-implementation experiment (pulser-ein §VI).

The paper's testbed: 16 client VMs rate-limited to 50 Mbit/s send through a
software switch whose port to the aggregator is limited to 50 Mbit/s (an
incast degree of 16). One VM sends a long background flow; the other 15
send synchronous bursts of 100 KB short flows with random jitter. It
reports the short flows' mean and 99th-percentile FCT and the long flow's
throughput (Table I: Pulser -20% and -26% FCT, +25% throughput vs DCTCP).

Here, on the lab star (every link --rate, the switch port to the receiver
the bottleneck with --buffer bytes and the variants' marking):
  - the long flow: sluice-tg long, one connection to the first sender host,
    for as long as the bursts run (its mean rate is the throughput);
  - the bursts: sluice-tg incast, one connection on each of the other
    --hosts - 1 sender hosts, --burst-bytes each, every round; each request
    waits a uniform random delay in [0, --jitter-ms] (FCT from its own
    request), --gap-ms between rounds, --rounds rounds.
Every variant runs in the same invocation on the same topology.

One row per variant: burst_fct_mean_us, burst_fct_p99_us (every flow of
every measured round), long_throughput_mbps, queue_mean_bytes,
queue_max_bytes, drops, retransmissions, timeouts, and the variant's
marking and control counters.
"""

from __future__ import annotations

import json
import os
import statistics
import time

import sluicelab

from .. import core
from ..core import Experiment, experiment
from .. import util
from .pulser import PulserExp, finish_row


@experiment
class PulserTestbedExp(Experiment):
    name = "pulser-testbed"
    help = "Pulser's testbed (pulser-ein §VI): a long flow and 15 jittered 100 KB bursts through a 50 Mbit/s port"
    default_variants = "dctcp,pulser"
    key_figures = ("burst_fct_p99_us", "burst_fct_mean_us", "long_throughput_mbps", "queue_max_bytes")
    ratio_to = "dctcp"
    build_targets = PulserExp.build_targets  # the same tools and agents

    @classmethod
    def add_args(cls, p):
        p.add_argument("--hosts", type=int, default=16, help="sender hosts: one long flow, the rest burst")
        p.add_argument("--rate", type=util.rate, default=50, help="every link's rate in Mbit/s")
        p.add_argument("--buffer", type=util.size, default=256 * 1024, help="switch port buffer in bytes")
        p.add_argument("--burst-bytes", type=util.size, default=100 * 1024, help="bytes per short flow")
        p.add_argument("--rounds", type=int, default=70,
                       help="measured burst rounds (one more is warm-up): 70 x 15 bursts = 1050 flows per run, "
                            "so every run's p99 rests on more than 1000 samples")
        p.add_argument("--gap-ms", type=int, default=200, help="idle time between rounds")
        p.add_argument("--jitter-ms", type=float, default=10, help="each request waits uniform [0, this]")
        p.add_argument("--seed", type=int, default=1, help="seed of the jitter")
        p.add_argument("--delay-us", type=float, default=0,
                       help="one-way propagation delay of the receiver's link (sluice-wire; 0 = none)")
        p.add_argument("--timeout", type=float, default=600, help="seconds per variant")

    def params(self) -> dict:
        a = self.args
        return {"hosts": a.hosts, "rate_mbit": a.rate, "buffer": a.buffer, "burst_bytes": a.burst_bytes,
                "rounds": a.rounds, "gap_ms": a.gap_ms, "jitter_ms": a.jitter_ms, "seed": a.seed,
                "delay_us": a.delay_us, "mode": "mtu",
                "aqm_k_packets": getattr(a, "aqm_k", None),
                "ein_samples": getattr(a, "aqm_ein_samples", None),
                "ein_mark": getattr(a, "ein_mark", None)}

    def run(self, ctx, variants):
        a = self.args
        if a.hosts < 2:
            raise core.BenchError("--hosts must be >= 2 (one long flow, at least one burst sender)")
        ctx.log(f"building star: {a.hosts} senders, {a.rate:g} Mbit/s, buffer {a.buffer} B")
        topo = sluicelab.star(ctx.lab, senders=a.hosts, rate=a.rate, buffer=a.buffer, mode="mtu",
                              delay_us=a.delay_us, wire=ctx.tool("sluice-wire") if a.delay_us > 0 else None)
        by_name = {v.name: v for v in variants}

        def measure(_, name, rep):
            v = by_name[name]
            r = self.point(ctx, topo, v, rep)
            topo.check_wires()
            ctx.log(f"{v.name:7s} bursts: FCT mean {r['burst_fct_mean_us']:.0f} us p99 {r['burst_fct_p99_us']:.0f} us, "
                    f"long flow {r['long_throughput_mbps']} Mbit/s, queue mean {r['queue_mean_bytes']} B, "
                    f"drops {r['drops']}")
            return r

        rows = core.sweep(ctx, [None], list(by_name), measure)
        out = {"experiment": "pulser-testbed", "params": self.params(), "topology": topo.describe(),
               "variants": rows}
        if topo.wires:
            out["wires"] = topo.wire_stats()
        return out

    def point(self, ctx, topo, v, rep=0) -> dict:
        a = self.args
        recv, long_host, bursters = topo.receivers[0], topo.senders[0], topo.senders[1:]
        ctx.point = {"sender_hosts": topo.senders, "receiver": recv}
        topo.set_host_sysctl({"net.ipv4.tcp_ecn": 1 if v.ecn else 0})
        lout = os.path.join(ctx.tmp, f"testbed-long-{v.name}-r{rep}.json")
        iout = os.path.join(ctx.tmp, f"testbed-bursts-{v.name}-r{rep}.json")
        round_s = (a.gap_ms + a.jitter_ms) / 1e3 + len(bursters) * a.burst_bytes * 8 / (a.rate * 1e6)
        with core.Measurement(ctx, topo, v, f"testbed-{v.name}-r{rep}") as m:
            m.start(topo.senders, [topo.bottleneck])
            largv = ctx.tg() + ["long", "--to", long_host.ip, "--conns", "1",
                                "--duration", f"{(a.rounds + 1) * round_s * 4 + 30:.0f}", "--interval-ms", "100",
                                "--link-mbps", str(a.rate), "--json", lout]
            if v.cc:
                largv += ["--cc", v.cc]
            lp = ctx.spawn(recv.ns, largv, f"tg-long-{v.name}-r{rep}")
            m.stop_on_finish("long", lambda: ctx.stop(lp))
            time.sleep(1.0)  # the long flow is under way before the first burst
            iargv = ctx.tg() + ["incast", "--to", ",".join(h.ip for h in bursters), "--conns", str(len(bursters)),
                                "--bytes", str(a.burst_bytes), "--rounds", str(a.rounds), "--warmup", "1",
                                "--gap-ms", str(a.gap_ms), "--jitter-us", f"{a.jitter_ms * 1e3:g}",
                                "--seed", str(a.seed + rep), "--per-flow", "--link-mbps", str(a.rate),
                                "--json", iout, "--timeout", str(a.timeout)]
            if v.cc:
                iargv += ["--cc", v.cc]
            ctx.run_tool(recv.ns, iargv, f"tg-bursts-{v.name}-r{rep}", timeout=a.timeout + 60)
            m.finish()
            ctx.save_artifacts(os.path.basename(lout), os.path.basename(iout))
        with open(iout) as f:
            bursts = json.load(f)
        with open(lout) as f:
            long_ = json.load(f)
        fcts = [fl["fct_us"] for r in bursts["per_round"] for fl in r.get("flows", [])]
        extra = dict(m.extra)
        row = {
            "burst_fct_mean_us": round(statistics.mean(fcts), 1) if fcts else None,
            "long_throughput_mbps": round(long_["flows"][0]["mean_mbps"], 2) if long_.get("flows") else None,
            "queue_mean_bytes": None,
            "queue_max_bytes": None,
            "ce_marks": extra.pop("ce_marks", None),
            "ein_marks": extra.pop("ein_marks", None),
            "burst_flows": len(fcts),
            "drops": m.bottleneck_delta("drops"),
            "burst_retrans_segs": bursts["summary"].get("retrans_segs"),
            "burst_rto_rounds": bursts["summary"].get("rto_rounds"),
        }
        core.add_percentiles(row, fcts, "burst_fct", unit="us")
        return finish_row(row, m, extra)

    # -- presentation ----------------------------------------------------------
    def table(self, result) -> str:
        p = result["params"]
        lines = [f"pulser-testbed: {p['hosts']} senders, {p['rate_mbit']:g} Mbit/s, buffer {p['buffer']} B, "
                 f"{p['hosts'] - 1} x {p['burst_bytes']} B bursts, jitter {p['jitter_ms']:g} ms, "
                 f"gap {p['gap_ms']} ms, {p['rounds']} rounds",
                 f"{'variant':8} {'burst mean us':>13} {'burst p99 us':>13} {'n':>6} {'long Mbit/s':>11} "
                 f"{'q mean B':>9} {'q max B':>8} {'drops':>6}"]
        for v, rows in result["variants"].items():
            r = rows[0]
            fl = "!" if "burst_fct_p99_us" in r.get("flags", {}) else " "
            lines.append(f"{v:8} {r['burst_fct_mean_us'] or 0:>13.0f} {r['burst_fct_p99_us'] or 0:>12.0f}{fl} "
                         f"{r.get('burst_fct_n', r.get('burst_flows', '?')):>6} "
                         f"{r['long_throughput_mbps'] or 0:>11.2f} {r['queue_mean_bytes'] or 0:>9.0f} "
                         f"{r['queue_max_bytes'] or 0:>8} {r['drops'] or 0:>6}")
        vs = result["variants"]
        if any("burst_fct_p99_us" in rows[0].get("flags", {}) for rows in vs.values()):
            lines.append("! p99 from fewer than 1000 flows (--rounds, --repeat)")
        if "dctcp" in vs and "pulser" in vs and "ratios" not in result:
            d, q = vs["dctcp"][0], vs["pulser"][0]
            if d["burst_fct_mean_us"] and d["burst_fct_p99_us"] and d["long_throughput_mbps"]:
                lines.append(f"pulser/dctcp: burst FCT mean x{q['burst_fct_mean_us'] / d['burst_fct_mean_us']:.2f}, "
                             f"p99 x{q['burst_fct_p99_us'] / d['burst_fct_p99_us']:.2f}, "
                             f"long throughput x{q['long_throughput_mbps'] / d['long_throughput_mbps']:.2f} "
                             f"(paper, Table I: 0.80, 0.74, 1.25)")
        return "\n".join(lines)

    def plot(self, result, path):
        names = list(result["variants"])
        fig, axes = self.subplots(1, 2, figsize=(10, 4))
        rows = [result["variants"][v][0] for v in names]
        xs = range(len(names))
        axes[0].bar([x - 0.2 for x in xs], [r["burst_fct_mean_us"] / 1e3 for r in rows], 0.4, label="mean")
        axes[0].bar([x + 0.2 for x in xs], [r["burst_fct_p99_us"] / 1e3 for r in rows], 0.4, label="p99")
        self.errorbar(axes[0], [x - 0.2 for x in xs], rows, "burst_fct_mean_us", 1e3, fmt="none", color="k")
        self.errorbar(axes[0], [x + 0.2 for x in xs], rows, "burst_fct_p99_us", 1e3, fmt="none", color="k")
        axes[0].set_ylabel("burst flow FCT (ms)")
        axes[1].bar(list(xs), [r["long_throughput_mbps"] for r in rows], 0.5)
        self.errorbar(axes[1], list(xs), rows, "long_throughput_mbps", fmt="none", color="k")
        axes[1].set_ylabel("long flow throughput (Mbit/s)")
        for ax in axes:
            ax.set_xticks(list(xs))
            ax.set_xticklabels(names)
            ax.grid(True, axis="y", alpha=0.3)
        axes[0].legend(fontsize=8)
        p = result["params"]
        axes[0].set_title(f"{p['hosts'] - 1} x {p['burst_bytes'] // 1024} KB bursts, {p['rate_mbit']:g} Mbit/s")
        self.save(fig, path)
