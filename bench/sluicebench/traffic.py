"""sluice-tg command lines and outputs the experiments share: Poisson flows
(fct, top, floodgate) and incast rounds (incast, floodgate)."""

from __future__ import annotations

import csv


def flows_argv(ctx, servers: list, cdf: str, load: float, count: int, seed: int, link_mbps: float,
               records: str, out: str, timeout: float, cc: str = "", pool: int = 2, scale: float = 1.0,
               buckets: list = None, window_clamp: int = 0) -> list:
    """`sluice-tg flows`: `count` Poisson arrivals at `load` of `link_mbps`,
    sizes from `cdf`, each from a uniformly chosen server (Node) of
    `servers`; per-flow CSV to `records`, summary JSON to `out`."""
    argv = ctx.tg() + ["flows", "--to", ",".join(h.ip for h in servers), "--cdf", cdf, "--load", str(load),
                       "--count", str(count), "--seed", str(seed), "--link-mbps", f"{link_mbps:g}",
                       "--pool", str(pool), "--scale", str(scale), "--records", records, "--json", out,
                       "--timeout", str(timeout)]
    if buckets:
        argv += ["--buckets", ",".join(str(b) for b in buckets)]
    if cc:
        argv += ["--cc", cc]
    if window_clamp:
        argv += ["--window-clamp", str(window_clamp)]
    return argv


def read_records(path: str) -> list:
    """The per-flow CSV of `sluice-tg flows --records`: (size, fct_us,
    slowdown) per flow."""
    with open(path) as f:
        return [(int(r["size"]), float(r["fct_us"]), float(r["slowdown"])) for r in csv.DictReader(f)]


def incast_argv(ctx, servers: list, conns: int, rounds: int, link_mbps: float, out: str, timeout: float,
                bytes_per_conn: int = 0, total_bytes: int = 0, warmup: int = 0, gap_ms: float = 0,
                fresh: bool = False, cc: str = "", window_clamp: int = 0) -> list:
    """`sluice-tg incast`: `rounds` barrier-synchronized rounds, each asking
    `conns` connections over `servers` (Nodes) for their bytes at once;
    every flow of every round in `out` (--per-flow)."""
    argv = ctx.tg() + ["incast", "--to", ",".join(h.ip for h in servers), "--conns", str(conns),
                       "--rounds", str(rounds), "--warmup", str(warmup), "--gap-ms", str(gap_ms),
                       "--link-mbps", f"{link_mbps:g}", "--json", out, "--per-flow", "--timeout", str(timeout)]
    if fresh:
        argv += ["--fresh"]
    argv += ["--total-bytes", str(total_bytes)] if total_bytes else ["--bytes", str(bytes_per_conn)]
    if cc:
        argv += ["--cc", cc]
    if window_clamp:
        argv += ["--window-clamp", str(window_clamp)]
    return argv
