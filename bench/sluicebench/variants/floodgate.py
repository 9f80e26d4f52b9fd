"""floodgate: every switch a sluice switch running the floodgate logic
(docs/floodgate.md), the hosts the same as the dctcp variant's
(sluice_dctcp, ECN), so the two differ only in the switches.

- floodgate: [switch] datapath = "hold": every frame passes through the
  switch's sluiced and the model logic (FloodgateLogic) runs per packet
  ("In sluiced, per packet").
- dctcp-hold: the same held switches with logic fifo (one queue, DCTCP
  marking in it): what the held data path alone does to DCTCP, the
  baseline floodgate is compared with on its own data path.
- dctcp-tree: the same for design A's data path (queue trees, logic fifo,
  one queue, the aqm mechanism marking): floodgate-voq's baseline on its
  own data path.
- floodgate-dstpause: floodgate's switches with the switch part of
  dstPause on (`dst_pause = true`: a first-hop ToR whose VOQ for D passes
  thre_off tells the hosts that fed it to pause D, §4.3) and every host
  running sluiced with the floodgate mechanism on its uplink (the host
  part: it holds a paused destination's frames until dstResume or the
  pause timeout, [floodgate] host_pause_timeout_ms in the hosts' sluiced:
  20 ms, times a time-scaled profile's scale, e.g. 200 ms at 10m; a
  host_* key in --floodgate-section goes to the hosts too and wins).
- floodgate-tree: the design-A data path (queue trees in the kernel, the
  BPF half fg_egress and the glue's netlink releases; "In sluiced, design
  A"), kept to compare the two in one run.
- floodgate-voq: design A with its VOQs in sluiced ([floodgate] voq =
  "agent"): frames with window pass in the kernel, only frames out of
  window are stolen to the agent, queued per destination and sent again
  when credits allow ("VOQs in the agent"); one queue per port (the VOQs
  are not queues of the tree).

The switches mark ECN as the dctcp variant's switches do (DCTCP step
marking at --aqm-k) unless --floodgate-no-ecn: design A with the aqm
mechanism on every port, hold with [switch] ecn_threshold_packets (the
held queues, which the aqm mechanism cannot see); its first switch registers the congestion control for
the run. After the point sluiced stops and the lab's shapers are put back
(as sluice-switch, whose teardown it shares), so dctcp and floodgate
alternate on one topology.

Extra row fields (summed over the switches, from `sluicectl switch
--json` -> logic_state): fg_credit_frames, fg_credit_records,
fg_credit_bytes (on the wire: Ethernet + header + 28 B per record, at
least 60 B a frame), fg_syn_records, fg_syn_bytes, fg_delayed_credits,
fg_voq_engaged (design A: VOQs taken; hold: packets put into a VOQ),
fg_releases (design A: TBF releases; hold: packets out of a VOQ),
fg_release_failed, fg_ctrl_rejected, fg_fallback_pkts, fg_hold_drops
(hold: tail drops in the switches' held queues, all ports),
fg_hold_ce_marked (hold: CE marks, [switch] ecn_threshold_packets = --aqm-k),
fg_hold_unheld_pkts (hold: frames that went to the qdisc unheld: fail
open, a full ring, too large; fg_hold_fail_open_pkts, fg_hold_ring_full of
them), fg_hold_ring_wait_us_mean / _max (hold: divert -> agent per frame,
the ring being a queue no logic sees). floodgate-dstpause adds
fg_dst_pause_out / fg_dst_resume_out (dstPause/dstResume frames the ToRs
sent, from the logic's counters) and, summed over the hosts' floodgate
mechanism (`sluicectl stats`), fg_host_pauses, fg_host_resumes,
fg_host_expired (pauses ended by the timeout), fg_host_held_frames,
fg_host_resent_frames, fg_host_send_errors, fg_host_overflow,
fg_host_stale; fg_host_agents_exited if a host's agent ended.
floodgate-voq adds fg_voq_stolen (frames out of window taken by the
agents), fg_voq_sent, fg_voq_send_calls (the sendmmsg calls that sent
them, one per release), fg_voq_dropped (at voq_limit_bytes), fg_voq_send_errors,
fg_voq_passed (could not be copied: too big, ring full); its ports' most
bytes held in the agents go to the experiment as the held data path's do
(hold_ports). Every variant here adds switch_agent_cpu_s and
switch_agent_cores: the CPU the switches' sluiced used (agent_cpu()),
and switch_agent_sched (how they were scheduled, --switch-agent-prio);
design A's glue adds fg_ticks and fg_credit_updates (the agents' credit
ticks, and the updates a credit frame ran).
Held data path: the queues are in sluiced, not in the qdisc sluice-qmon
watches, so `hold_ports` (per port: its qmon spec, the most bytes the
agent held at once, its tail drops) goes to the experiment, which adds
them to qmon's per-port figures.
"""

