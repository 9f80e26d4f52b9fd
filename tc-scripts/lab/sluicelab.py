"""sluice lab: network-namespace testbeds for experiments and tests.

A Lab owns one run's names: every namespace is called ``sl<tag><runid>-<node>``
and every interface ``sl<tag><runid>-<port>`` (<= 15 characters), where
<runid> is the process id in base 36. Everything a Lab creates lives inside
its namespaces, so deleting them (Lab.close(), also on error and Ctrl-C)
removes every veth, bridge and qdisc. A Lab that starts removes leftovers of
runs whose process is gone (a crashed or killed run).

Topologies (hosts and switches are namespaces joined by veth pairs):
  star(lab, ...)        N senders -> one switch -> receiver(s)
  dumbbell(lab, ...)    left hosts -> switch L == bottleneck == switch R -> right hosts
  leaf_spine(lab, ...)  ToRs x hosts per ToR, spines; routers with ECMP
  three_switch(lab, ...) BFC §6.1: groups via switch 1/3 -> switch 2 -> 2 receivers

Switches forward as a Linux bridge (star, dumbbell; "router" routes
instead) or as routers (leaf-spine). switch="sluice" keeps that forwarding
and makes every switch namespace a sluice switch: sluiced in switch mode
in the namespace (config generated from the ports: each switch port's
rate, buffer and burst, role host-facing toward a host, switch-facing
toward a switch, and the switch logic named by `sluice`), which builds its
own queue tree on each port instead of the lab's shaper.

Per link: rate shaping (TBF or HTB), a byte buffer limit (TBF limit or HTB
leaf bfifo), a propagation delay (this kernel has no netem: the link runs
through a wire namespace where sluice-wire forwards every frame after the
delay, see bench/lab/wire/wire.cc), and a frame mode: "gso" (TCP hands GSO super-packets to the
qdiscs; a TBF bottleneck splits them into MTU frames) or "mtu" (TSO/GSO off
and gso_max_segs 1 on every lab interface, GRO off: one MTU frame per skb
everywhere).

Only Python's standard library and iproute2/ethtool are used (and the built
sluice-wire for links with a delay).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Optional

NETNS_DIR = "/run/netns"
IFNAMSIZ = 15


class LabError(RuntimeError):
    pass


def base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    s = ""
    while True:
        n, r = divmod(n, 36)
        s = digits[r] + s
        if n == 0:
            return s


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sh(cmd, check=True, input=None, quiet=False) -> subprocess.CompletedProcess:
    """Runs a command (list or string) and returns the CompletedProcess.
    Raises LabError with the command and its stderr when check fails."""
    shell = isinstance(cmd, str)
    p = subprocess.run(cmd, shell=shell, input=input, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if check and p.returncode != 0:
        c = cmd if shell else " ".join(cmd)
        raise LabError(f"command failed ({p.returncode}): {c}\n{p.stderr.strip()}")
    return p


# --------------------------------------------------------------------------
# Entering a namespace in-process (for fast counter reads): setns(2) through
# libc. Python 3.11 has no os.setns. The calling process is single-threaded
# here, and the original namespace is always restored.
_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNET = 0x40000000


class InNetns:
    def __init__(self, ns: str):
        self.ns = ns

    def __enter__(self):
        self._orig = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        fd = os.open(os.path.join(NETNS_DIR, self.ns), os.O_RDONLY | os.O_CLOEXEC)
        try:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                e = ctypes.get_errno()
                raise LabError(f"setns {self.ns}: {os.strerror(e)}")
        finally:
            os.close(fd)
        return self

    def __exit__(self, *exc):
        try:
            if _libc.setns(self._orig, CLONE_NEWNET) != 0:
                # Staying in a lab namespace would be worse than dying.
                os._exit(70)
        finally:
            os.close(self._orig)
        return False


PR_SET_PDEATHSIG = 1


def _die_with_parent():
    """In a child before exec: SIGTERM when the runner dies, even by SIGKILL
    (kept across exec of non-setuid programs such as ip, chrt, sluice-*)."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _parse_snmp(text: str) -> dict:
    """Parses /proc/net/snmp or /proc/net/netstat: pairs of header/value
    lines -> {"Tcp.RetransSegs": n, "TcpExt.TCPTimeouts": n, ...}."""
    out = {}
    lines = text.splitlines()
    for i in range(0, len(lines) - 1, 2):
        h, v = lines[i].split(), lines[i + 1].split()
        if not h or h[0] != v[0]:
            continue
        proto = h[0].rstrip(":")
        for k, val in zip(h[1:], v[1:]):
            try:
                out[f"{proto}.{k}"] = int(val)
            except ValueError:
                pass
    return out


def netns_counters(ns: str) -> dict:
    """TCP/IP MIB counters of a namespace (Tcp.*, TcpExt.*, Ip.*, ...)."""
    with InNetns(ns):
        with open("/proc/net/snmp") as f:
            a = f.read()
        with open("/proc/net/netstat") as f:
            b = f.read()
    d = _parse_snmp(a)
    d.update(_parse_snmp(b))
    return d


def counters_delta(before: dict, after: dict) -> dict:
    return {k: after[k] - before.get(k, 0) for k in after}


