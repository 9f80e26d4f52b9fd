#!/usr/bin/python3
"""Plot a Pulser cwnd trace written by the integration test.

    SLUICE_PULSER_TRACE=trace.csv build/tests/integration/integration_pulser_test \
        --gtest_filter='*Brakes*'
    bench/pulser/plot_cwnd_trace.py trace.csv trace.png   # Debian python3 + python3-matplotlib

The CSV: a '# incast T0 - T1 s' line, then t_s,cwnd,ssthresh,ca_state,unacked
sampled from TCP_INFO every 50 us. Prints the cwnd changes around the incast
(brake to cwnd_safe, restore) and draws cwnd and data in flight over time."""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

SANE = 1_000_000  # see kSane in tests/integration/pulser_test.cc


def main():
    src, png = sys.argv[1], sys.argv[2]
    rows, t0, t1 = [], None, None
    with open(src) as f:
        for line in f:
            if line.startswith("# incast"):
                parts = line.split()
                t0, t1 = float(parts[2]), float(parts[4])
            elif line[0].isdigit():
                t, cwnd, ssth, state, unacked = line.strip().split(",")
                rows.append((float(t), int(cwnd), int(ssth), int(state), int(unacked)))
    lo, hi = t0 - 0.05, t1 + 0.15
    win = [r for r in rows if lo <= r[0] <= hi and r[1] < SANE]
    last = None
    print("t_ms_from_incast cwnd ssthresh ca_state unacked")
    for t, c, s, st, u in win:
        if c != last:
            print(f"{(t - t0) * 1000:8.2f} {c:5d} {s if s < 0x7fffffff else 'inf':>5} {st} {u:4d}")
            last = c
    fig, ax = plt.subplots(figsize=(9, 3.6))
    ax.step([(r[0] - t0) * 1000 for r in win], [r[1] for r in win], where="post", label="cwnd (segments)")
    ax.plot([(r[0] - t0) * 1000 for r in win], [r[4] for r in win], lw=0.6, alpha=0.6, label="unacked (in flight)")
    ax.axvspan(0, (t1 - t0) * 1000, color="orange", alpha=0.15, label="incast 16 x 20 KB")
    ax.axhline(4, color="red", lw=0.6, ls="--", label="cwnd_safe = 4")
    ax.set_xlabel("ms from the incast's start")
    ax.set_ylabel("segments")
    ax.set_title("sluice_pulser long flow: brake to cwnd_safe on EIN echo, restore after a window without echo")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
