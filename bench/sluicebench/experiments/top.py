"""top: the TOP testbed experiment (top-tpds20 §5.1, Fig. 10) at lab rates.

Topology: dumbbell, --pairs senders on switch L, --pairs receivers on switch
R, every link --rate Mbit/s, so the L->R link is the data bottleneck
(--pairs:1) and the R->L link carries every token. Flows: Poisson arrivals
at --loads of the bottleneck, sizes from a workload CDF (web search or data
mining, x --size-scale), each on a random sender -> receiver pair (sender
i talks to receiver i); the same schedule for every token variant of a
repeat.

Token variants (tokens, top, top-noexpiry; variants/top.py) run sluice-top:
a receiver per right host paces tokens, a sender per left host answers them;
FCT is the sender's, from opening the flow to the receiver's DONE; the
*_recv figures end when the receiver has every byte instead (one one-way
trip less, where sluice-tg's FCT ends too). dctcp
runs sluice-tg request/response flows with sluice_dctcp and step marking at
the bottleneck (variants/pulser.py) on the same pairs, load and CDF (its own
draws). Slowdown = FCT / (base RTT + size at the link rate) for all.

Row per load: fct_mean_us, fct_p99_us, short_fct_p99_us (flows below
--short-bytes), slowdown_mean, fct_recv_mean_us, short_fct_recv_p99_us,
slowdown_recv_mean (the receiver's view), deadline_miss_ratio (token variants with
--deadlines: flows that closed after their deadline or not at all, over
all flows; null otherwise), data_lost_packets (data dropped in the switches), tokens_expired,
max_data_queue_bytes (the bottleneck port, sluice-qmon).
"""

from __future__ import annotations

import bisect
import json
import os
import random
import statistics
import subprocess

import sluicelab

from .. import core, traffic, util
from ..core import TOP, BenchError, Experiment, experiment


def read_cdf(path: str) -> list:
    pts = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                s, p = line.split()[:2]
                pts.append((float(s), float(p)))
    return pts


def receiver_completions(log: str) -> list:
    """Every flow a `sluice-top recv` log closed, as its per-flow JSON line
    (size, fct_us, deadline, deadline_met, sync_us, ...): the lines that
    carry sync_us, not the summary or other text."""
    return [json.loads(line) for line in log.splitlines() if line.startswith("{") and '"sync_us"' in line]


def sample_size(pts: list, u: float) -> float:
    """Inverse CDF, linear between points (the first point's size below it)."""
    ps = [p for _, p in pts]
    i = bisect.bisect_left(ps, u)
    if i == 0:
        return pts[0][0]
    if i >= len(pts):
        return pts[-1][0]
    (s0, p0), (s1, p1) = pts[i - 1], pts[i]
    return s0 + (s1 - s0) * (u - p0) / (p1 - p0) if p1 > p0 else s1


def cap_cdf(pts: list, cap: int) -> list:
    """The CDF of min(size, cap): the points below cap, the probability at
    cap, then everything above it at cap + 1."""
    out = [(s, p) for s, p in pts if s < cap]
    if len(out) < len(pts):
        pc = next(p0 + (p1 - p0) * (cap - s0) / (s1 - s0)
                  for (s0, p0), (s1, p1) in zip([(0.0, 0.0)] + pts, pts) if s0 < cap <= s1)
        out += [(float(cap), pc), (float(cap + 1), 1.0)]
    return out


def mean_min(pts: list, cap: float) -> float:
    """E[min(S, cap)] for S drawn as sample_size draws (the first point's
    mass at its size, uniform between points), in the units of pts."""
    def seg(lo, hi):  # E[min(U, cap)] for U uniform on [lo, hi]
        if hi <= cap:
            return (lo + hi) / 2
        if lo >= cap:
            return cap
        f = (cap - lo) / (hi - lo)
        return f * (lo + cap) / 2 + (1 - f) * cap
    m = min(pts[0][0], cap) * pts[0][1]
    for (s0, p0), (s1, p1) in zip(pts, pts[1:]):
        if p1 > p0:
            m += (p1 - p0) * seg(s0, s1)
    return m


