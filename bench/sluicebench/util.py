"""Small parsing and statistics helpers for experiments."""

from __future__ import annotations

import argparse
import re

_SIZE = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
         "g": 1 << 30, "gb": 1 << 30}
_RATE = {"": 1, "m": 1, "mbit": 1, "g": 1000, "gbit": 1000, "k": 0.001, "kbit": 0.001}


def size(text: str) -> int:
    """'131072', '128K', '1M' -> bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _SIZE:
        raise argparse.ArgumentTypeError(f"bad size '{text}' (e.g. 65536, 64K, 1M)")
    return int(float(m.group(1)) * _SIZE[m.group(2).lower()])


def rate(text: str) -> float:
    """'1000', '100M', '1G' -> Mbit/s."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _RATE:
        raise argparse.ArgumentTypeError(f"bad rate '{text}' (Mbit/s, e.g. 100, 100M, 1G)")
    v = float(m.group(1)) * _RATE[m.group(2).lower()]
    if v <= 0:
        raise argparse.ArgumentTypeError("rate must be > 0")
    return v


def tcp_sysctl(text: str) -> tuple:
    """'net.ipv4.tcp_recovery=0' -> (key, value): a per-namespace TCP knob of
    the lab's hosts (net.ipv4.tcp_*), an integer value."""
    m = re.fullmatch(r"\s*(net\.ipv4\.tcp_[a-z0-9_]+)\s*=\s*(-?\d+)\s*", str(text))
    if not m:
        raise argparse.ArgumentTypeError(f"bad sysctl '{text}' (net.ipv4.tcp_NAME=INTEGER, "
                                         "e.g. net.ipv4.tcp_recovery=0)")
    return m.group(1), int(m.group(2))


def int_list(text: str) -> list:
    try:
        return [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad list '{text}' (e.g. 1,8,32)")


def float_list(text: str) -> list:
    try:
        return [float(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad list '{text}'")


def median_row(runs: list, key: str) -> dict:
    """The run whose `key` is the median (lower median for even counts),
    with every run's value listed as <key>_runs when there are several."""
    if len(runs) == 1:
        return runs[0]
    order = sorted(runs, key=lambda r: r[key])
    row = dict(order[(len(order) - 1) // 2])
    row[key + "_runs"] = [r[key] for r in runs]
    return row


def percentile(values: list, q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return 0.0
    v = sorted(values)
    import math
    idx = max(1, math.ceil(q / 100 * len(v)))
    return v[min(idx, len(v)) - 1]
