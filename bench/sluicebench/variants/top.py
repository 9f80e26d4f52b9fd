"""tokens, top, top-noexpiry: TOP (top-tpds20) on the lab's switches.

All three replace every switch port's queue with the TOP tree of
tc-scripts/top-switch.sh (signals first, the token group capped at
98/(98+1538) of the port with six HTB-prio token classes of --top-token-queue
tokens, data with the rest; an HTB approximation of R1, docs/top.md "Switch
port") and run the sluice-top transport (the `top` experiment starts it):
  tokens        one token class, round robin, no expiry (ExpressPass-like)
  top           FCT classes (§3.2) from each flow's remaining size, and a
                spare probe (sluice-top recv's default --spare probe: a slot no
                flow's token rate allows carries one token if none of these is
                outstanding, its answer restores the flow's rate); sluiced with
                mechanisms = ["top"] on every host: senders drop tokens older
                than T (§4.3)
  top-balanced  top with its class bounds balanced on the run's CDF
                (sluice-top recv --bounds from experiments/top.py
                balanced_bounds: classes 1-5 carry equal shares of the bytes,
                class 0 as §3.2's formula; docs/top.md "Class bounds from the
                workload")
  top-balanced-fine  top-balanced with class 1 ending at §3.2's class-2
                bound (balanced_bounds fine_first): the short flows keep the
                log classes, the large ones are balanced
  top-noexpiry  the same receiver; sluiced counts tokens older than T but
                passes them (expire = false): what R2 changes
  top-nospare   top without the spare probe (--spare off): ExpressPass's rate
                alone (§3.1): `top` as it ran before the probe became its
                default (2026-11-29)
  top-paper     the receiver as the paper has it, as until 2026-11-29: classes
                from the flow's total size, no spare probe (--fct-class size
                --spare off)
  top-spare     top with a token in every spare slot (--spare every); lost
                data in the lab (docs/top.md "Mean FCT against tokens")
  top-probe     --spare probe spelled out: the same receiver as top since
                2026-11-29 ("The spare probe in the lab")
  tokens-b4, top-b4  tokens / top with the switches' token group bursting at
                most 4 tokens (top-switch.sh TOKEN_BURST 4; HTB's default
                lets 16 through after a quiet spell), beside tokens / top in
                one run (docs/top.md "Data mining in the lab against the model")
  tokens-grid, top-grid  tokens / top paced on a fixed slot grid
                (--jitter 0), as until 2026-11-29; every other variant's
                receiver jitters each token gap by U(-0.1, 0.1) of a slot
                (ExpressPass's pacing jitter, docs/top.md "Pacing jitter")
  top-edf       deadline classes (EDF-like, §3.2 "Deadline-Oriented"), with
                expiry; for `top --deadlines`
Extra row fields: tokens_expired, tokens_valid (senders' agents), tokens_sent
(receivers' agents), token_drops_switch and data_drops_switch (the tree's
queues on every switch port).
"""

from __future__ import annotations

import json
import os
import subprocess

from ..agents import Agents, host_interface
from ..core import TOP, BenchError, Variant, variant


