"""floodgate: Floodgate's testbed experiment (floodgate-conext21 §5.2) at
lab scale.

Topology: leaf-spine of routers, one spine (the paper's core switch) and
three ToRs with two hosts each; host links at the profile's host rate, ToR
links at twice that (the paper's 10/20 Gbit/s, 1:2), every ToR<->core link
optionally given --core-delay-us of propagation delay by a sluice-wire (and
host links --host-delay-us; both 0 by default, see the option), MTU frames. The incast destination is the last host
(t3h2); four hosts of the other two racks send it --incast-bytes each at
once (sluice-tg incast rounds, --incast-gap-ms apart, for about as long as
the Poisson flows run), while Poisson flows with sizes from --workload run
among the five other hosts (each of them asks the other four, at --load of
its link).

Variants (variants/floodgate.py, variants/pulser.py): dctcp (the lab's
plain switches marking ECN at K on every port, sluice_dctcp hosts),
floodgate (sluice switches with logic floodgate per packet, datapath
"hold", the same hosts and marking) and floodgate-tree (the same on the
design-A data path). Held queues are in sluiced, not in the qdisc: their
maximum and drops are added per port (add_held). One row per variant with the maximum backlog per hop
(tor_up_queue_max_bytes: the first hop, ToR -> core; core_queue_max_bytes:
core -> ToR; tor_down_queue_max_bytes: the last hop, ToR -> host;
sluice-qmon, exact per packet), drops per hop (last_hop_drops = ToR-down),
other_fct_mean_us / _p50 / _p99 with other_fct_n (the Poisson flows),
incast_fct_mean_us / _p99 with incast_fct_n (every incast flow of every
round), credit_bytes_fraction (credit and switchSYN bytes / all bytes the
switch ports sent), and CDF points of both FCTs for the plot.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import subprocess

import sluicelab

from .. import core, traffic, util
from ..core import BenchError, Experiment, experiment
from .top import mean_size, read_cdf

# Host and core rates (1:2 as in §5.2), MTU frames. A profile with a
# time_scale > 1 is 100m slowed down: every rate divided by it and every
# time constant multiplied by it (TIME_BASE and FG_TIME_BASE below), so each
# BDP, window and threshold stays the same in bytes (packets) while a frame
# takes time_scale times longer on the wire; what does not scale is the
# machine's own lateness (the switch agents' wake-ups and CPU per frame),
# which becomes that much smaller against a packet time.
PROFILES = {
    "100m": {"rate": 100.0, "core": 200.0, "help": "hosts 100 Mbit/s, core 200 Mbit/s"},
    "1g": {"rate": 1000.0, "core": 2000.0, "help": "hosts 1 Gbit/s, core 2 Gbit/s"},
    "10m": {"rate": 10.0, "core": 20.0, "time_scale": 10,
            "help": "hosts 10 Mbit/s, core 20 Mbit/s: 100m slowed down 10x (an MTU frame 1.2 ms; incast gap, "
                    "link delays, floodgate's T, hop RTT, switchSYN timeout and the hosts' dstPause timeout x10; bytes "
                    "and K as 100m)"},
}
# 100m's time constants, the base a time-scaled profile multiplies: the
# experiment's (option defaults) and floodgate's own (Config defaults,
# agent/mechanisms/floodgate/logic.h), written into every switch's
# [floodgate] section unless --floodgate-section names the key; and the
# host part of dstPause's (HostPauseConfig, host_pause.h), written into the
# [floodgate] section of the hosts' sluiced (variant floodgate-dstpause)
# the same way.
TIME_BASE = {"incast_gap_ms": 10.0, "core_delay_us": 0.0, "host_delay_us": 0.0}
FG_TIME_BASE = {"credit_interval_us": 500, "hop_rtt_us": 200, "syn_timeout_ms": 10}
FG_HOST_TIME_BASE = {"host_pause_timeout_ms": 20}
FG_THRE_CREDIT_BDP = 10  # Config default (§6.5)


def section_keys(section: str) -> dict:
    """Keys of a --floodgate-section text ('k = v; k2 = v2' or lines) with
    their values as written."""
    out = {}
    for line in section.replace(";", "\n").splitlines():
        if "=" in line and not line.strip().startswith("#"):
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def profile_fg_keys(profile: str, section: str = "", base: dict = FG_TIME_BASE) -> dict:
    """[floodgate] keys a profile adds to every switch: 100m's T, hop RTT
    and switchSYN timeout (`base`) times its time_scale; none for a profile
    without one (the defaults stay as they are), none that `section` sets
    itself."""
    scale = PROFILES[profile].get("time_scale", 1)
    if scale == 1:
        return {}
    given = section_keys(section)
    return {k: int(round(v * scale)) for k, v in base.items() if k not in given}


def profile_host_keys(profile: str, section: str = "") -> dict:
    """[floodgate] keys a profile adds to every dstPause host: the host
    pause timeout times its time_scale (10m: 200 ms), unless `section`
    sets it."""
    return profile_fg_keys(profile, section, FG_HOST_TIME_BASE)


def derived(profile: str, section: str = "", aqm_k: int = 20, incast_gap_ms=None) -> dict:
    """What the switches' parameters come to in a profile, in bytes and
    packets (for the run's params and the test that 10m matches 100m):
    T, hop RTT, switchSYN timeout and the dstPause hosts' pause timeout in
    force; the initial window toward a core
    port BDP_nextHop + C_out*T (§3.2, §4.1), thre_credit (10 BDP, §6.5),
    thre_off/thre_on (one-hop BDP, §4.3) toward the core, DCTCP's K (packets,
    the same in every profile), the incast gap, and a core-port MTU frame's
    time on the wire."""
    pr = PROFILES[profile]
    scale = pr.get("time_scale", 1)
    keys = dict(FG_TIME_BASE, **FG_HOST_TIME_BASE)
    keys.update(profile_fg_keys(profile, section))
    keys.update(profile_host_keys(profile, section))
    for k, v in section_keys(section).items():
        if k in keys:
            keys[k] = float(v)
    core_Bpus = pr["core"] / 8  # bytes per microsecond
    bdp = core_Bpus * keys["hop_rtt_us"]
    gap = incast_gap_ms if incast_gap_ms is not None else TIME_BASE["incast_gap_ms"] * scale
    return {"time_scale": scale, "credit_interval_us": keys["credit_interval_us"],
            "hop_rtt_us": keys["hop_rtt_us"], "syn_timeout_ms": keys["syn_timeout_ms"],
            "host_pause_timeout_ms": keys["host_pause_timeout_ms"],
            "init_window_core_bytes": round(bdp + core_Bpus * keys["credit_interval_us"]),
            "thre_credit_core_bytes": round(FG_THRE_CREDIT_BDP * bdp), "thre_off_core_bytes": round(bdp),
            "aqm_k_packets": aqm_k, "incast_gap_ms": gap,
            "core_frame_us": round(1514 / core_Bpus, 3)}
HOPS = (("tor_up", "tor-up"), ("core", "core"), ("tor_down", "tor-down"))
CDF_POINTS = 200


def cdf_points(values: list) -> list:
    """CDF_POINTS evenly spaced quantiles of `values` (for the plot)."""
    s = sorted(values)
    if not s:
        return []
    return [round(s[min(len(s) - 1, int(i * len(s) / CDF_POINTS))], 1) for i in range(CDF_POINTS)] + [s[-1]]


def add_held(qmon: dict, held: list) -> tuple:
    """qmon's classes and ports with the held data path's queues added: per
    port the most bytes the switch's sluiced held at once plus the most its
    root qdisc held (an upper bound: the two maxima need not coincide; the
    qdisc keeps about one frame), and the agent's tail drops added to the
    qdisc's. Returns (classes, ports) in qmon's form."""
    by_spec = {h["spec"]: h for h in held if h.get("spec")}
    ports, classes = [], {}
    for p in qmon.get("ports", []):
        p = dict(p, tc=dict(p.get("tc", {})))
        h = by_spec.get(p["spec"])
        if h:
            p["max_backlog_bytes"] = p["max_backlog_bytes"] + h["held_max_bytes"]
            p["tc"]["drops"] = p["tc"].get("drops", 0) + h["drops"]
        ports.append(p)
        c = classes.setdefault(p["class"], {"max_backlog_bytes": 0, "drops": 0, "ports": 0})
        c["max_backlog_bytes"] = max(c["max_backlog_bytes"], p["max_backlog_bytes"])
        c["drops"] += p["tc"].get("drops", 0)
        c["ports"] += 1
    return classes, ports


def read_flow_tcp(path: str) -> list:
    """(fct_us, retrans_segs, rto) per flow of a `sluice-tg flows --records`
    CSV; rto is None when the sender's kernel does not count RTOs."""
    with open(path) as f:
        return [(float(r["fct_us"]), int(r["retrans_segs"] or 0), int(r["rto"]) if r.get("rto") else None)
                for r in csv.DictReader(f)]


