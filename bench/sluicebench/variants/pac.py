"""pac: proactive ACK control at the receiver (pac-icnp14 §III).

Plain cubic senders; sluiced with mechanisms = ["pac"] on every receiver's
interface. Extra row fields: held_acks (ACKs the agent held), admitted_acks
(ACKs the kernel admitted without the agent), p50/p99_ack_delay_us (delay PAC
added to every ACK of the point, admitted ones count as 0, at the resolution
of the hold-time histogram: the bucket's upper bound), pac_* counters.
"""

from __future__ import annotations

from ..agents import Agents, aqm_port
from ..core import Variant, variant
from .. import util


def _percentile_from_hist(zero: int, hist: list, q: float):
    """hist: [{"le_us": bound or "+Inf", "count": n}, ...]; `zero` ACKs had
    no delay. Returns the upper bound of the bucket holding quantile q."""
    total = zero + sum(h["count"] for h in hist)
    if not total:
        return None
    rank = q * total
    acc = zero
    if acc >= rank:
        return 0
    for h in hist:
        acc += h["count"]
        if acc >= rank:
            return h["le_us"] if h["le_us"] != "+Inf" else 100000
    return None


def default_threshold(buffer: int) -> int:
    """PAC's threshold when the experiment does not give one: 3/4 of the
    bottleneck buffer. pac-icnp14 §III-B sets it to the buffer size, but its
    testbed (§IV-B, Table I) gave PAC 80 KB of a 150 KB port; on the 1 Gbit/s
    profile 80-96 KB of 128 KB kept every round free of RTOs and 128 KB did
    not (docs/pac.md, threshold sweep)."""
    return buffer * 3 // 4


