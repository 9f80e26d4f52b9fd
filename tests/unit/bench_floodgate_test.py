"""bench/run floodgate's profiles: a time-scaled profile (10m) keeps every
window, threshold and queue of 100m in bytes and packets, only slower; the
defaults of 100m and 1g do not change (docs/floodgate.md)."""

import argparse
import os
import sys
import unittest

TOP = os.environ.get("SLUICE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(TOP, "bench"))
sys.path.insert(0, os.path.join(TOP, "tc-scripts", "lab"))

from sluicebench.experiments import floodgate as fgx  # noqa: E402
from sluicebench.variants import floodgate as fgv  # noqa: E402


def parsed(*argv):
    p = argparse.ArgumentParser()
    fgx.FloodgateExp.add_args(p)
    fgv.Floodgate.add_args(p)
    return p.parse_args(list(argv))


class TimeScaledProfile(unittest.TestCase):
    def test_10m_matches_100m_in_bytes_and_packets(self):
        slow, base = fgx.derived("10m"), fgx.derived("100m")
        # The paper's 1:2 and 10x slower.
        self.assertEqual(fgx.PROFILES["10m"]["core"] / fgx.PROFILES["10m"]["rate"], 2)
        self.assertEqual(fgx.PROFILES["100m"]["rate"] / fgx.PROFILES["10m"]["rate"], 10)
        for k in ("init_window_core_bytes", "thre_credit_core_bytes", "thre_off_core_bytes", "aqm_k_packets"):
            self.assertEqual(slow[k], base[k], k)
        # 100m: 25 B/us x (200 + 500) us = 17 500 B (docs/floodgate.md).
        self.assertEqual(base["init_window_core_bytes"], 17500)
        self.assertEqual(base["thre_credit_core_bytes"], 50000)
        # Every time 10x: T, hop RTT, switchSYN timeout, the incast gap, a frame.
        for k in ("credit_interval_us", "hop_rtt_us", "syn_timeout_ms", "incast_gap_ms", "core_frame_us"):
            self.assertAlmostEqual(slow[k], 10 * base[k], places=6, msg=k)
        # T and hop RTT in frame times are the same.
        self.assertAlmostEqual(slow["credit_interval_us"] / slow["core_frame_us"],
                               base["credit_interval_us"] / base["core_frame_us"], places=6)

    def test_defaults_of_100m_and_1g_unchanged(self):
        for prof in ("100m", "1g"):
            self.assertEqual(fgx.profile_fg_keys(prof), {})
            a = parsed("--profile", prof)
            fgx.FloodgateExp(a).resolve_times()
            self.assertEqual((a.incast_gap_ms, a.core_delay_us, a.host_delay_us), (10, 0, 0))
            self.assertEqual(fgv.Floodgate(a).floodgate_keys(), [])

    def test_10m_options_and_switch_section(self):
        a = parsed("--profile", "10m")
        fgx.FloodgateExp(a).resolve_times()
        self.assertEqual((a.incast_gap_ms, a.core_delay_us, a.host_delay_us), (100, 0, 0))
        self.assertEqual(fgv.Floodgate(a).floodgate_keys(),
                         ["credit_interval_us = 5000", "hop_rtt_us = 2000", "syn_timeout_ms = 100"])
        # floodgate-voq adds its own keys after them; each key once.
        keys = fgv.FloodgateVoq(a).floodgate_keys()
        names = [fgx.section_keys(k).popitem()[0] for k in keys]
        self.assertEqual(len(names), len(set(names)), keys)
        self.assertIn('voq = "agent"', keys)

    def test_explicit_values_win_and_are_not_scaled(self):
        a = parsed("--profile", "10m", "--incast-gap-ms", "20", "--core-delay-us", "50",
                   "--floodgate-section", "credit_interval_us = 2000; max_voqs = 4")
        fgx.FloodgateExp(a).resolve_times()
        self.assertEqual((a.incast_gap_ms, a.core_delay_us, a.host_delay_us), (20, 50, 0))
        keys = fgv.Floodgate(a).floodgate_keys()
        # The section's T replaces the profile's (a TOML key twice would be refused).
        self.assertEqual(keys, ["hop_rtt_us = 2000", "syn_timeout_ms = 100",
                                "credit_interval_us = 2000\n max_voqs = 4"])
        d = fgx.derived("10m", a.floodgate_section, incast_gap_ms=a.incast_gap_ms)
        self.assertEqual(d["credit_interval_us"], 2000)
        # 2.5 B/us x (2000 + 2000) us
        self.assertEqual(d["init_window_core_bytes"], 10000)
        self.assertEqual(d["incast_gap_ms"], 20)


    def test_10m_scales_the_hosts_pause_timeout(self):
        # 100m and 1g: the hosts keep the host part's defaults (no section).
        for prof in ("100m", "1g"):
            a = parsed("--profile", prof)
            fgx.FloodgateExp(a).resolve_times()
            self.assertEqual(a.floodgate_host_profile_keys, {})
            self.assertEqual(fgv.FloodgateDstPause(a).host_floodgate_keys(), [])
            self.assertEqual(fgx.derived(prof)["host_pause_timeout_ms"], 20)
        # 10m: 20 ms x 10 into the hosts' [floodgate], not into the switches'.
        a = parsed("--profile", "10m")
        fgx.FloodgateExp(a).resolve_times()
        self.assertEqual(a.floodgate_host_profile_keys, {"host_pause_timeout_ms": 200})
        dp = fgv.FloodgateDstPause(a)
        self.assertEqual(dp.host_floodgate_keys(), ["host_pause_timeout_ms = 200"])
        self.assertNotIn("host_pause_timeout_ms = 200", dp.floodgate_keys())
        self.assertEqual(fgx.derived("10m")["host_pause_timeout_ms"], 200)
        # --floodgate-section's host_* keys go to the hosts and win over the
        # profile's (a key twice would be refused); the rest stays the switches'.
        a = parsed("--profile", "10m", "--floodgate-section",
                   "host_pause_timeout_ms = 50; host_max_held_frames = 8192; max_voqs = 4")
        fgx.FloodgateExp(a).resolve_times()
        self.assertEqual(a.floodgate_host_profile_keys, {})
        self.assertEqual(fgv.FloodgateDstPause(a).host_floodgate_keys(),
                         ["host_pause_timeout_ms = 50", "host_max_held_frames = 8192"])
        self.assertEqual(fgx.derived("10m", a.floodgate_section)["host_pause_timeout_ms"], 50)


if __name__ == "__main__":
    unittest.main()