from __future__ import annotations

import os

from ..agents import Agents, aqm_port, host_interface
from ..core import BenchError, variant
from ..experiments.floodgate import section_keys
from .switch import SluiceSwitch, switch_states

# Wire sizes (include/sluice/wire.h): Ethernet header, control header,
# one record; a frame is padded to the Ethernet minimum (no FCS counted, as
# a qdisc counts bytes).
ETH_HDR, CTRL_HDR, CREDIT_REC, SYN_REC, ETH_MIN = 14, 8, 28, 24, 60


def frame_bytes(frames: int, records: int, rec: int) -> int:
    """Bytes of `frames` control frames holding `records` records in all."""
    if not frames:
        return 0
    return max(frames * ETH_MIN, frames * (ETH_HDR + CTRL_HDR) + records * rec)


def agent_cpu(topo) -> dict:
    """CPU the switches' sluiced used since they started (user + system,
    all threads, /proc/PID/stat), summed: switch_agent_cpu_s, and
    switch_agent_cores = that over their lifetimes (1.0 = one core busy;
    they run at SCHED_FIFO above the traffic generator, so what they take
    the applications and the kernel's own packet work do not get)."""
    hz = os.sysconf("SC_CLK_TCK")
    with open("/proc/uptime") as f:
        up = float(f.read().split()[0])
    cpu = wall = 0.0
    for p, _ in topo.sluice_procs:
        try:
            with open(f"/proc/{p.pid}/stat") as f:
                st = f.read()
        except OSError:
            continue
        v = st[st.rindex(")") + 2:].split()
        cpu += (int(v[11]) + int(v[12])) / hz
        wall += max(1e-3, up - int(v[19]) / hz)
    return {"switch_agent_cpu_s": round(cpu, 2), "switch_agent_cores": round(cpu / wall * len(topo.sluice_procs), 3)
            if wall else None}


