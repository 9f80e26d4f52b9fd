#include "flowstat_module.h"

#include <arpa/inet.h>

#include <algorithm>

#include "core/event_loop.h"
#include "flowstat.skel.h"
#include "core/log.h"

SLUICE_SKELETON(flowstat);

namespace sluice {

std::string format_flow(const sluice_flow_key& k) {
  char s[INET6_ADDRSTRLEN] = "?", d[INET6_ADDRSTRLEN] = "?";
  int af = k.family == 6 ? AF_INET6 : AF_INET;
  inet_ntop(af, k.saddr, s, sizeof(s));
  inet_ntop(af, k.daddr, d, sizeof(d));
  const char* proto = k.proto == 6 ? "tcp" : k.proto == 17 ? "udp" : "ip";
  auto fmt = [&](const char* a, uint16_t port) {
    std::string h = af == AF_INET6 ? std::string("[") + a + "]" : std::string(a);
    return h + ":" + std::to_string(ntohs(port));
  };
  return fmt(s, k.sport) + " -> " + fmt(d, k.dport) + " " + proto;
}

nlohmann::json flow_json(const FlowRow& r, uint64_t now_ns) {
  const auto& k = r.key;
  const auto& s = r.stats;
  char src[INET6_ADDRSTRLEN] = "", dst[INET6_ADDRSTRLEN] = "";
  int af = k.family == 6 ? AF_INET6 : AF_INET;
  inet_ntop(af, k.saddr, src, sizeof(src));
  inet_ntop(af, k.daddr, dst, sizeof(dst));
  return {
      {"dir", k.dir == SLUICE_DIR_INGRESS ? "ingress" : "egress"},
      {"proto", k.proto == 6    ? "tcp"
                : k.proto == 17 ? "udp"
                                : std::to_string(k.proto)},
      {"src", src},
      {"dst", dst},
      {"sport", ntohs(k.sport)},
      {"dport", ntohs(k.dport)},
      {"packets", s.packets},
      {"bytes", s.bytes},
      {"payload_bytes", s.payload_bytes},
      {"ce_packets", s.ce_packets},
      {"ect_packets", s.ect_packets},
      {"retrans_hints", s.retrans_hints},
      {"tcp_flags", s.tcp_flags},
      {"age_ms", s.first_ns && now_ns > s.first_ns ? (now_ns - s.first_ns) / 1'000'000 : 0},
      {"idle_ms", s.last_ns && now_ns > s.last_ns ? (now_ns - s.last_ns) / 1'000'000 : 0},
  };
}

struct FlowstatModule::Impl {
  std::string ifname;
  Skeleton<flowstat> skel;
  std::vector<TcAttachment> attachments;
  uint64_t idle_ns;
  bool per_flow_metrics;
  std::unique_ptr<PeriodicTimer> expiry;
};

FlowstatModule::FlowstatModule(const ModuleContext& ctx) : impl_(std::make_unique<Impl>()) {
  impl_->ifname = ctx.iface.name;
  auto& s = impl_->skel;
  s->rodata->track_flows = ctx.config.get<FlowstatConfig>().track_flows ? 1 : 0;
  s.pin_maps(ctx.pin_dir);
  s.load();
  // Attach ingress then egress; if egress fails, the ingress attachment in
  // the vector is detached when the exception unwinds this constructor.
  impl_->attachments.push_back(TcAttachment::attach(ctx.iface.name, Hook::Ingress,
                                                    bpf_program__fd(s->progs.flowstat_in), "flowstat_in",
                                                    kFlowstatTcPrio, ctx.attach_mode, ctx.config.agent.state_dir));
  impl_->attachments.push_back(TcAttachment::attach(ctx.iface.name, Hook::Egress,
                                                    bpf_program__fd(s->progs.flowstat_out), "flowstat_out",
                                                    kFlowstatTcPrio, ctx.attach_mode, ctx.config.agent.state_dir));
  impl_->per_flow_metrics = ctx.config.metrics.per_flow;
  impl_->idle_ns = uint64_t(ctx.config.get<FlowstatConfig>().idle_timeout_s) * 1'000'000'000ull;
  Impl* impl = impl_.get();
  impl_->expiry = ctx.loop.every(std::chrono::seconds(5), [this, impl] {
    size_t n = expire_idle(monotonic_ns(), impl->idle_ns);
    if (n) SLOG_DEBUG("FLOWS_EXPIRED", "{}: removed {} idle flows", impl->ifname, n);
  });
}

FlowstatModule::~FlowstatModule() {
  if (impl_) {
    impl_->expiry.reset();
    // Detach in reverse order of attach.
    while (!impl_->attachments.empty()) impl_->attachments.pop_back();
  }
}

std::vector<ProgramCounters> FlowstatModule::counters() const {
  return {{"flowstat", read_reason_counters(bpf_map__fd(impl_->skel->maps.sl_counters))}};
}

nlohmann::json FlowstatModule::flow_table(size_t limit) const {
  uint64_t now = monotonic_ns();
  auto rows = flows();
  std::sort(rows.begin(), rows.end(), [](const FlowRow& a, const FlowRow& b) { return a.stats.bytes > b.stats.bytes; });
  nlohmann::json fl = nlohmann::json::array();
  for (size_t i = 0; i < rows.size() && (limit == 0 || i < limit); ++i) fl.push_back(flow_json(rows[i], now));
  return {{"total", rows.size()}, {"flows", fl}};
}

std::vector<FlowRow> FlowstatModule::flows() const {
  std::vector<FlowRow> rows;
  for_each_entry<sluice_flow_key, sluice_flow_stats>(bpf_map__fd(impl_->skel->maps.sl_fs_flows_v1),
                                                     [&](const sluice_flow_key& k, const sluice_flow_stats& v) {
                                                       rows.push_back({k, v});
                                                     });
  return rows;
}

size_t FlowstatModule::expire_idle(uint64_t now_ns, uint64_t idle_ns) {
  size_t n = 0;
  int fd = bpf_map__fd(impl_->skel->maps.sl_fs_flows_v1);
  for (const auto& r : flows()) {
    if (r.stats.last_ns && now_ns > r.stats.last_ns && now_ns - r.stats.last_ns > idle_ns) {
      if (bpf_map_delete_elem(fd, &r.key) == 0) ++n;
    }
  }
  return n;
}

nlohmann::json FlowstatModule::status() const {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& t : impl_->attachments)
    a.push_back({{"program", t.prog_name()}, {"hook", to_string(t.hook())}, {"mode", to_string(t.mode())}});
  return {{"attachments", a}, {"pin_dir", impl_->skel.pin_dir()}};
}

