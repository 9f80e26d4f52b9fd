"""cubic, dctcp, pulser: the Pulser comparison (pulser-ein).

All three run the same switch: sluiced with mechanisms = ["aqm"] on the
bottleneck port (DCTCP step marking at K and EIN marking, Pulser Alg. 1), so
the only difference between them is the hosts:
  cubic   kernel cubic, no ECN: CE never applies (Not-ECT), EIN is ignored;
  dctcp   sluice_dctcp (BPF struct_ops) on senders and receiver;
  pulser  sluice_pulser, and sluiced with mechanisms = ["ein"] on every host
          (receivers echo EIN in ACKs, senders hand echoes to the CC).
The congestion controls are registered by the switch's agent under names
unique to the run (sl<runid>_d / _p) and unregistered when it stops.
Extra row fields: ce_marks, ein_marks, incasts_detected (switch), and for
dctcp/pulser the CC counters (cc_ecn_cuts, cc_brakes, cc_restores,
cc_repairs, ...), for pulser echoes_set/echoes_received (hosts).
"""

from __future__ import annotations

from ..agents import Agents, aqm_port, host_interface
from ..core import Variant, variant


class _SluiceSwitch(Variant):
    """Shared by cubic/dctcp/pulser: the marking switch, and (per subclass)
    the congestion control it registers and the hosts' ein agents."""
    build_targets = ["sluiced", "sluicectl"]
    register = []        # congestion controls the switch agent registers
    host_ein = False     # sluiced with ein on every host

    @classmethod
    def add_args(cls, parser):
        if getattr(parser, "_sluice_pulser_args", False):
            return
        parser._sluice_pulser_args = True
        g = parser.add_argument_group("cubic/dctcp/pulser variants (switch marking, congestion controls)")
        g.add_argument("--aqm-k", type=int, default=20, help="ECN threshold K in packets (DCTCP step marking)")
        g.add_argument("--aqm-ein-samples", type=int, default=50, help="Pulser Alg. 1 N")
        g.add_argument("--aqm-ein-threshold", type=float, default=0.25,
                       help="Pulser Alg. 1 EIN_threshold as a fraction of the line rate")
        g.add_argument("--aqm-high-water", type=int, default=0,
                       help="HighWaterMark in packets (0 = K, as in the paper)")
        g.add_argument("--ein-mark", choices=("arrival", "departure"), default="arrival",
                       help="[aqm] ein_mark: EIN written as packets enter the port's queue, or as they leave it "
                            "(at the far end of the port's link, the paper's dequeue marking)")
        g.add_argument("--ein-bit", default="tos:0x04", help="[ein] bit")
        g.add_argument("--ein-fresh-us", type=int, default=2000, help="[ein] echo_fresh_us")
        g.add_argument("--pulser-cwnd-safe", type=int, default=4, help="Pulser cwnd_safe in segments")
        g.add_argument("--dctcp-shift-g", type=int, default=4, help="DCTCP g = 1/2^shift_g")
        g.add_argument("--aqm-ports", choices=("bottleneck", "all"), default="bottleneck",
                       help="where the switch marks: the experiment's bottleneck port, or every switch port "
                            "(one agent per switch namespace; multi-hop topologies)")

    def __init__(self, args):
        super().__init__(args)
        self.agents = Agents("pulser")
        self.point_no = 0

    def _names(self, ctx):
        stem = f"sl{ctx.lab.runid}"
        return stem + "_d", stem + "_p"

    def _start(self, ctx, ns, tag, role, body, pin=""):
        # One pin_root for every agent of the point: sl_ein_sk_v1 is shared by
        # the hosts' ein programs and the switch agent's sluice_pulser
        # (`pin`: a switch agent of its own, one of several marking ones).
        pin_root = f"{self.agents.bpffs(ctx)}/p{self.point_no}" + (f"-{pin}" if pin else "")
        return self.agents.start(ctx, ns, tag, pin_root, f"""[ein]
bit = "{self.args.ein_bit}"
echo_fresh_us = {self.args.ein_fresh_us}
{body}""", role=role)

    def setup(self, ctx, topo):
        a = self.args
        self.point_no += 1
        dname, pname = self._names(ctx)
        if self.register == ["dctcp"]:
            self.cc = dname
        elif self.register == ["pulser"]:
            self.cc = pname
        regs = ", ".join(f'"{r}"' for r in self.register)
        hw = f"ein_high_water = {a.aqm_high_water}\n" if a.aqm_high_water else ""
        bn = topo.bottleneck
        far_end = ""
        if a.ein_mark == "departure":
            hw += 'ein_mark = "departure"\n'
            ns, dev = topo.far_end(bn)
            far_end = f"{ns}:{dev}"
        aqm = f"""[aqm]
ecn_threshold_packets = {a.aqm_k}
ein_samples = {a.aqm_ein_samples}
ein_threshold = {a.aqm_ein_threshold}
{hw}"""
        cc = f"""[cc]
register = [{regs}]
dctcp_name = "{dname}"
pulser_name = "{pname}"
dctcp_shift_g = {a.dctcp_shift_g}
pulser_cwnd_safe = {a.pulser_cwnd_safe}
"""
        if getattr(a, "aqm_ports", "bottleneck") == "all":
            # One agent per switch namespace, marking on every port; the
            # first registers the congestion controls (kernel-wide).
            for i, node in enumerate(topo.switches):
                ports = "".join(aqm_port(p) for p in node.ports)
                self._start(ctx, node.ns, f"sw-{self.name}-{self.point_no}-{node.name}", "switch",
                            (cc if i == 0 else "") + aqm + ports, pin=node.name)
        else:
            self._start(ctx, bn.ns, f"sw-{self.name}-{self.point_no}", "switch", cc + aqm + aqm_port(bn, far_end))
        if self.host_ein:
            for h in topo.hosts:
                self._start(ctx, h.ns, f"{h.name}-{self.name}-{self.point_no}", "host", host_interface(h, ["ein"]))
        for ag in self.agents.list:
            ctx.wait_for_log(ag.proc, "AGENT_STARTED", timeout=120)  # several agents on a loaded machine: measured > 30 s

    def metrics(self, ctx, topo):
        out = {"ce_marks": 0, "ein_marks": 0, "incasts_detected": 0}
        for ag, modules in self.agents.live_modules(ctx, out):
            for m in modules:
                s = m.get("stats", {})
                if m["name"] == "aqm":
                    for k in ("ce_marks", "ein_marks", "incasts_detected", "not_ect_over_k"):
                        out[k] = out.get(k, 0) + s.get(k, 0)
                elif m["name"] == "ein":
                    for k in ("echoes_set", "echoes_received", "marks_recorded", "marks_unmanaged",
                              "echoes_stale"):
                        out[k] = out.get(k, 0) + s.get(k, 0)
            if ag.role == "switch" and self.register:
                status = self.agents.ctl(ctx, ag, "status")
                for c in status.get("congestion_control", []):
                    for k in ("sockets", "alpha_updates", "ecn_cuts", "loss_events", "repairs", "brakes",
                              "brake_extends", "restores", "brakes_abandoned", "braked_tx_starts", "ein_acks",
                              "last_repair"):
                        if k in c:
                            out[f"cc_{k}"] = c[k]
        return out

    def teardown(self, ctx, topo):
        # Hosts first, the switch (which holds the registrations) last.
        self.agents.stop(ctx)


@variant
class Cubic(_SluiceSwitch):
    name = "cubic"
    help = "kernel cubic without ECN through the marking switch (CE never applies to Not-ECT)"
    cc = "cubic"
    ecn = False
    register = []


@variant
class Dctcp(_SluiceSwitch):
    name = "dctcp"
    help = "sluice_dctcp (BPF struct_ops DCTCP) with ECN, step marking at K"
    cc = "sluice_dctcp"
    ecn = True
    register = ["dctcp"]

    @classmethod
    def add_args(cls, parser):
        _SluiceSwitch.add_args(parser)


@variant
class Pulser(_SluiceSwitch):
    name = "pulser"
    help = "sluice_pulser (DCTCP + EIN brake), ein on every host, EIN marking (Pulser Alg. 1)"
    cc = "sluice_pulser"
    ecn = True
    register = ["pulser"]
    host_ein = True

    @classmethod
    def add_args(cls, parser):
        _SluiceSwitch.add_args(parser)