# --------------------------------------------------------------------------
@dataclass
class Shape:
    """Egress queue of one interface: rate, buffer, scheduler."""
    rate_mbit: float
    buffer: Optional[int] = None   # bytes; None: the qdisc's default
    kind: str = "tbf"              # "tbf" | "htb"
    burst: Optional[int] = None    # bytes of token bucket; None: default_burst()

    def default_burst(self) -> int:
        # 100 us at the rate, at least two MTU frames. Smaller than a GSO
        # super-packet at 1 Gbit/s, so a TBF splits GSO into MTU frames.
        return max(3028, int(self.rate_mbit * 1e6 / 8 * 100e-6))

    def tc_lines(self, dev: str) -> list:
        burst = self.burst or self.default_burst()
        rate = f"{self.rate_mbit:g}mbit"
        if self.kind == "tbf":
            limit = self.buffer if self.buffer is not None else 1_000_000
            return [f"qdisc replace dev {dev} root handle 1: tbf rate {rate} burst {burst} limit {limit}"]
        if self.kind == "htb":
            lines = [f"qdisc replace dev {dev} root handle 1: htb default 10",
                     f"class add dev {dev} parent 1: classid 1:10 htb rate {rate} ceil {rate} "
                     f"burst {burst} cburst {burst}"]
            if self.buffer is not None:
                lines.append(f"qdisc add dev {dev} parent 1:10 handle 10: bfifo limit {self.buffer}")
            return lines
        raise LabError(f"unknown shaper '{self.kind}' (tbf or htb)")


@dataclass
class Node:
    name: str           # short name (h1, sw, tor1)
    ns: str             # namespace
    kind: str           # "host" | "switch"
    ip: Optional[str] = None   # hosts: the address peers use
    ports: list = field(default_factory=list)


@dataclass
class Port:
    node: Node
    ifname: str
    cls: str                       # port class: host-up, tor-down, tor-up, core, ...
    shape: Optional[Shape] = None
    addr: Optional[str] = None     # CIDR
    peer: Optional["Port"] = None

    @property
    def ns(self) -> str:
        return self.node.ns

    def spec(self) -> str:
        """Queue monitor port spec: class=namespace:interface."""
        return f"{self.cls}={self.ns}:{self.ifname}"


