"""Statistics of repeated runs: the sample count behind every percentile,
median and min-max over repeats, pooled percentiles with a bootstrap 95%
interval, ratios between variants per repeat, and flags on figures a reader
must not trust silently (docs/lab.md "Reading a result").

Pure functions of plain rows (dicts); core.sweep() and core.finalize() call
them, experiments normally do not. No numpy: Debian's python3 runs bench/run
and the bootstrap below needs none.
"""

from __future__ import annotations

import math
import random
import re
import statistics
import zlib

# A percentile figure: <base>_p<q>[_<unit>], e.g. short_fct_p99_us,
# round_ms_p50, slowdown_p99. Its sample count is <base>_n.
PCT_KEY = re.compile(r"^(?P<base>.+?)_p(?P<q>\d+)(?:_(?P<unit>[a-z]+))?$")

# Rows carry their raw samples under this key until finalize() strips it.
SAMPLES = "_samples"
BOOT = "_boot"

# Bootstrap draws per pooled percentile (exact draws, see boot_quantiles).
BOOT_DRAWS = 4000
BOOT_SEED = 20261125


def pct_key(key: str):
    """(base, q) of a percentile figure's key, else None. p999 is 99.9."""
    m = PCT_KEY.match(key)
    if not m:
        return None
    d = m.group("q")
    q = float(d) if len(d) <= 2 else float(d[:2] + "." + d[2:])
    if not 0 < q < 100:
        return None
    return m.group("base"), q


def count_key(key: str):
    """The key of the sample count behind a percentile figure (None if the
    key is not one): short_fct_p99_us -> short_fct_n."""
    p = pct_key(key)
    return p[0] + "_n" if p else None


def min_samples(q: float) -> int:
    """Samples a q-th percentile needs to rest on at least 10 values beyond
    it: p99 -> 1000, p90 -> 100, p50 -> 20, p99.9 -> 10000. With fewer, one
    or two unlucky events decide the figure."""
    return int(math.ceil(round(10 / (1 - q / 100), 6)))


def quantile(sorted_values: list, q: float):
    """Nearest-rank q-th percentile (q in 0..100) of an ascending list,
    the definition sluice-tg uses."""
    n = len(sorted_values)
    if n == 0:
        return None
    k = max(1, math.ceil(q / 100 * n))
    return sorted_values[min(k, n) - 1]


