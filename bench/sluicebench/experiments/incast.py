"""incast: N synchronized senders answer one receiver through a shallow
switch buffer, round after round (the classic TCP incast experiment).

Topology: star, N sender hosts -> switch -> receiver; the switch port toward
the receiver is the bottleneck (TBF or HTB at --rate with --buffer bytes).
For each sender count and each variant: sluice-tg servers on the senders,
`sluice-tg incast` on the receiver, sluice-qmon on every switch port, TCP
counters of the sender namespaces and the bottleneck's tc counters before and
after. One JSON row per (variant, sender count).
"""

from __future__ import annotations

import json
import os

import sluicelab

from .. import core
from ..core import BenchError, Experiment, experiment
from .. import traffic, util


# Link profiles (see docs/lab.md, "incast"): the bottleneck settings the
# recorded baselines use, so every variant is compared on the same ones.
PROFILES = {
    # 1g-gso's token bucket holds 0.5 ms at the rate: with the lab default
    # (100 us, 12.5 KB) the TBF's timer, late by more than that on a loaded
    # 2-core machine, delivered 82% of 1 Gbit/s to a backlogged queue; 64 KB
    # delivers 95% (the payload ceiling, docs/lab.md "Token bucket"). GSO
    # super-packets up to 64 KB then enter (and leave, or are dropped from)
    # the TBF whole.
    "1g-gso": {"rate": 1000.0, "mode": "gso", "buffer": 131072, "burst": 65536,
               "help": "1 Gbit/s, GSO bursts into a TBF with 128 KB, 64 KB burst"},
    "100m-mtu": {"rate": 100.0, "mode": "mtu", "buffer": 32768,
                 "help": "100 Mbit/s, MTU frames, 32 KB buffer"},
    # The 1 Gbit/s switch profile (docs/switch.md): MTU frames (GSO/TSO/GRO
    # off, so a queue holds packets, not 64 KB super-packets) and the lab's
    # default bucket, 100 us at the rate as in 100m-mtu. With 1g-gso's 64 KB
    # bucket a 64 KB round leaves a port from its bucket, not at the rate, and
    # one sender's round time is the CPU time of its 44 frames.
    "1g-mtu": {"rate": 1000.0, "mode": "mtu", "buffer": 131072, "burst": 12500,
               "help": "1 Gbit/s, MTU frames, 128 KB buffer, 12.5 KB burst (switch experiments)"},
}


