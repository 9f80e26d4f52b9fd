#include "mechanisms/top/top_module.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <net/if.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/event_loop.h"
#include "core/heartbeat.h"
#include "core/log.h"
#include "core/tc.h"
#include "mechanisms/top/clock.h"
#include "sluice/top.h"
#include "top_expiry.skel.h"
#include "top_expiry_compat.skel.h"

// top_expiry_compat (Linux 6.1 to 6.7: XDP programs may not call
// bpf_task_from_pid) decides by the heartbeat alone (bpf/lib/liveness.h).
SLUICE_SKELETON_TWIN(top_expiry, top_expiry_compat, sluice::liveness_object_xdp);

namespace sluice {

namespace {

using top::ClockSample;
using top::ExpirySettings;

bool to_peer_key(const std::string& addr, sluice_top_peer_key& k) {
  k = {};
  if (inet_pton(AF_INET, addr.c_str(), k.addr) == 1) {
    k.family = 4;
    return true;
  }
  if (inet_pton(AF_INET6, addr.c_str(), k.addr) == 1) {
    k.family = 6;
    return true;
  }
  return false;
}

std::string addr_string(uint32_t family, const uint32_t* addr) {
  char buf[INET6_ADDRSTRLEN] = "?";
  inet_ntop(family == 6 ? AF_INET6 : AF_INET, addr, buf, sizeof(buf));
  return buf;
}

const char* kVerdictNames[SLUICE_TOP_EXPIRY_VERDICTS] = {"valid", "expired", "future", "sent"};

struct LinkDeleter {
  void operator()(bpf_link* l) const { bpf_link__destroy(l); }
};

class TopModule : public Module {
 public:
  explicit TopModule(const ModuleContext& ctx) : ifname_(ctx.iface.name), cfg_(ctx.config.get<TopConfig>()) {
    ifindex_ = if_nametoindex(ifname_.c_str());
    if (!ifindex_) throw SysError("TOP: interface " + ifname_, errno ? errno : ENODEV);
    threshold_ns_ = cfg_.threshold_ns();
    skel_->rodata->top_port = uint16_t(cfg_.port);
    skel_->rodata->fail_open_ns = uint64_t(cfg_.fail_open_ms) * 1'000'000;
    skel_.pin_maps(ctx.pin_dir);
    skel_.load();

    // Corrections first, so the program never judges a token without them:
    // §4.3, the sojourn time of a token from P is corrected by how far P's
    // clock runs ahead of ours. Pins may hold a previous run's peers.
    int cfd = bpf_map__fd(skel_->maps.sl_top_corr_v1);
    sluice_top_peer_key k{}, next{};
    while (bpf_map_get_next_key(cfd, nullptr, &next) == 0) bpf_map_delete_elem(cfd, &next);
    for (const auto& [addr, off] : cfg_.peer_clock_offset_ns) {
      if (!to_peer_key(addr, k)) throw Error("TOP: peer address " + addr);  // the config checked it
      int64_t corr = off - cfg_.clock_offset_ns;
      check(bpf_map_update_elem(cfd, &k, &corr, 0), "TOP: write correction for " + addr);
    }
    apply(first_sample());
    // Expired tokens are dropped while this is fresh: refreshed by the
    // heartbeat thread every fail_open / 4 while this loop has run within
    // fail_open (core/heartbeat.h); a killed, stopped or hung sluiced
    // leaves a clock state nobody updates, and the program fails open.
    beat_ =
        ctx.loop.heartbeats().add_fail_open(&skel_->bss->top_live, std::chrono::milliseconds(cfg_.fail_open_ms), "top");

    link_.reset(bpf_program__attach_xdp(skel_->progs.top_expiry, int(ifindex_)));
    if (!link_) throw SysError("attach top_expiry (XDP) to " + ifname_, errno);
    egress_.push_back(TcAttachment::attach(ifname_, Hook::Egress, bpf_program__fd(skel_->progs.top_egress),
                                           "top_egress", kTopTcPrio, ctx.attach_mode, ctx.config.agent.state_dir));
    if (cfg_.clock_source == TopClockSource::Ptp4l) poller_ = std::thread([this] { poll_clock(); });
    SLOG_INFO("TOP_STARTED", "{}: token expiry attached (XDP), T = {} us ({}), expiry {}, clock {}", ifname_,
              threshold_ns_ / 1000, cfg_.threshold_us ? "configured" : "derived per top-tpds20 §5.1",
              cfg_.expire ? "on" : "off (count only)",
              cfg_.clock_source == TopClockSource::Ptp4l ? "ptp4l at " + cfg_.ptp_uds : std::string("shared"));
  }

  ~TopModule() override {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (poller_.joinable()) poller_.join();
    egress_.clear();
    link_.reset();
    beat_.reset();
  }

  std::string name() const override { return "top"; }

  std::vector<ProgramCounters> counters() const override {
    return {{"top", read_reason_counters(bpf_map__fd(skel_->maps.sl_counters))}};
  }

