"""sluice-switch: the switches become sluice switches for the point.

Plain kernel TCP on the hosts (as baseline); every switch namespace runs
sluiced in switch mode (docs/switch.md), which replaces the lab's shaper on
each switch port with its own queue tree (same rate, buffer and burst) and
runs the switch logic --sluice-switch-logic (fifo: one queue, never
pauses). After the point sluiced stops (removing its trees) and the lab's
shapers are put back, so baseline and sluice-switch alternate on the same
topology in one run and their ratios compare the two data paths under the
same machine load. (`--switch sluice` instead builds the whole run with
sluice switches.)
Extra row fields: switch_ctrl_rejected, switch_pause_changes (summed over
switch ports), switch_fallback_pkts (packets the never-paused fallback
class carried: non-zero only when the classifier did not steer).
"""

from __future__ import annotations

import json
import subprocess

from ..core import BenchError, Variant, variant


def switch_states(ctx, topo):
    """(switch node, `sluicectl switch --json`) for every sluice switch of
    the topology; raises if one's sluiced has exited."""
    for p, node in topo.sluice_procs:
        if p.poll() is not None:
            raise BenchError(f"sluiced of {node.ns} exited:\n{ctx.lab.log_of(p)[-1000:]}")
        sock = f"{ctx.tmp}/sluiced-{node.name}/sluiced.sock"
        r = subprocess.run(["ip", "netns", "exec", node.ns, ctx.tool("sluicectl"), "-s", sock, "switch", "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=15)
        if r.returncode != 0:
            raise BenchError(f"sluicectl switch in {node.ns}: {r.stderr[-300:]}")
        yield node, json.loads(r.stdout)


@variant
class SluiceSwitch(Variant):
    name = "sluice-switch"
    help = "plain kernel TCP through sluice switches (sluiced switch mode, --sluice-switch-logic, default fifo)"
    cc = "cubic"
    ecn = False
    build_targets = ["sluiced", "sluicectl"]

    @classmethod
    def add_args(cls, parser):
        parser.add_argument("--sluice-switch-logic", default="fifo",
                            help="sluice-switch variant: the switch logic ([switch] logic)")
        parser.add_argument("--sluice-switch-queues", type=int, default=1,
                            help="sluice-switch variant: queues per switch port")

    def setup(self, ctx, topo):
        if topo.sluice_procs:
            raise BenchError(f"{self.name}: the topology already has sluice switches (--switch sluice)")
        topo.start_sluice({"bin": ctx.tool("sluiced"), "logic": getattr(self.args, "sluice_switch_logic", "fifo"),
                           "queues": getattr(self.args, "sluice_switch_queues", 1)})

    def metrics(self, ctx, topo):
        out = {"switch_ctrl_rejected": 0, "switch_pause_changes": 0, "switch_fallback_pkts": 0}
        for node, j in switch_states(ctx, topo):
            for port in j["ports"]:
                out["switch_ctrl_rejected"] += port["control"]["rejected"]
                out["switch_pause_changes"] += port["pause_changes"]
                out["switch_fallback_pkts"] += port.get("fallback", {}).get("pkts_out", 0)
        return out

    def teardown(self, ctx, topo):
        if topo.sluice_procs:
            codes = topo.stop_sluice(restore=True)
            bad = [c for c in codes if c not in (0, None)]
            if bad:
                ctx.log(f"{self.name}: sluiced exited with {bad}")