@experiment
class Incast(Experiment):
    name = "incast"
    help = "incast goodput vs number of synchronized senders (star topology)"
    default_variants = "baseline"
    # One run of 10 rounds is noisy: whether a round hits a 200 ms RTO is
    # close to a coin flip at the collapse point (docs/lab.md).
    default_repeat = 5
    point_keys = ("senders",)
    key_figures = ("goodput_mbps", "capacity_share", "rto_rounds", "max_queue_bytes")

    @classmethod
    def add_args(cls, p):
        p.add_argument("--senders", default="1,4,8,16,32,64,100",
                       help="comma-separated sender counts")
        p.add_argument("--hosts", type=int, default=0,
                       help="sender hosts (connections are spread over min(N, hosts)); 0 = max(senders)")
        p.add_argument("--bytes-per-sender", type=util.size, default=65536,
                       help="bytes each sender returns per round (K/M suffixes ok)")
        p.add_argument("--total-bytes", type=util.size, default=0,
                       help="fixed bytes per round split over the senders (overrides --bytes-per-sender)")
        p.add_argument("--rounds", type=int, default=10, help="measured rounds per point")
        p.add_argument("--warmup", type=int, default=0,
                       help="unmeasured rounds first (their drops/retransmissions still show "
                            "in the namespace and qdisc counters)")
        p.add_argument("--gap-ms", type=float, default=0, help="idle time between rounds")
        p.add_argument("--connections", choices=("persistent", "fresh"), default="persistent",
                       help="persistent: one connection per sender for all rounds (TCP state carries "
                            "over); fresh: new connections before every round, outside the timing")
        p.add_argument("--profile", choices=sorted(PROFILES), default="1g-gso",
                       help="link profile: " + "; ".join(f"{k}: {v['help']}" for k, v in sorted(PROFILES.items()))
                            + " (--rate/--mode/--buffer override it)")
        p.add_argument("--rate", type=util.rate, default=None,
                       help="link rate in Mbit/s (suffixes: 100M, 1G)")
        p.add_argument("--uplink-rate", type=util.rate, default=0,
                       help="sender uplink rate in Mbit/s (0 = --rate)")
        p.add_argument("--buffer", type=util.size, default=None,
                       help="bottleneck buffer in bytes (K/M suffixes ok)")
        p.add_argument("--mode", choices=("gso", "mtu"), default=None,
                       help="gso: GSO super-packets into the qdiscs; mtu: one MTU frame per skb")
        p.add_argument("--topology", choices=("star", "dumbbell", "leaf-spine"), default="star",
                       help="star: bottleneck at the receiver's switch port; dumbbell: senders on the "
                            "left switch, bottleneck the core link L->R; leaf-spine: senders in other "
                            "racks first, bottleneck the receiver's ToR port")
        p.add_argument("--core-rate", type=util.rate, default=0,
                       help="dumbbell L<->R / leaf-spine ToR<->spine rate (0 = --rate)")
        p.add_argument("--tors", type=int, default=4, help="leaf-spine: ToRs")
        p.add_argument("--spines", type=int, default=2, help="leaf-spine: spines")
        p.add_argument("--hosts-per-tor", type=int, default=0, help="leaf-spine: hosts per ToR (0 = enough)")
        p.add_argument("--background", type=int, default=0,
                       help="long-lived background flows from extra senders during every point "
                            "(star: to the receiver; dumbbell: to a second receiver, sharing only the "
                            "core link; leaf-spine: to the receiver)")
        p.add_argument("--background-warmup", type=float, default=1.0,
                       help="seconds the background flows run before the incast starts")
        p.add_argument("--switch", choices=("bridge", "router", "sluice"), default="bridge",
                       help="how switch namespaces forward and queue: a Linux bridge or router with the "
                            "lab's shaper, or sluice: bridge forwarding (routers on leaf-spine) with "
                            "sluiced in switch mode owning each port's queues (docs/switch.md)")
        p.add_argument("--switch-logic", default="fifo",
                       help="--switch sluice: the switch logic ([switch] logic; fifo = the plain port)")
        p.add_argument("--switch-queues", type=int, default=1,
                       help="--switch sluice: queues per switch port")
        p.add_argument("--shaper", choices=("tbf", "htb"), default="tbf",
                       help="bottleneck qdisc (TBF splits GSO into MTU frames)")
        p.add_argument("--burst", type=util.size, default=0,
                       help="token bucket burst in bytes (0 = the profile's, else 100 us at the rate, >= 2 frames)")
        p.add_argument("--timeout", type=float, default=300, help="seconds per point")

    def resolve_profile(self):
        a = self.args
        prof = PROFILES[a.profile]
        rate_given = a.rate is not None
        for k in ("rate", "mode", "buffer"):
            if getattr(a, k) is None:
                setattr(a, k, prof[k])
        # The profile's burst goes with its rate: another --rate gets the
        # lab's default burst for that rate unless --burst is given.
        if not a.burst and prof.get("burst") and (not rate_given or a.rate == prof["rate"]):
            a.burst = prof["burst"]

    def params(self) -> dict:
        a = self.args
        return {"profile": a.profile, "senders": self.senders, "hosts": self.hosts, "bytes_per_sender": a.bytes_per_sender,
                "total_bytes": a.total_bytes or None, "rounds": a.rounds, "warmup": a.warmup,
                "gap_ms": a.gap_ms, "connections": a.connections, "rate_mbit": a.rate, "uplink_mbit": a.uplink_rate or a.rate,
                "buffer": a.buffer, "mode": a.mode, "switch": a.switch, "shaper": a.shaper,
                "switch_logic": a.switch_logic if a.switch == "sluice" else None,
                "switch_queues": a.switch_queues if a.switch == "sluice" else None,
                "burst": a.burst or sluicelab.Shape(a.rate).default_burst(), "repeat": a.repeat,
                "bottleneck_mbit": self.bottleneck_rate(), "bottleneck_burst": self.bottleneck_burst(),
                "topology": a.topology, "core_mbit": a.core_rate or a.rate, "background": a.background}

    def run(self, ctx, variants):
        a = self.args
        self.resolve_profile()
        self.senders = util.int_list(a.senders)
        if not self.senders or min(self.senders) < 1:
            raise BenchError("--senders: give positive counts, e.g. 1,8,32")
        self.hosts = a.hosts or max(self.senders)
        topo = self.build(ctx)
        if a.background:
            ctx.log(f"{a.background} background flow(s) {', '.join(h.name for h in self.bg_hosts)} -> "
                    f"{self.bg_target.name} during every point")
        by_name = {v.name: v for v in variants}

        def measure(n, name, rep):
            r = self.point(ctx, topo, by_name[name], n, rep)
            ctx.log(f"N={n:<4d} rep {rep} {name:10s} goodput {r['goodput_mbps']:8.1f} Mbit/s "
                    f"({100 * r['capacity_share']:.0f}% of deliverable)  "
                    f"rto_rounds {r['rto_rounds']}/{r['rounds']}  drops {r['drops']}  "
                    f"maxq {r['max_queue_bytes']}")
            return r

        rows = core.sweep(ctx, self.senders, list(by_name), measure)
        return {"experiment": "incast", "params": self.params(), "topology": topo.describe(),
                "variants": rows}

    def bottleneck_rate(self) -> float:
        """The rate of the port the incast converges on: the receiver's
        switch port (star, leaf-spine) or the core link (dumbbell)."""
        a = self.args
        return (a.core_rate or a.rate) if a.topology == "dumbbell" else a.rate

    def bottleneck_burst(self) -> int:
        a = self.args
        return a.burst or sluicelab.Shape(self.bottleneck_rate()).default_burst()

    def deliverable_bytes(self, durations_us: list) -> float:
        """The most the bottleneck's token bucket can send in the measured
        rounds: rate x duration + one full bucket per round. A bucket that
        refilled while the port idled between rounds sends its burst at
        once, so over rounds of a few bucket-lengths the receiver can see
        more than the link rate; this, not the rate, is what a round's
        bytes are to be measured against."""
        rate_Bps = self.bottleneck_rate() * 1e6 / 8
        return sum(rate_Bps * d / 1e6 + self.bottleneck_burst() for d in durations_us)

    def build(self, ctx):
        """The topology, the incast senders (in the order they are used), the
        receiver, and the hosts and target of background flows."""
        a = self.args
        nb = a.background
        common = dict(rate=a.rate, buffer=a.buffer, mode=a.mode, shaper=a.shaper, burst=a.burst or None)
        # --switch sluice: the forwarding of the bridge baseline (routers on
        # leaf-spine), the queues of sluiced's switch mode.
        switch = "bridge" if a.switch == "sluice" else a.switch
        if a.switch == "sluice":
            common["sluice"] = {"bin": ctx.tool("sluiced"), "logic": a.switch_logic, "queues": a.switch_queues}
        ctx.log(f"building {a.topology}: {self.hosts} incast senders, {a.rate:g} Mbit/s, buffer {a.buffer} B, "
                f"mode {a.mode}, " + (f"sluice switches ({a.switch_logic})" if a.switch == "sluice" else a.shaper))
        if a.topology == "star":
            topo = sluicelab.star(ctx.lab, senders=self.hosts + nb, switch=switch,
                                  uplink_rate=a.uplink_rate or None, **common)
            self.receiver = topo.receivers[0]
            self.incast_hosts = topo.senders[:self.hosts]
            self.bg_hosts = topo.senders[self.hosts:]
            self.bg_target = self.receiver
        elif a.topology == "dumbbell":
            # Incast and background share only the L->R core link.
            topo = sluicelab.dumbbell(ctx.lab, left=self.hosts + nb, right=2 if nb else 1, switch=switch,
                                      bottleneck_rate=a.core_rate or None, **common)
            self.receiver = topo.receivers[0]
            self.incast_hosts = topo.senders[:self.hosts]
            self.bg_hosts = topo.senders[self.hosts:]
            self.bg_target = topo.receivers[-1]
        else:
            total = self.hosts + nb + 1
            hpt = a.hosts_per_tor or max(1, -(-total // a.tors))
            if a.tors * hpt < total:
                raise BenchError(f"--tors {a.tors} x --hosts-per-tor {hpt} hold fewer than {total} hosts")
            topo = sluicelab.leaf_spine(ctx.lab, tors=a.tors, spines=a.spines, hosts_per_tor=hpt,
                                        core_rate=a.core_rate or None, **common)
            self.receiver = topo.receivers[0]
            rack = self.receiver.name.split("h")[0]
            # Senders in other racks first: their traffic crosses the core.
            others = [h for h in topo.senders if not h.name.startswith(rack + "h")]
            same = [h for h in topo.senders if h.name.startswith(rack + "h")]
            order = others + same
            self.incast_hosts = order[:self.hosts]
            self.bg_hosts = order[self.hosts:self.hosts + nb]
            self.bg_target = self.receiver
        return topo

    def start_background(self, ctx, v, tag):
        """Long flows from the background hosts to their target, for the
        whole point; returns what stop_background() needs."""
        a = self.args
        if not a.background:
            return None
        servers = ctx.start_servers(self.bg_hosts, v.cc, port=5002)
        out = os.path.join(ctx.tmp, f"bg-{tag}.json")
        argv = ctx.tg() + ["long", "--to", ",".join(f"{h.ip}:5002" for h in self.bg_hosts),
                           "--conns", str(a.background), "--duration", "86400", "--interval-ms", "100",
                           "--link-mbps", str(a.rate), "--json", out]
        if v.cc:
            argv += ["--cc", v.cc]
        client = ctx.spawn(self.bg_target.ns, argv, f"tg-bg-{tag}")
        import time
        time.sleep(a.background_warmup)
        if client.poll() is not None:
            raise BenchError(f"background flows failed:\n{ctx.lab.log_of(client)[-2000:]}")
        return {"servers": servers, "client": client, "json": out}

    def stop_background(self, ctx, bg) -> dict:
        if not bg:
            return {}
        import signal as _signal
        ctx.stop(bg["client"], _signal.SIGTERM, grace=5)
        ctx.stop_all(bg["servers"])
        try:
            with open(bg["json"]) as f:
                j = json.load(f)
        except (OSError, ValueError):
            return {"background_mbps": None}
        # Mean aggregate after the warm-up, i.e. while the incast ran.
        warm = self.args.background_warmup
        vals = [r["aggregate_mbps"] for r in j["series"] if r["t_s"] > warm]
        return {"background_mbps": round(sum(vals) / len(vals), 1) if vals else None}

    def point(self, ctx, topo, v, n, rep) -> dict:
        a = self.args
        nh = min(n, len(self.incast_hosts))
        senders = self.incast_hosts[:nh]
        recv = self.receiver
        ctx.point = {"senders": n, "repeat": rep, "sender_hosts": senders, "receiver": recv}
        topo.set_host_sysctl({"net.ipv4.tcp_ecn": 1 if v.ecn else 0})
        tag = f"{v.name}-n{n}-r{rep}"
        out = os.path.join(ctx.tmp, f"incast-{tag}.json")
        with core.Measurement(ctx, topo, v, tag) as m:
            bg = self.start_background(ctx, v, tag)
            m.stop_on_finish("background", lambda: self.stop_background(ctx, bg))
            m.start(senders, topo.switch_ports())
            before = {h.ns: sluicelab.netns_counters(h.ns) for h in senders}
            argv = traffic.incast_argv(ctx, senders, n, a.rounds, a.rate, out, a.timeout,
                                       bytes_per_conn=a.bytes_per_sender, total_bytes=a.total_bytes,
                                       warmup=a.warmup, gap_ms=a.gap_ms, fresh=a.connections == "fresh",
                                       cc=v.cc)
            ctx.run_tool(recv.ns, argv, f"tg-incast-{tag}", timeout=a.timeout + 30)
            ctx.save_artifacts(f"incast-{tag}.json", f"tg-incast-{tag}.log")
            ns = {}
            for h in senders:
                d = sluicelab.counters_delta(before[h.ns], sluicelab.netns_counters(h.ns))
                for k in ("Tcp.RetransSegs", "TcpExt.TCPTimeouts", "TcpExt.TCPLossProbes",
                          "TcpExt.TCPSpuriousRTOs"):
                    ns[k] = ns.get(k, 0) + d.get(k, 0)
            m.finish()
        topo.check_switches()
        qmon = m.qmon
        with open(out) as f:
            tg = json.load(f)
        s = tg["summary"]
        rto_rounds = s["rto_rounds"]
        rto_source = "tcpi_total_rto"
        if rto_rounds is None:
            # Kernels before 6.7 do not count RTOs per socket: a round that
            # lasted at least the minimum RTO (200 ms) waited for one.
            rto_rounds = sum(1 for r in tg["per_round"] if r["duration_us"] >= 200_000)
            rto_source = "round >= 200 ms"
        # A round that waited for a 200 ms timer: an RTO, or a tail-loss probe
        # with one segment outstanding (its timer includes the worst-case
        # delayed ACK, 200 ms, and counts as a loss probe, not an RTO).
        ideal_ms = (a.total_bytes or a.bytes_per_sender * n) * 8 / (a.rate * 1e3)
        stall_rounds = sum(1 for r in tg["per_round"] if r["duration_us"] / 1e3 >= ideal_ms * 1.5 + 150)
        durations = [r["duration_us"] for r in tg["per_round"]]
        payload = sum(r["bytes"] for r in tg["per_round"])
        deliverable = self.deliverable_bytes(durations)
        row = {
            "senders": n,
            "goodput_mbps": round(s["goodput_mbps"], 2),
            "link_mbps": self.bottleneck_rate(),
            # Payload bytes / what the bottleneck could deliver in these
            # rounds (<= 1 physically; the goodput may exceed the link rate).
            "capacity_share": round(payload / deliverable, 4) if deliverable else None,
            "deliverable_mbit": round(deliverable * 8 / sum(durations), 1) if durations else None,
            "rto_rounds": rto_rounds,
            "rounds": a.rounds,
            "drops": m.bottleneck_delta("drops"),
            "retrans_segs": s["retrans_segs"],
            "max_queue_bytes": None,
            "utilisation": round(s["goodput_mbps"] / self.bottleneck_rate(), 4),
            "round_ms_max": round(s["round_us_max"] / 1e3, 3),
            "rto": s["rto"],
            "rto_source": rto_source,
            "stall_rounds": stall_rounds,
            "sender_hosts": len(senders),
            "ns_retrans_segs": ns.get("Tcp.RetransSegs", 0),
            "ns_timeouts": ns.get("TcpExt.TCPTimeouts", 0),
            "ns_loss_probes": ns.get("TcpExt.TCPLossProbes", 0),
            "bottleneck_bytes": m.bottleneck_delta("bytes"),
            # Every measured round: duration and whether a sender hit an RTO.
            "round_ms": [round(r["duration_us"] / 1e3, 2) for r in tg["per_round"]],
            "round_rto": [None if r["rto_flows"] is None else int(r["rto_flows"] > 0) for r in tg["per_round"]],
        }
        core.add_percentiles(row, [r["goodput_mbps"] for r in tg["per_round"]], "round_goodput",
                             qs=(50,), unit="mbps", digits=2)
        core.add_percentiles(row, [d / 1e3 for d in durations], "round_ms", qs=(50,), digits=3)
        if qmon:
            bn = topo.bottleneck.spec()
            port = next((p for p in qmon["ports"] if p["spec"] == bn), None)
            if port:
                row["max_queue_bytes"] = port["max_backlog_bytes"]
                row["max_queue_pkts"] = port["max_backlog_pkts"]
            row["max_queue_by_class"] = {c: v_["max_backlog_bytes"] for c, v_ in qmon["classes"].items()}
        row.update(m.results["background"] or {})
        row.update(m.faults)
        row.update(m.extra)
        return row

    # -- presentation ----------------------------------------------------------
    def table(self, result) -> str:
        p = result["params"]
        n = result.get("repeat", p.get("repeat", 1))
        lines = [f"incast: {p['rate_mbit']:g} Mbit/s {p['shaper']} bottleneck, buffer {p['buffer']} B, "
                 f"{p['mode']} mode, {p['bytes_per_sender']} B per sender, {p['rounds']} rounds"
                 + (f", {n} repeats (medians)" if n > 1 else ""),
                 f"{'senders':>7} {'variant':12} {'goodput':>9} {'%link':>7} {'%cap':>6} {'rto_rnds':>8} "
                 f"{'drops':>7} {'retrans':>7} {'maxq_B':>8} {'round_p50_ms':>12}"]
        above = False
        for i, v, r in self.points(result):
            n_ = p["senders"][i]
            mq = r["max_queue_bytes"]
            link = r.get("link_mbps") or p["rate_mbit"]
            pct = 100 * r["goodput_mbps"] / link
            mark = "!" if pct > 100 or "goodput_mbps" in r.get("flags", {}) else " "
            above |= mark == "!"
            cap = r.get("capacity_share")
            lines.append(f"{n_:>7} {v:12} {r['goodput_mbps']:>9.1f} {pct:>5.1f}%{mark} "
                         f"{'-' if cap is None else f'{100 * cap:.1f}%':>6} "
                         f"{r['rto_rounds']:>4}/{r['rounds']:<3} {r['drops']:>7} {r['retrans_segs']:>7} "
                         f"{'-' if mq is None else mq:>8} {r['round_ms_p50']:>12.2f}")
        lines.append("%cap: payload / what the bottleneck could deliver in those rounds (rate x round + its "
                     f"{p.get('bottleneck_burst', p['burst'])} B token bucket per round)")
        if above:
            lines.append("! goodput above the link rate: rounds so short that the token bucket's burst is a "
                         "large share of them; read %cap (or use longer rounds)")
        return "\n".join(lines)

    def plot(self, result, path):
        p = result["params"]
        fig, (ax1, ax2) = self.subplots(1, 2, figsize=(11, 4))
        for v, rows in result["variants"].items():
            xs = [r["senders"] for r in rows]
            if any("spread" in r for r in rows):
                self.errorbar(ax1, xs, rows, "goodput_mbps", marker="o", label=v)
            else:
                ax1.plot(xs, [r["goodput_mbps"] for r in rows], marker="o", label=v)
                runs = [r.get("goodput_mbps_runs") for r in rows]
                for x, rr in zip(xs, runs):
                    if rr:
                        ax1.plot([x, x], [min(rr), max(rr)], color="gray", lw=1)
            ax2.plot(xs, [100 * r["rto_rounds"] / r["rounds"] for r in rows], marker="s", label=v)
        ax1.axhline(p["rate_mbit"], ls="--", color="k", lw=0.8, label="link")
        ax1.set_xscale("log")
        ax1.set_xlabel("senders")
        ax1.set_ylabel("goodput (Mbit/s)")
        top = max([p["rate_mbit"]] + [r["goodput_mbps"] for rows in result["variants"].values() for r in rows])
        ax1.set_ylim(0, top * 1.05)
        ax1.legend()
        ax1.set_title(f"incast goodput, {p['rate_mbit']:g} Mbit/s, buffer {p['buffer'] // 1024} KB, {p['mode']}")
        ax2.set_xscale("log")
        ax2.set_xlabel("senders")
        ax2.set_ylabel("rounds with an RTO (%)")
        ax2.set_ylim(-2, 102)
        ax2.legend()
        ax2.set_title(f"{p['bytes_per_sender'] // 1024} KB per sender, {p['rounds']} rounds")
        for ax in (ax1, ax2):
            ax.grid(True, alpha=0.3)
        self.save(fig, path)