def balanced_bounds(pts: list, classes: int = 6, pkt_bytes: float = 1440, p_pkts: float = 0,
                    fine_first: bool = False) -> list:
    """FCT class bounds in packets for sluice-top recv --bounds, from the
    workload's CDF (bytes). §3.2 picks its thresholds so that the K queues
    carry balanced shares, under a 1/x approximation of a heavy-tailed CDF
    (its log formula); this takes the same balance from the CDF itself, for
    classes from the remaining size (the receiver's default): a flow sends
    min(S, b_c) - min(S, b_c-1) packets while in class c, so b_c solves
    E[min(S, b_c)] = c / (K - 1) * E[S] for c = 1 .. K-2, each of classes
    1 .. K-1 carrying an equal share of the bytes. Class 0 stays the log
    formula's (flows below p^(1/K) - 1 packets, a = b = 1, p = the largest
    flow): the shortest flows keep a class of their own.

    fine_first (top-balanced-fine): class 1 ends where the log formula's
    class 2 ends (p^(3/K) - 1 packets) instead of at the balanced bound,
    so the short flows keep §3.2's classes and only the large ones are
    balanced; kept only while it lies between class 0's bound and the
    balanced class 2's (else the balanced bound stays). In the model this
    gave web search's short flows their log-class p99 back at the balanced
    bounds' mean FCT (docs/top.md "Not done / next")."""
    if classes < 2:
        return []
    pk = [(s / pkt_bytes, pr) for s, pr in pts]
    p = p_pkts or max(2.0, pk[-1][0])
    first = p ** (1.0 / classes) - 1
    total = mean_size(pk)
    out = [first]
    for c in range(1, classes - 1):
        lo, hi = 0.0, pk[-1][0]
        for _ in range(200):
            mid = (lo + hi) / 2
            if mean_min(pk, mid) < c / (classes - 1) * total:
                lo = mid
            else:
                hi = mid
        out.append(max(hi, out[-1] + 1))  # strictly increasing, a packet apart at least
    if fine_first and classes >= 4:
        log2 = p ** (3.0 / classes) - 1
        if out[0] + 1 <= log2 < out[2] - 1:
            out[1] = log2
    return [round(b, 1) for b in out]


def mean_size(pts: list) -> float:
    return mean_min(pts, float("inf"))


