"""sluiced agents a variant runs inside lab namespaces.

One private bpffs per variant (the lab's namespaces do not see
/sys/fs/bpf), a config and a state directory per agent, `sluicectl --json`
queries, and teardown: agents stopped in reverse start order (so a switch
agent that registered congestion controls goes last), bpffs unmounted.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Optional

from .core import BenchError


def aqm_port(port, far_end: str = "") -> str:
    """The [[interface]] table that puts the aqm mechanism on a lab switch
    port; its line rate is the rate the port is shaped to (a port without a
    shaper has none, and aqm does not guess one). far_end ("NETNS:IFNAME"):
    where the port's packets arrive after its queue, for EIN written on
    departure."""
    if port.shape is None:
        raise BenchError(f"{port.ifname}: not shaped, so no line rate for aqm")
    fe = f'link_far_end = "{far_end}"\n' if far_end else ""
    return f"""[[interface]]
name = "{port.ifname}"
role = "switch-port"
mechanisms = ["aqm"]
line_rate_mbps = {int(port.shape.rate_mbit)}
{fe}"""


def host_interface(host, mechanisms: list[str]) -> str:
    """The [[interface]] table that runs `mechanisms` on a lab host's
    (first) port."""
    names = ", ".join(f'"{m}"' for m in mechanisms)
    return f"""[[interface]]
name = "{host.ports[0].ifname}"
role = "host"
mechanisms = [{names}]
"""


class Agent:
    def __init__(self, ns: str, proc: subprocess.Popen, sock: str, role: str):
        self.ns, self.proc, self.sock, self.role = ns, proc, sock, role


class Agents:
    def __init__(self, stem: str):
        self.stem = stem          # names the bpffs, state dirs, configs and logs
        self.list: list = []
        self._mount: Optional[str] = None

    def bpffs(self, ctx) -> str:
        if not self._mount:
            d = os.path.join(ctx.tmp, f"{self.stem}-bpffs")
            os.makedirs(d, exist_ok=True)
            subprocess.run(["mount", "-t", "bpf", "bpf", d], check=True)
            self._mount = d
        return self._mount

    def start(self, ctx, ns: str, tag: str, pin_root: str, body: str, role: str = "",
              prefix: Optional[list] = None) -> Agent:
        """Writes the config ([agent] paths, metrics off, then `body`) and
        spawns sluiced in `ns` (under `prefix`, e.g. chrt). Does not wait."""
        state = os.path.join(ctx.tmp, f"{self.stem}-state-{tag}")
        os.makedirs(state, exist_ok=True)
        cfg = os.path.join(ctx.tmp, f"sluiced-{self.stem}-{tag}.toml")
        sock = f"{state}/sluiced.sock"
        with open(cfg, "w") as f:
            f.write(f"""[agent]
pin_root = "{pin_root}"
state_dir = "{state}"
control_socket = "{sock}"
log_level = "info"
[metrics]
enabled = false
{body}""")
        p = ctx.spawn(ns, (prefix or []) + [ctx.tool("sluiced"), "--config", cfg], f"sluiced-{self.stem}-{tag}")
        a = Agent(ns, p, sock, role)
        self.list.append(a)
        return a

    def ctl(self, ctx, a: Agent, cmd: str) -> dict:
        r = subprocess.run(["ip", "netns", "exec", a.ns, ctx.tool("sluicectl"), "--socket", a.sock, cmd, "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=15)
        if r.returncode != 0:
            raise BenchError(f"sluicectl {cmd} failed: {r.stderr[-500:]}")
        return json.loads(r.stdout)

    def live_modules(self, ctx, out: dict, exited_key: str = "agent_exited"):
        """(agent, the module entries of its `sluicectl stats`) for every agent
        still running; one that exited is recorded in out[exited_key]."""
        for a in self.list:
            if a.proc.poll() is not None:
                out[exited_key] = a.proc.returncode
                continue
            st = self.ctl(ctx, a, "stats")
            yield a, [m for ifc in st["interfaces"] for m in ifc["modules"]]

    def stop(self, ctx):
        for a in reversed(self.list):
            try:
                ctx.stop(a.proc)
            except Exception:
                pass
        self.list = []
        if self._mount:
            subprocess.run(["umount", "-l", self._mount], check=False)
            self._mount = None
