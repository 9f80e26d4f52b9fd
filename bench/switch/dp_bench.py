#!/usr/bin/env python3
"""Switch data-path benchmark (docs/switch.md): a plain shaped router port
against the substrate's two designs, in the same run, points interleaved,
on MTU-sized frames:
  a  HTB tree, one class per queue with a TBF leaf, swport classifier,
     pause = TBF change over netlink
  b  held queues in the agent: swhold diverts every frame through a ring
     buffer, the agent schedules (DRR, the port model's scheduler) and
     re-injects through AF_PACKET, keeping the port's TBF at a few packets
     (backlog_pkts(rate)); bN: the same with a kernel backlog of N frames;
     bf / bNf: and PAUSE/RESUME applied by a tc ingress program (swbench
     --bpf-pause), which the agent checks before releasing each frame
  sluiced  the product: sluiced in switch mode on the port (logic pfc, 32
     queues, its own tree: root TBF at the link rate, HTB scheduling, a TBF
     leaf per queue), flows spread so flow i uses queue i; pause = the pfc
     logic applying the PAUSE frame through sluiced's event loop
  sluiced-hold  the product with [switch] datapath = "hold": sluiced holds
     the queues (design B in the agent: swhold divert, the pfc logic's
     on_enqueue per frame, its port model, re-injection keeping the root TBF
     at 100 us of frames, >= 1); pause = the pfc logic pausing the agent's
     queue
  sluiced-holdN  the same with [switch] hold_backlog_us = N (the root TBF
     kept at N us of frames instead of 100)

    sudo bench/switch/dp_bench.py --rates 100e6,1e9 --repeats 3 --json out.json

Topology (namespaces sl<tag><runid>-{gen,sw,sink}):
    gen --g0/g1--> sw (IPv4 router) --s0/s1--> sink
The switch port is s0 (sw's egress toward sink). gen is sluice-swbench gen
(UDP flows, sport 4000+i -> dport 5000+i, paced); sink is sluice-swbench sink
(swprobe at s1's ingress). Phases per point:
  throughput  32 flows at 1.2 x link rate; bits/s leaving the port vs the rate
  latency     32 flows at 10% of the link; one-way p50/p99 (gen stamp -> sink)
  pause       one flow at 1.2 x link on queue 0; the sink sends PAUSE(0) on s1,
              reaction = when queue 0's last packet arrived - when the frame
              was sent; then RESUME(0), checked to flow again
  cpu         busy CPU time of the whole machine (/proc/stat) during the
              throughput phase / packets forwarded (the machine is shared:
              compare designs by ratio to plain in the same run)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tc-scripts", "lab"))
import sluicelab  # noqa: E402

QUEUES = 32


BASE = "@base"


def base_of(design):
    """'sluiced-hold@base' -> ('sluiced-hold', True): the same design run with
    --sluiced-base (an unchanged build of main, for before/after in one run)."""
    return (design[:-len(BASE)], True) if design.endswith(BASE) else (design, False)


def hold_backlog_us(design):
    """sluiced-hold -> 100, sluiced-holdN -> N, anything else -> None."""
    design = base_of(design)[0]
    if design == "sluiced-hold":
        return 100
    if design.startswith("sluiced-hold") and design[len("sluiced-hold"):].isdigit():
        return int(design[len("sluiced-hold"):])
    return None


def is_sluiced(design):
    return base_of(design)[0] == "sluiced" or hold_backlog_us(design) is not None


def proc_cpu(pid):
    """A process's CPU time (utime + stime of all its threads, s: sampled at
    ticks), its threads' context switches (voluntary, involuntary) and their
    exact run time (schedstat, s), or None once gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            v = f.read().rsplit(")", 1)[1].split()
        cpu = (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")
        vol = inv = 0
        run_ns = wait_ns = 0
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                x = f.read().split()
                run_ns += int(x[0])
                wait_ns += int(x[1])
            with open(f"/proc/{pid}/task/{t}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        vol += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches"):
                        inv += int(line.split()[1])
        return cpu, vol, inv, run_ns / 1e9, wait_ns / 1e9
    except (OSError, IndexError, ValueError):
        return None


def cpu_busy_s():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return (sum(v) - idle) / os.sysconf("SC_CLK_TCK")


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("no JSON in output:\n" + text[-2000:])


def burst_bytes(rate):
    return max(3200, int(rate / 8 / 10000))  # 100 us at the rate, >= 2 frames


def design_b_backlog(design, rate):
    """'b' -> the default backlog at this rate; 'bN' -> N frames (either
    with an 'f' suffix: pause in BPF); else None."""
    d = design[:-1] if design.endswith("f") else design
    if d == "b":
        return backlog_pkts(rate)
    if d.startswith("b") and d[1:].isdigit() and int(d[1:]) >= 1:
        return int(d[1:])
    return None


def backlog_pkts(rate):
    """Design B's kernel backlog: 100 us of frames at the rate, at least 2
    (what the agent's wake-up latency needs to keep the link busy)."""
    return max(2, round(100e-6 * rate / (1514 * 8)))


class Bench:
    def __init__(self, lab, tool, sluiced=None, sched="fifo", sluiced_base=None):
        self.lab = lab
        self.tool = tool
        self.sluiced = sluiced
        self.sluiced_base = sluiced_base
        self.agent_pid = None  # the running switch process (its CPU per phase)
        # SCHED_FIFO (docs/lab.md): other load on the shared machine must not
        # delay the switch's reaction or the probe; the switch above the sink
        # above the generator.
        self.prio = {"switch": ["chrt", "-f", "12"], "sink": ["chrt", "-f", "11"],
                     "gen": ["chrt", "-f", "10"]} if sched == "fifo" else {}
        self.gen, self.sw, self.sink = lab.add_namespaces(["gen", "sw", "sink"])
        g0, g1, s0, s1 = (lab.if_name(n) for n in ("g0", "g1", "s0", "s1"))
        self.g0, self.g1, self.s0, self.s1 = g0, g1, s0, s1
        sluicelab.sh(["ip", "link", "add", g0, "netns", self.gen, "type", "veth", "peer", "name", g1,
                      "netns", self.sw])
        sluicelab.sh(["ip", "link", "add", s0, "netns", self.sw, "type", "veth", "peer", "name", s1,
                      "netns", self.sink])
        lab.ip_batch(self.gen, [f"addr add 10.9.1.1/24 dev {g0}", f"link set {g0} up", "link set lo up",
                                "route add default via 10.9.1.2"])
        lab.ip_batch(self.sw, [f"addr add 10.9.1.2/24 dev {g1}", f"link set {g1} up",
                               f"addr add 10.9.2.2/24 dev {s0}", f"link set {s0} up", "link set lo up",
                               "neigh replace 10.9.2.1 lladdr 02:00:00:00:02:01 dev " + s0])
        lab.ip_batch(self.sink, [f"link set {s1} address 02:00:00:00:02:01",
                                 f"addr add 10.9.2.1/24 dev {s1}", f"link set {s1} up", "link set lo up",
                                 "route add default via 10.9.2.2"])
        lab.sysctl(self.sw, {"net.ipv4.ip_forward": 1})
        # MTU-sized frames everywhere (ARCHITECTURE "Switch experiments").
        for ns, dev in ((self.gen, g0), (self.sw, g1), (self.sw, s0), (self.sink, s1)):
            lab.nsexec(ns, f"ethtool -K {dev} tso off gso off gro off >/dev/null 2>&1", check=False)

    def setup_port(self, design, rate):
        s0, b = self.s0, burst_bytes(rate)
        self.lab.nsexec(self.sw, f"tc qdisc del dev {s0} root 2>/dev/null; "
                                 f"tc qdisc del dev {s0} clsact 2>/dev/null", check=False)
        if is_sluiced(design):
            return  # sluiced builds its tree or root (and replaces whatever root is there)
        if design == "plain" or design_b_backlog(design, rate):
            # Design B keeps its queues in the agent: the port's qdisc is the
            # plain shaper, holding only the shallow backlog.
            self.lab.tc_batch(self.sw, [f"qdisc add dev {s0} root handle 10: tbf rate {int(rate)}bit "
                                        f"burst {b} limit 131072"])
            return
        lines = [f"qdisc add dev {s0} root handle 10: htb default 1 r2q 1",
                 f"class add dev {s0} parent 10: classid 10:1000 htb rate {int(rate)}bit "
                 f"burst {b} cburst {b}"]
        for q in range(QUEUES):
            lines.append(f"class add dev {s0} parent 10:1000 classid 10:{q + 1:x} htb rate "
                         f"{int(rate / QUEUES)}bit ceil {int(rate)}bit burst {b} cburst {b} quantum 1514")
            lines.append(f"qdisc add dev {s0} parent 10:{q + 1:x} handle {0x100 + q + 1:x}: tbf rate "
                         f"{int(rate)}bit burst {b} limit 131072")
        self.lab.tc_batch(self.sw, lines)

    def sluiced_config(self, rate, hold_us=None):
        state = os.path.join(self.lab.tmp, "sluiced")
        os.makedirs(state, exist_ok=True)
        cfg = os.path.join(self.lab.tmp, "sluiced.toml")
        with open(cfg, "w") as f:
            f.write("\n".join([
                "[agent]", f'pin_root = "/sys/fs/bpf/sluice-{self.lab.prefix}"', f'state_dir = "{state}"',
                f'control_socket = "{state}/sluiced.sock"', "[metrics]", "enabled = false",
                "[switch]", 'logic = "pfc"', f"queues = {QUEUES}", f"rate_mbit = {int(rate / 1e6)}",
                f'datapath = "hold"\nhold_backlog_us = {hold_us}' if hold_us else 'datapath = "tree"',
                "buffer_bytes = 131072", f"burst_bytes = {burst_bytes(rate)}",
                "[[switch.ports]]", f'name = "{self.s0}"', 'role = "switch-facing"']) + "\n")
        return cfg

    def sluiced_state(self):
        """sluiced's own view of the port: pause changes and how long each
        took from the frame's arrival (pause_apply_us) and in netlink."""
        ctl = os.path.join(os.path.dirname(self.sluiced), "sluicectl")
        sock = os.path.join(self.lab.tmp, "sluiced", "sluiced.sock")
        r = self.lab.nsexec(self.sw, f"{ctl} -s {sock} switch --json", check=False)
        try:
            port = json.loads(r.stdout)["ports"][0]
        except (ValueError, KeyError, IndexError):
            return {"error": (r.stdout + r.stderr)[-500:]}
        keys = ("pause_apply_us", "pause_netlink_us", "pause_apply_total", "pause_changes", "pause_failures",
                "fail_open_pkts", "control", "hold")
        return {k: port.get(k) for k in keys}

    def start_switch(self, design, rate):
        if design == "plain":
            return None
        if is_sluiced(design):
            binary = self.sluiced_base if base_of(design)[1] else self.sluiced
            argv, ready = [binary, "--config", self.sluiced_config(rate, hold_backlog_us(design))], \
                "SWITCH_STARTED"
        else:
            bl = design_b_backlog(design, rate)
            argv = [self.tool, "switch", "--dev", self.s0, "--queues", str(QUEUES), "--rate-bps", str(int(rate)),
                    "--flows", str(QUEUES), "--design", "b" if bl else design]
            if bl:
                argv += ["--backlog", str(bl)] + (["--bpf-pause"] if design.endswith("f") else [])
            ready = "ready"
        p = self.lab.spawn(self.sw, self.prio.get("switch", []) + argv, "switch")
        for _ in range(200):
            if ready in self.lab.log_of(p):
                self.agent_pid = p.pid  # ip netns exec and chrt exec: the switch itself
                return p
            if p.poll() is not None:
                raise RuntimeError("switch failed:\n" + self.lab.log_of(p))
            time.sleep(0.05)
        raise RuntimeError("switch not ready:\n" + self.lab.log_of(p))

    def phase(self, rate, flows, load, secs, samples=0, name="x", spread=0):
        gen_secs = secs + 1.0 + samples * 0.016 + 0.5
        sink = self.lab.spawn(self.sink, self.prio.get("sink", []) + [self.tool, "sink", "--dev", self.s1, "--flows", str(flows),
                                          "--secs", str(secs), "--pause-samples", str(samples),
                                          "--settle-ms", "5"], f"sink-{name}")
        while "ready" not in self.lab.log_of(sink):
            if sink.poll() is not None:
                raise RuntimeError("sink failed:\n" + self.lab.log_of(sink))
            time.sleep(0.02)
        stats0 = self.port_sent()
        a0 = proc_cpu(self.agent_pid) if self.agent_pid else None
        c0 = cpu_busy_s()
        gen = self.lab.spawn(self.gen, self.prio.get("gen", []) + [
            self.tool, "gen", "--flows", str(flows), "--rate-bps", str(int(rate * load)), "--secs", str(gen_secs),
            "--spread-queues", str(spread)], f"gen-{name}")
        sink.wait(timeout=gen_secs + 30)
        c1 = cpu_busy_s()
        a1 = proc_cpu(self.agent_pid) if self.agent_pid else None
        stats1 = self.port_sent()
        out = last_json(self.lab.log_of(sink))
        gen.wait(timeout=gen_secs + 30)
        out["gen"] = last_json(self.lab.log_of(gen))
        self.lab.procs[:] = [p for p in self.lab.procs if p.poll() is None]
        pk = stats1 - stats0
        out["port_pkts"] = pk
        out["cpu_us_per_pkt"] = (c1 - c0) * 1e6 / pk if pk else None
        if a0 and a1 and pk:
            # The switch process's own CPU (utime + stime, all threads) per
            # frame the port forwarded, and its context switches per frame
            # (voluntary ~ wake-ups). Its sendmmsg runs the port's qdisc and
            # the veth, whose xmit can run the receiver's softirq in its
            # context: forwarding work the plain kernel path does too.
            out["agent_cpu_s"] = a1[0] - a0[0]
            out["agent_cpu_us_per_pkt"] = (a1[0] - a0[0]) * 1e6 / pk
            # schedstat's run time is exact; utime + stime are charged a tick
            # at a time to whoever runs at the tick, which over-counts a
            # process woken tens of thousands of times a second.
            out["agent_run_s"] = a1[3] - a0[3]
            out["agent_run_us_per_pkt"] = (a1[3] - a0[3]) * 1e6 / pk
            out["agent_runq_wait_s"] = a1[4] - a0[4]  # runnable but not running
            out["agent_vcsw_per_pkt"] = (a1[1] - a0[1]) / pk
            out["agent_icsw_per_pkt"] = (a1[2] - a0[2]) / pk
        return out

    def port_sent(self):
        r = self.lab.nsexec(self.sw, f"tc -s -j qdisc show dev {self.s0} root")
        for q in json.loads(r.stdout):
            if q.get("root"):
                return q.get("packets", 0)
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="100e6,1e9")
    ap.add_argument("--designs", default="plain,a,b")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--secs", type=float, default=3.0)
    ap.add_argument("--pause-samples", type=int, default=150)
    ap.add_argument("--json", required=True)
    ap.add_argument("--lab-tag", default="sw", help="namespaces are sl<TAG><run id>-*")
    ap.add_argument("--sched", choices=["normal", "fifo"], default="fifo",
                    help="fifo: switch, sink and generator under SCHED_FIFO (12, 11, 10)")
    ap.add_argument("--sluiced", default=os.path.join(os.environ.get("SLUICE_BUILD_DIR", os.path.join(ROOT, "build")),
                                                      "agent", "sluiced"))
    ap.add_argument("--sluiced-base", default=None,
                    help="sluiced for designs with an '@base' suffix (e.g. sluiced-hold@base): an unchanged "
                         "build, interleaved with the current one in the same run")
    ap.add_argument("--tool", default=os.path.join(os.environ.get("SLUICE_BUILD_DIR", os.path.join(ROOT, "build")),
                                                   "bench", "sluice-swbench"))
    args = ap.parse_args()
    for d in args.designs.split(","):
        if d not in ("plain", "a") and not is_sluiced(d) and design_b_backlog(d, 1e8) is None:
            ap.error(f"--designs: unknown design {d!r} (plain, a, b, bN, sluiced, sluiced-hold, sluiced-holdN)")
        if base_of(d)[1] and not (is_sluiced(d) and args.sluiced_base):
            ap.error(f"--designs: {d!r} needs a sluiced design and --sluiced-base")
    rows = []
    load = [os.getloadavg()]
    with sluicelab.Lab(tag=args.lab_tag) as lab:
        b = Bench(lab, args.tool, args.sluiced, args.sched, args.sluiced_base)
        for rate in [float(x) for x in args.rates.split(",")]:
            for rep in range(args.repeats):
                for design in args.designs.split(","):
                    b.setup_port(design, rate)
                    sw = b.start_switch(design, rate)
                    row = {"rate": rate, "design": design, "repeat": rep, "sched": args.sched}
                    spread = QUEUES if is_sluiced(design) else 0
                    row["throughput"] = b.phase(rate, QUEUES, 1.2, args.secs, name="tput", spread=spread)
                    row["latency"] = b.phase(rate, QUEUES, 0.1, args.secs, name="lat", spread=spread)
                    if design != "plain" and args.pause_samples:
                        row["pause"] = b.phase(rate, 1, 1.2, 0.5, samples=args.pause_samples, name="pause",
                                               spread=spread)
                    if sw and is_sluiced(design):
                        row["switch"] = b.sluiced_state()
                    if sw:
                        lab.stop(sw)
                        b.agent_pid = None
                        if not is_sluiced(design):
                            row["switch"] = last_json(lab.log_of(sw))
                        else:
                            # The heartbeat withdrew (the loop did not reach
                            # its timers): BPF failed open from then on.
                            paused = [ln for ln in lab.log_of(sw).splitlines() if "HEARTBEAT_PAUSED" in ln]
                            row["heartbeat_withdrawals"] = len(paused)
                            row["heartbeat_withdrawn_first"] = paused[:2]
                    t = row["throughput"]
                    print(f"rate={rate:.0e} {design:12s} rep={rep} tput={t['bps'] / rate:.3f} "
                          f"lat_p50={row['latency']['lat_us_p50']}us p99={row['latency']['lat_us_p99']}us "
                          f"cpu/pkt={t['cpu_us_per_pkt'] and round(t['cpu_us_per_pkt'], 2)}us "
                          + (f"agent cpu/pkt tput={t['agent_cpu_us_per_pkt']:.2f}us "
                             f"lat={row['latency'].get('agent_cpu_us_per_pkt', 0):.2f}us "
                             f"run/pkt tput={t['agent_run_us_per_pkt']:.2f}us "
                             f"lat={row['latency'].get('agent_run_us_per_pkt', 0):.2f}us "
                             f"vcsw/pkt={t['agent_vcsw_per_pkt']:.2f} " if "agent_cpu_us_per_pkt" in t else "")
                          + (f"withdrawals={row['heartbeat_withdrawals']} " if "heartbeat_withdrawals" in row else "")
                          + (f"ring_wait mean={row['switch']['hold']['ring_wait_us_mean']:.0f}us "
                             f"max={row['switch']['hold']['ring_wait_us_max']:.0f}us "
                             if (row.get("switch") or {}).get("hold") else "")
                          + (f"pause p50={row['pause']['pause_react_us_p50']:.0f}us "
                             f"p99={row['pause']['pause_react_us_p99']:.0f}us n={row['pause']['pause_samples']} "
                             f"not_holding={row['pause']['pause_not_holding']} "
                             f"not_resumed={row['pause']['pause_not_resumed']}" if "pause" in row else "")
                          + (f" apply(frame->tc) p50={row['switch']['pause_apply_us']['p50']}us "
                             f"p99={row['switch']['pause_apply_us']['p99']}us "
                             f"netlink p99={row['switch']['pause_netlink_us']['p99']}us "
                             f"n={row['switch']['pause_apply_us']['samples']}"
                             if is_sluiced(design) and row.get("switch", {}).get("pause_apply_us") else "")
                          + (f" backlog={row['switch']['backlog_target']} watchdog fired={row['switch']['watchdog_fired']}"
                             f" fixed={row['switch']['watchdog_fixed']} ({row['switch']['watchdog_fixed_frames']} frames)"
                             f" deq_events={row['switch']['dequeued_events']}/{row['switch']['qdisc_sent']}"
                             if "watchdog_fired" in row.get("switch", {}) else ""),
                          flush=True)
                    row["loadavg"] = os.getloadavg()
                    load.append(row["loadavg"])
                    rows.append(row)
    with open(args.json, "w") as f:
        json.dump(rows, f, indent=1)
    summarize(rows)
    print("load average (1 min) during the run: %.1f..%.1f" % (min(x[0] for x in load), max(x[0] for x in load)))