nlohmann::json FlowstatModule::stats() const {
  uint64_t pk[2] = {0, 0}, by[2] = {0, 0}, ce[2] = {0, 0}, rt[2] = {0, 0};
  size_t n = 0;
  for (const auto& r : flows()) {
    int d = r.key.dir ? 1 : 0;
    pk[d] += r.stats.packets;
    by[d] += r.stats.bytes;
    ce[d] += r.stats.ce_packets;
    rt[d] += r.stats.retrans_hints;
    ++n;
  }
  auto dir = [&](int d) {
    return nlohmann::json{{"packets", pk[d]}, {"bytes", by[d]}, {"ce_packets", ce[d]}, {"retrans_hints", rt[d]}};
  };
  return {{"flows", n}, {"ingress", dir(0)}, {"egress", dir(1)}};
}

void FlowstatModule::metrics(std::vector<MetricSample>& out) const {
  auto st = stats();
  const std::string& ifn = impl_->ifname;
  out.push_back({"sluice_flows", "Flows in the flowstat table", false, {{"iface", ifn}}, double(st["flows"])});
  for (const char* d : {"ingress", "egress"}) {
    const auto& j = st[d];
    out.push_back({"sluice_iface_packets_total",
                   "Packets seen by flowstat (GSO segments counted)",
                   true,
                   {{"iface", ifn}, {"dir", d}},
                   double(j["packets"].get<uint64_t>())});
    out.push_back({"sluice_iface_bytes_total",
                   "Bytes seen by flowstat",
                   true,
                   {{"iface", ifn}, {"dir", d}},
                   double(j["bytes"].get<uint64_t>())});
    out.push_back({"sluice_iface_ce_packets_total",
                   "Packets seen with ECN CE",
                   true,
                   {{"iface", ifn}, {"dir", d}},
                   double(j["ce_packets"].get<uint64_t>())});
    out.push_back({"sluice_iface_retrans_hints_total",
                   "TCP segments that looked retransmitted",
                   true,
                   {{"iface", ifn}, {"dir", d}},
                   double(j["retrans_hints"].get<uint64_t>())});
  }
  if (!impl_->per_flow_metrics) return;
  for (const auto& r : flows()) {
    auto j = flow_json(r, 0);
    std::vector<std::pair<std::string, std::string>> l = {{"iface", ifn},
                                                          {"dir", j["dir"]},
                                                          {"proto", j["proto"]},
                                                          {"src", j["src"]},
                                                          {"dst", j["dst"]},
                                                          {"sport", std::to_string(j["sport"].get<int>())},
                                                          {"dport", std::to_string(j["dport"].get<int>())}};
    out.push_back({"sluice_flow_packets_total", "Packets of one flow", true, l, double(r.stats.packets)});
    out.push_back({"sluice_flow_bytes_total", "Bytes of one flow", true, l, double(r.stats.bytes)});
    out.push_back(
        {"sluice_flow_ce_packets_total", "CE-marked packets of one flow", true, l, double(r.stats.ce_packets)});
  }
}

std::unique_ptr<Module> make_flowstat_module(const ModuleContext& ctx) { return std::make_unique<FlowstatModule>(ctx); }

}  // namespace sluice