def rwnd_cap(arg: str, threshold: int, holds_requests: bool, always: bool = False) -> str:
    """rwnd_cap_bytes for the agent (a TOML value): `arg` is "auto", "off" or
    a size. auto: the agent's own "auto": the threshold's payload, or, with
    hold_requests and cap_to_response (pac-req), a third of the threshold,
    so three responses are under way at once and every flow's share is
    counted exactly (docs/pac.md, "New connections"; at 100 Mbit/s with a
    24 KB threshold a third gave 95.0/93.7/94.5% of the link at N =
    32/64/100 and a half 94.9/91.2/93.6%). Until 2026-11-28 the agent left
    it off with hold_requests and the bench set a third only when one
    response was larger than the threshold; `--pac-rwnd-cap off` is that
    uncapped estimate on the 1 Gbit/s profile. `always`: a
    third of the threshold, set here (pac-req-cap, which the agent's
    default now equals)."""
    if arg == "off":
        return "0"
    if arg != "auto":
        return str(util.size(arg))
    if holds_requests and always:
        return str(max(threshold // 3, 4096))
    return '"auto"'


@variant
class Pac(Variant):
    name = "pac"
    help = "PAC: the receiver holds ACKs so ACK-triggered in-flight data stays under the buffer (cubic senders)"
    cc = "cubic"
    ecn = False
    build_targets = ["sluiced", "sluicectl"]

    @classmethod
    def add_args(cls, parser):
        parser.add_argument("--pac-threshold", type=int, default=0,
                            help="PAC buffer_bytes (initial/max threshold); 0 = 3/4 of the experiment's "
                                 "--buffer (the paper's testbed gave PAC 80 KB of a 150 KB port, §IV-B)")
        parser.add_argument("--pac-extra", default="",
                            help="extra [pac] TOML lines, ';'-separated (e.g. 'max_hold_ms = 20')")
        parser.add_argument("--pac-kill-at", type=float, default=0,
                            help="seconds after the point starts to kill -9 the agent (fail-open demo)")
        parser.add_argument("--pac-rwnd-cap", default="auto",
                            help="rwnd_cap_bytes: clamp the window the receiver advertises (an extension); "
                                 "auto = the agent's default (the threshold for pac, a third of it for pac-req); "
                                 "'off' (pac-req: the uncapped estimate); or bytes (K suffix ok)")
        parser.add_argument("--pac-ecn-k", type=util.size, default=0,
                            help="the bottleneck port marks CE above this many bytes (sluiced aqm, DCTCP step "
                                 "marking) and the hosts negotiate ECN, so PAC's threshold follows eq. (2); "
                                 "the paper's testbed: 15K (10 packets). 0 = no marking")

    extra_config = ""
    # --pac-rwnd-cap auto caps windows at a third of the threshold even
    # when one response fits the threshold (pac-req-cap).
    cap_always = False

    def __init__(self, args):
        super().__init__(args)
        self.agents = Agents("pac")
        self.killer = None
        self.point_no = 0
        # §III-B eq. (2) needs CE marks: with --pac-ecn-k the senders are
        # ECN-capable (kernel cubic then also halves on ECE, as the paper's
        # unmodified senders would) and the bottleneck marks.
        self.ecn = bool(getattr(args, "pac_ecn_k", 0))

    def setup(self, ctx, topo):
        args = ctx.args
        thr = args.pac_threshold or default_threshold(getattr(args, "buffer", 0) or 131072)
        cap = rwnd_cap(args.pac_rwnd_cap, thr, "hold_requests = true" in self.extra_config, self.cap_always)
        thr, cap = self.window_only(ctx, thr, cap)
        self.point_no += 1
        bpffs = self.agents.bpffs(ctx)
        extra = "\n".join(l.strip() for l in args.pac_extra.split(";") if l.strip())
        # The agent is on the path of every held ACK: when the traffic
        # generator runs under SCHED_FIFO (--sched fifo, senders 10,
        # receiver 11) the agent runs one level above it, or busy senders
        # would starve the receiver's ACK clock.
        pre = []
        if getattr(args, "sched", "normal") == "fifo" and ctx._fifo_ok():
            pre = ["chrt", "-f", "12"]
        for recv in topo.receivers:
            tag = f"{recv.name}-{self.point_no}"
            a = self.agents.start(ctx, recv.ns, tag, f"{bpffs}/{tag}", f"""[pac]
buffer_bytes = {thr}
rwnd_cap_bytes = {cap}
{self.extra_config}
{extra}
[[interface]]
name = "{recv.ports[0].ifname}"
mechanisms = ["pac"]
""", role="receiver", prefix=pre)
            ctx.wait_for_log(a.proc, "PAC_STARTED", timeout=10)
        if self.ecn:
            bn = topo.bottleneck
            a = self.agents.start(ctx, bn.ns, f"sw-{self.point_no}", f"{bpffs}/sw-{self.point_no}", f"""[aqm]
ecn = true
ecn_threshold_bytes = {args.pac_ecn_k}
ein = false
{aqm_port(bn)}""", role="switch")
            ctx.wait_for_log(a.proc, "AGENT_STARTED", timeout=30)
        if args.pac_kill_at > 0:
            import threading
            procs = [a.proc for a in self.agents.list if a.role == "receiver"]

            def kill():
                for p in procs:
                    if p.poll() is None:
                        ctx.log(f"pac: kill -9 sluiced (pid {p.pid}) mid-incast")
                        p.kill()
            self.killer = threading.Timer(args.pac_kill_at, kill)
            self.killer.start()

    def window_only(self, ctx, thr, cap):
        """(buffer_bytes, rwnd_cap_bytes) the agent gets; pac-rwnd overrides."""
        return thr, cap

    def metrics(self, ctx, topo):
        out = {"held_acks": 0, "admitted_acks": 0, "p50_ack_delay_us": None, "p99_ack_delay_us": None}
        for _, modules in self.agents.live_modules(ctx, out, "pac_agent_exited"):
            for m in modules:
                if m["name"] == "aqm":
                    out["ce_marks"] = out.get("ce_marks", 0) + m["stats"].get("ce_marks", 0)
                if m["name"] != "pac":
                    continue
                s = m["stats"]
                verdicts = {v["reason"]: v["packets"] for pr in m["programs"] for v in pr["verdicts"]}
                admitted = verdicts.get("PAC_ADMIT", 0) + verdicts.get("PAC_FAIL_OPEN", 0)
                out["held_acks"] += s["held_events"]
                out["admitted_acks"] += admitted
                out["p50_ack_delay_us"] = _percentile_from_hist(admitted, s["hold_time_hist"], 0.50)
                out["p99_ack_delay_us"] = _percentile_from_hist(admitted, s["hold_time_hist"], 0.99)
                out["pac_hold_mean_us"] = round(s["hold_time_mean_us"], 1)
                out["pac_avg_srtt_us"] = round(s.get("avg_srtt_us", 0), 1)
                out["pac_busy_poll_us"] = s.get("busy_poll_us", 0)
                out["pac_threshold_changes"] = s.get("threshold_changes", 0)
                out["pac_threshold_bytes"] = s.get("threshold_bytes", 0)
                out["pac_rwnd_clamped"] = s.get("rwnd_clamped", 0)
                out["pac_bound_bytes"] = s.get("bound_bytes", 0)
                out["pac_idle_resets"] = s.get("idle_resets", 0)
                for k in ("new_flows", "first_window_bytes", "resp_cut_bytes", "uncounted_bytes",
                          "phantom_bytes", "timer_fails", "quiet_swept"):
                    out[f"pac_{k}"] = s.get(k, 0)
                for k in ("released_max_hold", "released_queue_full", "dropped_stale", "dropped_superseded",
                          "dropped_teardown", "send_failures", "corrections", "stalls"):
                    out[f"pac_{k}"] = s[k]
                out["pac_fail_open_acks"] = verdicts.get("PAC_FAIL_OPEN", 0)
                out["pac_ring_full"] = verdicts.get("PAC_RING_FULL", 0)
        return out

    def teardown(self, ctx, topo):
        if self.killer:
            self.killer.cancel()
            self.killer = None
        self.agents.stop(ctx)


@variant
class PacRequests(Pac):
    name = "pac-req"
    help = "PAC with hold_requests: requests (our data segments) are held like ACKs, their trigger the response"
    extra_config = "hold_requests = true\ncap_to_response = true"

    @classmethod
    def add_args(cls, parser):
        pass  # shares the --pac-* options


@variant
class PacRequestsCapped(PacRequests):
    name = "pac-req-cap"
    help = ("pac-req with every window capped at a third of the threshold, set by the bench (the agent's default "
            "for pac-req since 2026-11-28): the in-flight bound counts new connections exactly")
    cap_always = True


@variant
class PacRequestsSleep(PacRequests):
    name = "pac-req-sleep"
    help = "pac-req with busy_poll_us = 0: the agent sleeps in epoll while ACKs are held (ablation of the polling)"
    extra_config = PacRequests.extra_config + "\nbusy_poll_us = 0"


def fair_window(threshold: int, senders: int, wscale_unit: int = 128) -> int:
    """pac-rwnd's window: the threshold's payload split over the senders in
    whole segments, at least one (a sender cannot send less than a segment
    into a window: tcp_snd_wnd_test), rounded up to the window-scale unit
    the clamp works in (Linux's receive scale is 7 with the default
    tcp_rmem, 128-byte units), so a k-segment window is not clamped to
    k segments less a few bytes."""
    mss = 1448
    payload = threshold * mss // (mss + 66)
    segs = max(1, payload // (max(1, senders) * mss))
    b = segs * mss
    return (b + wscale_unit - 1) // wscale_unit * wscale_unit


@variant
class PacRwnd(Pac):
    name = "pac-rwnd"
    help = ("the alternative to holding ACKs: receiver-side window tuning. No ACK held (threshold out of reach); "
            "every connection's receive window clamped to its share of the threshold, max(1 segment, "
            "threshold / N) in whole segments, N the point's sender count (an oracle: the receiver is told N)")

    @classmethod
    def add_args(cls, parser):
        pass  # shares the --pac-* options

    def window_only(self, ctx, thr, cap):
        n = int(ctx.point.get("senders", 1))
        return 1 << 32, fair_window(thr, n)