def summarize(rows):
    by = {}
    for r in rows:
        by.setdefault((r["rate"], r["design"]), []).append(r)
    print("\nrate   design        tput/link (min..max)   tput/plain  lat p50/p99 us (median)  cpu us/pkt  pause p99 us (n)")
    for (rate, design), rs in sorted(by.items()):
        t = [r["throughput"]["bps"] / rate for r in rs]
        plain = [r["throughput"]["bps"] for r in by.get((rate, "plain"), [])]
        rel = statistics.median([r["throughput"]["bps"] for r in rs]) / statistics.median(plain) if plain else float("nan")
        lat50 = statistics.median([r["latency"]["lat_us_p50"] for r in rs])
        lat99 = statistics.median([r["latency"]["lat_us_p99"] for r in rs])
        cpu = [r["throughput"]["cpu_us_per_pkt"] for r in rs if r["throughput"]["cpu_us_per_pkt"]]
        pz = [r["pause"]["pause_react_us_p99"] for r in rs if "pause" in r]
        pn = sum(r["pause"]["pause_samples"] for r in rs if "pause" in r)
        wd = [r["switch"]["watchdog_fired"] for r in rs if "watchdog_fired" in r.get("switch", {})]
        ag = [(r["throughput"]["agent_run_us_per_pkt"], r["latency"].get("agent_run_us_per_pkt", float("nan")))
              for r in rs if "agent_run_us_per_pkt" in r["throughput"]]
        print(f"{rate:.0e}  {design:12s}  {statistics.median(t):.3f} ({min(t):.3f}..{max(t):.3f})   {rel:.3f}      "
              f"{lat50:.1f}/{lat99:.1f}              {statistics.median(cpu) if cpu else float('nan'):.2f}       "
              + (f"{statistics.median(pz):.0f} ({min(pz):.0f}..{max(pz):.0f}, n={pn})" if pz else "-")
              + (f"  watchdog fired {wd} per repeat" if wd else "")
              + ("  agent run us/frame (tput, lat) per repeat: " + ", ".join(f"{a:.1f}/{b:.1f}" for a, b in ag)
                 if ag else ""))


if __name__ == "__main__":
    main()
