"""Experiment runner core: registries of experiments and variants, the run
context handed to both, tool lookup, and the process/queue-monitor helpers
experiments share.

A *variant* is what is being compared (baseline kernel TCP, PAC, DCTCP, ...):
a class registered with @variant that prepares hosts and switch ports before
traffic and undoes it after. An *experiment* builds a topology, runs every
requested variant on it in the same invocation and returns the result JSON
{"experiment": ..., "params": {...}, "variants": {name: [row, ...]}}.
See bench/README.md "Adding a variant" / "Adding an experiment".
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from typing import Optional

import sluicelab

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# Tools every experiment needs; experiments may set build_targets to add theirs.
DEFAULT_TARGETS = ["sluice-tg", "sluice-qmon", "sluice-fault"]

_EXPERIMENTS: dict = {}
_VARIANTS: dict = {}


class BenchError(RuntimeError):
    pass


# ---------------------------------------------------------------------------
# Registries

def experiment(cls):
    """Class decorator: registers an Experiment subclass under cls.name."""
    if cls.name in _EXPERIMENTS:
        raise BenchError(f"experiment '{cls.name}' registered twice")
    _EXPERIMENTS[cls.name] = cls
    return cls


def variant(cls):
    """Class decorator: registers a Variant subclass under cls.name."""
    if cls.name in _VARIANTS:
        raise BenchError(f"variant '{cls.name}' registered twice")
    _VARIANTS[cls.name] = cls
    return cls


def experiments() -> dict:
    return dict(_EXPERIMENTS)


def variants() -> dict:
    return dict(_VARIANTS)


class Variant:
    """One thing being compared. Subclass, set `name`/`help`, override what
    you need, decorate with @variant, put the file in sluicebench/variants/.

    Life cycle, for every measurement point (e.g. one sender count):
        setup(ctx, topo)      after the topology exists, before any traffic
        ... traffic (sluice-tg servers use `cc`, namespaces get `ecn`) ...
        metrics(ctx, topo)    extra fields merged into the result row
        teardown(ctx, topo)   always called, also after an error or Ctrl-C
    Anything started with ctx.spawn() is stopped by the runner too, and the
    lab's namespaces are deleted at the end whatever happens.
    """
    name = ""
    help = ""
    # TCP_CONGESTION for every traffic-generator socket (servers and clients).
    cc = "cubic"
    # net.ipv4.tcp_ecn in every host namespace (1 = request and accept ECN).
    ecn = False

    @classmethod
    def add_args(cls, parser: argparse.ArgumentParser):
        """Variant-specific options; prefix them with the variant name
        (e.g. --pac-threshold) since all variants share one parser."""

    def __init__(self, args: argparse.Namespace):
        self.args = args

    def setup(self, ctx: "Context", topo: sluicelab.Topology):
        pass

    def metrics(self, ctx: "Context", topo: sluicelab.Topology) -> dict:
        return {}

    def teardown(self, ctx: "Context", topo: sluicelab.Topology):
        pass


class Experiment:
    """Subclass, set `name`/`help`, implement add_args/run/table/plot,
    decorate with @experiment, put the file in sluicebench/experiments/."""
    name = ""
    help = ""
    default_variants = "baseline"
    # Scheduling class of sluice-tg (--sched): "fifo" for bursty traffic that
    # must stay synchronized; "normal" for long bulk transfers (senders that
    # never block would starve ksoftirqd under SCHED_FIFO).
    default_sched = "fifo"

    @classmethod
    def add_args(cls, parser: argparse.ArgumentParser):
        pass

    def __init__(self, args: argparse.Namespace):
        self.args = args

    def cdf_path(self) -> str:
        """The flow-size CDF --workload names: a file path, or the name of
        one in bench/cdf/."""
        w = self.args.workload
        p = w if os.path.sep in w or w.endswith(".cdf") else os.path.join(TOP, "bench", "cdf", w + ".cdf")
        if not os.path.isfile(p):
            raise BenchError(f"--workload {w}: no CDF file {p}")
        return p

    def run(self, ctx: "Context", variants: list) -> dict:
        raise NotImplementedError

    def table(self, result: dict) -> str:
        return json.dumps(result, indent=1)

    def plot(self, result: dict, path: str):
        pass

    # Helpers for table() and plot().
    @staticmethod
    def points(result: dict):
        """(point index, variant, row) in table order: every variant's row of
        point 0, then of point 1, ... (rows are aligned by index)."""
        names = list(result["variants"])
        for i in range(len(result["variants"][names[0]]) if names else 0):
            for v in names:
                yield i, v, result["variants"][v][i]

    @staticmethod
    def subplots(*args, **kw):
        """matplotlib's subplots on the headless Agg backend."""
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt.subplots(*args, **kw)

    @staticmethod
    def save(fig, path: str):
        import matplotlib.pyplot as plt
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)


