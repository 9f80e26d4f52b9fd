// sluice-fault: lab fault injection on one interface (netem is not in this
// kernel). Loads bpf/lab/fault.bpf.c with the chosen fractions and seed,
// attaches it (tcx, or a clsact filter where tcx is missing) and keeps it
// attached until SIGINT/SIGTERM or --duration, then detaches and prints its
// counters as JSON. Run it inside the link's namespace:
//
//   ip netns exec NS sluice-fault --dev IF --hook egress --drop 0.01 --seed 7
//
// Attach it where a network would lose the packet (a switch port, or the
// receiver's ingress), not on a sender's own egress: a local drop is reported
// to the sending TCP, which reacts unlike to a loss in the network.
#include <CLI/CLI.hpp>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "sluice/fault.h"  // before the skeleton, which names struct sluice_fault_plan
#include "fault.skel.h"
#include "core/bpf_util.h"
#include "core/error.h"
#include "core/json_file.h"
#include "core/tc.h"

SLUICE_SKELETON(fault);

using namespace sluice;

namespace {
std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

uint32_t to_ppm(double frac, const char* what) {
  if (!(frac >= 0 && frac <= 1)) throw Error(std::string("--") + what + " must be a fraction in [0, 1]");
  return uint32_t(std::llround(frac * SLUICE_FAULT_PPM));
}

// "1:20" -> 0x00010014 (tc class ids are hex major:minor).
uint32_t parse_classid(const std::string& s) {
  auto c = s.find(':');
  if (c == std::string::npos) throw Error("--delay-class '" + s + "': expected MAJOR:MINOR (hex)");
  // strtoul's end pointers must point into strings that outlive the check:
  // keep both halves as named locals (not substr() temporaries).
  const std::string maj_s = s.substr(0, c), min_s = s.substr(c + 1);
  char* e1 = nullptr;
  char* e2 = nullptr;
  unsigned long maj = std::strtoul(maj_s.c_str(), &e1, 16);
  unsigned long min = std::strtoul(min_s.c_str(), &e2, 16);
  if (maj_s.empty() || min_s.empty() || *e1 || *e2 || maj > 0xffff || min > 0xffff)
    throw Error("--delay-class '" + s + "': expected MAJOR:MINOR (hex)");
  return uint32_t(maj << 16 | min);
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sluice-fault: drop, corrupt or delay (by marking) a fraction of packets on one link"};
  std::string dev, hook = "egress", proto = "any", mode = "auto", state_dir = "/run/sluice-fault", json_out = "-";
  std::string delay_class;
  double drop = 0, corrupt = 0, delay = 0, duration = 0;
  uint64_t seed = 1;
  uint16_t port = 0;
  bool data_only = false;
  app.add_option("--dev", dev, "interface (in the current network namespace)")->required();
  app.add_option("--hook", hook, "ingress or egress")->check(CLI::IsMember({"ingress", "egress"}));
  app.add_option("--drop", drop, "fraction of candidates dropped");
  app.add_option("--corrupt", corrupt, "fraction of candidates corrupted (IPv4 header checksum)");
  app.add_option("--delay", delay, "fraction of candidates steered to --delay-class");
  app.add_option("--delay-class", delay_class, "HTB class id for delayed packets, e.g. 1:20");
  app.add_option("--seed", seed, "seed of the fate generator")->default_val(1);
  app.add_option("--proto", proto, "candidates: tcp, udp or any")->check(CLI::IsMember({"tcp", "udp", "any"}));
  app.add_option("--port", port, "candidates: source or destination port (0 = any)");
  app.add_flag("--data-only", data_only, "candidates: only TCP segments carrying data");
  std::string ethertype;
  app.add_option("--ethertype", ethertype,
                 "candidates: frames of this EtherType instead of IP packets (hex, e.g. 0x88b5 for sluice control "
                 "frames)");
  app.add_option("--duration", duration, "seconds attached (0 = until SIGINT/SIGTERM)");
  app.add_option("--attach-mode", mode, "auto, tcx or clsact")->check(CLI::IsMember({"auto", "tcx", "clsact"}));
  app.add_option("--state-dir", state_dir, "where a created clsact qdisc is remembered");
  app.add_option("--json", json_out, "counters at exit ('-' = stdout)");
  CLI11_PARSE(app, argc, argv);

  try {
    uint32_t dp = to_ppm(drop, "drop"), cp = to_ppm(corrupt, "corrupt"), lp = to_ppm(delay, "delay");
    if (uint64_t(dp) + cp + lp > SLUICE_FAULT_PPM) throw Error("--drop + --corrupt + --delay must not exceed 1");
    if (lp && delay_class.empty()) throw Error("--delay needs --delay-class (an HTB class on this link)");
    if (data_only && proto == "udp") throw Error("--data-only selects TCP segments; it contradicts --proto udp");
    uint16_t etype = 0;
    if (!ethertype.empty()) {
      char* end = nullptr;
      unsigned long v = std::strtoul(ethertype.c_str(), &end, 16);
      if (*end || v < 0x600 || v > 0xffff)
        throw Error("--ethertype '" + ethertype + "': expected a hex EtherType 0x0600..0xffff");
      if (proto != "any" || port || data_only)
        throw Error("--ethertype selects non-IP frames; it contradicts --proto, --port and --data-only");
      if (cp) throw Error("--corrupt breaks an IPv4 checksum; frames chosen by --ethertype have none");
      etype = uint16_t(v);
    }

    Skeleton<fault> skel;
    sluice_fault_plan plan{};
    plan.seed = seed;
    plan.drop_ppm = dp;
    plan.corrupt_ppm = cp;
    plan.delay_ppm = lp;
    plan.delay_priority = delay_class.empty() ? 0 : parse_classid(delay_class);
    plan.match_proto = proto == "tcp" ? 6 : proto == "udp" ? 17 : 0;
    plan.match_port = port;
    plan.match_tcp_payload = data_only ? 1 : 0;
    plan.match_ethertype = etype;
    skel->rodata->plan = plan;  // one definition on both sides: sluice/fault.h
    skel.load();

    Hook h = hook == "ingress" ? Hook::Ingress : Hook::Egress;
    int fd = bpf_program__fd(skel->progs.fault_inject);
    std::unique_ptr<TcAttachment> att;
    auto try_attach = [&](AttachMode m) {
      att = std::make_unique<TcAttachment>(
          TcAttachment::attach(dev, h, fd, "fault_inject", kTcPrioLabLast, m, state_dir));
    };
    if (mode == "tcx") {
      try_attach(AttachMode::Tcx);
    } else if (mode == "clsact") {
      try_attach(AttachMode::Clsact);
    } else {
      try {
        try_attach(AttachMode::Tcx);
      } catch (const SysError&) {
        try_attach(AttachMode::Clsact);
      }
    }
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    std::fprintf(stderr, "sluice-fault: attached to %s %s via %s (drop %.6f corrupt %.6f delay %.6f seed %llu)\n",
                 dev.c_str(), hook.c_str(), to_string(att->mode()), drop, corrupt, delay, (unsigned long long)seed);
    double waited = 0;
    while (!g_stop && (duration <= 0 || waited < duration)) {
      usleep(20000);
      waited += 0.02;
    }
    att->detach();

    auto rc = read_reason_counters(bpf_map__fd(skel->maps.sl_counters));
    nlohmann::json counters = nlohmann::json::object();
    for (uint32_t r = 0; r < SLUICE_R__COUNT; ++r) {
      const ReasonInfo* ri = reason_info(r);
      if (!ri || !rc[r].packets) continue;
      counters[ri->name] = {{"packets", rc[r].packets}, {"bytes", rc[r].bytes}};
    }
    nlohmann::json out = {
        {"dev", dev},          {"hook", hook},   {"seed", seed},       {"drop", drop},
        {"corrupt", corrupt},  {"delay", delay}, {"ethertype", etype}, {"candidates", skel->bss->candidates},
        {"counters", counters}};
    write_json_file(json_out, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice-fault: %s\n", e.what());
    return 1;
  }
  return 0;
}