def flow_tcp_fields(flows: list) -> dict:
    """Row fields from the Poisson flows' own TCP counts (the data sender's
    tcp_info over each flow): how many retransmitted or waited for an RTO,
    and the median FCT of the flows that did neither (queueing alone)."""
    clean = [fct for fct, re, rto in flows if re == 0 and not rto]
    known = [rto for _, _, rto in flows if rto is not None]
    return {"other_flows_retrans": sum(1 for _, re, _ in flows if re),
            "other_flows_rto": sum(1 for r in known if r) if known else None,
            "other_flows_clean": len(clean),
            "other_fct_clean_p50_us": round(statistics.median(clean), 1) if clean else None}


@experiment
class FloodgateExp(Experiment):
    name = "floodgate"
    help = "Floodgate §5.2 at lab scale: leaf-spine 1 core x 3 ToRs x 2 hosts, 4-to-1 incast + Poisson flows"
    default_variants = "dctcp,floodgate"
    point_keys = ("profile",)
    key_figures = ("tor_down_queue_max_bytes", "core_queue_max_bytes", "tor_up_queue_max_bytes",
                   "other_fct_mean_us", "other_fct_p99_us", "incast_fct_mean_us", "last_hop_drops",
                   "credit_bytes_fraction")
    ratio_to = "dctcp"
    default_repeat = 3
    build_targets = core.DEFAULT_TARGETS + ["sluice-wire", "sluiced", "sluicectl"]

    @classmethod
    def add_args(cls, p):
        p.add_argument("--profile", choices=sorted(PROFILES), default="100m",
                       help="; ".join(f"{k}: {v['help']}" for k, v in sorted(PROFILES.items())))
        p.add_argument("--buffer", type=util.size, default=131072, help="switch port buffer, bytes")
        # 0 by default: on the shared 2-core machine the wires (user space,
        # normal priority, below the generator's and switches' SCHED_FIFO)
        # forwarded frames 0.5-14 ms late on average (docs/floodgate.md), so
        # a 50 us wire made hop RTTs a matter of scheduling, not distance.
        p.add_argument("--core-delay-us", type=float, default=None,
                       help="one-way propagation delay of every ToR<->core link (sluice-wire; default 0 = none, "
                            "times a profile's time scale)")
        p.add_argument("--host-delay-us", type=float, default=None,
                       help="one-way propagation delay of every host<->ToR link (sluice-wire; default as "
                            "--core-delay-us)")
        p.add_argument("--incast-bytes", type=util.size, default=45000,
                       help="bytes per incast sender per round (the paper's BDP-sized flows: 45 KB)")
        p.add_argument("--incast-gap-ms", type=float, default=None,
                       help="idle time between incast rounds (default 10 ms, times a profile's time scale)")
        p.add_argument("--workload", default="hadoop", help="Poisson flow sizes: CDF in bench/cdf/ or a path")
        p.add_argument("--load", type=float, default=0.4,
                       help="offered Poisson load into each of the five non-incast hosts, fraction of its link")
        p.add_argument("--flows", type=int, default=1000,
                       help="Poisson flows per variant and repeat (split over the five receiving hosts)")
        p.add_argument("--seed", type=int, default=1, help="Poisson arrivals, sizes, servers (repeat k: seed + k)")
        # §5.2: "a per-flow sending window on hosts is added to emulate the
        # first-RTT actions of DCQCN"; hosts here run DCTCP, uncapped unless
        # asked (the receiving socket's TCP_WINDOW_CLAMP, sluice-tg).
        p.add_argument("--host-window", type=util.size, default=0,
                       help="per-flow sending window on every host, bytes (e.g. 45000, the paper's BDP; 0 = none)")
        # The other half of that first RTT: DCQCN starts at line rate, so
        # a new flow sends its first window at once; TCP starts at 10
        # segments and grows. With --initcwnd a host's first RTT is the
        # paper's (e.g. 31 segments: one 45 KB window).
        p.add_argument("--initcwnd", type=int, default=0,
                       help="TCP initial window of every host in segments (route attribute initcwnd; 0 = the "
                            "kernel's 10), e.g. 31 with --host-window 45000: a flow's first RTT sends its whole "
                            "window, as §5.2's hosts do")
        p.add_argument("--timeout", type=float, default=600, help="seconds per variant run")

    def resolve_times(self):
        """The time options left at their defaults take 100m's times the
        profile's time scale; the switches' [floodgate] keys it adds go to
        the floodgate variants as args.floodgate_profile_keys, the dstPause
        hosts' as args.floodgate_host_profile_keys."""
        a = self.args
        scale = PROFILES[a.profile].get("time_scale", 1)
        core.fill_unset(a, {k: base * scale for k, base in TIME_BASE.items()})
        section = getattr(a, "floodgate_section", "") or ""
        a.floodgate_profile_keys = profile_fg_keys(a.profile, section)
        a.floodgate_host_profile_keys = profile_host_keys(a.profile, section)

    def params(self) -> dict:
        a = self.args
        pr = PROFILES[a.profile]
        return {"profile": a.profile, "rate_mbit": pr["rate"], "core_mbit": pr["core"],
                "time_scale": pr.get("time_scale", 1), "floodgate_profile_keys": a.floodgate_profile_keys,
                "floodgate_host_profile_keys": a.floodgate_host_profile_keys,
                "derived": derived(a.profile, getattr(a, "floodgate_section", "") or "", getattr(a, "aqm_k", 20),
                                   a.incast_gap_ms),
                "buffer": a.buffer,
                "mode": "mtu", "core_delay_us": a.core_delay_us, "host_delay_us": a.host_delay_us,
                "incast_senders": len(self.incast_hosts), "incast_bytes": a.incast_bytes,
                "incast_gap_ms": a.incast_gap_ms, "incast_rounds": self.rounds, "workload": a.workload,
                "cdf": os.path.relpath(self.cdf_path(), core.TOP), "load": a.load, "flows": a.flows,
                "seed": a.seed, "host_window": a.host_window, "initcwnd": a.initcwnd, "aqm_k": getattr(a, "aqm_k", None),
                "aqm_ports": getattr(a, "aqm_ports", None),
                "receiver": self.receiver.name, "incast_hosts": [h.name for h in self.incast_hosts],
                "poisson_hosts": [h.name for h in self.others]}

    def run(self, ctx, variants):
        self.resolve_times()
        a = self.args
        pr = PROFILES[a.profile]
        if a.floodgate_profile_keys:
            ctx.log(f"profile {a.profile}: time x{pr['time_scale']:g}, every switch's [floodgate] adds "
                    + ", ".join(f"{k} = {v:g}" for k, v in a.floodgate_profile_keys.items())
                    + "; a dstPause host's [floodgate] adds "
                    + (", ".join(f"{k} = {v:g}" for k, v in a.floodgate_host_profile_keys.items()) or "nothing")
                    + f"; incast gap {a.incast_gap_ms:g} ms")
        # The dctcp variant marks on every switch port of the leaf-spine, as
        # the floodgate variant's switches do.
        a.aqm_ports = "all"
        ctx.log(f"building leaf-spine: 1 core, 3 ToRs x 2 hosts, hosts {pr['rate']:g} / core {pr['core']:g} Mbit/s, "
                f"buffer {a.buffer} B, core links +{a.core_delay_us:g} us, host links +{a.host_delay_us:g} us")
        wire = ctx.tool("sluice-wire") if (a.core_delay_us or a.host_delay_us) else None
        topo = sluicelab.leaf_spine(ctx.lab, tors=3, spines=1, hosts_per_tor=2, rate=pr["rate"],
                                    core_rate=pr["core"], buffer=a.buffer, mode="mtu",
                                    core_delay_us=a.core_delay_us, host_delay_us=a.host_delay_us, wire=wire)
        if a.initcwnd:
            topo.set_initcwnd(a.initcwnd)
        self.receiver = topo.receivers[0]
        rack = self.receiver.name.split("h")[0]
        self.incast_hosts = [h for h in topo.hosts if not h.name.startswith(rack + "h")][:4]
        self.others = [h for h in topo.hosts if h is not self.receiver]
        # Incast rounds for about as long as the Poisson flows take at their load.
        rate_Bps = pr["rate"] * 1e6 / 8
        poisson_s = a.flows * mean_size(read_cdf(self.cdf_path())) / (len(self.others) * a.load * rate_Bps)
        round_s = len(self.incast_hosts) * a.incast_bytes / rate_Bps + a.incast_gap_ms / 1e3
        self.rounds = max(10, int(poisson_s / round_s))
        ctx.log(f"incast {len(self.incast_hosts)} x {a.incast_bytes} B -> {self.receiver.name}, {self.rounds} rounds; "
                f"{a.flows} {a.workload} flows among {', '.join(h.name for h in self.others)} (~{poisson_s:.1f} s)")
        by_name = {v.name: v for v in variants}

        def measure(profile, name, rep):
            r = self.point(ctx, topo, by_name[name], rep)
            ctx.log(f"rep {rep} {name:10s} maxq up/core/down {r['tor_up_queue_max_bytes']}/"
                    f"{r['core_queue_max_bytes']}/{r['tor_down_queue_max_bytes']} B  other FCT mean "
                    f"{r['other_fct_mean_us']:.0f} p99 {r['other_fct_p99_us']:.0f} us (n={r['other_fct_n']})  "
                    f"incast FCT mean {r['incast_fct_mean_us']:.0f} us  last-hop drops {r['last_hop_drops']}  "
                    f"credit share {r['credit_bytes_fraction']:.4f}")
            return r

        rows = core.sweep(ctx, [a.profile], list(by_name), measure)
        return {"experiment": self.name, "params": self.params(), "topology": topo.describe(),
                "wires": topo.wire_stats(), "variants": rows}

    def point(self, ctx, topo, v, rep) -> dict:
        a = self.args
        pr = PROFILES[a.profile]
        ctx.point = {"profile": a.profile, "repeat": rep, "sender_hosts": self.others, "receiver": self.receiver}
        topo.set_host_sysctl({"net.ipv4.tcp_ecn": 1 if v.ecn else 0})
        tag = f"fg-{v.name}-r{rep}"
        cdf = self.cdf_path()
        inc_out = os.path.join(ctx.tmp, f"{tag}-incast.json")
        per = max(1, a.flows // len(self.others))
        with core.Measurement(ctx, topo, v, tag) as m:
            m.start(self.others, topo.switch_ports())
            tcp0 = core.host_tcp_snapshot(topo.hosts)
            procs = []
            for i, h in enumerate(self.others):
                rec = os.path.join(ctx.tmp, f"{tag}-flows{i}.csv")
                argv = traffic.flows_argv(ctx, [x for x in self.others if x is not h], cdf, a.load, per,
                                          (a.seed + rep) * 1009 + i, pr["rate"], rec,
                                          os.path.join(ctx.tmp, f"{tag}-flows{i}.json"), a.timeout, cc=v.cc,
                                          window_clamp=a.host_window)
                procs.append((rec, ctx.spawn(h.ns, argv, f"{tag}-flows{i}")))
            inc = ctx.spawn(self.receiver.ns, traffic.incast_argv(
                ctx, self.incast_hosts, len(self.incast_hosts), self.rounds, pr["rate"], inc_out, a.timeout,
                bytes_per_conn=a.incast_bytes, gap_ms=a.incast_gap_ms, cc=v.cc, window_clamp=a.host_window),
                f"{tag}-incast")
            other, flow_rows = [], []
            for rec, p in procs + [(None, inc)]:
                try:
                    rc = p.wait(timeout=a.timeout + 60)
                except subprocess.TimeoutExpired:
                    ctx.stop(p)
                    raise BenchError(f"{p.name} did not finish: {ctx.lab.log_of(p)[-1500:]}")
                if rc != 0:
                    raise BenchError(f"{p.name} failed ({rc}): {ctx.lab.log_of(p)[-1500:]}")
                if rec:
                    other += [fct for _, fct, _ in traffic.read_records(rec)]
                    flow_rows += read_flow_tcp(rec)
            tcp = core.host_tcp_delta(tcp0, topo.hosts)
            ctx.save_artifacts(*[f"{tag}-flows{i}.csv" for i in range(len(self.others))], f"{tag}-incast.json")
            m.finish()
        topo.check_switches()
        topo.check_wires()
        with open(inc_out) as f:
            tg = json.load(f)
        incast = [fl["fct_us"] for r in tg["per_round"] for fl in r["flows"]]
        cls = m.qmon["classes"] if m.qmon else {}
        ports = m.qmon["ports"] if m.qmon else []
        held = m.extra.pop("hold_ports", None)
        if held and m.qmon:
            cls, ports = add_held(m.qmon, held)
        row = {"profile": a.profile}
        for key, c in HOPS:
            row[f"{key}_queue_max_bytes"] = cls.get(c, {}).get("max_backlog_bytes")
            row[f"{key}_drops"] = cls.get(c, {}).get("drops")
        row["last_hop_drops"] = row["tor_down_drops"]
        bn = topo.bottleneck.spec()
        row["incast_port_queue_max_bytes"] = next((p["max_backlog_bytes"] for p in ports if p["spec"] == bn), None)
        # Which port of a hop made its maximum (ToR-down: the incast port or
        # one the Poisson flows fill).
        row["queue_max_by_port"] = {p["spec"]: {"hop": p["class"], "max_backlog_bytes": p["max_backlog_bytes"]}
                                    for p in ports}
        row["other_fct_mean_us"] = round(statistics.fmean(other), 1) if other else None
        core.add_percentiles(row, other, "other_fct", unit="us")
        row["incast_fct_mean_us"] = round(statistics.fmean(incast), 1) if incast else None
        core.add_percentiles(row, incast, "incast_fct", unit="us")
        row["incast_rounds"] = len(tg["per_round"])
        row["incast_rto_rounds"] = tg["summary"]["rto_rounds"]
        row["wire_bytes"] = sum(p["tc"]["bytes"] for p in ports)
        ctrl = m.extra.get("fg_credit_bytes", 0) + m.extra.get("fg_syn_bytes", 0)
        row["credit_bytes_fraction"] = round(ctrl / row["wire_bytes"], 6) if row["wire_bytes"] else None
        row["other_fct_cdf_us"] = cdf_points(other)
        row["incast_fct_cdf_us"] = cdf_points(incast)
        row.update(tcp)
        row.update(flow_tcp_fields(flow_rows))
        row.update(m.faults)
        row.update(m.extra)
        # The machine is shared: its 1-minute load average as the point ended.
        row["loadavg_1m"] = round(os.getloadavg()[0], 2)
        return row

    # -- presentation ----------------------------------------------------------
    def table(self, result) -> str:
        p = result["params"]
        lines = [f"floodgate: leaf-spine 1 core x 3 ToRs x 2 hosts, {p['rate_mbit']:g}/{p['core_mbit']:g} Mbit/s, "
                 f"buffer {p['buffer']} B, core links +{p['core_delay_us']:g} us; incast {p['incast_senders']} x "
                 f"{p['incast_bytes']} B x {p['incast_rounds']} rounds; {p['flows']} {p['workload']} flows at "
                 f"{p['load']:g}; {result.get('repeat', 1)} repeat(s), medians (percentiles pooled)",
                 f"{'variant':10} {'upQ_max':>8} {'coreQ_max':>9} {'downQ_max':>9} {'down_drops':>10} "
                 f"{'other_mean':>10} {'other_p99':>10} {'n':>5} {'incast_mean':>11} {'n':>5} {'credit%':>8}"]

        def f(r, k, fmt="{:.0f}"):
            x = r.get(k)
            return "-" if x is None else fmt.format(x)
        for _, v, r in self.points(result):
            lines.append(f"{v:10} {f(r, 'tor_up_queue_max_bytes'):>8} {f(r, 'core_queue_max_bytes'):>9} "
                         f"{f(r, 'tor_down_queue_max_bytes'):>9} {f(r, 'last_hop_drops'):>10} "
                         f"{f(r, 'other_fct_mean_us'):>10} {f(r, 'other_fct_p99_us'):>10} {f(r, 'other_fct_n'):>5} "
                         f"{f(r, 'incast_fct_mean_us'):>11} {f(r, 'incast_fct_n'):>5} "
                         f"{f(r, 'credit_bytes_fraction', '{:.3%}'):>8}")
        return "\n".join(lines)

    def plot(self, result, path):
        names = list(result["variants"])
        fig, axes = self.subplots(1, 3, figsize=(15, 4.2))
        width = 0.8 / max(1, len(names))
        for j, v in enumerate(names):
            rows = result["variants"][v]
            r = rows[0]
            xs = [i - 0.4 + (j + 0.5) * width for i in range(len(HOPS))]
            keys = [f"{k}_queue_max_bytes" for k, _ in HOPS]
            axes[0].bar(xs, [(r.get(k) or 0) / 1e3 for k in keys], width, label=v)
            for x, k in zip(xs, keys):
                sp = r.get("spread", {}).get(k)
                if sp and len(r.get("runs", [])) > 1:
                    axes[0].plot([x, x], [sp[0] / 1e3, sp[1] / 1e3], color="k", lw=1)
            for ax, key in ((axes[1], "other_fct_cdf_us"), (axes[2], "incast_fct_cdf_us")):
                for k, run in enumerate(r.get("runs", [r])):
                    pts = run.get(key) or []
                    if pts:
                        ys = [i / (len(pts) - 1) for i in range(len(pts))]
                        ax.plot([x / 1e3 for x in pts], ys, color=f"C{j}", lw=1, alpha=0.8,
                                label=v if k == 0 else None)
        axes[0].set_xticks(range(len(HOPS)))
        axes[0].set_xticklabels(["ToR-up (1st hop)", "core", "ToR-down (last hop)"])
        axes[0].set_ylabel("max buffer (KB)")
        axes[0].set_title("max buffer per hop (bars: median, lines: min-max)")
        axes[1].set_title("non-incast (Poisson) FCT CDF, one line per repeat")
        axes[2].set_title("incast FCT CDF, one line per repeat")
        for ax in axes[1:]:
            ax.set_xscale("log")
            ax.set_xlabel("FCT (ms)")
            ax.set_ylabel("CDF")
        for ax in axes:
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
        self.save(fig, path)