@variant
class Floodgate(SluiceSwitch):
    name = "floodgate"
    help = ("sluice switches with logic floodgate per packet ([switch] datapath = \"hold\": windows, VOQs, "
            "credits in sluiced), sluice_dctcp hosts as the dctcp variant")
    cc = "sluice_dctcp"
    ecn = True
    datapath = "hold"
    logic = "floodgate"

    @classmethod
    def add_args(cls, parser):
        g = parser.add_argument_group("floodgate variant")
        g.add_argument("--floodgate-queues", type=int, default=8,
                       help="queues per switch port (queue 0 + VOQs 1..N-1)")
        g.add_argument("--floodgate-no-ecn", action="store_true",
                       help="no DCTCP marking in the floodgate switches (hosts then react to loss only)")
        g.add_argument("--floodgate-section", default="",
                       help="extra keys for every switch's [floodgate] section, e.g. 'hop_rtt_us = 400'; "
                            "floodgate-dstpause also gives its host_* keys (the host part of dstPause, e.g. "
                            "'host_pause_timeout_ms = 50') to the hosts' sluiced")
        g.add_argument("--switch-agent-prio", type=int, default=12, metavar="N",
                       help="the switches' sluiced under --sched fifo: SCHED_FIFO priority N (the traffic "
                            "generator runs at 10/11, so 12 is above it and 9 below), 0 = normal scheduling "
                            "(SCHED_OTHER); every variant of this family (dctcp-tree, dctcp-hold too)")
        g.add_argument("--switch-control-defer-us", type=int, default=0, metavar="US",
                       help="[switch] control_defer_us of every switch: a control frame (credit) this close to "
                            "the logic's next timer does not wake the agent, the timer reads it (0 = off)")

    def __init__(self, args):
        super().__init__(args)
        self.point_no = 0

    def setup(self, ctx, topo):
        if topo.sluice_procs:
            raise BenchError("floodgate: the topology already has sluice switches (--switch sluice)")
        a = self.args
        self.point_no += 1
        self.cc = f"sl{ctx.lab.runid}_d"   # the dctcp variant's name for sluice_dctcp in this run
        first = topo.switches[0]

        def extra(node):
            out = []
            if node is first:
                out.append(f'[cc]\nregister = ["dctcp"]\ndctcp_name = "{self.cc}"\n'
                           f"dctcp_shift_g = {getattr(a, 'dctcp_shift_g', 4)}")
            # Held queues are marked by the held data path itself ([switch]
            # ecn_threshold_packets, below): the aqm mechanism reads the root
            # qdisc, which holds about one frame of a held port.
            if not a.floodgate_no_ecn and self.datapath != "hold":
                out.append(f"[aqm]\necn_threshold_packets = {getattr(a, 'aqm_k', 20)}")
                out += [aqm_port(p) for p in node.ports]
            section = self.floodgate_keys()
            if section:
                out.append("\n".join(["[floodgate]"] + section))
            return "\n".join(out)

        # The switch's agent runs its control loop (credits, VOQ releases)
        # above the traffic generator's SCHED_FIFO 10/11 (--sched fifo) by
        # default, as a switch's own CPU would: measured with one TCP flow
        # through a VOQ, 55-74 Mbit/s at SCHED_FIFO 12 against ~25 at normal
        # priority on the loaded machine (docs/floodgate.md);
        # --switch-agent-prio puts it elsewhere.
        prefix = self.agent_prefix(ctx)
        queues = self.switch_queues()
        topo.start_sluice({"bin": ctx.tool("sluiced"), "logic": self.logic, "queues": queues,
                           "extra": extra, "prefix": prefix, "switch_keys": self.switch_keys()})

    def agent_prefix(self, ctx) -> list:
        """argv prefix of the switches' sluiced: SCHED_FIFO --switch-agent-prio
        under --sched fifo (none at 0, or without fifo)."""
        a = self.args
        prio = getattr(a, "switch_agent_prio", 12)
        if prio < 0 or prio > 99:
            raise BenchError(f"--switch-agent-prio {prio}: 0 (normal scheduling) or a SCHED_FIFO priority 1-99")
        if not prio or getattr(a, "sched", "normal") != "fifo" or not ctx._fifo_ok():
            return []
        return ["chrt", "-f", str(prio)]

    def switch_queues(self) -> int:
        return self.args.floodgate_queues if self.logic == "floodgate" else 1

    def floodgate_keys(self) -> list:
        """Lines of every switch's [floodgate] section (none: the defaults):
        the experiment's profile keys (a time-scaled profile's T, hop RTT,
        switchSYN timeout; only keys --floodgate-section does not set), then
        --floodgate-section."""
        a = self.args
        prof = getattr(a, "floodgate_profile_keys", None) or {}
        out = [f"{k} = {int(v) if float(v).is_integer() else v}" for k, v in prof.items()]
        return out + ([a.floodgate_section.replace(";", "\n")] if a.floodgate_section else [])

    def switch_keys(self) -> list:
        keys = [f'datapath = "{self.datapath}"']
        if getattr(self.args, "switch_control_defer_us", 0):
            keys.append(f"control_defer_us = {self.args.switch_control_defer_us}")
        if self.datapath == "hold" and not self.args.floodgate_no_ecn:
            # DCTCP step marking at K in every held queue, as the dctcp
            # variant's switches mark their ports.
            keys.append(f"ecn_threshold_packets = {getattr(self.args, 'aqm_k', 20)}")
        return keys

    def metrics(self, ctx, topo):
        out = {"fg_credit_frames": 0, "fg_credit_records": 0, "fg_credit_bytes": 0, "fg_syn_records": 0,
               "fg_syn_bytes": 0, "fg_delayed_credits": 0, "fg_voq_engaged": 0, "fg_releases": 0,
               "fg_release_failed": 0, "fg_ctrl_rejected": 0, "fg_fallback_pkts": 0, "fg_hold_drops": 0,
               "fg_hold_ce_marked": 0, "fg_hold_unheld_pkts": 0, "fg_hold_fail_open_pkts": 0, "fg_hold_ring_full": 0,
               "fg_hold_ring_wait_us_max": 0}
        hold = []
        ring_frames, ring_wait = 0, 0.0
        for node, j in switch_states(ctx, topo):
            specs = {p.ifname: p.spec() for p in node.ports}
            for port in j["ports"]:
                out["fg_ctrl_rejected"] += port["control"]["rejected"]
                out["fg_fallback_pkts"] += port.get("fallback", {}).get("pkts_out", 0)
                if "hold" in port:
                    drops = sum(q.get("dropped", 0) for q in port["queues"]) + port["hold"]["logic_drops"]
                    out["fg_hold_drops"] += drops
                    h = port["hold"]
                    out["fg_hold_ce_marked"] += h.get("ce_marked", 0)
                    # Frames that went to the qdisc without being held (fail
                    # open, a full ring, too large).
                    out["fg_hold_unheld_pkts"] += h["fail_open_pkts"] + h["ring_full"] + h["passed_big"]
                    out["fg_hold_fail_open_pkts"] += h["fail_open_pkts"]
                    out["fg_hold_ring_full"] += h["ring_full"]
                    ring_frames += h["frames_in"]
                    ring_wait += h.get("ring_wait_us_mean", 0) * h["frames_in"]
                    out["fg_hold_ring_wait_us_max"] = max(out["fg_hold_ring_wait_us_max"],
                                                          h.get("ring_wait_us_max", 0))
                    hold.append({"spec": specs.get(port["name"]), "held_max_bytes": port["hold"]["held_max_bytes"],
                                 "drops": drops})
            s = j.get("logic_state") or {}
            if self.logic != "floodgate":
                continue
            if not s:
                raise BenchError(f"{node.ns}: no floodgate state in `sluicectl switch --json`")
            c = s["credits_sent"]
            out["fg_credit_frames"] += c["frames"]
            out["fg_credit_records"] += c["records"]
            out["fg_credit_bytes"] += frame_bytes(c["frames"], c["records"], CREDIT_REC)
            syn = s["switch_syns"]["sent"]
            out["fg_syn_records"] += syn
            # A switchSYN frame per port and tick; counted as one record each
            # (the most frames they can have been).
            out["fg_syn_bytes"] += frame_bytes(syn, syn, SYN_REC)
            out["fg_delayed_credits"] += s["delayed_credits"]
            if "updates" in s:  # design A's glue: credit ticks, and updates on a credit frame
                out["fg_ticks"] = out.get("fg_ticks", 0) + s["updates"]["ticks"]
                out["fg_credit_updates"] = out.get("fg_credit_updates", 0) + s["updates"]["on_credit"]
            for p in s.get("ports", []):
                if p.get("voq_agent"):
                    hold.append({"spec": specs.get(p["port"]), "held_max_bytes": p["voq_held_max_bytes"],
                                 "drops": p["voq_dropped"]})
            if "agent_voq" in s:
                v = s["agent_voq"]
                for k, src in (("fg_voq_stolen", "stolen"), ("fg_voq_sent", "sent"), ("fg_voq_dropped", "dropped"),
                               ("fg_voq_send_errors", "send_errors"), ("fg_voq_ce_marked", "ce_marked")):
                    out[k] = out.get(k, 0) + v[src]
                # Releases that sent frames, one send_many (sendmmsg) each;
                # absent from a sluiced that sends frame by frame.
                if "send_calls" in v:
                    out["fg_voq_send_calls"] = out.get("fg_voq_send_calls", 0) + v["send_calls"]
                out["fg_voq_passed"] = out.get("fg_voq_passed", 0) + v["too_big_passed"] + v["ring_full_passed"]
                # Per frame, stolen -> sent again: mean weighted by frames, max.
                out["fg_voq_wait_us_sum"] = out.get("fg_voq_wait_us_sum", 0) + v["wait_us_mean"] * v["sent"]
                out["fg_voq_wait_us_max"] = max(out.get("fg_voq_wait_us_max", 0), v["wait_us_max"])
            if "voq" in s:  # design A's glue
                out["fg_voq_engaged"] += s["voq"]["engaged"]
                out["fg_releases"] += s["voq"]["releases"]
                out["fg_release_failed"] += s["voq"]["release_failed"]
            else:  # the model logic
                out["fg_voq_engaged"] += s["counters"]["voq_enqueued"]
                out["fg_releases"] += s["counters"]["voq_released"]
        out.update(agent_cpu(topo))
        pre = self.agent_prefix(ctx)
        out["switch_agent_sched"] = f"fifo {pre[-1]}" if pre else "normal"
        out["switch_control_defer_us"] = getattr(self.args, "switch_control_defer_us", 0)
        if out.get("fg_voq_sent"):
            out["fg_voq_wait_us_mean"] = round(out.pop("fg_voq_wait_us_sum") / out["fg_voq_sent"], 1)
        if hold:
            out["hold_ports"] = hold
            # Divert -> agent, per frame: the ring, a queue no logic sees.
            out["fg_hold_ring_wait_us_mean"] = round(ring_wait / ring_frames, 1) if ring_frames else None
        return out


