// sluice-top: the TOP transport as a command (top-tpds20 §4.4).
//   sluice-top recv --bind 10.0.0.2 --link-mbit 100 --objective fct
//   sluice-top send --bind 10.0.0.1 --to 10.0.0.2 --size 100000 --count 10
//                   [--xdp veth0 --expiry-us 500]   (token expiry, §4.3)
// Every completed flow is one JSON line on stdout; a summary line with the
// counters (tokens per priority, resends, XDP verdicts) ends the run.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "mechanisms/top/clock.h"
#include "mechanisms/top/objective.h"
#include "mechanisms/top/udp_io.h"
#include "sluice/liveness.h"
#include "sluice/reasons.h"
#include "top_expiry_compat.skel.h"

using namespace sluice::top;

namespace {

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

std::string prio_array(const std::array<uint64_t, kPriorities>& a) {
  std::string s = "[";
  for (int i = 0; i < kPriorities; i++) s += (i ? "," : "") + std::to_string(a[i]);
  return s + "]";
}

// The XDP expiry program on the sender's interface, detached on exit. Its
// heartbeat-only build, which loads on every kernel (6.1+): this process
// follows the clock and answers the tokens itself, so the program never
// fails open (fail_open_ns stays 0); a stopped sluice-top stops its flows
// anyway.
class Expiry {
 public:
  Expiry(const std::string& ifname, uint64_t threshold_ns, bool enabled, int64_t local_offset_ns) {
    ifindex_ = if_nametoindex(ifname.c_str());
    if (!ifindex_) throw std::runtime_error("no interface " + ifname);
    skel_ = top_expiry_compat__open();
    if (!skel_) throw std::runtime_error("open top_expiry: " + std::string(strerror(errno)));
    if (int rc = top_expiry_compat__load(skel_))
      throw std::runtime_error("load top_expiry: " + std::string(strerror(-rc)));
    int fd = bpf_program__fd(skel_->progs.top_expiry);
    flags_ = XDP_FLAGS_DRV_MODE;
    if (bpf_xdp_attach(ifindex_, fd, flags_, nullptr)) {
      flags_ = XDP_FLAGS_SKB_MODE;
      if (int rc = bpf_xdp_attach(ifindex_, fd, flags_, nullptr))
        throw std::runtime_error("attach top_expiry to " + ifname + ": " + strerror(-rc));
    }
    sluice_top_expiry_config c{};
    c.threshold_ns = threshold_ns;
    c.enabled = enabled;
    c.local_offset_ns = local_offset_ns;
    uint32_t k = 0;
    bpf_map_update_elem(bpf_map__fd(skel_->maps.sl_top_cfg_v1), &k, &c, 0);
  }
  void set(uint64_t threshold_ns, uint64_t widen_ns, bool enabled, int64_t local_offset_ns) {
    sluice_top_expiry_config c{};
    c.threshold_ns = threshold_ns;
    c.widen_ns = widen_ns;
    c.enabled = enabled;
    c.local_offset_ns = local_offset_ns;
    uint32_t k = 0;
    bpf_map_update_elem(bpf_map__fd(skel_->maps.sl_top_cfg_v1), &k, &c, 0);
  }
  ~Expiry() {
    if (skel_) {
      bpf_xdp_detach(ifindex_, flags_, nullptr);
      top_expiry_compat__destroy(skel_);
    }
  }
  void correction(const std::string& peer, int64_t ns) {
    sluice_top_peer_key k{};
    Addr a = parse_addr(peer, SLUICE_TOP_DEFAULT_PORT);
    if (a.ss.ss_family == AF_INET) {
      k.family = 4;
      std::memcpy(k.addr, &reinterpret_cast<sockaddr_in*>(&a.ss)->sin_addr, 4);
    } else {
      k.family = 6;
      std::memcpy(k.addr, &reinterpret_cast<sockaddr_in6*>(&a.ss)->sin6_addr, 16);
    }
    bpf_map_update_elem(bpf_map__fd(skel_->maps.sl_top_corr_v1), &k, &ns, 0);
  }
  // {valid, expired, future} per priority, summed over CPUs.
  std::string stats_json() const {
    int ncpu = libbpf_num_possible_cpus();
    std::array<std::array<uint64_t, kPriorities>, SLUICE_TOP_EXPIRY_VERDICTS> v{};
    std::vector<sluice_counter> per(ncpu);
    for (uint32_t slot = 0; slot < SLUICE_TOP_STATS_SLOTS; slot++) {
      if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.sl_top_stats_v1), &slot, per.data())) continue;
      for (auto& c : per) v[slot % SLUICE_TOP_EXPIRY_VERDICTS][slot / SLUICE_TOP_EXPIRY_VERDICTS] += c.packets;
    }
    return "{\"valid\":" + prio_array(v[SLUICE_TOP_X_VALID]) + ",\"expired\":" + prio_array(v[SLUICE_TOP_X_EXPIRED]) +
           ",\"future\":" + prio_array(v[SLUICE_TOP_X_FUTURE]) + "}";
  }

 private:
  top_expiry_compat* skel_ = nullptr;
  unsigned ifindex_ = 0;
  uint32_t flags_ = 0;
};

