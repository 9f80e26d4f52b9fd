// sluiced on a real veth in a network namespace, with real traffic:
// counters in sluicectl and Prometheus, kill -9 fails open, restarts reuse
// pinned maps, foreign tc filters survive, bad configs attach nothing,
// SIGHUP keeps the old config when the new one is bad, --check tells truth.
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <sys/utsname.h>
#include <sys/wait.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "flowstat.skel.h"
#include "core/bpf_util.h"
#include "core/features.h"
#include "core/netns.h"
#include "lib/drill.h"
#include "lib/netns_fixture.h"

SLUICE_SKELETON(flowstat);

using namespace sluice;
using namespace sluice::test;
using nlohmann::json;

namespace {

// Kernel version as major * 100 + minor (6.18 -> 618).
int kernel_version() {
  utsname u{};
  uname(&u);
  int major = 0, minor = 0;
  sscanf(u.release, "%d.%d", &major, &minor);
  return major * 100 + minor;
}

class AgentTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "integration tests need root";
    lab_ = std::make_unique<Lab>("t");
    a_ = lab_->add_ns("a");
    b_ = lab_->add_ns("b");
    lab_->add_veth(a_, "a0", "10.201.0.1/24", b_, "b0", "10.201.0.2/24");
    ifb_ = lab_->name("b0");
    sock_ = lab_->tmpdir() + "/ctl.sock";
    cfg_ = lab_->tmpdir() + "/sluiced.toml";
    write_config("");
  }
  void TearDown() override {
    agent_.stop();
    iperf_.stop();
    lab_.reset();
  }

  std::string mode() const { return GetParam(); }

  void write_config(const std::string& extra, const std::string& iface_extra = "") {
    std::ofstream f(cfg_);
    f << "[agent]\n"
      << "pin_root = \"" << lab_->bpffs() << "/sluice\"\n"
      << "state_dir = \"" << lab_->tmpdir() << "/state\"\n"
      << "control_socket = \"" << sock_ << "\"\n"
      << "attach_mode = \"" << mode() << "\"\n"
      << extra << "\n"
      << "[[interface]]\nname = \"" << ifb_ << "\"\n"
      << iface_extra;
  }

  Process start_agent(const std::string& log = "sluiced") {
    Process p = lab_->spawn(b_, {build_path("agent/sluiced"), "-c", cfg_}, log);
    bool up = eventually([&] { return ctl_ok("status"); }, std::chrono::seconds(10));
    EXPECT_TRUE(up) << "sluiced did not come up; log:\n" << p.log();
    return p;
  }

  bool ctl_ok(const std::string& cmd) {
    int st = -1;
    lab_->out(build_path("agent/sluicectl") + " -s " + sock_ + " " + cmd + " --json >/dev/null 2>&1", &st);
    return st == 0;
  }

  json ctl(const std::string& cmd) {
    int st = -1;
    std::string o = lab_->out(build_path("agent/sluicectl") + " -s " + sock_ + " " + cmd + " --json", &st);
    EXPECT_EQ(st, 0) << "sluicectl " << cmd << " failed: " << o;
    try {
      return json::parse(o);
    } catch (...) {
      ADD_FAILURE() << "sluicectl " << cmd << " printed no JSON: " << o;
      return json::object();
    }
  }

  // Bytes of the TCP flow a->b:5201 seen at ingress of b0, 0 if none.
  uint64_t ingress_tcp_bytes() {
    json j = ctl("flows -n 0");
    uint64_t b = 0;
    for (const auto& i : j["interfaces"])
      for (const auto& f : i["flows"])
        if (f["dir"] == "ingress" && f["proto"] == "tcp" && f["dport"] == 5201) b += f["bytes"].get<uint64_t>();
    return b;
  }

  uint64_t counted_packets() {
    json j = ctl("stats");
    for (const auto& i : j["interfaces"])
      for (const auto& m : i["modules"])
        for (const auto& p : m["programs"])
          for (const auto& v : p["verdicts"])
            if (v["reason"] == "PASS_COUNTED") return v["packets"];
    return 0;
  }

  // Sends `bytes` over TCP from a to b; returns the payload bytes the
  // receiver got (iperf3 stops reading at the end of the test, so data still
  // in socket buffers never crosses the wire), 0 on failure.
  uint64_t transfer(const std::string& bytes = "8M") {
    iperf_ = lab_->spawn(b_, {"iperf3", "-s", "-1", "-B", "10.201.0.2"}, "iperf3-server");
    bool listening = eventually([&] { return lab_->nsh(b_, "ss -ltn | grep -q :5201") == 0; }, std::chrono::seconds(5));
    if (!listening) return 0;
    int st = -1;
    std::string o = lab_->out("ip netns exec " + a_ + " timeout 20 iperf3 -J -c 10.201.0.2 -n " + bytes, &st);
    iperf_.wait(std::chrono::seconds(5));
    if (st != 0) return 0;
    try {
      return json::parse(o)["end"]["sum_received"]["bytes"].get<uint64_t>();
    } catch (...) {
      ADD_FAILURE() << "iperf3 -J printed no result: " << o.substr(0, 500);
      return 0;
    }
  }

  std::string tc_filters(const std::string& hook) {
    return lab_->out("ip netns exec " + b_ + " tc filter show dev " + ifb_ + " " + hook + " 2>&1");
  }
  bool has_clsact() {
    return lab_->out("ip netns exec " + b_ + " tc qdisc show dev " + ifb_).find("clsact") != std::string::npos;
  }

  std::unique_ptr<Lab> lab_;
  std::string a_, b_, ifb_, sock_, cfg_;
  Process agent_, iperf_;
};