  nlohmann::json status() const override {
    nlohmann::json a = nlohmann::json::array();
    a.push_back({{"program", "top_expiry"}, {"hook", "xdp"}, {"mode", "link"}});
    for (const auto& t : egress_)
      a.push_back({{"program", t.prog_name()}, {"hook", to_string(t.hook())}, {"mode", to_string(t.mode())}});
    auto st = clock_json();
    return {{"attachments", a},
            {"pin_dir", skel_.pin_dir()},
            {"threshold_ns", threshold_ns_},
            {"expire", cfg_.expire},
            {"object", skel_.name()},
            {"fail_open_ms", cfg_.fail_open_ms},
            {"fail_open", reason_packets(SLUICE_R_TOP_FAIL_OPEN)},
            {"clock_state", st["state"]}};
  }

  nlohmann::json stats() const override {
    nlohmann::json tokens = nlohmann::json::object();
    auto per = token_counts();
    for (int v = 0; v < SLUICE_TOP_EXPIRY_VERDICTS; v++) tokens[kVerdictNames[v]] = per[v];
    return {{"threshold_ns", threshold_ns_},
            {"expire", cfg_.expire},
            {"port", cfg_.port},
            {"object", skel_.name()},
            {"fail_open_ms", cfg_.fail_open_ms},
            {"fail_open", reason_packets(SLUICE_R_TOP_FAIL_OPEN)},
            {"clock", clock_json()},
            {"tokens", tokens},
            {"flows", flow_table(16)}};
  }

  void metrics(std::vector<MetricSample>& out) const override {
    auto per = token_counts();
    for (int v = 0; v < SLUICE_TOP_EXPIRY_VERDICTS; v++)
      for (int p = 0; p < SLUICE_TOP_PRIORITIES; p++)
        out.push_back({"sluice_top_tokens_total",
                       "TOP tokens by priority: sent (egress) and valid/expired/future (XDP expiry test)",
                       true,
                       {{"iface", ifname_}, {"priority", std::to_string(p)}, {"verdict", kVerdictNames[v]}},
                       double(per[v][p])});
    auto c = clock_json();
    std::vector<std::pair<std::string, std::string>> l = {{"iface", ifname_}};
    out.push_back({"sluice_top_clock_synced", "1 when the clock is synced (PTP SLAVE/MASTER or shared)", false, l,
                   c["synced"].get<bool>() ? 1.0 : 0.0});
    out.push_back({"sluice_top_clock_offset_ns", "PTP offset from the master (ptp4l)", false, l,
                   double(c["offset_ns"].get<int64_t>())});
    out.push_back({"sluice_top_clock_path_delay_ns", "PTP mean path delay (ptp4l)", false, l,
                   double(c["path_delay_ns"].get<int64_t>())});
    out.push_back({"sluice_top_threshold_ns", "token expiry threshold T (§4.3)", false, l, double(threshold_ns_)});
    out.push_back({"sluice_top_threshold_widen_ns", "added to T while the clock cannot be trusted", false, l,
                   double(c["widen_ns"].get<uint64_t>())});
  }

  nlohmann::json flow_table(size_t limit) const override {
    struct Row {
      sluice_top_flow_key k;
      sluice_top_flow_stats s;
    };
    std::vector<Row> rows;
    int fd = bpf_map__fd(skel_->maps.sl_top_flows_v1);
    sluice_top_flow_key key{}, next{};
    void* prev = nullptr;
    while (bpf_map_get_next_key(fd, prev, &next) == 0) {
      Row r{next, {}};
      if (bpf_map_lookup_elem(fd, &next, &r.s) == 0) rows.push_back(r);
      key = next;
      prev = &key;
      if (rows.size() > 65536) break;
    }
    std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.s.last_ns > b.s.last_ns; });
    nlohmann::json out = {{"total", rows.size()}, {"flows", nlohmann::json::array()}};
    for (size_t i = 0; i < rows.size() && (limit == 0 || i < limit); i++) {
      const auto& r = rows[i];
      out["flows"].push_back({{"peer", addr_string(r.k.family, r.k.addr)},
                              {"flow_id", r.k.flow_id},
                              {"priority", r.s.last_priority},
                              {"tokens_sent", r.s.tokens_sent},
                              {"tokens_valid", r.s.tokens_valid},
                              {"tokens_expired", r.s.tokens_expired},
                              {"data_sent", r.s.data_sent},
                              {"data_received", r.s.data_received}});
    }
    return out;
  }

 private:
  ClockSample first_sample() {
    if (cfg_.clock_source == TopClockSource::Shared) {
      ClockSample s = top::shared_clock_sample();
      s.injected_ns = cfg_.clock_offset_ns;
      return s;
    }
    return read();
  }
  ClockSample read() const {
    ClockSample s = top::read_ptp4l(cfg_.ptp_uds);
    s.injected_ns = cfg_.clock_offset_ns;
    return s;
  }

