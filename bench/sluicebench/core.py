"""Experiment runner core: registries of experiments and variants, the run
context handed to both, tool lookup, and the process/queue-monitor helpers
experiments share.

A *variant* is what is being compared (baseline kernel TCP, PAC, DCTCP, ...):
a class registered with @variant that prepares hosts and switch ports before
traffic and undoes it after. An *experiment* builds a topology, runs every
requested variant on it in the same invocation and returns the result JSON
{"experiment": ..., "params": {...}, "variants": {name: [row, ...]}}.
See docs/lab.md "Adding a variant" / "Adding an experiment".
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

from . import stats

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


def fill_unset(args: argparse.Namespace, values: dict) -> list:
    """Sets each option in `values` that args leaves at None (or lacks) to
    its value there, in place, and returns the names it set: a --profile's
    table filling the options not given explicitly (an explicit value,
    0 included, wins)."""
    filled = []
    for k, v in values.items():
        if getattr(args, k, None) is None:
            setattr(args, k, v)
            filled.append(k)
    return filled


class Experiment:
    """Subclass, set `name`/`help`, implement add_args/run/table/plot,
    decorate with @experiment, put the file in sluicebench/experiments/.
    Measure through sweep() to get --repeat, spread and ratios (docs/lab.md
    "How to add an experiment")."""
    name = ""
    help = ""
    default_variants = "baseline"
    # --repeat's default: times every point is measured (3: the least that
    # gives a spread; experiments whose single runs are noisier ask more).
    default_repeat = 3
    # Row fields that say which point a row is (e.g. ("load",)); the spread
    # summary and `bench/run show A B` label rows with them.
    point_keys: tuple = ()
    # The figures the spread summary prints and the ratios between variants
    # cover; the first is the one `bench/run show A B` compares.
    key_figures: tuple = ()
    # Ratios are other variants / this one (None: the first of --variants).
    ratio_to: Optional[str] = None
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
    def errorbar(ax, xs, rows, key, scale=1.0, **kw):
        """Plots rows[i][key] / scale at xs with error bars: the pooled
        bootstrap 95% interval of a percentile, else the min-max over the
        repeats (none for a single run)."""
        ys, lo, hi = [], [], []
        for r in rows:
            v = r.get(key)
            v = float("nan") if not stats.is_figure(v) else v / scale
            band = r.get("ci95", {}).get(key) or (r.get("spread", {}).get(key) if len(r.get("runs", [])) > 1 else None)
            ys.append(v)
            lo.append(max(0.0, v - band[0] / scale) if band else 0.0)
            hi.append(max(0.0, band[1] / scale - v) if band else 0.0)
        return ax.errorbar(xs, ys, yerr=[lo, hi], capsize=3, **kw)

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
    for rel in (f"bench/lab/tg/{name}", f"bench/lab/qmon/{name}", f"bench/lab/fault/{name}", f"bench/lab/wire/{name}",
                f"agent/{name}", name):
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
        """Waits for `text` in p's log. A process still running at `timeout`
        is slow, not failed (e.g. loading its BPF object while hundreds of
        senders keep both CPUs busy): it gets up to 6x longer, and says so."""
        t0 = time.monotonic()
        end, late = t0 + timeout, t0 + 6 * timeout
        while time.monotonic() < late:
            if text in self.lab.log_of(p):
                if time.monotonic() > end:
                    print(f"  note: {p.name} reported '{text}' after {time.monotonic() - t0:.1f} s", file=sys.stderr)
                return
            if p.poll() is not None:
                break
            time.sleep(0.02)
        raise BenchError(f"{p.name} did not report '{text}':\n{self.lab.log_of(p)[-2000:]}")

    # -- traffic generator ----------------------------------------------------
    def tg(self, server: bool = False) -> list:
        """argv prefix that runs sluice-tg: with --sched fifo under SCHED_FIFO
        (docs/lab.md "Measuring on a shared 2-core machine"), the client
        (the receiving application) one level above the servers so busy
        senders cannot starve it."""
        fifo = getattr(self.args, "sched", "normal") == "fifo"
        return self.fifo_prefix(10 if server else 11, fifo) + [self.tool("sluice-tg")]

    def fifo_prefix(self, prio: int, want: bool = True) -> list:
        """argv prefix that runs a lab tool under SCHED_FIFO `prio` when
        `want` and the kernel allows it (else nothing: normal scheduling,
        said once in the log)."""
        if not want or not self._fifo_ok():
            return []
        return ["chrt", "-f", str(prio)]

    def _fifo_ok(self) -> bool:
        if not hasattr(self, "_fifo"):
            r = subprocess.run(["chrt", "-f", "10", "true"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
            self._fifo = r.returncode == 0
            if not self._fifo:
                self.log(f"SCHED_FIFO not allowed here ({r.stderr.strip()}): lab tools run "
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


# ---------------------------------------------------------------------------
# The hosts' own TCP counters (per namespace, /proc/net/snmp and netstat):
# what the kernel TCP of the endpoints did during a point, so a slow FCT can
# be told apart as queueing (no retransmission), loss, timeouts or
# reordering.

HOST_TCP_COUNTERS = {
    "host_retrans_segs": "Tcp.RetransSegs",
    "host_tcp_timeouts": "TcpExt.TCPTimeouts",
    "host_syn_retrans": "TcpExt.TCPSynRetrans",
    "host_loss_probes": "TcpExt.TCPLossProbes",
    "host_spurious_rtos": "TcpExt.TCPSpuriousRTOs",
    "host_fast_retrans": "TcpExt.TCPFastRetrans",
    "host_sack_reorder": "TcpExt.TCPSACKReorder",
    "host_ts_reorder": "TcpExt.TCPTSReorder",
    "host_ofo_queue": "TcpExt.TCPOFOQueue",
    "host_dsack_recv": "TcpExt.TCPDSACKRecv",
    "host_in_csum_errors": "Tcp.InCsumErrors",
}


def host_tcp_snapshot(hosts: list) -> dict:
    """The MIB counters of every host's namespace (before a point)."""
    return {h.ns: sluicelab.netns_counters(h.ns) for h in hosts}


