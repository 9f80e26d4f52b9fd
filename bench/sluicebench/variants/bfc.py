"""bfc, bfc-stochastic, bfc-single: BFC (bfc-nsdi22) sluice switches.

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

Extra row fields (summed over the switches): collisions (None in the
sampled mode, which sees no flows), pause_apply_max_us (the slowest pause
or resume a switch applied, of its last 1024), pauses_sent,
resumes_sent, bitmaps_sent, pauses_rx, bfc_expired, plus the sluice-switch
fields; `bfc_trace` (the logic's queue-vs-Th samples of the bottleneck's
switch, [t_us, queue, bytes, th_bytes] of the bottleneck port) when the
experiment asks for it (ctx.point["bfc_trace"]).
"""

from __future__ import annotations

from ..core import BenchError
from .switch import SluiceSwitch, switch_states
from ..core import variant


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
        parser.add_argument("--bfc-hrtt-us", type=int, default=2000,
                            help="bfc variants: [bfc] hrtt_us, the control loop's round trip: Th = HRTT x rate / "
                                 "N_active (in sluiced: a depth sample + the wire both ways + the upstream's netlink "
                                 "pause; docs/bfc.md)")

    def setup(self, ctx, topo):
        if topo.sluice_procs:
            raise BenchError(f"{self.name}: the topology already has sluice switches (--switch sluice)")
        topo.start_sluice({"bin": ctx.tool("sluiced"), "logic": self.logic,
                           "queues": getattr(self.args, "bfc_queues", 32),
                           "extra": lambda node, h=getattr(self.args, "bfc_hrtt_us", 2000): f"[bfc]\nhrtt_us = {h}"})

    def metrics(self, ctx, topo):
        out = super().metrics(ctx, topo)
        for k in ("collisions", "pauses_sent", "resumes_sent", "bitmaps_sent", "pauses_rx", "bfc_expired"):
            out[k] = 0
        bn = topo.bottleneck
        sampled = False
        out["pause_apply_max_us"] = 0
        for node, j in switch_states(ctx, topo):
            # The slowest pause/resume the switches applied (frame at the
            # ingress program -> netlink change acknowledged; last 1024).
            for port in j.get("ports", []):
                out["pause_apply_max_us"] = max(out["pause_apply_max_us"],
                                                port.get("pause_apply_us", {}).get("max", 0))
            st = j.get("logic_state") or {}
            c = st.get("counters", {})
            for k in ("collisions", "pauses_sent", "resumes_sent", "bitmaps_sent", "pauses_rx"):
                out[k] += c.get(k, 0)
            out["bfc_expired"] += c.get("expired", 0)
            sampled |= bool(st.get("samples"))
            if ctx.point.get("bfc_trace") and node is bn.node:
                pid = next((p["port"] for p in st.get("ports", []) if p["name"] == bn.ifname), None)
                out["bfc_trace"] = [[t, q, b, th] for t, p, q, b, th in st.get("trace", []) if p == pid]
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