TEST_P(AgentTest, CountersMoveUnderTrafficInSluicectlAndPrometheus) {
  agent_ = start_agent();
  json st = ctl("status");
  EXPECT_EQ(st["attach_mode"], mode());
  uint64_t before = counted_packets();
  uint64_t got = transfer("8M");
  // `got` is what iperf3's server had read when the client's end message
  // came; under load most of the 8 MB can still sit in socket buffers then
  // (1,031,784 bytes seen at load ~8). Traffic flowed is what matters here.
  ASSERT_GT(got, 1u << 19);
  uint64_t bytes = ingress_tcp_bytes();
  EXPECT_GT(bytes, got) << "flowstat saw less than the payload the receiver got";
  EXPECT_GT(counted_packets(), before + 100);
  std::string metrics = lab_->out("ip netns exec " + b_ + " curl -sf http://127.0.0.1:9477/metrics");
  std::smatch m;
  std::regex re("sluice_iface_bytes_total\\{iface=\"" + ifb_ + "\",dir=\"ingress\"\\} ([0-9.e+]+)");
  ASSERT_TRUE(std::regex_search(metrics, m, re)) << metrics.substr(0, 2000);
  EXPECT_GE(std::stod(m[1]), double(got));
  EXPECT_NE(metrics.find("sluice_verdict_packets_total{iface=\"" + ifb_ + "\""), std::string::npos);
}

TEST_P(AgentTest, Kill9LeavesTrafficFlowing) {
  agent_ = start_agent();
  ASSERT_GT(transfer("2M"), 0u);
  agent_.kill9();
  EXPECT_GT(transfer("8M"), 1u << 19) << "traffic stopped after kill -9 of the agent";
}

