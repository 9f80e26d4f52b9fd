"""bfc: BFC's evaluation (bfc-nsdi22 §6) on lab switches.

Topologies (--topology):
  three-switch  the testbed of §6.1 (Fig. 6): group 1 -> switch 1 -> switch 2
                -> receiver 1, group 2 -> switch 1 -> switch 2 -> receiver 2,
                group 3 -> switch 3 -> switch 2 -> receiver 2; the two
                switch-to-switch links get --delay-us each way (sluice-wire);
  star          --hosts senders -> one switch -> the receiver (--delay-us on
                the receiver's link).
Traffic of the "workload" point: Poisson flows with sizes from --workload
(hadoop: Facebook, Roy et al.) at --load of the link toward the receiver
(three-switch: receiver 2 from groups 2 and 3, and receiver 1 from group 1
at --g1-load), and with --incast 1 (the default) --incast-share of the bytes
as N-to-1 incast bursts (N = --incast-degree, default: every sender host of
the receiver), the Poisson load lowered so the total stays --load.
three-switch also runs the "two-flows" point (§6.1 Fig. 7a): one long flow
from group 2 and one from group 3 compete for the switch 2 -> receiver 2
port for --two-flows-s; BFC variants record the port's queues against Th
(the logic's samples) for the PNG.

One row per variant and point. workload: short_slowdown_p99 (with
short_slowdown_n; short = at most --short-max bytes), short_slowdown_mean,
long_slowdown_mean (at least --long-min bytes), group1_slowdown_mean
(three-switch: receiver 1's flows, the HoL victims of Fig. 8),
buffer_p99_bytes (p99 over 1 ms intervals of the bottleneck port's largest
backlog, sluice-qmon), utilization (bottleneck bytes out / rate over the
run), collisions, pauses_sent (BFC variants), drops, retransmissions.
two-flows: utilization, queue figures, and for BFC the share of samples
within 2·Th. Slowdown = FCT / (size at link rate + base RTT), per flow as
sluice-tg computes it (base RTT measured before the traffic).
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import time

import sluicelab

from .. import core
from ..core import TOP, Experiment, experiment
from .. import util
from .pulser import PulserExp
from ..variants.bfc import hold_hrtt_us


# Lab profiles (--profile): the values of the options a profile sets when
# they are not given. 10m is 100m slowed down ten times: a frame takes 1.2 ms
# instead of 120 us and every delay is ten times longer, so the BDP, the
# buffers (bytes = packets), dctcp's K (packets) and BFC's Th = HRTT x rate
# / N_active (bytes) stay what they are at 100m, while the agents' own
# lateness (scheduling, not frame times) shrinks against the frame time and
# the HRTT. hold_hrtt_base_us: the held data path's pause loop without wire
# delay (hold_hrtt_us), which at 100 Mbit/s is ~300 us, mostly frames handed
# to the kernel and to the link (docs/bfc.md), so it scales with the frame
# time.
PROFILES = {
    "100m": {"rate": 100.0, "delay_us": 250.0, "two_flows_s": 4.0, "hold_hrtt_base_us": 300},
    "10m": {"rate": 10.0, "delay_us": 2500.0, "two_flows_s": 10.0, "hold_hrtt_base_us": 3000},
}


def apply_profile(args) -> None:
    """Fills the options --profile sets (those left at None) from the
    profile's table, in place; the experiment and the variants read the
    same namespace."""
    prof = PROFILES[getattr(args, "profile", None) or "100m"]
    core.fill_unset(args, {k: prof[k] for k in ("rate", "delay_us", "two_flows_s")})
    args.hold_hrtt_base_us = prof["hold_hrtt_base_us"]


@experiment
class BfcExp(Experiment):
    name = "bfc"
    help = "BFC vs DCTCP vs cubic: short-flow tail slowdown with/without incast, three-switch §6.1 or star"
    default_variants = "dctcp,cubic,bfc,bfc-stochastic,bfc-single"
    point_keys = ("point",)
    key_figures = ("short_slowdown_p99", "short_slowdown_mean", "long_slowdown_mean", "buffer_p99_bytes",
                   "utilization")
    ratio_to = "dctcp"
    build_targets = ["sluice-tg", "sluice-qmon", "sluice-fault", "sluice-wire", "sluiced", "sluicectl"]
    # Not SCHED_FIFO: the switches' agents (pause, resume, expiry) and the
    # user-space wires run under normal scheduling, and a traffic generator
    # above them starved both (a run measured 35 s short flows: pauses held
    # because the agent that would lift them did not run, and sluice-tg
    # opening a connection per stalled flow grew to 1,388 threads).
    default_sched = "normal"

    @classmethod
    def add_args(cls, p):
        p.add_argument("--topology", choices=("three-switch", "star"), default="three-switch")
        p.add_argument("--workload", default="hadoop", help="CDF in bench/cdf/ (hadoop = Facebook) or a path")
        p.add_argument("--load", type=float, default=0.6, help="offered load toward the receiver (fraction)")
        p.add_argument("--g1-load", type=float, default=0.3,
                       help="three-switch: group 1's load toward receiver 1 (crosses switch 1 -> 2 with group 2)")
        p.add_argument("--flows", type=int, default=2000,
                       help="Poisson flows toward the receiver per variant and repeat (hadoop: ~70%% are <= 10 KB)")
        p.add_argument("--seed", type=int, default=1)
        p.add_argument("--short-max", type=util.size, default=10240, help="largest short flow (bytes)")
        p.add_argument("--long-min", type=util.size, default=1 << 20, help="smallest long flow (bytes)")
        p.add_argument("--incast", type=int, choices=(0, 1), default=1, help="incast bursts on (1) or off (0)")
        p.add_argument("--incast-share", type=float, default=0.05, help="share of the bytes sent as incast")
        p.add_argument("--incast-degree", type=int, default=0, help="N of N-to-1 (0: every sender of the receiver)")
        p.add_argument("--incast-bytes", type=util.size, default=20480, help="bytes per sender per burst")
        p.add_argument("--hosts", type=int, default=16, help="star: sender hosts")
        p.add_argument("--groups", default="2,6,6", help="three-switch: hosts of groups 1, 2, 3")
        p.add_argument("--profile", choices=sorted(PROFILES), default="100m",
                       help="time scale of the lab: 100m = 100 Mbit/s links, 250 us wire delay, 4 s two-flows "
                            "point, bfc-hold HRTT base 300 us; 10m = the same network ten times slower (10 Mbit/s, "
                            "2500 us, 10 s, 3000 us): the same BDP, buffers, Th and K in packets, the agents' "
                            "lateness ten times smaller against a frame time and the HRTT (docs/bfc.md). "
                            "--rate, --delay-us, --two-flows-s, --bfc-hold-hrtt-us given explicitly win")
        p.add_argument("--rate", type=util.rate, default=None, help="link rate in Mbit/s (default: the profile's)")
        p.add_argument("--buffer", type=util.size, default=32768,
                       help="buffer per switch port (FIFO) or per queue (sluice switch queues)")
        p.add_argument("--mode", choices=("gso", "mtu"), default="mtu")
        p.add_argument("--delay-us", type=float, default=None,
                       help="one-way delay of the switch-to-switch links (three-switch) or the receiver's link (star)"
                            " (default: the profile's)")
        p.add_argument("--two-flows-s", type=float, default=None, help="three-switch: seconds of the two-flows point "
                                                                       "(0 = skip it; default: the profile's)")
        p.add_argument("--points", default="workload,two-flows",
                       help="which points to run (two-flows only on three-switch)")
        # The paper's DCTCP starts flows at line rate (§6.2.1 "DCTCP"; App. D
        # compares it with slow start); TCP here starts at 10 segments.
        p.add_argument("--initcwnd", type=int, default=0,
                       help="TCP initial window of every host in segments (route attribute initcwnd; 0 = the "
                            "kernel's 10), e.g. the BDP: a flow's first RTT sends a whole window, as the paper's "
                            "hosts do")
        p.add_argument("--pool", type=int, default=2)
        p.add_argument("--timeout", type=float, default=600)

    def __init__(self, args):
        super().__init__(args)
        apply_profile(args)

    def params(self) -> dict:
        a = self.args
        return {"profile": getattr(a, "profile", "100m"), "topology": a.topology, "workload": os.path.relpath(self.cdf_path(), TOP), "load": a.load,
                "g1_load": a.g1_load if a.topology == "three-switch" else None, "flows": a.flows, "seed": a.seed,
                "short_max": a.short_max, "long_min": a.long_min, "incast": a.incast,
                "incast_share": a.incast_share if a.incast else 0, "incast_degree": self.degree if a.incast else 0,
                "incast_bytes": a.incast_bytes, "incast_gap_ms": self.gap_ms if a.incast else None,
                "hosts": a.hosts if a.topology == "star" else None,
                "groups": self.groups if a.topology == "three-switch" else None,
                "rate_mbit": a.rate, "buffer": a.buffer, "mode": a.mode, "delay_us": a.delay_us,
                "two_flows_s": a.two_flows_s if a.topology == "three-switch" else 0,
                "bfc_queues": getattr(a, "bfc_queues", None), "bfc_hold_hrtt_us": hold_hrtt_us(a),
                "aqm_k_packets": getattr(a, "aqm_k", None), "initcwnd": a.initcwnd}

    def run(self, ctx, variants):
        a = self.args
        self.groups = [int(x) for x in a.groups.split(",")]
        wire = ctx.tool("sluice-wire") if a.delay_us > 0 else None
        if a.topology == "three-switch":
            topo = sluicelab.three_switch(ctx.lab, groups=tuple(self.groups), rate=a.rate, buffer=a.buffer,
                                          mode=a.mode, delay_us=a.delay_us, wire=wire)
            self.senders = topo.groups[1] + topo.groups[2]
        else:
            topo = sluicelab.star(ctx.lab, senders=a.hosts, rate=a.rate, buffer=a.buffer, mode=a.mode,
                                  delay_us=a.delay_us, wire=wire)
            self.senders = topo.senders
        if a.initcwnd:
            topo.set_initcwnd(a.initcwnd)
        self.degree = a.incast_degree or len(self.senders)
        # Incast: share s of all bytes toward the receiver. Bursts of
        # degree x bytes every gap carry s * load of the link; the Poisson
        # flows the rest.
        burst_bits = self.degree * a.incast_bytes * 8
        self.gap_ms = burst_bits / (a.incast_share * a.load * a.rate * 1e6) * 1e3 if a.incast else None
        self.flow_load = a.load * (1 - a.incast_share) if a.incast else a.load
        ctx.log(f"{a.topology}: {len(topo.senders)} senders, {a.rate:g} Mbit/s, buffer {a.buffer} B, "
                f"delay {a.delay_us:g} us; flows at {self.flow_load:.3f}"
                + (f", incast {self.degree} x {a.incast_bytes} B every {self.gap_ms:.0f} ms" if a.incast else ""))
        by_name = {v.name: v for v in variants}
        want = {x.strip() for x in a.points.split(",") if x.strip()}
        if not want or want - {"workload", "two-flows"}:
            raise core.BenchError(f"--points {a.points}: expected workload and/or two-flows")
        points = (["workload"] if "workload" in want else []) + \
            (["two-flows"] if "two-flows" in want and a.topology == "three-switch" and a.two_flows_s > 0 else [])

        def measure(point, name, rep):
            v = by_name[name]
            r = self.workload(ctx, topo, v, rep) if point == "workload" else self.two_flows(ctx, topo, v, rep)
            topo.check_wires()
            if point == "workload":
                ctx.log(f"rep {rep} {name:14s} short slowdown p99 {r['short_slowdown_p99']} "
                        f"(n={r['short_slowdown_n']}) mean {r['short_slowdown_mean']}, long mean "
                        f"{r['long_slowdown_mean']}, buffer p99 {r['buffer_p99_bytes']} B, util "
                        f"{r['utilization']}, pauses {r.get('pauses_sent')}")
            else:
                ctx.log(f"rep {rep} {name:14s} two flows: util {r['utilization']}, queue max {r['queue_max_bytes']}"
                        f", within 2Th {r.get('within_2th')}")
            return r

        rows = core.sweep(ctx, points, list(by_name), measure)
        out = {"experiment": "bfc", "params": self.params(), "topology": topo.describe(), "variants": rows}
        if topo.wires:
            out["wires"] = topo.wire_stats()
        return out

    # -- the workload point ------------------------------------------------------
    def workload(self, ctx, topo, v, rep) -> dict:
        a = self.args
        recv = topo.receivers[-1]
        ctx.point = {"point": "workload", "repeat": rep, "sender_hosts": topo.senders, "receiver": recv}
        topo.set_host_sysctl({"net.ipv4.tcp_ecn": 1 if v.ecn else 0})
        tag = f"bfc-{v.name}-w-r{rep}"
        cdf = self.cdf_path()
        seed = a.seed + rep
        files = {k: os.path.join(ctx.tmp, f"{tag}-{k}") for k in ("flows.json", "flows.csv", "incast.json",
                                                                    "g1.json", "g1.csv")}
        mean = PulserExp._cdf_mean(cdf)
        est_s = a.flows * mean * 8 / (self.flow_load * a.rate * 1e6)
        g1 = topo.groups[0] if a.topology == "three-switch" else []
        with core.Measurement(ctx, topo, v, tag) as m:
            m.start(topo.senders, [topo.bottleneck])
            tcp0 = core.host_tcp_snapshot(topo.hosts)
            side = []
            if a.incast:
                rounds = max(3, int(est_s * 1000 / self.gap_ms))
                argv = ctx.tg() + ["incast", "--to", ",".join(h.ip for h in self.senders),
                                   "--conns", str(self.degree), "--bytes", str(a.incast_bytes),
                                   "--rounds", str(rounds), "--warmup", "0", "--gap-ms", str(int(self.gap_ms)),
                                   "--link-mbps", str(a.rate), "--json", files["incast.json"],
                                   "--timeout", str(a.timeout)] + (["--cc", v.cc] if v.cc else [])
                side.append(ctx.spawn(recv.ns, argv, f"tg-incast-{tag}"))
            if g1:
                n1 = max(50, int(a.flows * a.g1_load / a.load))
                argv = ctx.tg() + self._flows_argv(g1, cdf, a.g1_load, n1, seed + 1000, files["g1.json"],
                                                   files["g1.csv"]) + (["--cc", v.cc] if v.cc else [])
                side.append(ctx.spawn(topo.receivers[0].ns, argv, f"tg-g1-{tag}"))
            for p in side:
                m.stop_on_finish(p.name, lambda p=p: ctx.stop(p))
            argv = ctx.tg() + self._flows_argv(self.senders, cdf, self.flow_load, a.flows, seed, files["flows.json"],
                                               files["flows.csv"]) + (["--cc", v.cc] if v.cc else [])
            ctx.run_tool(recv.ns, argv, f"tg-flows-{tag}", timeout=a.timeout + 60)
            q_mid = topo.qdisc_stats(topo.bottleneck)
            for p in side:
                try:
                    p.wait(timeout=120)
                except Exception:
                    ctx.log(f"{tag}: {p.name} outlasted the flows by 120 s; stopped")
                ctx.stop(p)
            tcp = core.host_tcp_delta(tcp0, topo.hosts)
            m.finish()
            ctx.save_artifacts(*[os.path.basename(f) for f in files.values()])
        row = {"point": "workload"}
        row.update(tcp)
        recs, span_us = self._records(files["flows.csv"])
        short = [s for size, s in recs if size <= a.short_max]
        long_ = [s for size, s in recs if size >= a.long_min]
        core.add_percentiles(row, short, "short_slowdown", digits=3)
        row["short_slowdown_mean"] = round(statistics.mean(short), 3) if short else None
        row["long_slowdown_mean"] = round(statistics.mean(long_), 3) if long_ else None
        row["long_flows"] = len(long_)
        if g1 and os.path.exists(files["g1.csv"]):
            g = [s for _, s in self._records(files["g1.csv"])[0]]
            row["group1_slowdown_mean"] = round(statistics.mean(g), 3) if g else None
            row["group1_flows"] = len(g)
        with open(files["flows.json"]) as f:
            tg = json.load(f)
        row.update({"base_rtt_us": round(tg["base_rtt_us"], 1), "achieved_load": round(tg["summary"]["achieved_load"], 4),
                    "retrans_segs": tg["summary"]["retrans_segs"], "rto_flows": tg["summary"]["rto_flows"],
                    "drops": m.bottleneck_delta("drops")})
        # Bottleneck bytes (root qdisc) over the flows' span, first arrival
        # to last completion (the incast and group 1 add theirs).
        sent = q_mid.get("bytes", 0) - m.q0.get("bytes", 0)
        row["utilization"] = round(sent * 8 / (span_us * a.rate), 4) if span_us > 0 else None
        self._buffer(row, m)
        if os.path.exists(files["incast.json"]):
            with open(files["incast.json"]) as f:
                inc = json.load(f)
            rms = [r["duration_us"] / 1e3 for r in inc.get("per_round", [])]
            row["incast_rounds"] = len(rms)
            core.add_percentiles(row, rms, "incast_round_ms", qs=(50,), digits=2)
        row.update(m.faults)
        row.update(m.extra)
        row["loadavg_1m"] = round(os.getloadavg()[0], 2)  # the machine's, at the point's end
        return row

    def _flows_argv(self, servers, cdf, load, count, seed, out, rec) -> list:
        a = self.args
        return ["flows", "--to", ",".join(h.ip for h in servers), "--cdf", cdf, "--load", f"{load:.4f}",
                "--count", str(count), "--seed", str(seed), "--link-mbps", str(a.rate), "--pool", str(a.pool),
                "--records", rec, "--json", out, "--timeout", str(a.timeout)]

    @staticmethod
    def _records(path) -> tuple:
        """[(size, slowdown)] of sluice-tg's per-flow CSV, and the span from
        the first start to the last completion (us)."""
        with open(path) as f:
            rows = list(csv.DictReader(f))
        span = 0.0
        if rows:
            span = max(float(r["start_us"]) + float(r["fct_us"]) for r in rows) - min(float(r["start_us"]) for r in rows)
        return [(int(r["size"]), float(r["slowdown"])) for r in rows], span

    @staticmethod
    def _buffer(row, m):
        """buffer_p99_bytes (with buffer_n): p99 over the queue monitor's
        intervals (1 ms) of the bottleneck's largest backlog in each;
        queue_max_bytes exact, queue_mean_bytes time-weighted.

        A held port (bfc-hold) keeps its queues in the agent and the qdisc
        one frame: the variant's metrics carry the agent's figures, and the
        qdisc's samples must not go into the row, or the repeats' merge
        would pool them into buffer_p99_bytes over the agent's figure."""
        out = {"queue_max_bytes": None, "queue_mean_bytes": None}
        if m.extra.get("buffer_p99_bytes") is not None:
            row.update(out)
            return
        q = m.qmon
        if not q or not q["ports"]:
            row.update(out)
            return
        out["queue_max_bytes"] = q["ports"][0]["max_backlog_bytes"]
        out["queue_mean_bytes"] = round(q["ports"][0]["mean_backlog_bytes"], 1)
        path = os.path.join(m.ctx.tmp, f"qmon-{m.tag}.csv")
        try:
            with open(path) as f:
                vals = [int(r["max_bytes"]) for r in csv.DictReader(f)]
        except (OSError, KeyError, ValueError):
            vals = []
        row.update(out)
        core.add_percentiles(row, vals, "buffer", qs=(99,), unit="bytes", digits=0)

    # -- the two-flows point (Fig. 7a) -------------------------------------------
    def two_flows(self, ctx, topo, v, rep) -> dict:
        a = self.args
        recv = topo.receivers[-1]
        pair = [topo.groups[1][0], topo.groups[2][0]]
        ctx.point = {"point": "two-flows", "repeat": rep, "sender_hosts": pair, "receiver": recv, "bfc_trace": True}
        topo.set_host_sysctl({"net.ipv4.tcp_ecn": 1 if v.ecn else 0})
        tag = f"bfc-{v.name}-2f-r{rep}"
        out = os.path.join(ctx.tmp, f"{tag}.json")
        settle = 0.5
        with core.Measurement(ctx, topo, v, tag) as m:
            m.start(pair, [topo.bottleneck])
            argv = ctx.tg() + ["long", "--to", ",".join(h.ip for h in pair), "--conns", "2",
                               "--duration", f"{a.two_flows_s:g}", "--json", out] + (["--cc", v.cc] if v.cc else [])
            p = ctx.spawn(recv.ns, argv, f"tg-long-{tag}")
            time.sleep(settle)
            q1 = topo.qdisc_stats(topo.bottleneck)
            t1 = time.monotonic()
            time.sleep(max(0.5, a.two_flows_s - 2 * settle))
            q2 = topo.qdisc_stats(topo.bottleneck)
            t2 = time.monotonic()
            rc = p.wait(timeout=a.two_flows_s + 60)
            ctx.stop(p)
            if rc != 0:
                raise core.BenchError(f"{p.name} failed ({rc}):\n{ctx.lab.log_of(p)[-1500:]}")
            m.finish()
        row = {"point": "two-flows",
               "utilization": round((q2.get("bytes", 0) - q1.get("bytes", 0)) * 8 / ((t2 - t1) * a.rate * 1e6), 4),
               "drops": m.bottleneck_delta("drops"), "loadavg_1m": round(os.getloadavg()[0], 2)}
        self._buffer(row, m)
        extra = dict(m.extra)
        trace = extra.pop("bfc_trace", None)
        row.update(extra)
        if trace:
            # Per queue: bytes against Th in the same sample; within 2·Th
            # (App. A's bound for two flows) over samples of queues with data.
            busy = [(b, th) for _, _, b, th in trace if b > 0 and th > 0]
            row["trace_samples"] = len(busy)
            row["within_2th"] = round(sum(1 for b, th in busy if b <= 2 * th) / len(busy), 4) if busy else None
            core.add_percentiles(row, [b / th for b, th in busy], "queue_over_th", qs=(50, 99), digits=3)
            row["trace"] = trace if rep == 0 else None
        return row

    # -- presentation --------------------------------------------------------------
    def table(self, result) -> str:
        p = result["params"]
        names = list(result["variants"])
        w = max([8] + [len(n) for n in names])
        lines = [f"bfc: {p['topology']}, {p['workload']} at {p['load']:.0%} of {p['rate_mbit']:g} Mbit/s"
                 + (f", incast {p['incast_degree']} x {p['incast_bytes']} B = {p['incast_share']:.0%} of bytes"
                    if p.get("incast") else ", no incast")
                 + f", buffer {p['buffer']} B, delay {p['delay_us']:g} us",
                 f"{'point':>9} {'variant':{w}} {'short p99':>10} {'n':>6} {'short mean':>10} {'long mean':>9} "
                 f"{'g1 mean':>8} {'buf p99 B':>9} {'util':>6} {'coll':>6} {'pauses':>7} {'2Th':>6}"]
        for _, v, r in self.points(result):
            fl = r.get("flags", {})
            def f(k, spec):
                x = r.get(k)
                return format(x, spec) if isinstance(x, (int, float)) else "-"
            lines.append(f"{r.get('point', ''):>9} {v:{w}} {f('short_slowdown_p99', '10.2f')}"
                         f"{'!' if 'short_slowdown_p99' in fl else ' '}{f('short_slowdown_n', '>5')} "
                         f"{f('short_slowdown_mean', '10.2f')} {f('long_slowdown_mean', '9.2f')} "
                         f"{f('group1_slowdown_mean', '8.2f')} {f('buffer_p99_bytes', '9.0f')} "
                         f"{f('utilization', '6.3f')} {f('collisions', '6d')} {f('pauses_sent', '7d')} "
                         f"{f('within_2th', '6.3f')}")
        return "\n".join(lines)

    def plot(self, result, path):
        names = list(result["variants"])
        p = result["params"]
        fig, axes = self.subplots(1, 3, figsize=(15, 4))
        wl = [(v, next((r for r in result["variants"][v] if r.get("point") == "workload"), None)) for v in names]
        xs = list(range(len(names)))
        for key, ax, lab in (("short_slowdown_p99", axes[0], "short-flow slowdown p99 (95% CI)"),
                             ("long_slowdown_mean", axes[1], "long-flow mean slowdown (min-max)")):
            rows = [r or {} for _, r in wl]
            ax.bar(xs, [r.get(key) or 0 for r in rows], color="tab:blue")
            self.errorbar(ax, xs, rows, key, fmt="none", color="k")
            ax.set_xticks(xs)
            ax.set_xticklabels(names, rotation=20, fontsize=8)
            ax.set_ylabel(lab)
            ax.grid(True, axis="y", alpha=0.3)
        axes[0].set_title(f"{p['topology']}, {os.path.basename(p['workload'])} {p['load']:.0%}, "
                          + ("incast" if p.get("incast") else "no incast"))
        ax = axes[2]
        drew = ""
        # bfc-hold (per packet) first where both ran.
        for v in sorted(names, key=lambda n: n != "bfc-hold"):
            row = next((r for r in result["variants"][v] if r.get("point") == "two-flows"), None)
            trace = (row or {}).get("trace") or next((r.get("trace") for r in (row or {}).get("runs", [])
                                                      if r.get("trace")), None)
            if not trace or v not in ("bfc", "bfc-hold") or drew:
                continue
            # The busiest 300 ms (most samples with data), as Fig. 7a shows
            # a short window.
            ts = [x[0] for x in trace]
            best, t0, j = -1, ts[0], 0
            for i in range(len(ts)):
                while ts[i] - ts[j] > 300_000:
                    j += 1
                if i - j > best:
                    best, t0 = i - j, ts[j]
            win = [x for x in trace if t0 <= x[0] <= t0 + 300_000]

            def gaps(pts, col):
                # A queue is recorded only while it holds data (and once
                # after): break the line where samples are missing.
                xs, ys, last = [], [], None
                for x in pts:
                    if last is not None and x[0] - last > 2500:
                        xs.append(float("nan"))
                        ys.append(float("nan"))
                    xs.append((x[0] - t0) / 1e3)
                    ys.append(x[col] / 1e3)
                    last = x[0]
                return xs, ys
            qs = sorted({x[1] for x in win})
            for q in qs:
                # Per packet a flow changes queue once idle 2 HRTT: many
                # queues; only a few get a legend entry.
                ax.plot(*gaps([x for x in win if x[1] == q], 2), lw=0.9, marker=".", ms=2,
                        label=f"queue {q}" if len(qs) <= 6 else None)
            ths = {x[0]: x for x in win}
            xs, ys = gaps([ths[t] for t in sorted(ths)], 3)
            ax.plot(xs, ys, "k-", lw=1.0, drawstyle="steps-post", label="Th (HRTT x rate / N_active)")
            ax.plot(xs, [2 * y for y in ys], "k:", lw=0.8, drawstyle="steps-post", label="2 Th")
            drew = v
        if drew:
            ax.set_xlabel("time (ms), the busiest 300 ms of the run")
            ax.set_ylabel("queue length (KB), sampled every 1 ms")
            ax.set_title(f"two flows at switch 2 -> receiver 2 ({drew}, Fig. 7a)")
            ax.legend(fontsize=7, title=None if len(qs) <= 6 else f"{len(qs)} queues (colours)", title_fontsize=7)
            ax.grid(True, alpha=0.3)
        else:
            ax.set_axis_off()
        self.save(fig, path)