def udp_echo_rtt_us(ctx, s, r) -> float:
    """Base RTT from host s to host r: the median of 30 UDP echoes of a
    small datagram (there is no ping here), in us. ctx: spawn, wait_for_log
    and stop (a bench Context, or bench/top/floor.py's lab)."""
    echo = ctx.spawn(r.ns, ["python3", "-c", (
        "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
        f"s.bind(('{r.ip}',7299))\nprint('ready',flush=True)\n"
        "while True:\n d,a=s.recvfrom(64)\n s.sendto(d,a)\n")], "udp-echo")
    try:
        ctx.wait_for_log(echo, "ready", timeout=10)
        out = subprocess.run(["ip", "netns", "exec", s.ns, "python3", "-c", (
            "import socket,time,statistics\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
            "s.settimeout(1)\nv=[]\nfor i in range(30):\n t=time.perf_counter()\n"
            f" s.sendto(b'x',('{r.ip}',7299))\n"
            " try:\n  s.recvfrom(64)\n except OSError:\n  continue\n"
            " v.append((time.perf_counter()-t)*1e6)\n time.sleep(0.02)\n"
            "print(statistics.median(v) if len(v)>=5 else 'too few echoes')\n")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, timeout=30).stdout
        return float(out.strip().splitlines()[-1])
    except (ValueError, IndexError, subprocess.TimeoutExpired) as e:
        raise BenchError(f"base RTT measurement failed: {e}")
    finally:
        ctx.stop(echo)


@experiment
class TopExp(Experiment):
    name = "top"
    help = "TOP testbed (top-tpds20 §5.1 Fig. 10): dumbbell, web search / data mining, tokens vs top vs dctcp"
    default_variants = "tokens,top,top-noexpiry,dctcp"
    point_keys = ("load",)
    key_figures = ("fct_mean_us", "slowdown_mean", "short_fct_p99_us", "fct_p99_us", "deadline_miss_ratio",
                   "fct_recv_mean_us", "slowdown_recv_mean", "short_fct_recv_p99_us")
    ratio_to = "tokens"
    default_repeat = 3

    @classmethod
    def add_args(cls, p):
        p.add_argument("--workload", default="websearch", help="CDF in bench/cdf/ (websearch, datamining) or a path")
        p.add_argument("--loads", default="0.6", help="offered loads, fraction of the bottleneck")
        p.add_argument("--flows", type=int, default=200, help="flows per variant, load and repeat")
        p.add_argument("--size-scale", type=float, default=1.0, help="multiply every flow size")
        p.add_argument("--max-size", type=util.size, default=0,
                       help="every variant draws min(size, this) (0: no cap), e.g. data mining at lab rates")
        p.add_argument("--seed", type=int, default=1)
        p.add_argument("--pairs", type=int, default=3, help="sender/receiver pairs across the dumbbell")
        p.add_argument("--rate", type=util.rate, default=100, help="every link, Mbit/s")
        p.add_argument("--buffer", type=util.size, default=262144, help="switch port (data) buffer, bytes")
        p.add_argument("--short-bytes", type=util.size, default=100000, help="short flows: below this")
        p.add_argument("--rtt-us", type=int, default=500, help="sluice-top --rtt-us (rate control period)")
        p.add_argument("--timeout", type=float, default=600, help="seconds per variant run")
        # Off by default: on 2,000 data mining flows it made both token
        # variants slower (docs/top.md "The receiver's view, and SCHED_FIFO").
        p.add_argument("--top-fifo", action="store_true",
                       help="run sluice-top under SCHED_FIFO (receivers 11, senders 10); --sched is sluice-tg's")
        p.add_argument("--deadlines", default="",
                       help="LO,HI: every flow gets a deadline of U[LO, HI] x its ideal FCT (base RTT + size at "
                            "the link rate), drawn per repeat, the same for every token variant; the row then "
                            "has deadline_miss_ratio (compare top-edf with tokens)")

    @staticmethod
    def sluice_top() -> str:
        p = os.path.join(core.build_dir(), "agent", "mechanisms", "top", "sluice-top")
        if not os.access(p, os.X_OK):
            raise BenchError(f"sluice-top not found at {p} (cmake --build ... --target sluice-top)")
        return p

    def cdf_path(self) -> str:
        w = self.args.workload
        return w if os.path.sep in w else os.path.join(TOP, "bench", "cdf", f"{w}.cdf")

    def params(self) -> dict:
        a = self.args
        return {"workload": a.workload, "cdf": os.path.relpath(self.cdf_path(), TOP), "loads": self.loads,
                "flows": a.flows, "size_scale": a.size_scale, "max_size": a.max_size, "seed": a.seed,
                "pairs": a.pairs, "rate_mbit": a.rate, "buffer": a.buffer, "short_bytes": a.short_bytes,
                "token_queue": getattr(a, "top_token_queue", 8),
                "token_burst": getattr(a, "top_token_burst", 0),
                "base_one_way_us": getattr(a, "top_base_one_way_us", 100),
                "deadlines": a.deadlines or None, "top_fifo": a.top_fifo,
                "switch_side": "tc-scripts/top-switch.sh HTB tree on every switch port (R1 approximated)"}

    def run(self, ctx, variants):
        a = self.args
        self.loads = [float(x) for x in a.loads.split(",") if x.strip()]
        self.pts = read_cdf(self.cdf_path())
        self.cdf_file = self.cdf_path()
        if a.max_size:
            # min(size, --max-size) for every variant: a CDF file sluice-tg reads too.
            self.pts = cap_cdf(self.pts, a.max_size)
            self.cdf_file = os.path.join(ctx.tmp, "capped.cdf")
            with open(self.cdf_file, "w") as f:
                f.write(f"# {self.cdf_path()} capped at {a.max_size} bytes\n")
                for sz, pr in self.pts:
                    f.write(f"{sz:.0f} {pr:.6f}\n")
        ctx.log(f"building dumbbell: {a.pairs} + {a.pairs} hosts, {a.rate:g} Mbit/s, buffer {a.buffer} B")
        topo = sluicelab.dumbbell(ctx.lab, left=a.pairs, right=a.pairs, rate=a.rate, buffer=a.buffer, mode="mtu",
                                  switch="bridge", shaper="htb")
        self.base_rtt_us = self.ping(ctx, topo)
        ctx.log(f"base RTT {self.base_rtt_us:.0f} us")
        by_name = {v.name: v for v in variants}

        def measure(load, name, rep):
            row = self.point(ctx, topo, by_name[name], load, rep)
            def f(k, fmt):  # None (no flow finished) is logged, not a crash
                return "-" if row.get(k) is None else format(row[k], fmt)
            ctx.log(f"load {load} rep {rep} {name:12s} {row['flows_done']}/{row['flows']} flows  "
                    f"FCT mean {f('fct_mean_us', '.0f')} us p99 {f('fct_p99_us', '.0f')} us  "
                    f"slowdown {f('slowdown_mean', '.2f')} (at the receiver {f('slowdown_recv_mean', '.2f')})  "
                    f"lost {row['data_lost_packets']}  "
                    f"expired {row['tokens_expired']}")
            return row

        rows = core.sweep(ctx, self.loads, list(by_name), measure)
        return {"experiment": self.name, "params": self.params(), "topology": topo.describe(), "variants": rows}

    def ping(self, ctx, topo) -> float:
        return udp_echo_rtt_us(ctx, topo.senders[0], topo.receivers[0])

    def deadline_range(self):
        """(lo, hi) of --deadlines, or None."""
        if not self.args.deadlines:
            return None
        try:
            lo, hi = (float(x) for x in self.args.deadlines.split(","))
        except ValueError:
            raise BenchError(f"--deadlines {self.args.deadlines!r}: want LO,HI (multiples of the ideal FCT)")
        if not (1.0 <= lo <= hi):
            raise BenchError(f"--deadlines {self.args.deadlines!r}: want 1 <= LO <= HI")
        return lo, hi

    def schedule(self, load: float, rep: int) -> list:
        """(start_us, size, pair, deadline_us) for --flows Poisson arrivals at
        `load`; deadline_us is 0 without --deadlines. The deadlines come from
        a generator of their own, so the arrivals and sizes of a repeat are
        the same with and without them."""
        a = self.args
        rng = random.Random(a.seed * 1000003 + rep * 1009 + int(load * 100))
        drng = random.Random(a.seed * 7919 + rep * 104729 + int(load * 100))
        dl = self.deadline_range()
        mean = mean_size(self.pts) * a.size_scale
        lam = load * a.rate * 1e6 / 8 / mean  # flows per second
        t, out = 0.0, []
        for _ in range(a.flows):
            t += rng.expovariate(lam)
            size = max(1, int(sample_size(self.pts, rng.random()) * a.size_scale))
            pair = rng.randrange(a.pairs)
            deadline = int(self.ideal_us(size) * drng.uniform(*dl)) if dl else 0
            out.append((int(t * 1e6), size, pair, deadline))
        return out

    def ideal_us(self, size: int) -> float:
        """FCT of a flow alone: base RTT + size at the link rate."""
        return self.base_rtt_us + size * 8 / self.args.rate

    def slowdown(self, size: int, fct_us: float) -> float:
        return fct_us / self.ideal_us(size)

    def point(self, ctx, topo, v, load, rep) -> dict:
        a = self.args
        senders, receivers = topo.senders, topo.receivers
        ctx.point = {"load": load, "repeat": rep, "sender_hosts": senders, "receiver": receivers[0]}
        tag = f"top-{v.name}-{load}-r{rep}"
        topo.set_host_sysctl({"net.ipv4.tcp_ecn": 1 if v.ecn else 0})
        recs, at_recv, extra = [], [], {}
        with core.Measurement(ctx, topo, v, tag) as m:
            if v.name == "dctcp":
                m.start(senders, [topo.bottleneck])
                recs = self.run_tg(ctx, topo, v, load, rep, tag)
                at_recv = recs  # sluice-tg's FCT ends at the receiving client already
            else:
                m.start([], [topo.bottleneck])
                recs, at_recv, extra = self.run_top(ctx, topo, v, load, rep, tag)
            m.finish()
        drops = m.bottleneck_delta("drops")  # after finish(): it reads the counters again
        row = {"load": load, "flows": a.flows, "flows_done": len(recs)}
        fcts = [f for _, f in recs]
        short = [f for s, f in recs if s < a.short_bytes]
        row["fct_mean_us"] = round(statistics.fmean(fcts), 1) if fcts else None
        core.add_percentiles(row, fcts, "fct", unit="us")
        core.add_percentiles(row, short, "short_fct", qs=(99,), unit="us")
        sl = [self.slowdown(s, f) for s, f in recs]
        row["slowdown_mean"] = round(statistics.fmean(sl), 3) if sl else None
        # The receiver's view: the flow's start (its SYNC's timestamp, the
        # sender's clock) to the moment the receiver has every byte, without
        # the DONE's trip back; what sluice-tg's FCT (dctcp) measures.
        row["fct_recv_mean_us"] = round(statistics.fmean(f for _, f in at_recv), 1) if at_recv else None
        core.add_percentiles(row, [f for s, f in at_recv if s < a.short_bytes], "short_fct_recv", qs=(99,), unit="us")
        row["slowdown_recv_mean"] = round(statistics.fmean(self.slowdown(s, f) for s, f in at_recv), 3) \
            if at_recv else None
        row["deadline_miss_ratio"] = None
        if "deadline_flows" in extra:
            row["deadline_miss_ratio"] = round(extra["deadline_missed"] / extra["deadline_flows"], 4) \
                if extra["deadline_flows"] else None
        if v.name == "dctcp":
            row["data_lost_packets"] = drops
            row["tokens_expired"] = None
        else:
            row["data_lost_packets"] = m.extra.get("data_drops_switch")
            row["tokens_expired"] = m.extra.get("tokens_expired")
        row["max_data_queue_bytes"] = m.qmon["ports"][0]["max_backlog_bytes"] if m.qmon and m.qmon["ports"] else None
        row["base_rtt_us"] = round(self.base_rtt_us, 1)
        row.update(extra)
        row.update({k: val for k, val in m.extra.items() if k not in row})
        return row

    def bounds_args(self, v, pmax: float) -> list:
        """--bounds for a variant whose classes are balanced on this run's
        CDF (after --max-size and --size-scale)."""
        if not getattr(v, "balanced", False):
            return []
        scaled = [(sz * self.args.size_scale, pr) for sz, pr in self.pts]
        b = balanced_bounds(scaled, 6, 1440, pmax, fine_first=getattr(v, "fine_first", False))
        return ["--bounds", ",".join(f"{x:g}" for x in b)]

    def run_top(self, ctx, topo, v, load, rep, tag):
        a = self.args
        sched = self.schedule(load, rep)
        pmax = max(2.0, self.pts[-1][0] * a.size_scale / 1440)
        recvs, sends = [], []
        # The deadline classes tell slacks apart up to the largest deadline
        # (the log base, as p is for sizes: §3.2's thresholds, objective.h).
        span = max([d for *_, d in sched] + [2])
        for i in range(a.pairs):
            mine = [(t, s, d) for t, s, p, d in sched if p == i]
            if not mine:
                continue
            r, s = topo.receivers[i], topo.senders[i]
            argv = [self.sluice_top(), "recv", "--bind", r.ip, "--link-mbit", f"{a.rate:g}",
                    "--objective", v.objective, "--p-pkts", f"{pmax:.0f}", "--deadline-span-us", str(span),
                    "--rtt-us", str(a.rtt_us), "--exit-after", str(len(mine)),
                    *self.bounds_args(v, pmax), *getattr(v, "recv_args", [])]
            recvs.append(ctx.spawn(r.ns, ctx.fifo_prefix(11, a.top_fifo) + argv, f"{tag}-recv{i}"))
            path = os.path.join(ctx.tmp, f"{tag}-sched{i}.txt")
            with open(path, "w") as f:
                t0 = mine[0][0]
                for t, sz, d in mine:
                    f.write(f"{t - t0 + 50000} {sz}" + (f" {d}" if d else "") + "\n")  # 50 ms for every sender to start
            sends.append((i, path))
        procs = []
        for i, path in sends:
            s, r = topo.senders[i], topo.receivers[i]
            argv = [self.sluice_top(), "send", "--bind", s.ip, "--to", r.ip, "--schedule", path,
                    "--rtt-us", str(a.rtt_us), "--timeout-s", str(int(a.timeout))]
            procs.append((i, ctx.spawn(s.ns, ctx.fifo_prefix(10, a.top_fifo) + argv, f"{tag}-send{i}")))
        recs, resent, sent, unfinished = [], 0, 0, 0
        for i, p in procs:
            try:
                p.wait(timeout=a.timeout + 30)
            except subprocess.TimeoutExpired:
                ctx.stop(p)
            log = ctx.lab.log_of(p)
            for line in log.splitlines():
                if not line.startswith("{"):
                    continue
                j = json.loads(line)
                if "fct_us" in j:
                    recs.append((j["size"], j["fct_us"]))
                elif j.get("role") == "send":
                    resent += j["data_resent"]
                    sent += j["data_sent"]
                    unfinished += j["flows"] - j["flows_done"]
        for p in recvs:
            ctx.stop(p)
        closed = [j for p in recvs for j in receiver_completions(ctx.lab.log_of(p))]
        at_recv = [(j["size"], j["fct_us"]) for j in closed]
        extra = {"data_sent": sent, "data_resent": resent, "flows_unfinished": unfinished}
        if any(d for *_, d in sched):
            # The receiver knows whether a flow closed by its deadline
            # (receiver.cc); a flow that never closed missed it.
            met = sum(bool(j.get("deadline") and j.get("deadline_met")) for j in closed)
            extra.update({"deadline_flows": len(sched), "deadline_missed": len(sched) - met})
        ctx.save_artifacts(*[f"{tag}-send{i}.log" for i, _ in sends], *[f"{tag}-recv{i}.log" for i, _ in sends])
        return recs, at_recv, extra

    def run_tg(self, ctx, topo, v, load, rep, tag):
        """dctcp: one sluice-tg flows client per receiver, asking its paired
        sender, load / pairs each of the bottleneck."""
        a = self.args
        n = max(1, a.flows // a.pairs)
        procs = []
        for i in range(a.pairs):
            r, s = topo.receivers[i], topo.senders[i]
            rec = os.path.join(ctx.tmp, f"{tag}-{i}.csv")
            argv = traffic.flows_argv(ctx, [s], self.cdf_file, load / a.pairs, n, a.seed * 1000003 + rep * 1009 + i,
                                      a.rate, rec, os.path.join(ctx.tmp, f"{tag}-{i}.json"), a.timeout, cc=v.cc,
                                      scale=a.size_scale)
            procs.append((rec, ctx.spawn(r.ns, argv, f"{tag}-tg{i}")))
        recs = []
        for rec, p in procs:
            try:
                p.wait(timeout=a.timeout + 60)
            except subprocess.TimeoutExpired:
                ctx.stop(p)
                raise BenchError(f"sluice-tg did not finish: {ctx.lab.log_of(p)[-1500:]}")
            if p.returncode != 0:
                raise BenchError(f"sluice-tg failed: {ctx.lab.log_of(p)[-1500:]}")
            recs += [(size, fct) for size, fct, _ in traffic.read_records(rec)]
        return recs

    # -- presentation ----------------------------------------------------------
    def table(self, result) -> str:
        p = result["params"]
        lines = [f"top: {p['workload']} x{p['size_scale']:g}, {p['flows']} flows per run, {p['pairs']} pairs, "
                 f"{p['rate_mbit']:g} Mbit/s, buffer {p['buffer']} B",
                 f"{'load':>5} {'variant':13} {'done':>9} {'fct_mean':>10} {'fct_p99':>10} {'n':>5} "
                 f"{'short_p99':>10} {'n':>5} {'slowdown':>9} {'lost':>5} {'expired':>8} {'maxq_B':>8} {'dl_miss':>7}"]
        for _, v, r in self.points(result):
            def f(k, fmt="{:.0f}"):
                x = r.get(k)
                return "-" if x is None else fmt.format(x)
            lines.append(f"{r['load']:>5} {v:13} {str(r.get('flows_done')) + '/' + str(r.get('flows')):>9} "
                         f"{f('fct_mean_us'):>10} {f('fct_p99_us'):>10} {f('fct_n'):>5} "
                         f"{f('short_fct_p99_us'):>10} {f('short_fct_n'):>5} {f('slowdown_mean', '{:.2f}'):>9} "
                         f"{f('data_lost_packets'):>5} {f('tokens_expired'):>8} {f('max_data_queue_bytes'):>8} "
                         f"{f('deadline_miss_ratio', '{:.3f}'):>7}")
        return "\n".join(lines)

    def plot(self, result, path):
        names = list(result["variants"])
        fig, axes = self.subplots(1, 2, figsize=(11, 4))
        for ax, key, lab in ((axes[0], "fct_mean_us", "mean FCT (ms)"), (axes[1], "slowdown_mean", "mean slowdown")):
            for v in names:
                rows = result["variants"][v]
                xs = [r["load"] for r in rows]
                scale = 1e3 if key.endswith("_us") else 1
                self.errorbar(ax, xs, rows, key, scale, label=v, marker="o")
            ax.set_xlabel("load")
            ax.set_ylabel(lab)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
        axes[0].set_title(f"top: {result['params']['workload']}")
        self.save(fig, path)