TEST_P(AgentTest, RestartReusesPinnedMapsAfterKill9AndSigterm) {
  agent_ = start_agent("sluiced-1");
  uint64_t got1 = transfer("4M");
  uint64_t b1 = ingress_tcp_bytes();
  uint64_t c1 = counted_packets();
  ASSERT_GT(b1, got1);
  agent_.kill9();
  agent_ = start_agent("sluiced-2");
  EXPECT_GE(ingress_tcp_bytes(), b1) << "flow counters lost across kill -9 + restart";
  EXPECT_GE(counted_packets(), c1) << "verdict counters lost across kill -9 + restart";
  uint64_t got2 = transfer("4M");
  ASSERT_GT(got2, 0u);
  uint64_t b2 = ingress_tcp_bytes();
  EXPECT_GT(b2, b1 + got2);
  // Clean stop and start: still the same maps.
  EXPECT_EQ(WEXITSTATUS(agent_.stop()), 0);
  agent_ = start_agent("sluiced-3");
  EXPECT_GE(ingress_tcp_bytes(), b2);
  // Only one sluice filter per hook, whatever happened before.
  if (mode() == "clsact") {
    std::string f = tc_filters("ingress");
    EXPECT_EQ(std::count(f.begin(), f.end(), '\n') > 0, true);
    size_t n = 0;
    for (size_t pos = 0; (pos = f.find("handle 0x51 ", pos)) != std::string::npos; ++pos) ++n;
    EXPECT_EQ(n, 1u) << f;
  }
}

// An upgrade across a map rename (docs/architecture.md "Pinned maps"): the
// pins of an older build (pre-rule names) stay beside the new ones, unused;
// the agent loads, adopts its own pins and counts; --purge removes both,
// also the host-wide pin directory of Pulser's EIN map.
TEST_P(AgentTest, OldMapNamesStayBesideNewOnesUntilPurge) {
  const std::string root = lab_->bpffs() + "/sluice";
  const std::string fs_dir = root + "/" + ifb_ + "/flowstat";
  ASSERT_EQ(lab_->nsh(b_, "mkdir -p " + fs_dir + " " + root + "/cc"), 0);
  for (const std::string& pin : {fs_dir + "/sl_flows", root + "/cc/sl_ein_sk"})
    ASSERT_EQ(lab_->nsh(b_, "bpftool map create " + pin + " type hash key 4 value 4 entries 1 name " +
                                pin.substr(pin.rfind('/') + 1)),
              0)
        << "cannot pin an old-named map at " << pin;
  agent_ = start_agent("sluiced-1");
  uint64_t got = transfer("4M");
  ASSERT_GT(got, 0u);
  uint64_t b1 = ingress_tcp_bytes();
  EXPECT_GT(b1, got) << "flowstat did not count with an old pin beside its maps";
  std::string pins = lab_->out("ls " + fs_dir);
  EXPECT_NE(pins.find("sl_fs_flows_v1"), std::string::npos) << pins;
  EXPECT_NE(pins.find("sl_flows"), std::string::npos) << "the old pin was removed by a start: " << pins;
  EXPECT_EQ(WEXITSTATUS(agent_.stop()), 0);
  agent_ = start_agent("sluiced-2");
  EXPECT_GE(ingress_tcp_bytes(), b1) << "the restarted agent did not adopt sl_fs_flows_v1";
  EXPECT_EQ(WEXITSTATUS(agent_.stop()), 0);
  int st = -1;
  std::string o =
      lab_->out("ip netns exec " + b_ + " " + build_path("agent/sluiced") + " -c " + cfg_ + " --purge", &st);
  EXPECT_EQ(st, 0) << o;
  EXPECT_EQ(lab_->out("ls -A " + root + " 2>&1"), "") << "pins left after --purge: " << lab_->out("find " + root);
}

TEST_P(AgentTest, SigtermLeavesNoFiltersAndRemovesOnlyItsOwnClsact) {
  ASSERT_FALSE(has_clsact());
  agent_ = start_agent();
  if (mode() == "clsact") {
    EXPECT_TRUE(has_clsact());
    EXPECT_NE(tc_filters("ingress").find("flowstat_in"), std::string::npos);
  }
  EXPECT_EQ(WEXITSTATUS(agent_.stop()), 0);
  EXPECT_EQ(tc_filters("ingress").find("flowstat"), std::string::npos);
  EXPECT_EQ(tc_filters("egress").find("flowstat"), std::string::npos);
  EXPECT_FALSE(has_clsact()) << "the clsact qdisc sluice created was left behind";
}

