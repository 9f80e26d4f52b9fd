"""bench/run top's class bounds balanced on the workload (top-balanced):
classes 1..K-1 carry equal shares of the bytes a flow sends while its
remaining size is in them, class 0 is §3.2's formula's (docs/top.md "Class
bounds from the workload")."""

import argparse
import math
import os
import random
import sys
import unittest

TOP = os.environ.get("SLUICE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(TOP, "bench"))
sys.path.insert(0, os.path.join(TOP, "tc-scripts", "lab"))

from sluicebench.experiments import top as topx  # noqa: E402
from sluicebench.variants import top as topv  # noqa: E402

CDF = os.path.join(TOP, "bench", "cdf")


def workloads():
    return {"websearch": topx.read_cdf(os.path.join(CDF, "websearch.cdf")),
            "datamining-10MB": topx.cap_cdf(topx.read_cdf(os.path.join(CDF, "datamining.cdf")), 10_000_000),
            "hadoop": topx.read_cdf(os.path.join(CDF, "hadoop.cdf"))}


class BalancedBounds(unittest.TestCase):
    def test_shape_and_first_class(self):
        for name, pts in workloads().items():
            b = topx.balanced_bounds(pts)
            self.assertEqual(len(b), 5, name)
            self.assertTrue(all(x < y for x, y in zip(b, b[1:])), (name, b))
            p = pts[-1][0] / 1440
            self.assertAlmostEqual(b[0], p ** (1 / 6) - 1, delta=0.05, msg=name)

    def test_each_class_carries_an_equal_share_of_the_bytes(self):
        # Against draws as the experiment makes them: the packets a flow
        # sends while its remaining size is in class c, c = 1..5.
        for name, pts in workloads().items():
            b = topx.balanced_bounds(pts)
            rng = random.Random(7)
            per = [0.0] * 6
            edges = [0.0] + b + [math.inf]
            for _ in range(200_000):
                s = topx.sample_size(pts, rng.random()) / 1440
                for c in range(6):
                    per[c] += max(0.0, min(s, edges[c + 1]) - edges[c])
            share = [x / sum(per[1:]) for x in per[1:]]
            for c, x in enumerate(share, 1):
                self.assertAlmostEqual(x, 0.2, delta=0.03, msg=f"{name} class {c}: {share}")

    def test_degenerate_cdf_still_increases(self):
        b = topx.balanced_bounds([(1440.0, 1.0)])
        self.assertEqual(len(b), 5)
        self.assertTrue(all(x < y for x, y in zip(b, b[1:])), b)

    def test_only_the_balanced_variant_gets_bounds(self):
        p = argparse.ArgumentParser()
        topx.TopExp.add_args(p)
        exp = topx.TopExp.__new__(topx.TopExp)
        exp.args = p.parse_args(["--max-size", "10000000", "--workload", "datamining"])
        exp.pts = workloads()["datamining-10MB"]
        self.assertEqual(exp.bounds_args(topv.TopVariant, 6944), [])
        self.assertEqual(exp.bounds_args(topv.Tokens, 6944), [])
        args = exp.bounds_args(topv.TopBalanced, 6944)
        self.assertEqual(args[0], "--bounds")
        vals = [float(x) for x in args[1].split(",")]
        self.assertEqual(vals, topx.balanced_bounds(exp.pts, 6, 1440, 6944))

    def test_fine_first_class_keeps_the_log_bounds_of_short_flows(self):
        for name, pts in workloads().items():
            b = topx.balanced_bounds(pts)
            f = topx.balanced_bounds(pts, fine_first=True)
            p = pts[-1][0] / 1440
            self.assertTrue(all(x < y for x, y in zip(f, f[1:])), (name, f))
            self.assertEqual(f[0], b[0], name)
            self.assertEqual(f[2:], b[2:], name)
            if b[0] + 1 <= p ** 0.5 - 1 < b[2] - 1:
                self.assertAlmostEqual(f[1], p ** 0.5 - 1, delta=0.05, msg=name)
            else:
                self.assertEqual(f[1], b[1], name)
        # web search: class 1 is 4.2 .. 141 packets, not 4.2 .. ~579
        ws = topx.balanced_bounds(workloads()["websearch"], fine_first=True)
        self.assertLess(ws[1], 200)
        self.assertGreater(topx.balanced_bounds(workloads()["websearch"])[1], 400)

    def test_the_fine_variant_gets_its_own_bounds(self):
        p = argparse.ArgumentParser()
        topx.TopExp.add_args(p)
        exp = topx.TopExp.__new__(topx.TopExp)
        exp.args = p.parse_args(["--workload", "websearch"])
        exp.pts = workloads()["websearch"]
        pmax = exp.pts[-1][0] / 1440
        vals = [float(x) for x in exp.bounds_args(topv.TopBalancedFine, pmax)[1].split(",")]
        self.assertEqual(vals, topx.balanced_bounds(exp.pts, 6, 1440, pmax, fine_first=True))
        self.assertNotEqual(vals, [float(x) for x in exp.bounds_args(topv.TopBalanced, pmax)[1].split(",")])


class ReceiverView(unittest.TestCase):
    """The *_recv figures come from the receivers' per-flow lines only."""

    def test_per_flow_lines_only(self):
        log = "\n".join([
            "sluice-top recv: bound 10.0.0.4:7200",
            '{"flow":4294967296,"size":1460,"fct_us":410.5,"deadline":false,"deadline_met":true,'
            '"sync_us":120.0,"token_us":127.0,"data_us":260.1}',
            '{"flow":4294967297,"size":5000000,"fct_us":402113.0,"deadline":false,"deadline_met":true,'
            '"sync_us":90.2,"token_us":96.3,"data_us":211.0}',
            '{"role":"recv","tokens_sent":[1,2,3,4,5,6],"flows_closed":2}',
            '{"flow":4294967298,"size":1460,"start_us":5.0,"fct_us":500.0,"token_us":70.0}',
        ])
        got = topx.receiver_completions(log)
        self.assertEqual([(j["size"], j["fct_us"]) for j in got], [(1460, 410.5), (5000000, 402113.0)])
        self.assertEqual([j["deadline_met"] for j in got], [True, True])

    def test_empty_log(self):
        self.assertEqual(topx.receiver_completions(""), [])


if __name__ == "__main__":
    unittest.main()
