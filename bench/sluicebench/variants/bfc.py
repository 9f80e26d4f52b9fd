"""bfc, bfc-stochastic, bfc-single: BFC (bfc-nsdi22) sluice switches,
sampled mode; bfc-hold, bfc-hold-stochastic, bfc-hold-single,
bfc-hold-nosticky: per-packet BFC on the held data path with the hosts'
NICs as BFC hops.

Every switch namespace runs sluiced in switch mode with the switch logic of
the same name (docs/bfc.md), --bfc-queues queues per port (32), for the
point; the lab's shapers come back after it (as the sluice-switch variant,
whose start/stop this reuses). Hosts run plain kernel cubic without ECN:
the host half of BFC (pausing a host's own queues) is not built, so
backpressure acts between switches only.

In sluiced BFC runs in its sampled mode (docs/bfc.md "In sluiced: the
sampled mode"): pause from the sampled queue depth vs Th, flows hashed over
the queues. So `bfc` and `bfc-stochastic` are the same data path there;
bfc-nosticky is not offered (there is no assignment to make sticky).

The bfc-hold variants run every switch with [switch] datapath = "hold"
(docs/switch.md), where sluiced calls the logic per packet: §3.3's dynamic
assignment (sticky), pause counters per (ingress port, upstreamQ) read
from the 802.1Q tag each hop pushes, Th = HRTT x rate / N_active. Every
host runs sluiced too, as its NIC: a one-port switch on its uplink with the
same logic (docs/bfc.md "The host half"), so a PAUSE from the first switch
stops that queue of the sender, and the host's links are switch-facing at
both ends. HRTT: --bfc-hold-hrtt-us; by default the held path's 300 us
plus the round trip of the delayed links that carry the pauses (three-
switch: the switch-to-switch links, 300 + 2 x --delay-us; star: the
senders' links, undelayed, 300). Delayed links carry the upstreamQ tag
(sluice-wire puts it back into the frame). buffer_p99_bytes is then the agent's
held bytes at the bottleneck port (p99 of the per-millisecond maxima;
sluice-qmon sees only the one frame kept in the kernel), drops the
bottleneck port's tail drops in the agent.

Extra row fields (summed over the switches): collisions (None in the
sampled mode, which sees no flows), pause_apply_max_us (the slowest pause
or resume a switch applied, of its last 1024), pause_apply_p50_us /
pause_apply_p99_us / pause_apply_n (control frame at the receiving
hop's ingress -> applied: the median of the ports' p50, the worst port's
p99), bottleneck_th_bytes (the bottleneck port's Th when read after the
traffic, N_active = 0: HRTT x rate), pauses_sent,
resumes_sent, bitmaps_sent, pauses_rx, bfc_expired, plus the sluice-switch
fields; bfc-hold only, summed over every port of every agent over the
point (the agents start with it): hold_queue_drops / nic_queue_drops
(tail drops in the switches' / the hosts' NIC agents' queues) and
hold_<counter> for HOLD_LOSS_COUNTERS; `bfc_trace` (the logic's queue-vs-Th samples of the bottleneck's
switch, [t_us, queue, bytes, th_bytes] of the bottleneck port) when the
experiment asks for it (ctx.point["bfc_trace"]).
"""

from __future__ import annotations

from ..core import BenchError
from .switch import SluiceSwitch, switch_states
from ..core import variant


# `sluicectl switch --json` per-port "hold" counters that count a frame
# lost or sent around the agent's queues (docs/switch.md, Design B).
HOLD_LOSS_COUNTERS = ("logic_drops", "qdisc_drops", "send_errors", "ring_full", "fail_open_pkts", "passed_big",
                      "bad_queue")