// Four flowstat objects standing in for another tool's programs: one per
// clsact direction, and one per tcx direction where the kernel has tcx.
struct ForeignFlowstat {
  Skeleton<flowstat> cin, cout, tin, tout;
  ForeignHooks::Progs progs() {
    for (auto* s : {&cin, &cout, &tin, &tout}) s->load();
    ForeignHooks::Progs p;
    p.clsact_in = bpf_program__fd(cin->progs.flowstat_in);
    p.clsact_out = bpf_program__fd(cout->progs.flowstat_out);
    if (kernel_version() >= 606) {
      p.tcx_in = bpf_program__fd(tin->progs.flowstat_in);
      p.tcx_out = bpf_program__fd(tout->progs.flowstat_out);
    }
    return p;
  }
};

// Someone else's programs on every hook sluice uses -- clsact ingress and
// egress filters and tcx links on both directions -- attached before
// sluiced starts. They stay attached and keep seeing the traffic through
// sluice's attach, a kill -9, the restart that re-adopts the hooks, and a
// clean detach; the clsact qdisc they share is left in place.
TEST_P(AgentTest, ForeignProgramsOnEveryHookSurviveAttachKillRestartAndDetach) {
  ForeignFlowstat fs;
  const ForeignHooks::Progs progs = fs.progs();
  ForeignHooks foreign(b_, ifb_, progs);
  auto seen = [&] {
    std::vector<uint64_t> v;
    for (auto* s : {&fs.cin, &fs.cout, &fs.tin, &fs.tout})
      v.push_back(read_reason_counters(bpf_map__fd((*s)->maps.sl_counters))[SLUICE_R_PASS_COUNTED].packets);
    return v;
  };
  const char* names[] = {"clsact ingress", "clsact egress", "tcx ingress", "tcx egress"};
  // Every foreign program saw the transfer: the data at ingress, the ACKs at
  // egress (GRO makes them few: tens per 2 MB).
  auto all_saw_traffic = [&](const std::string& when) {
    std::vector<uint64_t> before = seen();
    uint64_t got = transfer("2M");
    ASSERT_GT(got, 0u) << "no traffic " << when;
    std::vector<uint64_t> after = seen();
    for (size_t i = 0; i < 4; ++i) {
      if (i >= 2 && progs.tcx_in < 0) continue;
      EXPECT_GT(after[i], before[i] + (i % 2 ? 10 : 100))
          << "the foreign " << names[i] << " program saw no traffic " << when;
    }
  };
  all_saw_traffic("before sluiced started");
  agent_ = start_agent("sluiced-1");
  EXPECT_EQ(foreign.missing(), "") << "after sluiced attached";
  uint64_t c0 = counted_packets();
  all_saw_traffic("with sluiced attached");
  EXPECT_GT(counted_packets(), c0 + 100) << "sluice itself did not count beside the foreign programs";
  agent_.kill9();
  EXPECT_EQ(foreign.missing(), "") << "after kill -9 of sluiced";
  all_saw_traffic("after kill -9 of sluiced");
  agent_ = start_agent("sluiced-2");
  EXPECT_EQ(foreign.missing(), "") << "after the restart";
  c0 = counted_packets();
  all_saw_traffic("after the restart");
  EXPECT_GT(counted_packets(), c0 + 100) << "the restarted sluiced did not count";
  EXPECT_EQ(WEXITSTATUS(agent_.stop()), 0);
  EXPECT_EQ(foreign.missing(), "") << "after sluiced detached (SIGTERM)";
  EXPECT_TRUE(has_clsact()) << "a clsact qdisc we did not create (and still in use) was deleted";
  for (const char* hook : {"ingress", "egress"}) {
    EXPECT_EQ(tc_filters(hook).find("handle 0x51 "), std::string::npos) << "sluice's filter left on " << hook;
  }
  all_saw_traffic("after sluiced detached");
}

