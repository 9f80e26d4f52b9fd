#!/usr/bin/python3
"""Markdown tables for docs/top.md from a `bench/run top` result JSON:
medians over the repeats with [min, max], pooled p99 with its sample count,
and top's per-repeat ratios to tokens against the issue's goals.

    bench/top/doc_table.py bench/results/top/websearch.json
"""
import json
import sys


def cell(r, k, fmt, scale=1.0):
    v = r.get(k)
    if v is None:
        return "–"
    s = fmt.format(v / scale)
    sp = r.get("spread", {}).get(k)
    if sp and sp[0] is not None and sp[1] is not None and sp[0] != sp[1]:
        s += " [" + fmt.format(sp[0] / scale) + ", " + fmt.format(sp[1] / scale) + "]"
    return s


def main(path):
    r = json.load(open(path))
    p = r["params"]
    print(f"{p['workload']}" + (f" (sizes capped at {p['max_size']} B)" if p.get("max_size") else "") +
          f", {p['flows']} flows per run, {p['pairs']} pairs, {p['rate_mbit']:g} Mbit/s, "
          f"{r.get('repeat', '?')} repeats\n")
    print("| load | variant | FCT mean (ms) | FCT p99 (ms), n | short p99 (ms), n | slowdown mean | "
          "data lost (pkts) | tokens expired | max data queue (B) |")
    print("|---|---|---|---|---|---|---|---|---|")
    names = list(r["variants"])
    for i in range(len(r["variants"][names[0]])):
        for v in names:
            row = r["variants"][v][i]
            p99 = "–" if row.get("fct_p99_us") is None else f"{row['fct_p99_us'] / 1e3:.0f}, {row.get('fct_n')}"
            sp99 = "–" if row.get("short_fct_p99_us") is None else \
                f"{row['short_fct_p99_us'] / 1e3:.1f}, {row.get('short_fct_n')}"
            print(f"| {row['load']} | {v} | {cell(row, 'fct_mean_us', '{:.0f}', 1e3)} | {p99} | {sp99} | "
                  f"{cell(row, 'slowdown_mean', '{:.2f}')} | {cell(row, 'data_lost_packets', '{:.0f}')} | "
                  f"{cell(row, 'tokens_expired', '{:.0f}')} | {cell(row, 'max_data_queue_bytes', '{:.0f}')} |")
    rat = r.get("ratios", {})
    if rat.get("to") != "tokens":
        return
    for name, per_load in rat.get("variants", {}).items():
        print(f"\n{name} / tokens, per repeat (median [min, max]); goals: FCT mean <= 0.70, slowdown mean <= 0.40\n")
        print("| load | FCT mean | slowdown mean | short p99 | FCT p99 |")
        print("|---|---|---|---|---|")
        for i, d in enumerate(per_load):
            load = r["variants"][name][i]["load"]
            f = lambda k: (f"{d[k]['median']:.2f} [{d[k]['min']:.2f}, {d[k]['max']:.2f}]" if k in d else "–")
            print(f"| {load} | {f('fct_mean_us')} | {f('slowdown_mean')} | {f('short_fct_p99_us')} | "
                  f"{f('fct_p99_us')} |")

if __name__ == "__main__":
    main(sys.argv[1])