class Lab:
    """One run's namespaces, processes and temp directory."""

    def __init__(self, tag: str = "l", keep: bool = False, verbose: bool = False):
        if not re.fullmatch(r"[a-z]{1,2}", tag):
            raise LabError("lab tag must be 1-2 lowercase letters")
        if os.geteuid() != 0:
            raise LabError("the lab needs root (network namespaces, qdiscs, BPF)")
        self.tag = tag
        self.runid = base36(os.getpid())
        self.prefix = f"sl{tag}{self.runid}-"
        self.keep = keep
        self.verbose = verbose
        self.namespaces: list = []
        self.procs: list = []
        self.tmp = tempfile.mkdtemp(prefix=f"sluice-lab-{self.prefix}")
        self.closed = False
        reap_stale(tag)
        os.makedirs(OWNER_DIR, exist_ok=True)
        with open(_owner_path(self.prefix), "w") as f:
            f.write(f"{os.getpid()}\n")

    # -- names --------------------------------------------------------------
    def ns_name(self, short: str) -> str:
        return self.prefix + short

    def if_name(self, short: str) -> str:
        n = self.prefix + short
        if len(n) > IFNAMSIZ:
            raise LabError(f"interface name {n} longer than {IFNAMSIZ} characters")
        return n

    # -- namespaces ----------------------------------------------------------
    def add_namespaces(self, shorts: list) -> list:
        names = [self.ns_name(s) for s in shorts]
        # Record first: a failure half-way still gets cleaned up.
        self.namespaces.extend(names)
        sh(["ip", "-batch", "-"], input="".join(f"netns add {n}\n" for n in names))
        return names

    def nsexec(self, ns: str, cmd: str, check=True) -> subprocess.CompletedProcess:
        return sh(["ip", "netns", "exec", ns, "sh", "-c", cmd], check=check)

    def ip_batch(self, ns: Optional[str], lines: list):
        if not lines:
            return
        cmd = ["ip"] + (["-n", ns] if ns else []) + ["-batch", "-"]
        sh(cmd, input="\n".join(lines) + "\n")

    def tc_batch(self, ns: str, lines: list):
        if not lines:
            return
        sh(["tc", "-n", ns, "-batch", "-"], input="\n".join(lines) + "\n")

    def sysctl(self, ns: str, values: dict):
        """Per-namespace sysctls, written in-process through setns."""
        with InNetns(ns):
            for k, v in values.items():
                path = "/proc/sys/" + k.replace(".", "/")
                with open(path, "w") as f:
                    f.write(str(v))

    # -- processes -----------------------------------------------------------
    def spawn(self, ns: Optional[str], argv: list, name: str) -> subprocess.Popen:
        """Starts argv inside namespace ns, output to <tmp>/<name>.log, in its
        own session (a terminal Ctrl-C reaches only the runner, which then
        stops children in order)."""
        log = open(os.path.join(self.tmp, name + ".log"), "w")
        full = (["ip", "netns", "exec", ns] if ns else []) + list(argv)
        p = subprocess.Popen(full, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True,
                             preexec_fn=_die_with_parent)
        log.close()
        p.log_path = os.path.join(self.tmp, name + ".log")
        p.name = name
        self.procs.append(p)
        return p

    def stop(self, p: subprocess.Popen, sig=signal.SIGTERM, grace: float = 3.0) -> Optional[int]:
        """Ends one process we started, by pid: sig, then SIGKILL."""
        if p.poll() is None:
            try:
                p.send_signal(sig)
                p.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
            except ProcessLookupError:
                pass
        if p in self.procs:
            self.procs.remove(p)
        return p.returncode

    def log_of(self, p) -> str:
        try:
            with open(p.log_path) as f:
                return f.read()
        except OSError:
            return ""

    # -- teardown ------------------------------------------------------------
    def close(self):
        """Stops our processes and deletes our namespaces (and with them every
        interface and qdisc). Safe to call twice; SIGINT is ignored meanwhile
        so a second Ctrl-C cannot leave a half-deleted lab."""
        if self.closed:
            return
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            for p in list(self.procs):
                try:
                    self.stop(p, grace=2.0)
                except Exception:
                    pass
            if self.keep:
                print(f"[lab] --keep: leaving namespaces {self.prefix}* (remove with "
                      f"tc-scripts/lab/topo down {self.prefix})", file=sys.stderr)
            else:
                delete_namespaces(self.namespaces)
                shutil.rmtree(self.tmp, ignore_errors=True)
                try:
                    os.unlink(_owner_path(self.prefix))
                except OSError:
                    pass
            self.closed = True
        finally:
            signal.signal(signal.SIGINT, old)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def delete_namespaces(names: list):
    """Kills every process left inside (they were started by this run) and
    deletes the namespaces."""
    existing = [n for n in names if os.path.exists(os.path.join(NETNS_DIR, n))]
    for n in existing:
        pids = sh(["ip", "netns", "pids", n], check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    if existing:
        sh(["ip", "-force", "-batch", "-"], check=False,
           input="".join(f"netns del {n}\n" for n in existing))
    for n in existing:
        if os.path.exists(os.path.join(NETNS_DIR, n)):
            sh(["ip", "netns", "del", n], check=False)


def list_lab_namespaces(tag: str = "l") -> dict:
    """{runid: [namespace, ...]} of every lab run with this tag."""
    out: dict = {}
    try:
        names = os.listdir(NETNS_DIR)
    except FileNotFoundError:
        return out
    pat = re.compile(rf"^sl{tag}([0-9a-z]+)-")
    for n in names:
        m = pat.match(n)
        if m:
            out.setdefault(m.group(1), []).append(n)
    return out


# Every run records its owner in OWNER_DIR/sl<tag><runid> (the pid in the
# file); tests/lib/netns_fixture.cc does the same. A namespace name alone does
# not say which tag it belongs to ("slt" + "p1ab" and "sltp" + "1ab" are one
# string), so a run is reaped only when its marker names exactly this tag and
# its pid, and that pid is gone; namespaces without a marker are left alone.
OWNER_DIR = "/run/sluice-lab"


def _owner_path(prefix: str) -> str:
    return os.path.join(OWNER_DIR, prefix.rstrip("-"))


def reap_stale(tag: str = "l"):
    """Deletes namespaces of runs (of this tag) whose process no longer exists."""
    try:
        runs = os.listdir(OWNER_DIR)
    except FileNotFoundError:
        runs = []
    reaped = []
    for run in runs:
        if not run.startswith(f"sl{tag}"):
            continue
        try:
            with open(os.path.join(OWNER_DIR, run)) as f:
                pid = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if pid <= 0 or run != f"sl{tag}{base36(pid)}" or _pid_alive(pid):
            continue
        names = [n for n in list_lab_namespaces(tag).get(base36(pid), []) if n.startswith(run + "-")]
        if names:
            print(f"[lab] removing {len(names)} namespaces of dead run {run}", file=sys.stderr)
            delete_namespaces(names)
        reaped.append(run)
        try:
            os.unlink(os.path.join(OWNER_DIR, run))
        except OSError:
            pass
    # Temp dirs of the runs reaped above (named sluice-lab-<prefix>...).
    tmpd = tempfile.gettempdir()
    for d in os.listdir(tmpd):
        if any(d.startswith(f"sluice-lab-{run}-") for run in reaped):
            shutil.rmtree(os.path.join(tmpd, d), ignore_errors=True)


# --------------------------------------------------------------------------
HOST_SYSCTLS = {
    # Every run starts cold: no cached ssthresh/RTT from an earlier run.
    "net.ipv4.tcp_no_metrics_save": 1,
    "net.ipv6.conf.all.disable_ipv6": 1,
    "net.ipv6.conf.default.disable_ipv6": 1,
}
ROUTER_SYSCTLS = {
    "net.ipv4.ip_forward": 1,
    "net.ipv4.conf.all.rp_filter": 0,
    "net.ipv4.conf.default.rp_filter": 0,
    "net.ipv4.fib_multipath_hash_policy": 1,  # ECMP on the 5-tuple
    "net.ipv6.conf.all.disable_ipv6": 1,
    "net.ipv6.conf.default.disable_ipv6": 1,
}


class Topology:
    """Nodes and links of one testbed, built inside a Lab."""

    def __init__(self, lab: Lab, kind: str, mode: str = "gso", switch: str = "bridge",
                 sluice: Optional[dict] = None):
        """sluice: {"bin": sluiced, "logic": name, "queues": n} makes every
        switch a sluice switch (forwarding stays `switch`); optional
        "extra" (sluice_config) and "prefix" (argv before sluiced, e.g.
        chrt)."""
        if mode not in ("gso", "mtu"):
            raise LabError(f"unknown frame mode '{mode}' (gso or mtu)")
        if switch not in ("bridge", "router"):
            raise LabError(f"unknown switch kind '{switch}' (bridge or router)")
        if sluice is not None and not (sluice.get("bin") and os.access(sluice["bin"], os.X_OK)):
            raise LabError(f"sluice switches need the built sluiced (got {sluice.get('bin')!r})")
        self.lab = lab
        self.kind = kind
        self.mode = mode
        self.switch_kind = switch
        self.sluice = sluice
        self.sluice_procs: list = []    # (Popen, switch Node)
        self.nodes: dict = {}
        self.links: list = []           # (Port, Port)
        self.wires: list = []           # (Port, Port, one-way delay us, wire namespace short name)
        self.wire_bin: Optional[str] = None
        self.wire_procs: list = []
        self.hosts: list = []
        self.switches: list = []
        self.senders: list = []
        self.receivers: list = []
        self.bottleneck: Optional[Port] = None
        self.params: dict = {}
        self._routes: dict = {}         # ns -> [ip route lines]
        self._bridges: dict = {}        # switch ns -> bridge ifname

    # -- description ---------------------------------------------------------
    def add_node(self, short: str, kind: str) -> Node:
        n = Node(short, self.lab.ns_name(short), kind)
        self.nodes[short] = n
        (self.hosts if kind == "host" else self.switches).append(n)
        return n

    def link(self, a: Node, a_if: str, a_cls: str, b: Node, b_if: str, b_cls: str,
             a_shape: Optional[Shape] = None, b_shape: Optional[Shape] = None,
             a_addr: Optional[str] = None, b_addr: Optional[str] = None, delay_us: float = 0):
        """A link between two nodes. With delay_us > 0 it is two veth pairs
        joined in a wire namespace by sluice-wire (each direction delayed by
        delay_us after the sending port's queue); the ports are the same."""
        pa = Port(a, self.lab.if_name(a_if), a_cls, a_shape, a_addr)
        pb = Port(b, self.lab.if_name(b_if), b_cls, b_shape, b_addr)
        pa.peer, pb.peer = pb, pa
        a.ports.append(pa)
        b.ports.append(pb)
        self.links.append((pa, pb))
        if delay_us < 0:
            raise LabError(f"link {a_if}-{b_if}: negative delay")
        if delay_us > 0:
            self.wires.append((pa, pb, delay_us, f"w{len(self.wires) + 1}"))
        return pa, pb

    def route(self, node: Node, line: str):
        self._routes.setdefault(node.ns, []).append(line)

    def ports(self, cls: Optional[str] = None) -> list:
        out = []
        for a, b in self.links:
            for p in (a, b):
                if cls is None or p.cls == cls:
                    out.append(p)
        return out

    def switch_ports(self) -> list:
        return [p for p in self.ports() if p.node.kind == "switch"]

    def describe(self) -> dict:
        return {
            "kind": self.kind, "mode": self.mode,
            "switch": "sluice" if self.sluice else self.switch_kind,
            "forwarding": self.switch_kind,
            "switch_logic": self.sluice["logic"] if self.sluice else None,
            "hosts": {h.name: {"ns": h.ns, "ip": h.ip} for h in self.hosts},
            "switches": [s.ns for s in self.switches],
            "bottleneck": self.bottleneck.spec() if self.bottleneck else None,
            "params": self.params,
        }

    # -- building ------------------------------------------------------------
    def build(self):
        lab = self.lab
        if self.wires and not (self.wire_bin and os.access(self.wire_bin, os.X_OK)):
            raise LabError(f"links with a delay need the built sluice-wire (got {self.wire_bin!r})")
        wired = {id(a) for a, _, _, _ in self.wires}
        lab.add_namespaces([n.name for n in self.nodes.values()] + [w for _, _, _, w in self.wires])
        lines = [f"link add {a.ifname} netns {a.ns} type veth peer name {b.ifname} netns {b.ns}"
                 for a, b in self.links if id(a) not in wired]
        for a, b, _, w in self.wires:
            wns, (wa, wb) = lab.ns_name(w), self._wire_ends(w)
            lines += [f"link add {a.ifname} netns {a.ns} type veth peer name {wa} netns {wns}",
                      f"link add {b.ifname} netns {b.ns} type veth peer name {wb} netns {wns}"]
        lab.ip_batch(None, lines)
        for a, b, delay, w in self.wires:
            self._build_wire(a, b, delay, w)
        for node in self.nodes.values():
            ip = ["link set lo up"]
            if node.kind == "switch" and self.switch_kind == "bridge":
                br = lab.if_name("br" + node.name[-4:]) if len(self.switches) > 1 else lab.if_name("br")
                self._bridges[node.ns] = br
                ip.append(f"link add {br} type bridge stp_state 0 mcast_snooping 0")
                ip.append(f"link set {br} up")
            for p in node.ports:
                if p.addr:
                    ip.append(f"addr add {p.addr} dev {p.ifname}")
                if node.ns in self._bridges and p.cls != "br":
                    ip.append(f"link set {p.ifname} master {self._bridges[node.ns]}")
                if self.mode == "mtu":
                    ip.append(f"link set {p.ifname} gso_max_segs 1")
                ip.append(f"link set {p.ifname} up")
            ip.extend(f"route {r}" for r in self._routes.get(node.ns, []))
            lab.ip_batch(node.ns, ip)
            lab.sysctl(node.ns, ROUTER_SYSCTLS if (node.kind == "switch" and self.switch_kind == "router")
                       else HOST_SYSCTLS)
            if self.mode == "mtu":
                cmds = "; ".join(f"ethtool -K {p.ifname} tso off gso off gro off" for p in node.ports)
                lab.nsexec(node.ns, cmds)
            tc = []
            for p in node.ports:
                # A sluice switch's ports get their queue tree from sluiced.
                if p.shape and not (self.sluice and node.kind == "switch"):
                    tc.extend(p.shape.tc_lines(p.ifname))
            lab.tc_batch(node.ns, tc)
        if self.sluice:
            self.start_sluice(self.sluice)
        return self

    # -- sluice switches -----------------------------------------------------
    def start_sluice(self, sluice: dict):
        """Makes every switch a sluice switch now (sluiced replaces each
        port's root qdisc with its own queue tree); stop_sluice() undoes
        it. Used by build() for switch="sluice" and by bench variants that
        compare sluice switches with the lab's in one run."""
        self.sluice = sluice
        try:
            for node in self.switches + self._nic_hosts():
                self._start_sluice(node)
        except Exception:
            self.stop_sluice()
            raise

    def stop_sluice(self, restore: bool = True) -> list:
        """Stops every switch's sluiced (it removes its queue trees) and,
        with `restore`, puts the lab's shapers back on the switch ports.
        Returns the exit codes."""
        codes = []
        for p, node in self.sluice_procs:
            # Removing its trees goes through rtnl, which other labs on the
            # machine hold at times: 5 s was measured too short (a run lost).
            codes.append(self.lab.stop(p, grace=20.0))
        self.sluice_procs = []
        if restore:
            for node in self.switches + self._nic_hosts():
                tc = []
                for p in node.ports:
                    if p.shape:
                        tc.extend(p.shape.tc_lines(p.ifname))
                self.lab.tc_batch(node.ns, tc)
        return codes

    def _nic_hosts(self) -> list:
        """The hosts that run sluiced as their NIC (sluice["nic_hosts"]: a
        one-port switch on the uplink, as BFC's port model has it): none
        unless asked for."""
        s = self.sluice or {}
        return list(self.hosts) if s.get("nic_hosts") else []

    def sluice_config(self, node: Node) -> str:
        """sluiced's configuration for switch `node`: [switch] with
        sluice["switch_keys"] (lines), every port of the node, at the rate, buffer and burst of its shaper, then
        what sluice["extra"](node) returns (more sections or tables, e.g.
        the logic's own section), if given."""
        lab, s = self.lab, self.sluice
        state = os.path.join(lab.tmp, f"sluiced-{node.name}")
        bursts = {p.shape.burst for p in node.ports if p.shape and p.shape.burst}
        if len(bursts) > 1:
            raise LabError(f"{node.name}: ports with different bursts ({sorted(bursts)})")
        lines = ["[agent]", f'pin_root = "/sys/fs/bpf/sluice-{lab.prefix}{node.name}"',
                 f'state_dir = "{state}"', f'control_socket = "{state}/sluiced.sock"']
        if node.kind == "host":
            # A host's own TCP must see a segment its NIC's agent takes as
            # sent: clsact's stolen verdict (tcx has only drop; docs/bfc.md).
            lines.append('attach_mode = "clsact"')
        lines += ["[metrics]", "enabled = false", "[switch]", f'logic = "{s["logic"]}"',
                 f"queues = {int(s.get('queues', 1))}", f"burst_bytes = {bursts.pop() if bursts else 0}"]
        # More [switch] keys (TOML lines), e.g. 'datapath = "hold"'.
        lines += list(s.get("switch_keys") or [])
        nics = self._nic_hosts()
        for p in node.ports:
            if p.shape is None:
                raise LabError(f"{p.ifname}: a sluice switch port needs a rate (shape)")
            # A host that runs sluiced as its NIC is a switch hop: its link
            # carries control frames (and BFC's tags) both ways.
            host_peer = p.peer.node.kind == "host" and not any(p.peer.node is h for h in nics)
            role = "host-facing" if host_peer else "switch-facing"
            lines += ["[[switch.ports]]", f'name = "{p.ifname}"', f'role = "{role}"',
                      f"rate_mbit = {max(1, int(round(p.shape.rate_mbit)))}",
                      f"buffer_bytes = {p.shape.buffer if p.shape.buffer is not None else 1_000_000}"]
        extra = s.get("extra")
        if extra:
            lines.append(extra(node))
        return "\n".join(lines) + "\n"

    def _start_sluice(self, node: Node):
        lab = self.lab
        state = os.path.join(lab.tmp, f"sluiced-{node.name}")
        os.makedirs(state, exist_ok=True)
        cfg = os.path.join(lab.tmp, f"sluiced-{node.name}.toml")
        with open(cfg, "w") as f:
            f.write(self.sluice_config(node))
        p = lab.spawn(node.ns, list(self.sluice.get("prefix") or []) + [self.sluice["bin"], "--config", cfg],
                      f"sluiced-{node.name}")
        self.sluice_procs.append((p, node))
        # Up to a minute: netlink (the tree) is slow when other labs hold rtnl.
        for _ in range(3000):
            if "SWITCH_STARTED" in lab.log_of(p) or p.poll() is not None:
                break
            time.sleep(0.02)
        if p.poll() is not None or "SWITCH_STARTED" not in lab.log_of(p):
            raise LabError(f"sluiced (switch mode) in {node.ns} did not start:\n{lab.log_of(p)[-2000:]}")

    def check_switches(self):
        """Raises if a sluice switch's sluiced has ended: what was measured
        through it since is void."""
        for p, node in self.sluice_procs:
            if p.poll() is not None:
                raise LabError(f"sluiced of {node.ns} exited ({p.returncode}):\n{self.lab.log_of(p)[-1000:]}")

    def _wire_ends(self, w: str) -> tuple:
        """The wire's two interfaces: the peer of a link's port a, of port b."""
        return self.lab.if_name(w + "a"), self.lab.if_name(w + "b")

    def _build_wire(self, a: Port, b: Port, delay_us: float, w: str):
        """The wire namespace of one delayed link: its two ends up, no IP
        stack of its own, and sluice-wire joining them."""
        lab, wns = self.lab, self.lab.ns_name(w)
        ends = self._wire_ends(w)
        lab.ip_batch(wns, ["link set lo up"] + [f"link set {e} up" for e in ends])
        lab.sysctl(wns, {"net.ipv6.conf.all.disable_ipv6": 1, "net.ipv6.conf.default.disable_ipv6": 1})
        if self.mode == "mtu":
            lab.nsexec(wns, "; ".join(f"ethtool -K {e} tso off gso off gro off" for e in ends))
        p = lab.spawn(wns, [self.wire_bin, "--a", ends[0], "--b", ends[1], "--delay-us", f"{delay_us:g}",
                            "--json", os.path.join(lab.tmp, f"wire-{w}.json")], f"wire-{w}")
        self.wire_procs.append((p, w))
        for _ in range(250):
            if "sluice-wire:" in lab.log_of(p) or p.poll() is not None:
                break
            time.sleep(0.02)
        if p.poll() is not None or "<->" not in lab.log_of(p):
            raise LabError(f"sluice-wire on {a.ifname}-{b.ifname} did not start:\n{lab.log_of(p)[-1000:]}")

    def far_end(self, port: Port) -> tuple:
        """(namespace, interface) where packets leaving `port` arrive: the
        peer port, or the wire's end when the link has a delay."""
        for a, b, _, w in self.wires:
            if port is a or port is b:
                return self.lab.ns_name(w), self._wire_ends(w)[0 if port is a else 1]
        return port.peer.ns, port.peer.ifname

    def check_wires(self):
        """Raises if a wire's process has ended: its link carries nothing
        since, and what was measured over it is void."""
        for p, w in self.wire_procs:
            if p.poll() is not None:
                raise LabError(f"sluice-wire of {self.lab.ns_name(w)} exited ({p.returncode}):\n"
                               f"{self.lab.log_of(p)[-1000:]}")

    def wire_stats(self) -> list:
        """Counters of every wire (sluice-wire's JSON); stops the wires, so
        call it after the traffic."""
        out = []
        for p, w in self.wire_procs:
            self.lab.stop(p)
            try:
                with open(os.path.join(self.lab.tmp, f"wire-{w}.json")) as f:
                    out.append(json.load(f))
            except (OSError, ValueError):
                pass
        self.wire_procs = []
        return out

    # -- helpers for experiments --------------------------------------------
    def qdisc_stats(self, port: Port) -> dict:
        """Root qdisc counters of a port from `tc -s -j qdisc` (bytes,
        packets, drops, overlimits, requeues, backlog, qlen)."""
        out = sh(["tc", "-n", port.ns, "-s", "-j", "qdisc", "show", "dev", port.ifname]).stdout
        for q in json.loads(out or "[]"):
            if q.get("root"):
                return {k: q.get(k, 0) for k in ("bytes", "packets", "drops", "overlimits",
                                                  "requeues", "backlog", "qlen")}
        return {}

    def set_host_sysctl(self, values: dict, hosts: Optional[list] = None):
        for h in (hosts or self.hosts):
            self.lab.sysctl(h.ns, values)

    def set_initcwnd(self, segments: int, hosts: Optional[list] = None):
        """TCP's initial window on every route of the hosts (the route
        attribute `initcwnd`; 0 = the kernel's default of 10 segments)."""
        if not 0 <= segments <= 1024:
            raise LabError(f"initcwnd {segments}: expected 0..1024 segments")
        for h in (hosts or self.hosts):
            routes = json.loads(sh(["ip", "-n", h.ns, "-j", "route", "show"]).stdout or "[]")
            lines = []
            for r in routes:
                words = [f"route change {r['dst']}"]
                if r.get("gateway"):
                    words.append(f"via {r['gateway']}")
                words.append(f"dev {r['dev']}")
                for key, word in (("protocol", "proto"), ("scope", "scope"), ("prefsrc", "src")):
                    if r.get(key):
                        words.append(f"{word} {r[key]}")
                words.append(f"initcwnd {segments}")
                lines.append(" ".join(words))
            self.lab.ip_batch(h.ns, lines)


def _host_ip(index: int, router: bool) -> tuple:
    """(host CIDR, gateway or None) for host number index (1-based)."""
    a, b = divmod(index - 1, 250)
    if router:
        return f"10.{1 + a}.{b}.2/24", f"10.{1 + a}.{b}.1"
    return f"10.0.{a}.{b + 1}/16", None


def _bottleneck_shape(rate, buffer, shaper, burst) -> Shape:
    return Shape(rate_mbit=rate, buffer=buffer, kind=shaper, burst=burst)


def star(lab: Lab, senders: int, receivers: int = 1, rate: float = 1000, buffer: int = 131072,
         mode: str = "gso", switch: str = "bridge", shaper: str = "tbf", burst: Optional[int] = None,
         uplink_rate: Optional[float] = None, delay_us: float = 0, wire: Optional[str] = None,
         sluice: Optional[dict] = None) -> Topology:
    """N senders and R receivers on one switch. Every switch egress port is
    shaped to `rate` with `buffer` bytes (the receiver's port is the incast
    bottleneck); every host uplink is shaped to `uplink_rate` (default
    `rate`) with HTB so veth senders are not infinitely fast. delay_us > 0
    gives each receiver's link that one-way propagation delay (after the
    switch port's queue; `wire` is the sluice-wire binary)."""
    t = Topology(lab, "star", mode, switch, sluice)
    t.wire_bin = wire
    up = Shape(rate_mbit=uplink_rate or rate, buffer=None, kind="htb", burst=burst)
    sw = t.add_node("sw", "switch")
    router = switch == "router"
    total = senders + receivers
    for i in range(1, total + 1):
        is_recv = i > senders
        short = f"r{i - senders}" if is_recv else f"h{i}"
        h = t.add_node(short, "host")
        cidr, gw = _host_ip(i, router)
        h.ip = cidr.split("/")[0]
        swaddr = f"{gw}/24" if router else None
        t.link(h, short, "host-up", sw, "p" + short, "sw-down",
               a_shape=up, b_shape=_bottleneck_shape(rate, buffer, shaper, burst),
               a_addr=cidr, b_addr=swaddr, delay_us=delay_us if is_recv else 0)
        if router:
            t.route(h, f"add default via {gw}")
        (t.receivers if is_recv else t.senders).append(h)
    t.bottleneck = next(p for p in sw.ports if p.peer.node is t.receivers[0])
    t.params = {"senders": senders, "receivers": receivers, "rate_mbit": rate, "buffer": buffer,
                "mode": mode, "switch": switch, "shaper": shaper,
                "burst": burst or Shape(rate).default_burst(), "uplink_mbit": uplink_rate or rate,
                "receiver_delay_us": delay_us}
    return t.build()


def dumbbell(lab: Lab, left: int, right: int, rate: float = 1000, bottleneck_rate: Optional[float] = None,
             buffer: int = 131072, mode: str = "gso", switch: str = "bridge", shaper: str = "tbf",
             burst: Optional[int] = None, sluice: Optional[dict] = None) -> Topology:
    """Left hosts on switch L, right hosts on switch R, one L<->R link at
    `bottleneck_rate` (default `rate`). Traffic left->right queues in L's
    port toward R (class "core"); R's ports toward right hosts are "sw-down"."""
    t = Topology(lab, "dumbbell", mode, switch, sluice)
    brate = bottleneck_rate or rate
    router = switch == "router"
    up = Shape(rate_mbit=rate, kind="htb", burst=burst)
    L = t.add_node("swl", "switch")
    R = t.add_node("swr", "switch")
    t.link(L, "lr", "core", R, "rl", "core",
           a_shape=_bottleneck_shape(brate, buffer, shaper, burst),
           b_shape=_bottleneck_shape(brate, buffer, shaper, burst),
           a_addr="172.16.0.1/30" if router else None, b_addr="172.16.0.2/30" if router else None)
    idx = 0
    for side, sw, n, lst in (("l", L, left, t.senders), ("r", R, right, t.receivers)):
        for i in range(1, n + 1):
            idx += 1
            short = f"{side}{i}"
            h = t.add_node(short, "host")
            if router:
                base = 1 if side == "l" else 2
                cidr, gw = f"10.{base}.{i}.2/24", f"10.{base}.{i}.1"
            else:
                cidr, gw = _host_ip(idx, False)
            h.ip = cidr.split("/")[0]
            t.link(h, short, "host-up", sw, "p" + short, "sw-down",
                   a_shape=up, b_shape=_bottleneck_shape(rate, buffer, shaper, burst),
                   a_addr=cidr, b_addr=f"{gw}/24" if router else None)
            if router:
                t.route(h, f"add default via {gw}")
            lst.append(h)
    if router:
        t.route(L, "add 10.2.0.0/16 via 172.16.0.2")
        t.route(R, "add 10.1.0.0/16 via 172.16.0.1")
    t.bottleneck = t.links[0][0]
    t.params = {"left": left, "right": right, "rate_mbit": rate, "bottleneck_mbit": brate,
                "buffer": buffer, "mode": mode, "switch": switch, "shaper": shaper,
                "burst": burst or Shape(rate).default_burst()}
    return t.build()


def leaf_spine(lab: Lab, tors: int = 2, spines: int = 2, hosts_per_tor: int = 4, rate: float = 1000,
               core_rate: Optional[float] = None, buffer: int = 131072, mode: str = "gso",
               shaper: str = "tbf", burst: Optional[int] = None, sluice: Optional[dict] = None,
               core_delay_us: float = 0, host_delay_us: float = 0, wire: Optional[str] = None) -> Topology:
    """2-tier leaf-spine of routers: every ToR links to every spine; ToRs
    spread traffic to other racks over the spines by ECMP (5-tuple hash).
    Port classes: tor-down (ToR -> host), tor-up (ToR -> spine), core
    (spine -> ToR), host-up. Host t<a>h<i> has 10.<a>.<i>.2.
    core_delay_us / host_delay_us > 0: that one-way propagation delay on
    every ToR<->spine / host<->ToR link (a sluice-wire each; `wire` is its
    binary)."""
    if tors > 250 or hosts_per_tor > 250 or spines > 60:
        raise LabError("leaf_spine: at most 250 ToRs, 250 hosts per ToR, 60 spines")
    t = Topology(lab, "leaf-spine", mode, "router", sluice)
    t.wire_bin = wire
    crate = core_rate or rate
    up = Shape(rate_mbit=rate, kind="htb", burst=burst)
    spine_nodes = [t.add_node(f"s{b}", "switch") for b in range(1, spines + 1)]
    for a in range(1, tors + 1):
        tor = t.add_node(f"t{a}", "switch")
        for i in range(1, hosts_per_tor + 1):
            h = t.add_node(f"t{a}h{i}", "host")
            h.ip = f"10.{a}.{i}.2"
            t.link(h, f"t{a}h{i}", "host-up", tor, f"t{a}d{i}", "tor-down",
                   a_shape=up, b_shape=_bottleneck_shape(rate, buffer, shaper, burst),
                   a_addr=f"{h.ip}/24", b_addr=f"10.{a}.{i}.1/24", delay_us=host_delay_us)
            t.route(h, f"add default via 10.{a}.{i}.1")
        nexthops = []
        for b, s in enumerate(spine_nodes, start=1):
            # 172.(16 + b).a.0/30 between ToR a and spine b
            tor_ip, sp_ip = f"172.{16 + b}.{a}.1", f"172.{16 + b}.{a}.2"
            t.link(tor, f"t{a}u{b}", "tor-up", s, f"s{b}t{a}", "core",
                   a_shape=_bottleneck_shape(crate, buffer, shaper, burst),
                   b_shape=_bottleneck_shape(crate, buffer, shaper, burst),
                   a_addr=f"{tor_ip}/30", b_addr=f"{sp_ip}/30", delay_us=core_delay_us)
            nexthops.append(f"nexthop via {sp_ip}")
            t.route(s, f"add 10.{a}.0.0/16 via {tor_ip}")
        t.route(tor, "add 10.0.0.0/8 " + " ".join(nexthops))
    hosts = [h for h in t.hosts]
    t.senders = hosts[:-1]
    t.receivers = hosts[-1:]
    t.bottleneck = next(p for p in t.ports("tor-down") if p.peer.node is t.receivers[0])
    t.params = {"tors": tors, "spines": spines, "hosts_per_tor": hosts_per_tor, "rate_mbit": rate,
                "core_mbit": crate, "buffer": buffer, "mode": mode, "shaper": shaper,
                "burst": burst or Shape(rate).default_burst(), "core_delay_us": core_delay_us,
                "host_delay_us": host_delay_us}
    return t.build()


def three_switch(lab: Lab, groups: tuple = (2, 4, 4), rate: float = 100, core_rate: Optional[float] = None,
                 buffer: int = 131072, mode: str = "mtu", shaper: str = "tbf", burst: Optional[int] = None,
                 delay_us: float = 0, wire: Optional[str] = None, sluice: Optional[dict] = None) -> Topology:
    """The three-switch testbed of BFC §6.1 (bfc-nsdi22 Fig. 6):
         group 1 (g1h*) -> switch 1 -> switch 2 -> receiver 1 (r1)
         group 2 (g2h*) -> switch 1 -> switch 2 -> receiver 2 (r2)
         group 3 (g3h*) -> switch 3 -> switch 2 -> receiver 2
    `groups` = hosts per sender group (topo.groups lists them). Groups 1
    and 2 share the switch 1 -> switch 2 link (class "core", `core_rate`,
    default `rate`), groups 2 and 3 the switch 2 -> receiver 2 port (the
    bottleneck, class "sw-down"). delay_us > 0 gives both switch-to-switch
    links that one-way delay (sluice-wire; sluice control frames cross it
    too), so the hop RTT between switches can be longer than a veth's.
    Bridges (one L2 domain, a tree: no loops)."""
    if len(groups) != 3 or min(groups) < 1 or max(groups) > 60:
        raise LabError("three_switch: groups = (g1, g2, g3) hosts, 1..60 each")
    t = Topology(lab, "three-switch", mode, "bridge", sluice)
    t.wire_bin = wire
    crate = core_rate or rate
    up = Shape(rate_mbit=rate, kind="htb", burst=burst)
    s1, s2, s3 = (t.add_node(f"sw{i}", "switch") for i in (1, 2, 3))
    for k, s in ((1, s1), (3, s3)):
        t.link(s, f"c{k}2", "core", s2, f"c2{k}", "core",
               a_shape=_bottleneck_shape(crate, buffer, shaper, burst),
               b_shape=_bottleneck_shape(crate, buffer, shaper, burst), delay_us=delay_us)
    t.groups = [[], [], []]
    plan = [(f"g{g + 1}h{i}", sw, g) for g, sw in enumerate((s1, s1, s3)) for i in range(1, groups[g] + 1)]
    plan += [("r1", s2, None), ("r2", s2, None)]
    for idx, (short, sw, g) in enumerate(plan, start=1):
        h = t.add_node(short, "host")
        cidr, _ = _host_ip(idx, False)
        h.ip = cidr.split("/")[0]
        t.link(h, short, "host-up", sw, "p" + short, "sw-down",
               a_shape=up, b_shape=_bottleneck_shape(rate, buffer, shaper, burst), a_addr=cidr)
        if g is None:
            t.receivers.append(h)
        else:
            t.groups[g].append(h)
            t.senders.append(h)
    t.bottleneck = next(p for p in s2.ports if p.peer.node is t.receivers[1])
    t.params = {"groups": list(groups), "rate_mbit": rate, "core_mbit": crate, "buffer": buffer, "mode": mode,
                "switch": "bridge", "shaper": shaper, "burst": burst or Shape(rate).default_burst(),
                "core_delay_us": delay_us}
    return t.build()