// The other order: sluiced is attached first (in clsact mode it creates the
// qdisc), someone attaches to the same hooks, sluiced stops. The foreign
// programs and the qdisc they now use stay.
TEST_P(AgentTest, ForeignProgramsAttachedAfterSluicedSurviveItsDetach) {
  ASSERT_FALSE(has_clsact());
  agent_ = start_agent();
  ForeignFlowstat fs;
  ForeignHooks foreign(b_, ifb_, fs.progs());
  ASSERT_GT(transfer("2M"), 0u);
  EXPECT_EQ(WEXITSTATUS(agent_.stop()), 0);
  EXPECT_EQ(foreign.missing(), "") << "after sluiced detached (SIGTERM)";
  EXPECT_TRUE(has_clsact()) << "sluice removed the clsact qdisc it created while others' filters were on it";
  uint64_t before = read_reason_counters(bpf_map__fd(fs.cin->maps.sl_counters))[SLUICE_R_PASS_COUNTED].packets;
  ASSERT_GT(transfer("2M"), 0u);
  EXPECT_GT(read_reason_counters(bpf_map__fd(fs.cin->maps.sl_counters))[SLUICE_R_PASS_COUNTED].packets, before + 100);
}

TEST_P(AgentTest, BadConfigIsRefusedNamingTheKeyAndAttachesNothing) {
  write_config("[metrics]\nport = 99999\n");
  Process p = lab_->spawn(b_, {build_path("agent/sluiced"), "-c", cfg_}, "sluiced-bad");
  int st = p.wait(std::chrono::seconds(10));
  ASSERT_NE(st, -1) << "sluiced with a bad config did not exit";
  EXPECT_NE(WEXITSTATUS(st), 0);
  EXPECT_NE(p.log().find("metrics.port = 99999: out of range"), std::string::npos) << p.log();
  EXPECT_FALSE(has_clsact());
  EXPECT_EQ(lab_->out("ls " + lab_->bpffs() + "/sluice 2>/dev/null"), "") << "pins made by a refused config";
}

TEST_P(AgentTest, PartialAttachFailureRollsBack) {
  write_config("", "[[interface]]\nname = \"" + lab_->name("nope0") + "\"\n");
  Process p = lab_->spawn(b_, {build_path("agent/sluiced"), "-c", cfg_}, "sluiced-partial");
  int st = p.wait(std::chrono::seconds(10));
  ASSERT_NE(st, -1);
  EXPECT_NE(WEXITSTATUS(st), 0);
  EXPECT_NE(p.log().find("nope0"), std::string::npos) << p.log();
  EXPECT_EQ(tc_filters("ingress").find("flowstat"), std::string::npos) << "first interface left attached";
  EXPECT_FALSE(has_clsact());
}

TEST_P(AgentTest, SighupKeepsRunningConfigWhenNewOneIsBad) {
  agent_ = start_agent();
  write_config("[flowstat]\nidle_timeout_s = -5\n");
  ::kill(agent_.pid(), SIGHUP);
  ASSERT_TRUE(eventually([&] { return ctl("status")["reloads"]["rejected"] == 1; }, std::chrono::seconds(5)));
  EXPECT_TRUE(agent_.running());
  uint64_t got = transfer("2M");
  ASSERT_GT(got, 0u);
  EXPECT_GT(ingress_tcp_bytes(), got) << "counting stopped after a rejected reload";
  write_config("[flowstat]\nidle_timeout_s = 60\n");
  ::kill(agent_.pid(), SIGHUP);
  ASSERT_TRUE(eventually([&] { return ctl("status")["reloads"]["ok"] == 1; }, std::chrono::seconds(5)));
  EXPECT_EQ(ctl("config")["config"]["flowstat"]["idle_timeout_s"], 60);
  uint64_t b = ingress_tcp_bytes();
  uint64_t got2 = transfer("2M");
  ASSERT_GT(got2, 0u);
  EXPECT_GT(ingress_tcp_bytes(), b + got2) << "counting stopped after an accepted reload";
}

INSTANTIATE_TEST_SUITE_P(AttachModes, AgentTest, ::testing::Values("tcx", "clsact"),
                         [](const auto& info) { return info.param; });