  // The clock manager (§4.3): T widened while the clock cannot be trusted,
  // never tighter than configured; every change of state is logged once.
  void apply(const ClockSample& s) {
    uint64_t bound = uint64_t(cfg_.offset_bound_us) * 1000;
    ExpirySettings e = top::expiry_for(s, threshold_ns_, bound);
    sluice_top_expiry_config c{};
    c.threshold_ns = e.threshold_ns;
    c.widen_ns = e.widen_ns;
    c.local_offset_ns = top::local_offset_ns(s, bound);
    c.enabled = cfg_.expire ? 1 : 0;
    uint32_t zero = 0;
    int rc = bpf_map_update_elem(bpf_map__fd(skel_->maps.sl_top_cfg_v1), &zero, &c, 0);
    std::string state = top::synced(s) ? (s.shared ? "shared" : "synced") : "unsynced";
    std::lock_guard<std::mutex> g(mu_);
    bool changed = !have_ || e.why != settings_.why || state != state_;
    sample_ = s;
    settings_ = e;
    local_offset_ = c.local_offset_ns;
    state_ = state;
    have_ = true;
    if (rc) SLOG_ERROR("TOP_CLOCK_WRITE", "{}: writing the expiry config failed: {}", ifname_, strerror(-rc));
    if (!changed) return;
    if (e.widen_ns)
      SLOG_WARN("TOP_CLOCK", "{}: clock {} ({}): {}; T = {} us + {} us", ifname_, state, s.port_state, e.why,
                e.threshold_ns / 1000, e.widen_ns / 1000);
    else
      SLOG_INFO("TOP_CLOCK", "{}: clock {} ({}, offset {} ns, path delay {} ns): T = {} us", ifname_, state,
                s.port_state, s.offset_ns, s.path_delay_ns, e.threshold_ns / 1000);
  }

  void poll_clock() {
    std::unique_lock<std::mutex> lk(mu_);
    while (!stop_) {
      cv_.wait_for(lk, std::chrono::milliseconds(cfg_.clock_poll_ms), [this] { return stop_; });
      if (stop_) break;
      lk.unlock();
      ClockSample s = read();  // pmc can take a while: never under the lock
      apply(s);
      lk.lock();
    }
  }

  nlohmann::json clock_json() const {
    std::lock_guard<std::mutex> g(mu_);
    return {{"source", cfg_.clock_source == TopClockSource::Ptp4l ? "ptp4l" : "shared"},
            {"state", state_},
            {"synced", top::synced(sample_)},
            {"ptp", sample_.have_ptp},
            {"port_state", sample_.port_state},
            {"offset_ns", sample_.offset_ns},
            {"path_delay_ns", sample_.path_delay_ns},
            {"steps_removed", sample_.steps_removed},
            {"offset_bound_ns", uint64_t(cfg_.offset_bound_us) * 1000},
            {"injected_offset_ns", cfg_.clock_offset_ns},
            {"local_offset_ns", local_offset_},
            {"threshold_ns", settings_.threshold_ns},
            {"widen_ns", settings_.widen_ns},
            {"widened_because", settings_.why}};
  }

  // Packets counted under one reason, summed over CPUs.
  uint64_t reason_packets(uint32_t reason) const {
    return read_reason_counters(bpf_map__fd(skel_->maps.sl_counters))[reason].packets;
  }

  // [verdict][priority] packets, summed over CPUs.
  std::array<std::array<uint64_t, SLUICE_TOP_PRIORITIES>, SLUICE_TOP_EXPIRY_VERDICTS> token_counts() const {
    std::array<std::array<uint64_t, SLUICE_TOP_PRIORITIES>, SLUICE_TOP_EXPIRY_VERDICTS> v{};
    int ncpu = libbpf_num_possible_cpus();
    if (ncpu <= 0) return v;
    std::vector<sluice_counter> per(static_cast<size_t>(ncpu));
    int fd = bpf_map__fd(skel_->maps.sl_top_stats_v1);
    for (uint32_t slot = 0; slot < SLUICE_TOP_STATS_SLOTS; slot++) {
      if (bpf_map_lookup_elem(fd, &slot, per.data())) continue;
      for (const auto& c : per) v[slot % SLUICE_TOP_EXPIRY_VERDICTS][slot / SLUICE_TOP_EXPIRY_VERDICTS] += c.packets;
    }
    return v;
  }

  std::string ifname_;
  TopConfig cfg_;
  unsigned ifindex_ = 0;
  uint64_t threshold_ns_ = 0;
  Skeleton<top_expiry> skel_;
  std::unique_ptr<bpf_link, LinkDeleter> link_;
  std::unique_ptr<HeartbeatThread::Registration> beat_;
  std::vector<TcAttachment> egress_;
  std::thread poller_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool have_ = false;
  ClockSample sample_;
  ExpirySettings settings_;
  int64_t local_offset_ = 0;
  std::string state_;
};

}  // namespace

std::unique_ptr<Module> make_top_module(const ModuleContext& ctx) { return std::make_unique<TopModule>(ctx); }

}  // namespace sluice
