"""bench/run command line."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

import sluicelab

from . import core, stats


def _on_sigterm(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _write_json(path: str, data: dict):
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def show(exps: dict, files: list) -> int:
    """Prints stored results with their spread; with two files of one
    experiment, the first key figure row by row (second / first)."""
    results = []
    for f in files:
        with open(f) as fh:
            results.append(json.load(fh))
    for f, r in zip(files, results):
        cls = exps.get(r.get("experiment"))
        if not cls:
            print(f"{f}: unknown experiment {r.get('experiment')!r}", file=sys.stderr)
            return 1
        exp = cls(argparse.Namespace())
        print(f"== {f}")
        print(exp.table(r))
        s = core.summary(r, exp)
        if s:
            print(s)
        print()
    if len(results) == 2 and results[0]["experiment"] == results[1]["experiment"]:
        exp = exps[results[0]["experiment"]](argparse.Namespace())
        if exp.key_figures:
            metric = exp.key_figures[0]
            print(f"{metric}: second / first (each with its spread)")
            worst = 0.0
            for v, rows in results[0]["variants"].items():
                other = {core._label(exp, o, j): o for j, o in enumerate(results[1]["variants"].get(v, []))}
                for i, r in enumerate(rows):
                    lab = core._label(exp, r, i)
                    o = other.get(lab)
                    if o and r.get(metric) and o.get(metric) is not None:
                        ratio = o[metric] / r[metric]
                        worst = max(worst, abs(ratio - 1))
                        print(f"  {v:12s} {lab:14} {stats.fmt_spread(r, metric):>34} "
                              f"{stats.fmt_spread(o, metric):>34}  {ratio:6.2f}  "
                              f"{stats.agreement(r[metric], _band(r, metric), o[metric], _band(o, metric))}")
            print(f"largest difference: {100 * worst:.0f}%")
            ra, rb = results[0].get("ratios"), results[1].get("ratios")
            if ra and rb and ra.get("to") == rb.get("to"):
                print(f"ratios to {ra['to']} (per repeat, median [min-max]): first, second")
                for v, per in ra["variants"].items():
                    other = rb["variants"].get(v, [])
                    for i, d in enumerate(per):
                        if i >= len(other):
                            continue
                        e = other[i]
                        for k, s in d.items():
                            t = e.get(k)
                            if not t or "median" not in s or "median" not in t:
                                continue
                            print(f"  {v}/{ra['to']} #{i} {k:24} x{s['median']:.2f} [{s['min']:.2f}-{s['max']:.2f}]"
                                  f"  x{t['median']:.2f} [{t['min']:.2f}-{t['max']:.2f}]  "
                                  f"{stats.agreement(s['median'], [s['min'], s['max']], t['median'], [t['min'], t['max']])}")
    return 0


def _band(row: dict, key: str):
    """A figure's reported spread: its interval (percentiles) or min-max."""
    return row.get("ci95", {}).get(key) or row.get("spread", {}).get(key)