// `sluiced --check` must report what this kernel has: a feature the kernel
// version must have is a failure if reported missing.
TEST(Check, TellsTheTruthOnThisKernel) {
  int st = -1;
  Lab lab("c");
  std::string o = lab.out(build_path("agent/sluiced") + " --check 2>&1", &st);
  EXPECT_EQ(st, 0) << o;
  utsname u{};
  uname(&u);
  int v = kernel_version();
  auto yes = [&](const std::string& f) { return std::regex_search(o, std::regex("\\n  " + f + " +yes")); };
  EXPECT_TRUE(yes("btf")) << o;
  EXPECT_TRUE(yes("ringbuf")) << o;
  EXPECT_TRUE(yes("tc-clsact")) << o;
  EXPECT_TRUE(yes("xdp")) << o;
  EXPECT_TRUE(yes("struct-ops-tcp-cc")) << o;
  EXPECT_TRUE(yes("tp-btf-qdisc")) << o;
  if (v >= 602) {
    EXPECT_TRUE(yes("bpf-cast-to-kern-ctx")) << "kernel " << u.release << " has it\n" << o;
    EXPECT_TRUE(yes("bpf-task-from-pid")) << "kernel " << u.release << " has it\n" << o;
  }
  if (v >= 608) {
    EXPECT_TRUE(yes("bpf-task-from-pid-xdp")) << "kernel " << u.release << " has it\n" << o;
  }
  if (v >= 606) {
    EXPECT_TRUE(yes("tcx")) << "kernel " << u.release << " has it\n" << o;
  } else {
    EXPECT_FALSE(yes("tcx")) << o;
  }
}

// `sluiced --check` leaves nothing behind in the namespace it runs in (a
// deployed agent runs in the host's own) nor on the bpf filesystem: no
// interface (neither end of the probes' veth pair ever appears here), no
// qdisc, no filter, no pin. Run in a namespace of its own with a fresh
// bpffs on /sys/fs/bpf, checked right after --check returns, before the
// kernel has torn the probes' private namespace down.
TEST(Check, ProbesLeaveNothingInTheAgentsNamespaceOrOnBpffs) {
  Lab lab("c");
  std::string ns = lab.add_ns("p");
  int st = -1;
  std::string o =
      lab.out("ip netns exec " + ns + " unshare -m --propagation private sh -c 'mount -t bpf sluice /sys/fs/bpf && " +
                  build_path("agent/sluiced") +
                  " --check >/dev/null 2>&1; echo rc=$?; ip -o link show; tc qdisc show; echo pins:; "
                  "find /sys/fs/bpf -mindepth 1 ! -name maps.debug ! -name progs.debug'",
              &st);
  EXPECT_EQ(st, 0) << o;
  EXPECT_NE(o.find("rc=0\n"), std::string::npos) << o;
  EXPECT_EQ(o.find("slprobe"), std::string::npos) << o;
  EXPECT_NE(o.find("lo:"), std::string::npos) << o;
  EXPECT_EQ(std::count(o.begin(), o.end(), '\n'), 4) << "rc, lo, lo's qdisc, 'pins:' and nothing else:\n" << o;
  EXPECT_EQ(o.find("clsact"), std::string::npos) << o;
  ASSERT_NE(o.find("pins:\n"), std::string::npos) << o;
  EXPECT_EQ(o.substr(o.find("pins:\n") + 6), "") << "pins left by --check:\n" << o;
}