@variant
class FloodgateTree(Floodgate):
    name = "floodgate-tree"
    help = ("floodgate on the design-A data path ([switch] datapath = \"tree\": kernel queue trees, BPF windows, "
            "netlink releases), otherwise as floodgate")
    datapath = "tree"

    @classmethod
    def add_args(cls, parser):
        pass  # floodgate's options serve both


@variant
class FloodgateVoq(FloodgateTree):
    name = "floodgate-voq"
    help = ("floodgate on design A with its VOQs in sluiced ([floodgate] voq = \"agent\": windows in BPF, only "
            "frames out of window through the agent), otherwise as floodgate")

    def switch_queues(self) -> int:
        return 1

    def floodgate_keys(self) -> list:
        # The agent's VOQs are queues no qdisc AQM sees: they mark CE
        # themselves at --aqm-k, as the held queues do.
        keys = ['voq = "agent"']
        if not self.args.floodgate_no_ecn:
            keys.append(f"voq_ecn_packets = {getattr(self.args, 'aqm_k', 20)}")
        return super().floodgate_keys() + keys


@variant
class DctcpHold(Floodgate):
    name = "dctcp-hold"
    help = ("the dctcp variant's hosts through sluice switches on the held data path ([switch] datapath = \"hold\", "
            "logic fifo, one queue, DCTCP marking at --aqm-k in it): floodgate's baseline on its own data path")
    logic = "fifo"

    @classmethod
    def add_args(cls, parser):
        pass  # floodgate's options serve it (--floodgate-no-ecn)