def main(argv=None) -> int:
    core.load_plugins()
    exps, vars_ = core.experiments(), core.variants()
    ap = argparse.ArgumentParser(
        prog="bench/run",
        description="Run a sluice experiment: build the topology, run every variant in the same "
                    "invocation, write JSON and a PNG plot, print a table.")
    sub = ap.add_subparsers(dest="experiment", metavar="EXPERIMENT")
    sub.add_parser("list", help="list experiments and variants")
    sh = sub.add_parser("show", help="print the table of a result JSON; with two, compare them row by row")
    sh.add_argument("files", nargs="+", metavar="JSON")
    for name, cls in sorted(exps.items()):
        p = sub.add_parser(name, help=cls.help, description=cls.help,
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        p.add_argument("--variants", default=cls.default_variants,
                       help="comma-separated variants to compare (bench/run list)")
        p.add_argument("--json", required=True, metavar="OUT", help="result JSON path")
        p.add_argument("--png", metavar="PNG", help="plot path (default: OUT with .png)")
        p.add_argument("--no-plot", action="store_true", help="skip the PNG")
        p.add_argument("--no-build", action="store_true", help="do not build missing tools first")
        p.add_argument("--keep", action="store_true", help="leave the namespaces for inspection")
        p.add_argument("--lab-tag", default="l", metavar="TAG",
                       help="1-2 lowercase letters: namespaces and interfaces are named sl<TAG><run id>-*")
        p.add_argument("--fault", metavar="SPEC",
                       help="inject faults with sluice-fault during every point, e.g. "
                            "drop=0.001,seed=7 (keys: drop, corrupt, delay, delay-class, seed, proto, "
                            "data-only, port=bottleneck|CLASS, hook=egress|ingress)")
        p.add_argument("--artifacts", metavar="DIR",
                       help="keep every point's raw outputs here: sluice-tg JSON and per-flow CSV, "
                            "sluice-qmon JSON and queue time series, tool logs")
        p.add_argument("--sched", choices=("normal", "fifo"), default=cls.default_sched,
                       help="scheduling class of the traffic generator: fifo = SCHED_FIFO (servers 10, "
                            "client 11), so other load on the shared machine does not desynchronize the "
                            "senders (docs/lab.md)")
        p.add_argument("--repeat", type=int, default=cls.default_repeat, metavar="N",
                       help="measure every point N times, variants interleaved in each repeat; the JSON keeps "
                            "every run, rows give the median with min-max and percentiles pooled over the runs "
                            "with a bootstrap 95%% interval (docs/lab.md)")
        p.add_argument("--ratio-to", metavar="VARIANT", default=cls.ratio_to,
                       help="ratios between variants are the others / this one (None, or a variant not "
                            "run: the first of --variants)")
        p.add_argument("-v", "--verbose", action="store_true")
        cls.add_args(p)
        for vcls in vars_.values():
            vcls.add_args(p)
    args = ap.parse_args(argv)
    if args.experiment == "show":
        return show(exps, args.files)
    if args.experiment in (None, "list"):
        print("experiments:")
        for n, c in sorted(exps.items()):
            print(f"  {n:12s} {c.help}")
        print("variants:")
        for n, c in sorted(vars_.items()):
            print(f"  {n:12s} {c.help}")
        return 0 if args.experiment == "list" else 2

    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in names if v not in vars_]
    if unknown or not names:
        print(f"bench/run: unknown variant(s) {', '.join(unknown) or '(none given)'}; "
              f"known: {', '.join(sorted(vars_))}", file=sys.stderr)
        return 2
    if len(set(names)) != len(names):
        print("bench/run: a variant is listed twice", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("bench/run: run as root (network namespaces, qdiscs, BPF)", file=sys.stderr)
        return 1

    if args.repeat < 1:
        print("bench/run: --repeat must be >= 1", file=sys.stderr)
        return 2
    if args.ratio_to and args.ratio_to not in names and args.ratio_to != exps[args.experiment].ratio_to:
        print(f"bench/run: --ratio-to {args.ratio_to} is not one of --variants", file=sys.stderr)
        return 2
    if getattr(args, "fault", None):
        try:
            core.parse_fault(args.fault)
        except core.BenchError as e:
            print(f"bench/run: {e}", file=sys.stderr)
            return 2
    exp = exps[args.experiment](args)
    variants = [vars_[n](args) for n in names]
    signal.signal(signal.SIGTERM, _on_sigterm)
    # Explicitly: a runner started from a script in the background inherits
    # SIGINT ignored, and Ctrl-C must still tear the lab down.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    t0 = time.monotonic()
    try:
        if not args.no_build:
            targets = list(getattr(exp, "build_targets", core.DEFAULT_TARGETS))
            for v in variants:
                targets += [t for t in getattr(v, "build_targets", []) if t not in targets]
            core.ensure_built(targets,
                              lambda m: print(f"[bench] {m}", file=sys.stderr))
        with sluicelab.Lab(tag=args.lab_tag, keep=args.keep, verbose=args.verbose) as lab:
            ctx = core.Context(args, lab)
            ctx.log(f"lab prefix {lab.prefix}, variants {', '.join(names)}")
            result = exp.run(ctx, variants)
    except KeyboardInterrupt:
        print("\nbench/run: interrupted; lab torn down", file=sys.stderr)
        return 130
    except (core.BenchError, sluicelab.LabError) as e:
        print(f"bench/run: {e}", file=sys.stderr)
        return 1
    result.setdefault("elapsed_s", round(time.monotonic() - t0, 1))
    core.finalize(result, exp, args)
    _write_json(args.json, result)
    print(exp.table(result))
    s = core.summary(result, exp)
    if s:
        print(s)
    print(f"\nJSON: {args.json}")
    if not args.no_plot:
        png = args.png or os.path.splitext(args.json)[0] + ".png"
        try:
            exp.plot(result, png)
            print(f"plot: {png}")
        except ImportError as e:
            print(f"bench/run: no plot ({e}); install python3-matplotlib", file=sys.stderr)
    return 0