// The attach probes, run on an interface: each undoes exactly what it did.
// On a bare interface (the probes create and remove the clsact qdisc) and
// on one where someone else's programs sit on every hook, one of them at
// the very priority the tc probe uses: afterwards the hooks are as they
// were, nothing of the probes' stays open in this process, and the
// foreign programs are all still attached.
TEST(Check, AttachProbesLeaveTheInterfaceAsFound) {
  Lab lab("c");
  std::string a = lab.add_ns("a"), b = lab.add_ns("b");
  lab.add_veth(a, "p0", "", b, "p1", "");
  const std::string ifn = lab.name("p0");
  Skeleton<flowstat> fs;
  fs.load();
  const int fds = bpf_fds_open();
  auto probe_here = [&](const std::string& when) {
    AttachProbeResults r;
    run_in_netns(a, [&] { r = probe_attach(static_cast<int>(if_nametoindex(ifn.c_str()))); });
    EXPECT_TRUE(r.tc.ok) << when << ": " << r.tc.detail;
    EXPECT_TRUE(r.xdp.ok) << when << ": " << r.xdp.detail;
    if (kernel_version() >= 606) {
      EXPECT_TRUE(r.tcx.ok) << when << ": " << r.tcx.detail;
    }
    EXPECT_EQ(bpf_fds_open(), fds) << when << ": the probes kept BPF objects open";
  };
  std::string before = hook_snapshot(a, ifn);
  ASSERT_EQ(before.find("clsact"), std::string::npos) << before;
  probe_here("bare interface");
  EXPECT_EQ(hook_snapshot(a, ifn), before) << "the probes changed a bare interface";
  {
    ForeignHooks::Progs progs;
    progs.clsact_in = bpf_program__fd(fs->progs.flowstat_in);
    progs.clsact_out = bpf_program__fd(fs->progs.flowstat_out);
    if (kernel_version() >= 606) {
      progs.tcx_in = bpf_program__fd(fs->progs.flowstat_in);
      progs.tcx_out = bpf_program__fd(fs->progs.flowstat_out);
    }
    ForeignHooks foreign(a, ifn, progs, 0xFFFF);
    const int fds_foreign = bpf_fds_open();
    before = hook_snapshot(a, ifn);
    ASSERT_NE(before.find("clsact"), std::string::npos) << before;
    AttachProbeResults r;
    run_in_netns(a, [&] { r = probe_attach(static_cast<int>(if_nametoindex(ifn.c_str()))); });
    EXPECT_TRUE(r.tc.ok) << r.tc.detail;
    EXPECT_EQ(bpf_fds_open(), fds_foreign) << "the probes kept BPF objects open";
    EXPECT_EQ(hook_snapshot(a, ifn), before) << "the probes changed an interface with foreign programs";
    EXPECT_EQ(foreign.missing(), "") << "the probes removed a foreign program";
  }
  // The whole probe, as sluiced runs it: its veth pair and namespace are
  // its own; nothing stays open here.
  FeatureReport rep = probe_features();
  EXPECT_TRUE(rep[Feature::TcClsact].ok) << rep[Feature::TcClsact].detail;
  EXPECT_EQ(bpf_fds_open(), fds) << "probe_features() kept BPF objects open";
}

// The probes' veth pair is deleted when its scope ends, whether the code
// using it returns or throws, and the pid in its name keeps two processes'
// pairs apart. Checked inside the namespace that holds it, so the result
// does not depend on when the kernel tears a namespace down.
TEST(Check, ScopedVethPairIsGoneWhenItsScopeEnds) {
  std::string a, b;
  run_in_new_netns([&] {
    {
      ScopedVethPair v("sltst");
      a = v.a();
      b = v.b();
      EXPECT_NE(if_nametoindex(a.c_str()), 0u) << a;
      EXPECT_NE(if_nametoindex(b.c_str()), 0u) << b;
    }
    EXPECT_EQ(if_nametoindex(a.c_str()), 0u) << a << " left behind";
    EXPECT_EQ(if_nametoindex(b.c_str()), 0u) << b << " left behind";
    try {
      ScopedVethPair v("sltst");
      throw std::runtime_error("probe failed");
    } catch (const std::runtime_error&) {
    }
    EXPECT_EQ(if_nametoindex(a.c_str()), 0u) << a << " left behind after an exception";
  });
  std::string pid36;
  for (unsigned long p = static_cast<unsigned long>(getpid()); p; p /= 36)
    pid36.insert(pid36.begin(), "0123456789abcdefghijklmnopqrstuvwxyz"[p % 36]);
  EXPECT_EQ(a, "sltst" + pid36 + "a");
  EXPECT_EQ(b, "sltst" + pid36 + "b");
  EXPECT_LT(a.size(), size_t(IFNAMSIZ));
}

}  // namespace