# ---------------------------------------------------------------------------
# Tools

def build_dir() -> str:
    return os.environ.get("SLUICE_BUILD_DIR", os.path.join(TOP, "build"))


def tool(name: str) -> str:
    """Path of a built sluice binary (sluice-tg, sluice-qmon, sluiced, ...)."""
    bd = build_dir()
    for rel in (f"agent/tg/{name}", f"agent/qmon/{name}", f"agent/fault/{name}", f"agent/wire/{name}", f"agent/{name}", name):
        p = os.path.join(bd, rel)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    raise BenchError(f"{name} not found under {bd} (build it: cmake --build {bd})")


def ensure_built(targets: list, log):
    """Configures and builds what is missing, as a new user's first run
    needs. Up to date builds cost a second or two."""
    bd = build_dir()
    if not os.path.exists(os.path.join(bd, "CMakeCache.txt")):
        dep = os.path.join(TOP, "tc-scripts", "install-deps.sh")
        log(f"configuring {bd} (first run)")
        subprocess.run([dep], check=True)
        subprocess.run(["cmake", "-S", TOP, "-B", bd, "-DCMAKE_BUILD_TYPE=RelWithDebInfo"],
                       check=True, stdout=subprocess.DEVNULL)
    jobs = str(min(2, os.cpu_count() or 1))
    r = subprocess.run(["nice", "cmake", "--build", bd, "-j", jobs, "--target"] + targets,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-4000:])
        raise BenchError("build failed (output above)")


# ---------------------------------------------------------------------------
# Context