def host_tcp_delta(before: dict, hosts: list) -> dict:
    """Row fields (HOST_TCP_COUNTERS) summed over `hosts`: how much each
    counter grew since host_tcp_snapshot() returned `before`."""
    row = {k: 0 for k in HOST_TCP_COUNTERS}
    for h in hosts:
        d = sluicelab.counters_delta(before.get(h.ns, {}), sluicelab.netns_counters(h.ns))
        for k, mib in HOST_TCP_COUNTERS.items():
            row[k] += d.get(mib, 0)
    return row


# ---------------------------------------------------------------------------
# Repeats, sample counts, spread (docs/lab.md "Reading a result")

def percentiles(values: list, base: str, qs=(50, 99), unit: str = "", digits: int = 1) -> dict:
    """Row fields for percentiles of `values`: <base>_p<q>[_<unit>] for each
    q, <base>_n (the sample count) and the samples themselves, which sweep()
    pools over repeats and finalize() drops before the JSON is written.
    percentiles(fcts, "short_fct", unit="us") -> short_fct_p50_us,
    short_fct_p99_us, short_fct_n."""
    s = sorted(values)
    out = {}
    for q in qs:
        d = f"{q:g}".replace(".", "")
        v = stats.quantile(s, q)
        out[f"{base}_p{d}" + (f"_{unit}" if unit else "")] = None if v is None else round(v, digits)
    out[f"{base}_n"] = len(s)
    out[stats.SAMPLES] = {base: s}
    return out


def add_percentiles(row: dict, values: list, base: str, qs=(50, 99), unit: str = "", digits: int = 1) -> dict:
    """percentiles() merged into an existing row (several sample sets may
    share a row)."""
    p = percentiles(values, base, qs, unit, digits)
    samples = p.pop(stats.SAMPLES)
    row.update(p)
    row.setdefault(stats.SAMPLES, {}).update(samples)
    return row


def sweep(ctx: "Context", points: list, names: list, measure) -> dict:
    """The measurement loop every experiment uses: for each point, --repeat
    times, each name in turn (variants interleaved inside every repeat, so a
    noisy moment of the shared machine hits all of them), calls
    measure(point, name, rep) -> row (or a list of rows, e.g. one per size
    bucket). Returns {name: [row, ...]}, one row per point (and sub-row),
    each the merge of its repeats (stats.merge_runs): medians with
    spread {key: [min, max]}, percentiles pooled over the repeats with ci95
    and their pooled sample count, and every repeat's row in `runs`."""
    n = max(1, int(getattr(ctx.args, "repeat", 1) or 1))
    rows = {name: [] for name in names}
    for point in points:
        runs = {name: [] for name in names}
        for rep in range(n):
            ctx.rep = rep
            for name in names:
                r = measure(point, name, rep)
                runs[name].append(r if isinstance(r, list) else [r])
        for name in names:
            per = runs[name]
            for j in range(len(per[0])):
                row = stats.merge_runs([per[k][j] for k in range(n)])
                for k, r in enumerate(row["runs"]):
                    r["repeat"] = k
                rows[name].append(row)
    return rows


def _label(exp: "Experiment", row: dict, i: int) -> str:
    keys = [k for k in exp.point_keys if k in row]
    return " ".join(f"{k}={row[k]}" for k in keys) if keys else f"#{i}"