def hold_hrtt_us(args) -> int:
    """HRTT of the bfc-hold variants: --bfc-hold-hrtt-us, else the held
    path's ~300 us loop plus the round trip of a delayed link that carries
    pauses (BFC §3.3: Th = HRTT x rate / N_active, HRTT the hop's round trip)."""
    h = getattr(args, "bfc_hold_hrtt_us", None)
    if h:
        return int(h)
    # The loop without wire delay: 300 us at 100 Mbit/s, scaled with the
    # frame time by bench/run bfc --profile (hold_hrtt_base_us).
    base = getattr(args, "hold_hrtt_base_us", None) or 300
    delay = getattr(args, "delay_us", 0) or 0
    return int(base + 2 * delay) if getattr(args, "topology", "") == "three-switch" else int(base)


class _Bfc(SluiceSwitch):
    logic = ""
    build_targets = ["sluiced", "sluicectl"]

    @classmethod
    def add_args(cls, parser):
        if getattr(parser, "_sluice_bfc_args", False):
            return
        parser._sluice_bfc_args = True
        parser.add_argument("--bfc-queues", type=int, default=32,
                            help="bfc variants: queues per switch port (BFC §3.3.1: 32)")
        parser.add_argument("--bfc-hold-hrtt-us", type=int, default=None,
                            help="bfc-hold variants: [bfc] hrtt_us (default: the held data path's loop, ~300 us, "
                                 "docs/bfc.md, plus the round trip of the delayed links that carry pauses: "
                                 "300 + 2 x --delay-us on three-switch, 300 on star; bench/run bfc --profile 10m: "
                                 "3000 instead of 300)")
        parser.add_argument("--bfc-hrtt-us", type=int, default=2000,
                            help="bfc variants: [bfc] hrtt_us, the control loop's round trip: Th = HRTT x rate / "
                                 "N_active (in sluiced: a depth sample + the wire both ways + the upstream's netlink "
                                 "pause; docs/bfc.md)")

    hold = False  # per-packet BFC on the held data path, hosts as BFC NICs

    def setup(self, ctx, topo):
        if topo.sluice_procs:
            raise BenchError(f"{self.name}: the topology already has sluice switches (--switch sluice)")
        h = hold_hrtt_us(self.args) if self.hold else getattr(self.args, "bfc_hrtt_us", 2000)
        topo.start_sluice({"bin": ctx.tool("sluiced"), "logic": self.logic,
                           "queues": getattr(self.args, "bfc_queues", 32),
                           "switch_keys": ['datapath = "hold"'] if self.hold else [], "nic_hosts": self.hold,
                           "extra": lambda node, h=h: f"[bfc]\nhrtt_us = {h}"})

    def metrics(self, ctx, topo):
        out = super().metrics(ctx, topo)
        for k in ("collisions", "pauses_sent", "resumes_sent", "bitmaps_sent", "pauses_rx", "bfc_expired"):
            out[k] = 0
        bn = topo.bottleneck
        sampled = False
        out["pause_apply_max_us"] = 0
        out["nic_collisions"] = 0
        if self.hold:
            out["hold_queue_drops"] = out["nic_queue_drops"] = 0
            for k in HOLD_LOSS_COUNTERS:
                out[f"hold_{k}"] = 0
        applied = []  # (samples, p50, p99) of every port that applied a pause or resume
        for node, j in switch_states(ctx, topo):
            # The slowest pause/resume the switches applied (frame at the
            # ingress program -> netlink change acknowledged, or with hold
            # the agent's queue paused; last 1024).
            for port in j.get("ports", []):
                held = port.get("hold", {})
                queue_drops = sum(q.get("dropped", 0) for q in port.get("queues", []))
                pa = port.get("pause_apply_us", {})
                out["pause_apply_max_us"] = max(out["pause_apply_max_us"], pa.get("max", 0))
                if pa.get("samples"):
                    applied.append((pa["samples"], pa.get("p50", 0), pa.get("p99", 0)))
                if self.hold and node is bn.node and port["name"] == bn.ifname:
                    # The queues are in the agent: its held bytes and drops.
                    out["buffer_p99_bytes"] = port.get("held", {}).get("ms_max_p99_bytes")
                    out["buffer_n"] = port.get("held", {}).get("ms_intervals")
                    out["queue_max_bytes"] = port.get("held", {}).get("ms_max_bytes")
                    out["drops"] = queue_drops + held.get("qdisc_drops", 0)
                if self.hold:
                    # Where a held frame can be lost or overtaken, summed
                    # over every port of every sluiced: the agents' queues'
                    # tail drops (switches and the hosts' NICs apart), the
                    # root qdiscs' drops, failed re-injections, and frames
                    # that passed the agent (ring full, fail open), which
                    # can overtake held ones.
                    out["hold_queue_drops" if node.kind == "switch" else "nic_queue_drops"] += queue_drops
                    for k in HOLD_LOSS_COUNTERS:
                        out[f"hold_{k}"] += held.get(k, 0)
            st = j.get("logic_state") or {}
            c = st.get("counters", {})
            for k in ("pauses_sent", "resumes_sent", "bitmaps_sent", "pauses_rx"):
                out[k] += c.get(k, 0)
            # Collisions at the switches (the row's figure) and at the NICs.
            out["collisions" if node.kind == "switch" else "nic_collisions"] += c.get("collisions", 0)
            out["bfc_expired"] += c.get("expired", 0)
            sampled |= bool(st.get("samples"))
            if node is bn.node:
                # Th at the bottleneck port when the metrics are read (after
                # the traffic: N_active 0, so HRTT x rate, the configured Th(1)).
                out["bottleneck_th_bytes"] = next((p.get("threshold_bytes") for p in st.get("ports", [])
                                                   if p["name"] == bn.ifname), None)
            if ctx.point.get("bfc_trace") and node is bn.node:
                pid = next((p["port"] for p in st.get("ports", []) if p["name"] == bn.ifname), None)
                out["bfc_trace"] = [[t, q, b, th] for t, p, q, b, th in st.get("trace", []) if p == pid]
        # How late the upstream applied pauses: the ports' p50 (median over
        # the ports that applied any) and the worst port's p99, with the
        # samples behind them (each port's last 1024 at most).
        out["pause_apply_n"] = sum(n for n, _, _ in applied)
        out["pause_apply_p50_us"] = sorted(p50 for _, p50, _ in applied)[len(applied) // 2] if applied else None
        out["pause_apply_p99_us"] = max(p99 for _, _, p99 in applied) if applied else None
        if sampled:
            # Sampled mode: no per-packet calls, so no flow is ever seen
            # sharing a queue; the count does not exist (not zero).
            out["collisions"] = None
        return out


@variant
class Bfc(_Bfc):
    name = "bfc"
    help = "BFC switches (sluiced switch logic bfc, --bfc-queues queues; sampled mode, docs/bfc.md), cubic hosts"
    logic = "bfc"


@variant
class BfcStochastic(_Bfc):
    name = "bfc-stochastic"
    help = "BFC with hash (stochastic) queue assignment, bfc-nsdi22 Fig. 8's ablation"
    logic = "bfc-stochastic"


@variant
class BfcSingle(_Bfc):
    name = "bfc-single"
    help = "BFC with every flow in queue 0 (PFC-like), bfc-nsdi22 Fig. 8's ablation"
    logic = "bfc-single"


class _BfcHold(_Bfc):
    hold = True


@variant
class BfcHold(_BfcHold):
    name = "bfc-hold"
    help = ("BFC per packet (§3.3): switches with datapath = hold, hosts' NICs as one-port BFC switches, upstreamQ "
            "tagged (docs/bfc.md), cubic hosts")
    logic = "bfc"


@variant
class BfcHoldStochastic(_BfcHold):
    name = "bfc-hold-stochastic"
    help = "bfc-hold with hash (stochastic) queue assignment, bfc-nsdi22 Fig. 8's ablation"
    logic = "bfc-stochastic"


@variant
class BfcHoldSingle(_BfcHold):
    name = "bfc-hold-single"
    help = "bfc-hold with every flow in queue 0 (PFC-like), bfc-nsdi22 Fig. 8's ablation"
    logic = "bfc-single"


@variant
class BfcHoldNosticky(_BfcHold):
    name = "bfc-hold-nosticky"
    help = "bfc-hold without sticky assignment (a flow may change queue when it has no packet queued)"
    logic = "bfc-nosticky"
