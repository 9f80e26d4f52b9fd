"""bench/sluicebench statistics: sample counts, pooling over repeats,
bootstrap intervals, ratios and flags (docs/lab.md "Reading a result")."""

import argparse
import math
import os
import random
import sys
import unittest

TOP = os.environ.get("SLUICE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(TOP, "bench"))
sys.path.insert(0, os.path.join(TOP, "tc-scripts", "lab"))

from sluicebench import core, stats  # noqa: E402


class Percentiles(unittest.TestCase):
    def test_nearest_rank_and_count(self):
        vals = list(range(1, 1001))  # 1..1000
        row = core.percentiles(vals, "short_fct", unit="us")
        self.assertEqual(row["short_fct_p50_us"], 500)
        self.assertEqual(row["short_fct_p99_us"], 990)
        self.assertEqual(row["short_fct_n"], 1000)
        self.assertEqual(stats.count_key("short_fct_p99_us"), "short_fct_n")
        self.assertEqual(stats.count_key("round_ms_p50"), "round_ms_n")
        self.assertEqual(stats.count_key("goodput_mbps"), None)
        self.assertEqual(stats.pct_key("x_p999"), ("x", 99.9))

    def test_minmax_coverage(self):
        self.assertAlmostEqual(stats.minmax_coverage(3), 0.75)
        self.assertAlmostEqual(stats.minmax_coverage(5), 0.9375)

    def test_agreement(self):
        self.assertEqual(stats.agreement(10, [8, 12], 11, [9, 13]), "within")
        self.assertEqual(stats.agreement(10, [9, 11], 13, [10.5, 14]), "overlap")
        self.assertEqual(stats.agreement(10, [9, 11], 14, [12, 15]), "DISAGREE")

    def test_min_samples(self):
        self.assertEqual(stats.min_samples(99), 1000)
        self.assertEqual(stats.min_samples(50), 20)
        self.assertEqual(stats.min_samples(99.9), 10000)

    def test_bootstrap_matches_resampling(self):
        # The Beta shortcut must give the same distribution as resampling
        # n values with replacement and taking the nearest-rank p99.
        rng = random.Random(3)
        vals = sorted(rng.expovariate(1.0) for _ in range(400))
        fast = sorted(stats.boot_quantiles(vals, 99, draws=3000, seed=5))
        slow = []
        for _ in range(3000):
            s = sorted(rng.choice(vals) for _ in range(len(vals)))
            slow.append(stats.quantile(s, 99))
        # Both put their draws on the same order statistics: the largest
        # difference of their CDFs (Kolmogorov-Smirnov, 3000 draws each;
        # 0.05 is beyond the 99.9% critical value, 0.05).
        worst = 0.0
        for x in vals[-40:]:
            fa = sum(1 for y in fast if y <= x) / len(fast)
            fb = sum(1 for y in slow if y <= x) / len(slow)
            worst = max(worst, abs(fa - fb))
        self.assertLess(worst, 0.05)
        # And not a degenerate distribution: several order statistics.
        self.assertGreater(len(set(fast)), 3)

    def test_interval_covers_true_quantile(self):
        # 95% intervals of the exponential's p90 cover ln(10) in about 95%
        # of samples (fails if the interval is far too narrow or too wide).
        rng = random.Random(11)
        hits = 0
        for t in range(200):
            vals = sorted(rng.expovariate(1.0) for _ in range(300))
            lo, hi = stats.interval(stats.boot_quantiles(vals, 90, draws=800, seed=t))
            hits += lo <= math.log(10) <= hi
        self.assertGreater(hits, 176)
        self.assertLess(hits, 200)


class Merge(unittest.TestCase):
    def run_row(self, vals, tput):
        row = {"load": 0.6, "long_throughput_mbps": tput, "name": "x"}
        return core.add_percentiles(row, vals, "short_fct", unit="us")

    def test_medians_spread_pooling(self):
        runs = [self.run_row(list(range(1, 501)), 40.0),
                self.run_row(list(range(501, 1001)), 44.0),
                self.run_row(list(range(1001, 1501)), 30.0)]
        row = stats.merge_runs(runs)
        self.assertEqual(row["long_throughput_mbps"], 40)
        self.assertEqual(row["spread"]["long_throughput_mbps"], [30, 44])
        # Pooled: 1..1500, p99 = 1485; n = 1500.
        self.assertEqual(row["short_fct_p99_us"], 1485)
        self.assertEqual(row["short_fct_n"], 1500)
        lo, hi = row["ci95"]["short_fct_p99_us"]
        self.assertLessEqual(lo, 1485)
        self.assertGreaterEqual(hi, 1485)
        self.assertEqual(row["spread"]["short_fct_p99_us"], [495, 1495])
        self.assertEqual(len(row["runs"]), 3)
        self.assertNotIn(stats.SAMPLES, row["runs"][0])
        self.assertEqual(row["name"], "x")

    def test_flags(self):
        row = self.run_row(list(range(800)), 120.0)
        f = stats.flags(row, rate_mbit=100)
        self.assertIn("short_fct_p99_us", f)
        self.assertIn("long_throughput_mbps", f)
        self.assertNotIn("short_fct_p50_us", f)
        ok = self.run_row(list(range(1000)), 99.0)
        self.assertEqual(stats.flags(ok, rate_mbit=100), {})
        self.assertEqual(stats.check_counts({"x_p99_us": 3.0}), ["x_p99_us"])


class RatioInterval(unittest.TestCase):
    def test_independent_bootstraps(self):
        # Two samples, the second 1.2 x the first's distribution: the 95%
        # interval of the ratio of their p99s must contain 1.2 in most of
        # 40 trials (identical seeds for both made it a point, missing it).
        rng = random.Random(7)
        hits = 0
        for t in range(40):
            a = sorted(rng.expovariate(1.0) for _ in range(2000))
            b = sorted(1.2 * rng.expovariate(1.0) for _ in range(2000))
            ba, bb = stats.boot_quantiles(a, 99, draws=1000), stats.boot_quantiles(b, 99, draws=1000)
            lo, hi = stats.interval([y / x for x, y in zip(ba, bb)])
            hits += lo <= 1.2 <= hi
        self.assertGreaterEqual(hits, 34)


class Clustered(unittest.TestCase):
    def test_a_deviant_run_widens_the_interval(self):
        # Three runs, one with a tail three times the others': the pooled
        # p99's interval must reach from about the quiet runs' p99 to about
        # the deviant one's (resampling only the samples gave a narrow one).
        rng = random.Random(5)
        quiet = [sorted(rng.expovariate(1.0) for _ in range(1100)) for _ in range(2)]
        loud = sorted(3 * rng.expovariate(1.0) for _ in range(1100))
        lo, hi = stats.interval(stats.boot_pooled(quiet + [loud], 99))
        flat_lo, flat_hi = stats.interval(stats.boot_quantiles(sorted(x for r in quiet + [loud] for x in r), 99))
        self.assertLess(lo, stats.quantile(quiet[0], 99) * 1.15)
        self.assertGreater(hi, stats.quantile(loud, 99) * 0.85)
        self.assertGreater(hi - lo, 2 * (flat_hi - flat_lo))

    def test_replicates_are_paired_by_repeat(self):
        # Run effects (scale 1, 2, 4) shared by both variants; the second is
        # 1.2 x the first within every run. Paired replicates keep the ratio
        # interval around 1.2 and narrow despite the run effects.
        rng = random.Random(9)
        a = [sorted(f * rng.expovariate(1.0) for _ in range(2000)) for f in (1, 2, 4)]
        b = [sorted(1.2 * f * rng.expovariate(1.0) for _ in range(2000)) for f in (1, 2, 4)]
        ra, rb = stats.boot_pooled(a, 99), stats.boot_pooled(b, 99)
        lo, hi = stats.interval([y / x for x, y in zip(ra, rb)])
        self.assertLessEqual(lo, 1.2)
        self.assertGreaterEqual(hi, 1.2)
        self.assertLess(hi - lo, 0.6)


class Finalize(unittest.TestCase):
    def test_ratios_per_repeat(self):
        class Exp(core.Experiment):
            name = "t"
            point_keys = ("load",)
            key_figures = ("short_fct_p99_us", "long_throughput_mbps")
            ratio_to = "dctcp"

        def run(scale, tput):
            row = {"load": 0.6, "long_throughput_mbps": tput}
            return core.add_percentiles(row, [scale * x for x in range(1, 1201)], "short_fct", unit="us")

        d = stats.merge_runs([run(1.0, 40.0), run(1.0, 50.0), run(1.0, 40.0)])
        p = stats.merge_runs([run(2.0, 40.0), run(1.0, 50.0), run(0.5, 80.0)])
        res = {"params": {"rate_mbit": 100}, "variants": {"dctcp": [d], "pulser": [p]}}
        core.finalize(res, Exp(argparse.Namespace()), argparse.Namespace(repeat=3, ratio_to=None))
        r = res["ratios"]["variants"]["pulser"][0]
        self.assertEqual(r["short_fct_p99_us"]["runs"], [2.0, 1.0, 0.5])
        self.assertEqual(r["short_fct_p99_us"]["median"], 1.0)
        self.assertEqual((r["long_throughput_mbps"]["min"], r["long_throughput_mbps"]["max"]), (1.0, 2.0))
        lo, hi = r["short_fct_p99_us"]["pooled_ci95"]
        self.assertLess(lo, hi)
        self.assertNotIn(stats.BOOT, res["variants"]["pulser"][0])
        text = core.summary(res, Exp(argparse.Namespace()))
        self.assertIn("pulser/dctcp", text)
        self.assertIn("n=3600", text)


class HeldBuffer(unittest.TestCase):
    """bfc-hold keeps its queues in the agent: the row's buffer_p99_bytes is
    the agent's per repeat, and the merge of the repeats must not replace it
    with the pooled p99 of the qdisc's one-frame samples."""

    def test_agent_figure_survives_the_merge(self):
        import shutil
        import tempfile
        from sluicebench.experiments.bfc import BfcExp

        tmp = tempfile.mkdtemp(prefix="sluice-bench-test-")
        self.addCleanup(shutil.rmtree, tmp, True)

        class M:
            def __init__(self, tag, held):
                self.tag, self.extra = tag, held
                self.ctx = argparse.Namespace(tmp=tmp)
                self.qmon = {"ports": [{"max_backlog_bytes": 1518, "mean_backlog_bytes": 700.0}]}
                with open(os.path.join(tmp, f"qmon-{tag}.csv"), "w") as f:
                    f.write("t_us,max_bytes\n" + "".join(f"{i},1518\n" for i in range(1200)))

        def run(i, held):
            m = M(f"r{i}", held)
            row = {"point": "workload"}
            BfcExp._buffer(row, m)
            row.update(m.extra)
            return row

        held = [{"buffer_p99_bytes": b, "buffer_n": 5000, "queue_max_bytes": 2 * b} for b in (200000, 600000, 900000)]
        row = stats.merge_runs([run(i, h) for i, h in enumerate(held)])
        self.assertEqual(row["buffer_p99_bytes"], 600000)
        self.assertEqual(row["spread"]["buffer_p99_bytes"], [200000, 900000])
        self.assertIsNone(row["queue_mean_bytes"])
        # A plain port still pools the qdisc's samples.
        plain = stats.merge_runs([run(i, {}) for i in range(3)])
        self.assertEqual(plain["buffer_p99_bytes"], 1518)
        self.assertEqual(plain["buffer_n"], 3600)


class BfcProfile(unittest.TestCase):
    """bench/run bfc --profile: 10m is 100m ten times slower (rate, wire
    delay, the bfc-hold HRTT), so Th and the BDP stay the same in packets;
    options given explicitly win, and without a profile nothing changes."""

    @staticmethod
    def args(**kw):
        a = dict(profile="100m", topology="star", rate=None, delay_us=None, two_flows_s=None,
                 bfc_hold_hrtt_us=None)
        a.update(kw)
        return argparse.Namespace(**a)

    def test_profiles(self):
        from sluicebench.experiments.bfc import apply_profile
        from sluicebench.variants.bfc import hold_hrtt_us

        for prof, topo, rate, delay, hrtt in (("100m", "star", 100, 250, 300), ("100m", "three-switch", 100, 250, 800),
                                              ("10m", "star", 10, 2500, 3000),
                                              ("10m", "three-switch", 10, 2500, 8000)):
            a = self.args(profile=prof, topology=topo)
            apply_profile(a)
            self.assertEqual((a.rate, a.delay_us, hold_hrtt_us(a)), (rate, delay, hrtt), (prof, topo))
            # Th(N=1) = HRTT x rate: the same bytes in both profiles.
            th = hold_hrtt_us(a) * 1e-6 * a.rate * 1e6 / 8
            self.assertAlmostEqual(th, {"star": 3750, "three-switch": 10000}[topo])
        a = self.args(profile="10m", topology="three-switch", rate=20.0, delay_us=0.0, two_flows_s=3.0)
        apply_profile(a)
        self.assertEqual((a.rate, a.delay_us, a.two_flows_s, hold_hrtt_us(a)), (20.0, 0.0, 3.0, 3000))
        a = self.args(profile="10m", bfc_hold_hrtt_us=1234)
        apply_profile(a)
        self.assertEqual(hold_hrtt_us(a), 1234)
        # Other experiments' bfc-hold variants: no profile applied, 300 us.
        self.assertEqual(hold_hrtt_us(argparse.Namespace(topology="star", delay_us=250)), 300)



class FillUnset(unittest.TestCase):
    """core.fill_unset: what bfc's and floodgate's --profile use to fill the
    options not given."""

    def test_fills_only_what_is_none_or_missing(self):
        a = argparse.Namespace(rate=None, delay_us=0.0, gap_ms=20.0)
        filled = core.fill_unset(a, {"rate": 10.0, "delay_us": 2500.0, "gap_ms": 100.0, "extra_s": 3.0})
        self.assertEqual(filled, ["rate", "extra_s"])
        # An explicit value, 0 included, is kept.
        self.assertEqual((a.rate, a.delay_us, a.gap_ms, a.extra_s), (10.0, 0.0, 20.0, 3.0))
        self.assertEqual(core.fill_unset(a, {"rate": 1.0}), [])
        self.assertEqual(a.rate, 10.0)


if __name__ == "__main__":
    unittest.main()