def data_seed(sorted_values: list, q: float) -> int:
    """A seed that is the same for the same samples (results reproduce) and
    different for different ones: two variants' draws must be independent,
    or the interval of their ratio comes out far too narrow."""
    return zlib.crc32(repr((len(sorted_values), q, sorted_values[::max(1, len(sorted_values) // 64)])).encode()) ^ BOOT_SEED


def boot_quantiles(sorted_values: list, q: float, draws: int = BOOT_DRAWS, seed=None) -> list:
    """`draws` bootstrap replicates of the nearest-rank q-th percentile.

    Resampling n values with replacement picks indices ceil(n * U_i) for n
    uniform U_i; the k-th smallest resampled value (k = ceil(q n / 100)) is
    the value at index ceil(n * U_(k)), and the k-th order statistic of n
    uniforms is Beta(k, n - k + 1) distributed. So one Beta draw gives one
    replicate exactly, without resampling n values (Efron & Tibshirani, An
    Introduction to the Bootstrap, ch. 13, percentile intervals)."""
    n = len(sorted_values)
    if n == 0:
        return []
    k = min(n, max(1, math.ceil(q / 100 * n)))
    rng = random.Random(data_seed(sorted_values, q) if seed is None else seed)
    out = []
    for _ in range(draws):
        u = rng.betavariate(k, n - k + 1)
        out.append(sorted_values[min(n, max(1, math.ceil(n * u))) - 1])
    return out


def boot_pooled(runs: list, q: float, draws: int = BOOT_DRAWS) -> list:
    """Bootstrap replicates of the q-th percentile of several runs' samples
    pooled, resampling in two stages: the runs (N of the N, with
    replacement), then the samples of the runs drawn (boot_quantiles' Beta
    draw on their pooled values). Resampling only the samples would treat
    the runs as one big sample and miss what moves a whole run (a burst of
    timeouts, the machine's load): two back-to-back runs of 3 repeats each
    then had disjoint intervals. Two-stage resampling of clustered data:
    Davison & Hinkley, Bootstrap Methods and their Application, §3.8.

    The runs are picked by a generator seeded only by the number of runs,
    so the i-th replicate of every variant uses the same repeats: ratios of
    replicates stay paired by repeat (same workload seed, same moment)."""
    runs = [r for r in runs]
    n_runs = len(runs)
    if n_runs == 1:
        return boot_quantiles(runs[0], q, draws)
    pick = random.Random(BOOT_SEED + n_runs)
    pooled_all = sorted(x for r in runs for x in r)
    beta = random.Random(data_seed(pooled_all, q))
    cache: dict = {}
    out = []
    for _ in range(draws):
        key = tuple(sorted(pick.randrange(n_runs) for _ in range(n_runs)))
        s = cache.get(key)
        if s is None:
            if len(cache) > 256:
                cache.clear()
            s = cache[key] = sorted(x for i in key for x in runs[i])
        n = len(s)
        if n == 0:
            continue
        k = min(n, max(1, math.ceil(q / 100 * n)))
        u = beta.betavariate(k, n - k + 1)
        out.append(s[min(n, max(1, math.ceil(n * u))) - 1])
    return out


def interval(draws: list, level: float = 0.95):
    """Percentile interval of bootstrap draws."""
    if not draws:
        return None
    s = sorted(draws)
    lo = (1 - level) / 2 * 100
    return [quantile(s, lo), quantile(s, 100 - lo)]


def is_figure(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def tidy(x):
    """Integral medians stay integers; floats get 4 decimals."""
    if isinstance(x, float):
        if x.is_integer() and abs(x) < 1e15:
            return int(x)
        return round(x, 4)
    return x


def merge_runs(runs: list) -> dict:
    """One row from the rows of N repeats of the same point and variant.

    Every numeric figure becomes the median over the runs, with
    spread[key] = [min, max]. A percentile figure whose runs carry their
    samples (core.percentiles) becomes the percentile of all runs' samples
    pooled, with ci95[key] (two-stage bootstrap, boot_pooled) and its count
    key the pooled count;
    spread[key] is still the min-max of the per-run percentiles. Other
    fields come from the first run; every run's row is kept in `runs`."""
    clean = [{k: v for k, v in r.items() if k not in (SAMPLES, BOOT)} for r in runs]
    row = dict(clean[0])
    spread, ci = {}, {}
    for key, v0 in clean[0].items():
        vals = [r.get(key) for r in clean]
        if not all(is_figure(v) for v in vals):
            continue
        row[key] = tidy(statistics.median(vals))
        spread[key] = [tidy(min(vals)), tidy(max(vals))]
    pooled = {}
    boot = {}
    if all(SAMPLES in r for r in runs):
        bases = set(runs[0][SAMPLES])
        for r in runs[1:]:
            bases &= set(r[SAMPLES])
        for base in bases:
            pooled[base] = sorted(x for r in runs for x in r[SAMPLES][base])
        per_run = {base: [r[SAMPLES][base] for r in runs] for base in bases}
        for key in list(row):
            p = pct_key(key)
            if not p or p[0] not in pooled or not pooled[p[0]]:
                continue
            s = pooled[p[0]]
            digits = _digits(clean[0].get(key))
            row[key] = _round(quantile(s, p[1]), digits)
            row[p[0] + "_n"] = len(s)
            draws = boot_pooled(per_run[p[0]], p[1])
            ci[key] = [_round(x, digits) for x in interval(draws)]
            boot[key] = draws
    row["spread"] = spread
    if ci:
        row["ci95"] = ci
    row["runs"] = clean
    if boot:
        row[BOOT] = boot
    return row


def _digits(v):
    if isinstance(v, float):
        s = repr(v)
        return len(s.split(".")[1]) if "." in s and "e" not in s else 3
    return 0 if isinstance(v, int) else 3


def _round(x, digits):
    return round(x, digits) if digits else (int(x) if float(x).is_integer() else x)


def check_counts(row: dict) -> list:
    """Keys of percentile figures without their sample count (an error:
    every percentile carries its n)."""
    return [k for k, v in row.items()
            if is_figure(v) and pct_key(k) and not is_figure(row.get(count_key(k)))]


def flags(row: dict, rate_mbit=None) -> dict:
    """{key: why} for the figures of a row a reader must not take at face
    value: a percentile from fewer than min_samples(q) samples, a throughput
    (<...>_mbps) above the link rate."""
    out = {}
    for k, v in row.items():
        if not is_figure(v):
            continue
        p = pct_key(k)
        if p:
            n = row.get(p[0] + "_n")
            need = min_samples(p[1])
            if is_figure(n) and n < need and p[1] >= 90:
                out[k] = f"p{p[1]:g} from {n} samples (< {need})"
        if rate_mbit and k.endswith("_mbps") and v > rate_mbit * (1 + 1e-9):
            out[k] = f"{v:g} Mbit/s is above the {rate_mbit:g} Mbit/s link rate"
    return out


def ratio_stats(runs_v: list, runs_b: list, key: str, boot_v=None, boot_b=None) -> dict:
    """Ratio v/b of one figure: per repeat (runs paired by index), their
    median and min-max, and for pooled percentiles the pooled ratio with a
    bootstrap 95% interval (the two samples resampled independently)."""
    per = []
    for rv, rb in zip(runs_v, runs_b):
        a, b = rv.get(key), rb.get(key)
        per.append(round(a / b, 4) if is_figure(a) and is_figure(b) and b else None)
    ok = [x for x in per if x is not None]
    out = {"runs": per}
    if ok:
        out.update(median=tidy(statistics.median(ok)), min=min(ok), max=max(ok))
    if boot_v and boot_b:
        rs = [a / b for a, b in zip(boot_v, boot_b) if b]
        if rs:
            out["pooled_ci95"] = [round(x, 4) for x in interval(rs)]
    return out


def minmax_coverage(n: int) -> float:
    """Probability that the min-max of n independent values holds their
    median: 1 - 2 / 2^n (3: 75%, 5: 94%, 7: 98%), whatever their
    distribution (the sign test's interval)."""
    return 1 - 2 * 0.5 ** n if n > 1 else 0.0


def agreement(a, band_a, b, band_b) -> str:
    """How two measurements of one figure agree: 'within' (each inside the
    other's spread), 'overlap' (their spreads overlap), else 'DISAGREE'."""
    if not band_a or not band_b:
        return ""
    if band_b[0] <= a <= band_b[1] and band_a[0] <= b <= band_a[1]:
        return "within"
    if band_a[0] <= band_b[1] and band_b[0] <= band_a[1]:
        return "overlap"
    return "DISAGREE"


def fmt_spread(row: dict, key: str, spec: str = ".0f") -> str:
    """'value [min-max]' or, for a pooled percentile, 'value (CI lo-hi) n=N';
    '!' after a flagged figure."""
    v = row.get(key)
    if not is_figure(v):
        return "-"
    s = format(v, spec)
    ci = row.get("ci95", {}).get(key)
    sp = row.get("spread", {}).get(key)
    if ci:
        s += f" ({format(ci[0], spec)}-{format(ci[1], spec)})"
    elif sp and len(row.get("runs", [])) > 1:
        s += f" [{format(sp[0], spec)}-{format(sp[1], spec)}]"
    ck = count_key(key)
    if ck and is_figure(row.get(ck)):
        s += f" n={row[ck]}"
    if key in row.get("flags", {}):
        s += " !"
    return s