@variant
class DctcpTree(FloodgateTree):
    name = "dctcp-tree"
    help = ("the dctcp variant's hosts through sluice switches on the design-A data path ([switch] datapath = "
            "\"tree\", logic fifo, one queue, the aqm mechanism marking): floodgate-voq's baseline on its own data path")
    logic = "fifo"


@variant
class FloodgateDstPause(Floodgate):
    name = "floodgate-dstpause"
    help = ("floodgate with dstPause (§4.3): the switches' dst_pause on, every host running sluiced with the "
            "floodgate mechanism on its uplink (holds a paused destination's frames)")

    @classmethod
    def add_args(cls, parser):
        pass  # floodgate's options serve it

    def __init__(self, args):
        super().__init__(args)
        self.agents = Agents("fgdp")

    def floodgate_keys(self) -> list:
        return super().floodgate_keys() + ["dst_pause = true"]

    def host_floodgate_keys(self) -> list:
        """Lines of every host's [floodgate] section (none: the host part's
        defaults): the experiment's profile keys for the hosts (a
        time-scaled profile's pause timeout; only if --floodgate-section
        does not set it), then the host_* keys of --floodgate-section."""
        a = self.args
        prof = getattr(a, "floodgate_host_profile_keys", None) or {}
        out = [f"{k} = {int(v) if float(v).is_integer() else v}" for k, v in prof.items()]
        return out + [f"{k} = {v}" for k, v in section_keys(a.floodgate_section or "").items()
                      if k.startswith("host_")]

    def setup(self, ctx, topo):
        super().setup(ctx, topo)
        keys = self.host_floodgate_keys()
        section = "\n".join(["[floodgate]"] + keys) + "\n" if keys else ""
        try:
            for h in topo.hosts:
                self.agents.start(ctx, h.ns, f"{h.name}-{self.point_no}", f"{self.agents.bpffs(ctx)}/{h.name}",
                                  host_interface(h, ["floodgate"]) + section, role="host")
            for ag in self.agents.list:
                ctx.wait_for_log(ag.proc, "AGENT_STARTED", timeout=120)
        except Exception:
            self.teardown(ctx, topo)
            raise

    def metrics(self, ctx, topo):
        out = super().metrics(ctx, topo)
        out["fg_dst_pause_out"] = out["fg_dst_resume_out"] = 0
        for _, j in switch_states(ctx, topo):
            c = (j.get("logic_state") or {}).get("counters", {})
            out["fg_dst_pause_out"] += c.get("dst_pause_out", 0)
            out["fg_dst_resume_out"] += c.get("dst_resume_out", 0)
        keys = ("pauses", "resumes", "expired", "held_frames", "resent_frames", "send_errors", "overflow", "stale")
        for k in keys:
            out[f"fg_host_{k}"] = 0
        for _, modules in self.agents.live_modules(ctx, out, "fg_host_agents_exited"):
            for m in modules:
                if m["name"] == "floodgate":
                    for k in keys:
                        out[f"fg_host_{k}"] += m.get("stats", {}).get(k, 0)
        return out

    def teardown(self, ctx, topo):
        # Hosts first (each sends what it still holds), then the switches.
        self.agents.stop(ctx)
        super().teardown(ctx, topo)