struct Sched {
  uint64_t start_us, size, deadline_us;
};

std::string clock_json(const ClockSample& c, const ExpirySettings& e) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "{\"ptp\":%s,\"port_state\":\"%s\",\"offset_ns\":%lld,\"path_delay_ns\":%lld,"
                "\"steps_removed\":%d,\"synced\":%s,\"threshold_ns\":%llu,\"widen_ns\":%llu}",
                c.have_ptp ? "true" : "false", c.port_state.c_str(), (long long)c.offset_ns, (long long)c.path_delay_ns,
                c.steps_removed, synced(c) ? "true" : "false", (unsigned long long)e.threshold_ns,
                (unsigned long long)e.widen_ns);
  return buf;
}

std::vector<Sched> read_schedule(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read schedule " + path);
  std::vector<Sched> v;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    n++;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream is(line);
    Sched s{0, 0, 0};
    if (!(is >> s.start_us >> s.size) || s.size == 0)
      throw std::runtime_error(path + ":" + std::to_string(n) + ": want 'start_us size_bytes [deadline_us]'");
    is >> s.deadline_us;
    v.push_back(s);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sluice-top: TOP token-oriented transport (send/recv)"};
  app.require_subcommand(1);
  std::string bind, to, objective = "fct", xdp_if, stats_path;
  double link_mbit = 100, p_pkts = 20000, a = 1, b = 1, deadline_span_us = 100000;
  uint64_t rtt_us = 500, size = 0, count = 1, interval_us = 0, deadline_us = 0, timeout_s = 60, expiry_us = 0,
           exit_after = 0;
  int64_t clock_offset_ns = 0;
  int prio_class = -1;
  bool non_clairvoyant = false, expiry_off = false;
  std::string schedule;
  std::vector<std::string> corrections;
  uint16_t mss = kDefaultMss;
  std::string ptp_uds;
  uint64_t bound_us = 1000;
  uint32_t token_queue = 8;
  std::string fct_class = "remaining";
  std::string spare = "probe";
  bool spare_slots = false, spare_probe = false;
  double jitter = 0.1;
  uint64_t jitter_seed = 0;

  auto* recv = app.add_subcommand("recv", "receive flows: pace tokens by the objective");
  recv->add_option("--bind", bind, "local address[:port]")->required();
  recv->add_option("--link-mbit", link_mbit, "access link rate: one token per (token + data) frame time");
  recv->add_option("--objective", objective, "fct | las | deadline | fair");
  recv->add_option("--p-pkts", p_pkts, "largest flow in packets (log base of the FCT classes, §3.2)");
  recv->add_option("--a", a, "FCT/LAS class formula: floor(K log_p(a x + b))");
  recv->add_option("--b", b);
  std::vector<double> bounds;
  recv->add_option("--bounds", bounds,
                   "FCT/LAS class bounds in packets instead of the formula: K-1 increasing values, comma-separated "
                   "(class c holds [bound c-1, bound c)); bench/run top's top-balanced derives them from the CDF")
      ->delimiter(',');
  recv->add_option("--deadline-span-us", deadline_span_us,
                   "deadline objective: the largest slack its classes tell apart (log base, as --p-pkts for FCT)");
  recv->add_option("--token-queue", token_queue,
                   "tokens per switch token queue: an unanswered token is lost after 2 RTT + 2 such queues");
  recv->add_option("--fct-class", fct_class,
                   "x of the FCT classes: the flow's remaining packets (default) or its total size (§3.2)")
      ->check(CLI::IsMember({"remaining", "size"}));
  recv->add_option("--spare", spare,
                   "a slot no flow's token rate allows: off (ExpressPass's rate alone, §3.1), probe (default: one "
                   "spare token outstanding, its answer restores the flow's rate) or every (a token every such slot)")
      ->check(CLI::IsMember({"off", "probe", "every"}));
  recv->add_option("--jitter", jitter,
                   "each token gap is the slot times 1 + U(-J, J) (ExpressPass's pacing jitter, default 0.1; 0: a "
                   "fixed grid), at most 0.5");
  recv->add_option("--jitter-seed", jitter_seed, "seed of the pacing jitter (0, default: random)");
  recv->add_flag("--spare-slots", spare_slots, "the same as --spare every");
  recv->add_flag("--spare-probe", spare_probe, "the same as --spare probe");
  recv->add_option("--exit-after", exit_after, "exit after this many flows closed (0: until signalled)");
  auto* send = app.add_subcommand("send", "send flows; answer each valid token with one data packet");
  send->add_option("--bind", bind, "local address[:port]")->required();
  send->add_option("--to", to, "receiver address[:port]")->required();
  send->add_option("--size", size, "flow size, bytes");
  send->add_option("--count", count, "flows of --size");
  send->add_option("--interval-us", interval_us, "between flow starts (0: all at once)");
  send->add_option("--schedule", schedule, "file of 'start_us size_bytes [deadline_us]' lines");
  send->add_flag("--non-clairvoyant", non_clairvoyant, "size only in the FIN (§4.4)");
  send->add_option("--deadline-us", deadline_us, "deadline of every flow");
  send->add_option("--prio-class", prio_class, "fixed token class 0..5 (default: receiver's objective)");
  send->add_option("--timeout-s", timeout_s, "give up after");
  send->add_option("--xdp", xdp_if, "attach the token-expiry XDP program here");
  send->add_option("--expiry-us", expiry_us, "expiry threshold T (with --xdp)");
  send->add_flag("--expiry-off", expiry_off, "attach, count, never drop (top-noexpiry)");
  send->add_option("--correction", corrections, "PEER=NS: clock correction for tokens from PEER");
  send->add_option("--ptp-uds", ptp_uds, "ptp4l's management socket: widen T while unsynced (clock manager)");
  send->add_option("--offset-bound-us", bound_us, "widen T by this while unsynced / offset above it");
  auto* clk = app.add_subcommand("clock", "read ptp4l's state once and print the expiry settings");
  clk->add_option("--ptp-uds", ptp_uds, "ptp4l's management socket")->required();
  clk->add_option("--expiry-us", expiry_us, "configured T");
  clk->add_option("--offset-bound-us", bound_us, "offset bound");
  for (auto* c : {recv, send}) {
    c->add_option("--rtt-us", rtt_us, "base RTT: rate-control period, resend spacing");
    c->add_option("--clock-offset-ns", clock_offset_ns, "skew this host's synced clock (lab)");
    c->add_option("--mss", mss, "data bytes per packet");
    c->add_option("--stats", stats_path, "write the summary JSON here too");
  }
  CLI11_PARSE(app, argc, argv);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);

  try {
    if (clk->parsed()) {
      ClockSample c = read_ptp4l(ptp_uds);
      ExpirySettings e = expiry_for(c, expiry_us * 1000, bound_us * 1000);
      std::printf("%s\n", clock_json(c, e).c_str());
      if (!e.why.empty()) std::fprintf(stderr, "sluice-top: %s\n", e.why.c_str());
      return c.have_ptp ? 0 : 4;
    }
    UdpEndpoint ep(parse_addr(bind, SLUICE_TOP_DEFAULT_PORT));
    std::string summary;
    if (recv->parsed()) {
      ReceiverConfig rc;
      auto obj = parse_objective(objective);
      if (!obj) throw std::runtime_error("unknown objective '" + objective + "'");
      rc.objective = *obj;
      rc.slot_ns = pacing_slot_ns(link_mbit, mss);
      rc.rtt_ns = rtt_us * 1000;
      rc.token_queue = token_queue;
      rc.prio.p = p_pkts;
      rc.prio.a = a;
      rc.prio.b = b;
      rc.prio.bounds = bounds;
      rc.prio.deadline_span_us = deadline_span_us;
      rc.fct_class_remaining = fct_class == "remaining";
      if (int(spare_slots) + int(spare_probe) + int(recv->count("--spare") > 0) > 1)
        throw std::runtime_error("--spare, --spare-slots and --spare-probe: give one");
      rc.spare = *parse_spare(spare_slots ? "every" : spare_probe ? "probe" : spare);
      rc.jitter = jitter;
      rc.jitter_seed = jitter_seed;
      if (auto e = rc.validate()) throw std::runtime_error("receiver config: " + *e);
      Receiver r(rc);
      Node node(ep, &r, nullptr, clock_offset_ns);
      uint64_t closed = 0;
      node.run([&] { return g_stop || (exit_after && closed >= exit_after); }, UINT64_MAX,
               [&] {
                 for (auto& c : r.take_completions()) {
                   closed++;
                   // sync/token/data_us: the SYNC's arrival, the first token
                   // and the first data packet, after the flow's start.
                   auto since = [&](uint64_t t) { return us_after_start(t, c.start_ns); };
                   std::printf(
                       "{\"flow\":%lu,\"size\":%lu,\"fct_us\":%.1f,\"deadline\":%s,\"deadline_met\":%s,"
                       "\"sync_us\":%.1f,\"token_us\":%.1f,\"data_us\":%.1f}\n",
                       (unsigned long)c.flow, (unsigned long)c.size_bytes, (c.done_ns - c.start_ns) / 1e3,
                       c.deadline_ns ? "true" : "false", c.deadline_met ? "true" : "false", since(c.sync_ns),
                       since(c.first_token_ns), since(c.first_data_ns));
                   std::fflush(stdout);
                 }
               });
      auto& s = r.stats();
      summary =
          "{\"role\":\"recv\",\"tokens_sent\":" + prio_array(s.tokens_sent) +
          ",\"data_received\":" + std::to_string(s.data_received) +
          ",\"data_duplicate\":" + std::to_string(s.data_duplicate) +
          ",\"nacks_sent\":" + std::to_string(s.nacks_sent) + ",\"slots\":" + std::to_string(s.slots) +
          ",\"slots_idle\":" + std::to_string(s.slots_idle) + ",\"slots_spare\":" + std::to_string(s.slots_spare) +
          ",\"spare\":\"" + spare_name(r.config().spare) +
          "\",\"slots_missed\":" + std::to_string(node.slots_missed()) +
          ",\"slot_ns\":" + std::to_string(r.config().slot_ns) + ",\"flows_closed\":" + std::to_string(s.flows_closed) +
          ",\"token_data_us\":[" + std::to_string(s.token_data_quantile(0.5) / 1000) + "," +
          std::to_string(s.token_data_quantile(0.9) / 1000) + "," + std::to_string(s.token_data_quantile(0.99) / 1000) +
          "]" + ",\"bad_packets\":" + std::to_string(s.bad_packets + ep.bad_packets()) + "}";
    } else {
      std::vector<Sched> plan;
      if (!schedule.empty()) {
        plan = read_schedule(schedule);
      } else {
        if (!size) throw std::runtime_error("send: --size or --schedule");
        for (uint64_t i = 0; i < count; i++) plan.push_back({i * interval_us, size, deadline_us});
      }
      std::unique_ptr<Expiry> xdp;
      if (!xdp_if.empty()) {
        if (!expiry_us) throw std::runtime_error("--xdp needs --expiry-us");
        xdp = std::make_unique<Expiry>(xdp_if, expiry_us * 1000, !expiry_off, clock_offset_ns);
        for (auto& c : corrections) {
          auto eq = c.find('=');
          if (eq == std::string::npos) throw std::runtime_error("--correction wants PEER=NS");
          xdp->correction(c.substr(0, eq), std::stoll(c.substr(eq + 1)));
        }
      }
      // Clock manager: polls ptp4l once a second off the packet loop and
      // widens T while the clock cannot be trusted, saying so on stderr.
      std::atomic<bool> clock_stop{false};
      std::thread clock_thread;
      if (xdp && !ptp_uds.empty()) {
        // First reading before any flow opens, so no token meets a T the
        // clock cannot back.
        ClockSample c0 = read_ptp4l(ptp_uds);
        ExpirySettings e0 = expiry_for(c0, expiry_us * 1000, bound_us * 1000);
        xdp->set(e0.threshold_ns, e0.widen_ns, !expiry_off, clock_offset_ns);
        clock_thread = std::thread([&] {
          std::string last;
          while (!clock_stop) {
            ClockSample c = read_ptp4l(ptp_uds);
            ExpirySettings e = expiry_for(c, expiry_us * 1000, bound_us * 1000);
            xdp->set(e.threshold_ns, e.widen_ns, !expiry_off, clock_offset_ns);
            if (e.why != last)
              std::fprintf(stderr, "sluice-top: clock %s%s\n", clock_json(c, e).c_str(),
                           e.why.empty() ? "" : (": " + e.why).c_str());
            last = e.why;
            for (int i = 0; i < 10 && !clock_stop; i++) std::this_thread::sleep_for(std::chrono::milliseconds(100));
          }
        });
      }
      struct Joiner {
        std::atomic<bool>& stop;
        std::thread& t;
        ~Joiner() {
          stop = true;
          if (t.joinable()) t.join();
        }
      } joiner{clock_stop, clock_thread};
      SenderConfig sc;
      sc.mss = mss;
      sc.rtt_ns = rtt_us * 1000;
      sc.flow_id_base = (static_cast<uint64_t>(getpid()) << 32) | 1;
      if (auto e = sc.validate()) throw std::runtime_error("sender config: " + *e);
      Sender s(sc);
      Node node(ep, nullptr, &s, clock_offset_ns);
      Addr dst = parse_addr(to, SLUICE_TOP_DEFAULT_PORT);
      uint64_t t0 = node.now();
      size_t next = 0, done = 0;
      uint64_t until = t0 + timeout_s * 1'000'000'000ull;
      auto tick = [&] {
        uint64_t now = node.now();
        while (next < plan.size() && now >= t0 + plan[next].start_us * 1000) {
          FlowSpec f;
          f.size_bytes = plan[next].size;
          f.clairvoyant = !non_clairvoyant;
          f.deadline_ns = plan[next].deadline_us * 1000;
          if (prio_class >= 0) f.prio_class = static_cast<uint8_t>(prio_class);
          node.open(f, dst);
          next++;
        }
        if (next < plan.size()) node.wake_at(t0 + plan[next].start_us * 1000);
        for (auto& c : s.take_completions()) {
          done++;
          // token_us: the first token's arrival after the flow opened.
          std::printf("{\"flow\":%lu,\"size\":%lu,\"start_us\":%.1f,\"fct_us\":%.1f,\"token_us\":%.1f}\n",
                      (unsigned long)c.flow, (unsigned long)c.size_bytes, (c.start_ns - t0) / 1e3,
                      (c.done_ns - c.start_ns) / 1e3, us_after_start(c.first_token_ns, c.start_ns));
          std::fflush(stdout);
        }
      };
      tick();
      node.run([&] { return g_stop || done == plan.size(); }, until, tick);
      auto& st = s.stats();
      summary =
          "{\"role\":\"send\",\"flows\":" + std::to_string(plan.size()) + ",\"flows_done\":" + std::to_string(done) +
          ",\"tokens_received\":" + prio_array(st.tokens_received) + ",\"data_sent\":" + std::to_string(st.data_sent) +
          ",\"data_resent\":" + std::to_string(st.data_resent) +
          ",\"tokens_unused\":" + std::to_string(st.tokens_unused) +
          ",\"syncs_sent\":" + std::to_string(st.syncs_sent) + ",\"send_errors\":" + std::to_string(ep.send_errors()) +
          ",\"xdp\":" + (xdp ? xdp->stats_json() : std::string("null")) + "}";
      std::printf("%s\n", summary.c_str());
      if (!stats_path.empty()) std::ofstream(stats_path) << summary << "\n";
      return done == plan.size() ? 0 : 3;
    }
    std::printf("%s\n", summary.c_str());
    if (!stats_path.empty()) std::ofstream(stats_path) << summary << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice-top: %s\n", e.what());
    return 2;
  }
  return 0;
}