def finalize(result: dict, exp: "Experiment", args: argparse.Namespace) -> dict:
    """After run(): flags (percentiles from too few samples, throughputs
    above the link rate, percentiles without their count), ratios between
    variants per repeat, the repeat count; drops the raw samples."""
    rate = result.get("params", {}).get("rate_mbit")
    vs = result.get("variants", {})
    result["repeat"] = max(1, int(getattr(args, "repeat", 1) or 1))
    for rows in vs.values():
        for row in rows:
            for r in [row] + row.get("runs", []):
                f = stats.flags(r, rate)
                for k in stats.check_counts(r):
                    f[k] = "percentile without its sample count"
                f.update(r.get("flags", {}))
                if f:
                    r["flags"] = f
    names = list(vs)
    base = getattr(args, "ratio_to", None) or exp.ratio_to or (names[0] if names else None)
    if base not in vs and names:
        base = names[0]
    figs = list(exp.key_figures)
    if base and len(names) > 1 and figs:
        rat = {}
        for v in names:
            if v == base:
                continue
            out = []
            for rv, rb in zip(vs[v], vs[base]):
                rv_runs, rb_runs = rv.get("runs", [rv]), rb.get("runs", [rb])
                bv, bb = rv.get(stats.BOOT, {}), rb.get(stats.BOOT, {})
                out.append({k: stats.ratio_stats(rv_runs, rb_runs, k, bv.get(k), bb.get(k))
                            for k in figs if k in rv})
            rat[v] = out
        result["ratios"] = {"to": base, "figures": figs, "variants": rat}
    for rows in vs.values():
        for row in rows:
            for r in [row] + row.get("runs", []):
                r.pop(stats.SAMPLES, None)
                r.pop(stats.BOOT, None)
    return result


def summary(result: dict, exp: "Experiment") -> str:
    """The spread block printed under every table (bench/run and show):
    key figures with their spread and sample counts, the ratios between
    variants per repeat, and every flag."""
    vs = result.get("variants", {})
    if "repeat" not in result:
        return "(recorded before repeats and sample counts were kept: no spread, no n)"
    n = result["repeat"]
    figs = [k for k in exp.key_figures]
    lines = []
    if figs and vs:
        lines.append(f"spread: {n} repeat(s) per point, variants interleaved; median [min-max] over the repeats; "
                     "percentiles pooled over the repeats (bootstrap 95% CI) with n samples; ! = flagged below")
        w = max(len(v) for v in vs)
        names = list(vs)
        for i in range(len(vs[names[0]])):
            for v in names:
                if i >= len(vs[v]):
                    continue
                row = vs[v][i]
                cells = [f"{k} {stats.fmt_spread(row, k, _spec(row.get(k)))}" for k in figs if k in row]
                lines.append(f"  {_label(exp, row, i):14} {v:{w}}  " + "; ".join(cells))
    rat = result.get("ratios")
    if rat and rat.get("variants"):
        cover = f" (a {100 * stats.minmax_coverage(n):.0f}% interval for their median)" if n > 1 else ""
        lines.append(f"ratios to {rat['to']}, paired by repeat: median [min-max] of the {n} per-repeat ratios{cover}; "
                     "pooled percentiles: CI = 95% interval of their ratio")
        base_rows = vs.get(rat["to"], [])
        for v, per in rat["variants"].items():
            for i, d in enumerate(per):
                cells = []
                for k, s in d.items():
                    if "median" not in s:
                        continue
                    c = f"{k} x{s['median']:.2f}"
                    if len(s["runs"]) > 1:
                        c += f" [{s['min']:.2f}-{s['max']:.2f}]"
                    if s.get("pooled_ci95"):
                        c += f" CI {s['pooled_ci95'][0]:.2f}-{s['pooled_ci95'][1]:.2f}"
                    cells.append(c)
                lab = _label(exp, base_rows[i], i) if i < len(base_rows) else f"#{i}"
                lines.append(f"  {lab:14} {v}/{rat['to']}: " + "; ".join(cells))
    fl = []
    for v, rows in vs.items():
        for i, row in enumerate(rows):
            for k, why in row.get("flags", {}).items():
                fl.append(f"  ! {_label(exp, row, i)} {v} {k}: {why}")
            runs = row.get("runs", [])
            nrun = sum(1 for r in runs if r.get("flags")) if len(runs) > 1 else 0
            if nrun:
                why = sorted({w.split(" from ")[0] if " from " in w else k
                              for r in runs for k, w in r.get("flags", {}).items()})
                fl.append(f"  ! {_label(exp, row, i)} {v}: {nrun} of {len(runs)} repeats flagged on their own "
                          f"({', '.join(why)}; runs[].flags)")
    if fl:
        lines.append("flags:")
        lines += fl
    return "\n".join(lines)


def _spec(v) -> str:
    if isinstance(v, float) and abs(v) < 100:
        return ".2f" if abs(v) >= 1 else ".3f"
    return ".0f"