def _qdisc_drops(ns: str, dev: str) -> dict:
    """drops per qdisc handle ("30:", "21:", ...) on one port."""
    r = subprocess.run(["ip", "netns", "exec", ns, "tc", "-s", "-j", "qdisc", "show", "dev", dev],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = {}
    if r.returncode == 0 and r.stdout.strip():
        for q in json.loads(r.stdout):
            out[q.get("handle", "?")] = int(q.get("drops", 0))
    return out


class _Top(Variant):
    build_targets = ["sluice-top", "sluiced", "sluicectl"]
    cc = ""
    objective = "fct"
    expire = None        # None: no sluiced; True/False: [top] expire
    recv_args: list = []  # more `sluice-top recv` options
    token_burst = None   # the token group's burst in tokens; None: --top-token-burst

    @classmethod
    def add_args(cls, parser):
        if getattr(parser, "_sluice_top_args", False):
            return
        parser._sluice_top_args = True
        g = parser.add_argument_group("tokens/top/top-noexpiry variants (TOP switch tree, sluice-top, sluiced)")
        g.add_argument("--top-token-queue", type=int, default=8,
                       help="tokens per switch token queue (ExpressPass's 8; the paper's testbed 6)")
        g.add_argument("--top-token-burst", type=int, default=0,
                       help="tokens the switches' token group passes back to back (top-switch.sh TOKEN_BURST; "
                            "0: HTB's default burst, 16 tokens)")
        g.add_argument("--top-base-one-way-us", type=int, default=100,
                       help="[top] base_one_way_us: T = this + 2 x token_queue x 98 B / (5.99%% of the port)")
        g.add_argument("--top-threshold-us", type=int, default=0, help="[top] threshold_us (0: derived)")

    def __init__(self, args):
        super().__init__(args)
        self.agents = Agents("top")
        self.ports = []
        self.point_no = 0

    def _port_tree(self, ctx, topo):
        script = os.path.join(TOP, "tc-scripts", "top-switch.sh")
        for p in topo.switch_ports():
            if p.shape is None:
                raise BenchError(f"{p.ifname}: not shaped, no rate for the TOP tree")
            buf = p.shape.buffer if p.shape.buffer is not None else 1000000
            r = subprocess.run(["ip", "netns", "exec", p.ns, script, "add", p.ifname, str(int(p.shape.rate_mbit)),
                                str(self.args.top_token_queue), str(buf),
                                str(self.token_burst if self.token_burst is not None
                                    else getattr(self.args, "top_token_burst", 0))],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if r.returncode != 0:
                raise BenchError(f"top-switch.sh add {p.ifname}: {r.stdout[-800:]}")
            self.ports.append(p)

    def setup(self, ctx, topo):
        self.point_no += 1
        self._port_tree(ctx, topo)
        self.d0 = {p.ifname: _qdisc_drops(p.ns, p.ifname) for p in self.ports}
        if self.expire is None:
            return
        a = self.args
        t = f"threshold_us = {a.top_threshold_us}\n" if a.top_threshold_us else ""
        body = f"""[top]
{t}base_one_way_us = {a.top_base_one_way_us}
link_mbit = {int(topo.params['rate_mbit'])}
token_queue = {a.top_token_queue}
expire = {'true' if self.expire else 'false'}
clock_source = "shared"
"""
        for h in topo.senders + topo.receivers:
            pin_root = f"{self.agents.bpffs(ctx)}/p{self.point_no}-{h.name}"
            self.agents.start(ctx, h.ns, f"{h.name}-{self.name}-{self.point_no}", pin_root, body + "\n" + host_interface(h, ["top"]), role="sender" if h in topo.senders else "receiver")
        for ag in self.agents.list:
            ctx.wait_for_log(ag.proc, "TOP_STARTED", timeout=30)

    def metrics(self, ctx, topo):
        out = {"token_drops_switch": 0, "data_drops_switch": 0, "tokens_expired": None, "tokens_valid": None,
               "tokens_sent": None}
        for p in self.ports:
            d1, d0 = _qdisc_drops(p.ns, p.ifname), self.d0.get(p.ifname, {})
            for h, n in d1.items():
                delta = n - d0.get(h, 0)
                if h == "30:":
                    out["data_drops_switch"] += delta
                elif h in ("21:", "22:", "23:", "24:", "25:", "26:"):
                    out["token_drops_switch"] += delta
        if self.agents.list:
            out.update({"tokens_expired": 0, "tokens_valid": 0, "tokens_sent": 0})
        for _, modules in self.agents.live_modules(ctx, out):
            for m in modules:
                if m["name"] != "top":
                    continue
                tk = m["stats"]["tokens"]
                out["tokens_expired"] += sum(tk["expired"])
                out["tokens_valid"] += sum(tk["valid"]) + sum(tk["future"])
                out["tokens_sent"] += sum(tk["sent"])
        return out

    def teardown(self, ctx, topo):
        self.agents.stop(ctx)
        for p in self.ports:
            # Back to the topology's own queue for the next variant.
            subprocess.run(["ip", "netns", "exec", p.ns, "tc", "qdisc", "del", "dev", p.ifname, "root"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if p.shape is not None:
                ctx.lab.tc_batch(p.ns, p.shape.tc_lines(p.ifname))
        self.ports = []


@variant
class Tokens(_Top):
    name = "tokens"
    help = "token transport, one token class, round robin, no expiry (ExpressPass-like), TOP switch tree"
    objective = "fair"
    expire = None


@variant
class TopVariant(_Top):
    name = "top"
    help = "TOP: FCT token classes (§3.2), sluiced drops tokens older than T on senders (§4.3)"
    objective = "fct"
    expire = True


@variant
class TopBalanced(_Top):
    name = "top-balanced"
    help = ("TOP with its FCT class bounds balanced on the run's CDF (each of classes 1-5 carries an equal share of "
            "the bytes, class 0 as §3.2's formula; sluice-top recv --bounds), expiry on")
    objective = "fct"
    expire = True
    balanced = True


@variant
class TopBalancedFine(TopBalanced):
    name = "top-balanced-fine"
    help = ("top-balanced with class 1 ending at §3.2's class-2 bound (p^(3/6) - 1 packets): the short flows keep the "
            "log classes, the large ones are balanced")
    fine_first = True


@variant
class TopNoExpiry(_Top):
    name = "top-noexpiry"
    help = "TOP's token classes without host expiry (sluiced counts tokens older than T, passes them)"
    objective = "fct"
    expire = False


@variant
class TopEdf(_Top):
    name = "top-edf"
    help = "TOP with the deadline objective (token class from each flow's slack), expiry on; use with --deadlines"
    objective = "deadline"
    expire = True


@variant
class TopPaper(_Top):
    name = "top-paper"
    help = "TOP's receiver as the paper has it: classes from the flow's total size, no spare probe; expiry on"
    objective = "fct"
    expire = True
    recv_args = ["--fct-class", "size", "--spare", "off"]


@variant
class TopNoSpare(_Top):
    name = "top-nospare"
    help = "TOP without the spare probe (ExpressPass's token rate alone, §3.1), expiry on"
    objective = "fct"
    expire = True
    recv_args = ["--spare", "off"]


@variant
class TopSpare(_Top):
    name = "top-spare"
    help = "TOP with spare slots (a slot no flow's token rate allows still carries a token), expiry on"
    objective = "fct"
    expire = True
    recv_args = ["--spare", "every"]


@variant
class TopProbe(_Top):
    name = "top-probe"
    help = "TOP with --spare probe spelled out (top's default since 2026-11-29); expiry on"
    objective = "fct"
    expire = True
    recv_args = ["--spare", "probe"]


@variant
class TokensBurst4(Tokens):
    name = "tokens-b4"
    help = "tokens with the switches' token group bursting at most 4 tokens (top-switch.sh TOKEN_BURST 4)"
    token_burst = 4


@variant
class TopBurst4(TopVariant):
    name = "top-b4"
    help = "top with the switches' token group bursting at most 4 tokens (top-switch.sh TOKEN_BURST 4)"
    token_burst = 4


@variant
class TokensGrid(Tokens):
    name = "tokens-grid"
    help = "tokens paced on a fixed slot grid, no pacing jitter (sluice-top recv --jitter 0; as until 2026-11-29)"
    recv_args = ["--jitter", "0"]


@variant
class TopGrid(TopVariant):
    name = "top-grid"
    help = "top paced on a fixed slot grid, no pacing jitter (sluice-top recv --jitter 0; as until 2026-11-29)"
    recv_args = ["--jitter", "0"]