class Context:
    """What experiments and variants get: the lab, the arguments, tools,
    logging, and helpers for the processes every experiment runs."""

    def __init__(self, args: argparse.Namespace, lab: sluicelab.Lab):
        self.args = args
        self.lab = lab
        self.verbose = getattr(args, "verbose", False)
        self.point: dict = {}  # the current measurement point, e.g. {"senders": 32}

    def save_artifacts(self, *names: str):
        """Copies files of this run's temp dir (names relative to it; logs
        of processes are <name>.log) to --artifacts DIR, if given."""
        dest = getattr(self.args, "artifacts", None)
        if not dest:
            return
        import shutil
        os.makedirs(dest, exist_ok=True)
        for n in names:
            src = os.path.join(self.tmp, n)
            if os.path.isfile(src):
                shutil.copy2(src, os.path.join(dest, n))

    def log(self, msg: str):
        print(f"[bench] {msg}", file=sys.stderr, flush=True)

    def debug(self, msg: str):
        if self.verbose:
            self.log(msg)

    def tool(self, name: str) -> str:
        return tool(name)

    @property
    def tmp(self) -> str:
        return self.lab.tmp

    def spawn(self, ns: Optional[str], argv: list, name: str) -> subprocess.Popen:
        self.debug(f"spawn [{ns}] {' '.join(argv)}")
        return self.lab.spawn(ns, argv, name)

    def stop(self, p, sig=signal.SIGTERM, grace=3.0):
        return self.lab.stop(p, sig, grace)

    def run_tool(self, ns: Optional[str], argv: list, name: str, timeout: float) -> str:
        """Runs a tool to completion inside ns; returns its log. Raises with
        the log tail when it fails or times out."""
        p = self.spawn(ns, argv, name)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop(p, signal.SIGKILL)
            raise BenchError(f"{name} did not finish within {timeout:.0f} s:\n{self.lab.log_of(p)[-2000:]}")
        self.stop(p)
        out = self.lab.log_of(p)
        if rc != 0:
            raise BenchError(f"{name} failed ({rc}):\n{out[-2000:]}")
        return out

    def wait_for_log(self, p, text: str, timeout: float = 5.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if text in self.lab.log_of(p):
                return
            if p.poll() is not None:
                break
            time.sleep(0.02)
        raise BenchError(f"{p.name} did not report '{text}':\n{self.lab.log_of(p)[-2000:]}")

    # -- traffic generator ----------------------------------------------------
    def tg(self, server: bool = False) -> list:
        """argv prefix that runs sluice-tg: with --sched fifo under SCHED_FIFO
        (bench/README.md "Measuring on a shared 2-core machine"), the client
        (the receiving application) one level above the servers so busy
        senders cannot starve it."""
        prio = getattr(self.args, "sched", "normal")
        if prio == "fifo" and not self._fifo_ok():
            prio = "normal"
        pre = ["chrt", "-f", "10" if server else "11"] if prio == "fifo" else []
        return pre + [self.tool("sluice-tg")]

    def _fifo_ok(self) -> bool:
        if not hasattr(self, "_fifo"):
            r = subprocess.run(["chrt", "-f", "10", "true"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
            self._fifo = r.returncode == 0
            if not self._fifo:
                self.log(f"SCHED_FIFO not allowed here ({r.stderr.strip()}): traffic generator runs "
                         "with normal scheduling, expect more run-to-run spread")
        return self._fifo

    def start_servers(self, hosts: list, cc: str, port: int = 5001, extra: Optional[list] = None) -> list:
        procs = []
        for h in hosts:
            argv = self.tg(server=True) + ["server", "--port", str(port)]
            if cc:
                argv += ["--cc", cc]
            procs.append(self.spawn(h.ns, argv + (extra or []), f"tg-server-{h.name}-{port}"))
        for p in procs:
            self.wait_for_log(p, "listening")
        return procs

    def stop_all(self, procs: list):
        for p in procs:
            self.stop(p)

    # -- fault injection --------------------------------------------------------
    def start_faults(self, topo: sluicelab.Topology, tag: str) -> list:
        """sluice-fault on the ports --fault names (the bottleneck by default,
        or every port of a class); returns handles for stop_faults()."""
        spec = getattr(self.args, "fault", None)
        if not spec:
            return []
        f = parse_fault(spec)
        ports = [topo.bottleneck] if f["port"] == "bottleneck" else topo.ports(f["port"])
        if not ports:
            raise BenchError(f"--fault: no port of class '{f['port']}' in this topology")
        handles = []
        for i, p in enumerate(ports):
            out = os.path.join(self.tmp, f"fault-{tag}-{i}.json")
            argv = [self.tool("sluice-fault"), "--dev", p.ifname, "--hook", f["hook"], "--json", out,
                    "--state-dir", os.path.join(self.tmp, "fault-state")]
            for k in ("drop", "corrupt", "delay", "delay-class", "seed", "proto"):
                if k in f:
                    argv += [f"--{k}", f[k]]
            if f.get("data-only") not in (None, "0", ""):
                argv += ["--data-only"]
            proc = self.spawn(p.ns, argv, f"fault-{tag}-{i}")
            handles.append({"proc": proc, "json": out})
            self.wait_for_log(proc, "attached", timeout=10)
        return handles

    def stop_faults(self, handles: list) -> dict:
        """Detaches and sums the counters: {"fault_dropped": n, ...}."""
        if not handles:
            return {}
        tot = {"fault_dropped": 0, "fault_corrupted": 0, "fault_delayed": 0, "fault_candidates": 0}
        for h in handles:
            self.stop(h["proc"], signal.SIGTERM, grace=5)
            try:
                with open(h["json"]) as fh:
                    j = json.load(fh)
            except (OSError, ValueError):
                raise BenchError(f"sluice-fault failed:\n{self.lab.log_of(h['proc'])[-2000:]}")
            c = j["counters"]
            tot["fault_candidates"] += j["candidates"]
            tot["fault_dropped"] += c.get("DROP_FAULT", {}).get("packets", 0)
            tot["fault_corrupted"] += c.get("PASS_FAULT_CORRUPTED", {}).get("packets", 0)
            tot["fault_delayed"] += c.get("PASS_FAULT_DELAYED", {}).get("packets", 0)
        return tot

    # -- queue monitor ---------------------------------------------------------
    def start_qmon(self, ports: list, name: str = "qmon", interval_us: int = 1000) -> Optional[dict]:
        """Starts sluice-qmon on the given lab ports; returns a handle for
        stop_qmon(), or None when sluice-qmon is not built."""
        try:
            exe = self.tool("sluice-qmon")
        except BenchError:
            return None
        out = os.path.join(self.tmp, name + ".json")
        series = os.path.join(self.tmp, name + ".csv")
        argv = [exe, "--json", out, "--series", series, "--interval-us", str(interval_us)]
        for p in ports:
            argv += ["--port", p.spec()]
        proc = self.spawn(None, argv, name)
        self.wait_for_log(proc, "monitoring", timeout=10)
        return {"proc": proc, "json": out, "series": series}

    def stop_qmon(self, h: Optional[dict]) -> Optional[dict]:
        if not h:
            return None
        rc = self.stop(h["proc"], signal.SIGINT, grace=5)
        if rc != 0 or not os.path.exists(h["json"]):
            raise BenchError(f"sluice-qmon failed ({rc}):\n{self.lab.log_of(h['proc'])[-2000:]}")
        base = os.path.basename(h["json"])[:-5]
        self.save_artifacts(base + ".json", base + ".csv", base + ".log")
        with open(h["json"]) as f:
            return json.load(f)


class Measurement:
    """One measured point of a variant, as a context manager:

        with Measurement(ctx, topo, v, tag) as m:
            m.start(server_hosts, qmon_ports)   # servers, faults, queue monitor
            ctx.run_tool(...)                   # the traffic
            m.finish()                          # m.qmon, m.q0/m.q1, m.faults, m.extra

    setup() of the variant runs on entry. finish() stops the queue monitor,
    reads the bottleneck counters again, runs the stops registered with
    stop_on_finish() (results in m.results), stops the faults and collects
    the variant's metrics. On exit the servers stop and the variant is torn
    down; whatever finish() did not reach (an error) is stopped best effort.
    """

    def __init__(self, ctx: "Context", topo: sluicelab.Topology, v: Variant, tag: str):
        self.ctx, self.topo, self.v, self.tag = ctx, topo, v, tag
        self.qmon: Optional[dict] = None
        self.q0: dict = {}
        self.q1: dict = {}
        self.faults: dict = {}
        self.extra: dict = {}
        self.results: dict = {}
        self._servers: list = []
        self._qm = None
        self._fault_handles: list = []
        self._stops: list = []

    def __enter__(self) -> "Measurement":
        try:
            self.v.setup(self.ctx, self.topo)
        except BaseException:
            self.v.teardown(self.ctx, self.topo)
            raise
        return self

    def stop_on_finish(self, name: str, fn):
        self._stops.append((name, fn))

    def start(self, server_hosts: list, qmon_ports: list, qmon_name: Optional[str] = None):
        self._servers = self.ctx.start_servers(server_hosts, self.v.cc)
        self._fault_handles = self.ctx.start_faults(self.topo, self.tag)
        self.q0 = self.topo.qdisc_stats(self.topo.bottleneck)
        self._qm = self.ctx.start_qmon(qmon_ports, name=qmon_name or f"qmon-{self.tag}")

    def finish(self):
        qm, self._qm = self._qm, None
        self.qmon = self.ctx.stop_qmon(qm)
        self.q1 = self.topo.qdisc_stats(self.topo.bottleneck)
        stops, self._stops = self._stops, []
        for name, fn in stops:
            self.results[name] = fn()
        handles, self._fault_handles = self._fault_handles, []
        self.faults = self.ctx.stop_faults(handles)
        self.extra = self.v.metrics(self.ctx, self.topo) or {}

    def bottleneck_delta(self, key: str) -> int:
        """How much a bottleneck qdisc counter (drops, bytes, ...) grew."""
        return self.q1.get(key, 0) - self.q0.get(key, 0)

    def __exit__(self, *exc):
        best_effort = []
        if self._qm:
            best_effort.append(lambda qm=self._qm: self.ctx.stop_qmon(qm))
        best_effort += [fn for _, fn in self._stops]
        if self._fault_handles:
            best_effort.append(lambda h=self._fault_handles: self.ctx.stop_faults(h))
        for fn in best_effort:
            try:
                fn()
            except Exception:
                pass
        try:
            self.ctx.stop_all(self._servers)
        finally:
            self.v.teardown(self.ctx, self.topo)
        return False


FAULT_KEYS = {"drop", "corrupt", "delay", "delay-class", "seed", "port", "hook", "proto", "data-only"}


def parse_fault(spec: str) -> dict:
    """--fault drop=0.01,seed=7[,corrupt=P][,delay=P,delay-class=1:20]
    [,port=bottleneck|CLASS][,hook=egress|ingress][,proto=tcp|udp|any][,data-only=1]"""
    out = {"port": "bottleneck", "hook": "egress"}
    for item in spec.split(","):
        if not item.strip():
            continue
        k, sep, v = item.partition("=")
        k = k.strip()
        if not sep or k not in FAULT_KEYS:
            raise BenchError(f"--fault: bad item '{item}' (keys: {', '.join(sorted(FAULT_KEYS))})")
        out[k] = v.strip()
    for k in ("drop", "corrupt", "delay"):
        if k in out:
            try:
                f = float(out[k])
            except ValueError:
                raise BenchError(f"--fault: {k}={out[k]} is not a number")
            if not 0 <= f <= 1:
                raise BenchError(f"--fault: {k} must be a fraction in [0, 1]")
    return out


def load_plugins():
    """Imports every module in sluicebench/experiments and sluicebench/variants
    (each registers itself)."""
    import importlib
    import pkgutil
    from . import experiments as E, variants as V
    for pkg in (E, V):
        for m in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
            importlib.import_module(f"{pkg.__name__}.{m.name}")
