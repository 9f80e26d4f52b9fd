#include "aqm_module.h"

#include <bpf/btf.h>
#include <linux/pkt_sched.h>
#include <net/if.h>
#include <netlink/netlink.h>
#include <netlink/route/qdisc.h>
#include <netlink/route/tc.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <type_traits>

#include "aqm.skel.h"
#include "aqm_compat.skel.h"
#include "core/log.h"
#include "core/netns.h"
#include "sluice/pulser.h"
#include "core/tc.h"

SLUICE_SKELETON(aqm);
SLUICE_SKELETON(aqm_compat);

namespace sluice {

std::string root_qdisc_kind(const std::string& ifname) {
  int ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
  if (!ifindex) return "";
  nl_sock* sk = nl_socket_alloc();
  if (!sk) return "";
  std::string kind;
  nl_cache* cache = nullptr;
  if (nl_connect(sk, NETLINK_ROUTE) == 0 && rtnl_qdisc_alloc_cache(sk, &cache) == 0) {
    rtnl_qdisc* q = rtnl_qdisc_get_by_parent(cache, ifindex, TC_H_ROOT);
    if (q) {
      if (const char* k = rtnl_tc_get_kind(TC_CAST(q))) kind = k;
      rtnl_qdisc_put(q);
    } else {
      kind = "noqueue";
    }
    nl_cache_free(cache);
  }
  nl_socket_free(sk);
  return kind;
}

namespace {

int interface_mtu(const std::string& ifname) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  int mtu = ioctl(s, SIOCGIFMTU, &ifr) == 0 ? ifr.ifr_mtu : -1;
  close(s);
  return mtu;
}

// A tracing program's link, destroyed (detached) with it.
struct BpfLink {
  bpf_link* l = nullptr;
  explicit BpfLink(bpf_program* p, const char* what) : l(bpf_program__attach(p)) {
    if (!l) throw SysError(std::string("attach ") + what, errno);
  }
  BpfLink(BpfLink&& o) noexcept : l(o.l) { o.l = nullptr; }
  BpfLink(const BpfLink&) = delete;
  ~BpfLink() {
    if (l) bpf_link__destroy(l);
  }
};

// Skel is aqm (backlog through bpf_cast_to_kern_ctx) or aqm_compat (the
// same marker, backlog from the qdisc tracepoints): one source, two objects.
template <typename Skel>
class AqmModule : public Module {
  static constexpr bool kTracepoint = std::is_same_v<Skel, aqm_compat>;

 public:
  AqmModule(const ModuleContext& ctx, std::string why)
      : ifname_(ctx.iface.name), cfg_(ctx.config.get<AqmConfig>()), source_why_(std::move(why)) {
    const auto& ac = ctx.config.get<AqmConfig>();
    if (!ctx.iface.line_rate_mbps)
      throw Error("aqm on " + ifname_ + " needs line_rate_mbps (a port without a line rate does not guess)");
    line_rate_mbps_ = *ctx.iface.line_rate_mbps;
    // The marker reads the root qdisc's backlog: there must be a queue,
    // and it must be the root (mq keeps backlogs in per-queue children).
    kind_ = root_qdisc_kind(ifname_);
    if (kind_.empty()) throw Error("aqm on " + ifname_ + ": cannot read the root qdisc (does the interface exist?)");
    if (kind_ == "noqueue" || kind_ == "mq" || kind_ == "mqprio")
      throw Error("aqm on " + ifname_ + ": root qdisc is " + kind_ +
                  ", which keeps no backlog the marker can read; install a queueing root qdisc (tbf, htb, "
                  "bfifo/pfifo) on the port first");
    int mtu = interface_mtu(ifname_);
    if (ac.k_in_packets() && mtu <= 0) throw Error("aqm on " + ifname_ + ": cannot read the MTU");
    // Pulser §III-A: EIN_threshold = factor × line rate, as queue growth
    // per second in K's unit (packets: MTU-sized frames).
    double bytes_per_s = double(line_rate_mbps_) * 1e6 / 8.0;
    double per_s = ac.k_in_packets() ? bytes_per_s / double(mtu + 14) : bytes_per_s;
    threshold_per_s_ = uint64_t(ac.ein_threshold * per_s);
    if (ac.ein && threshold_per_s_ == 0)
      throw Error("aqm on " + ifname_ + ": ein_threshold × line rate rounds to 0 per second");

    auto* ro = skel_->rodata;
    ro->ecn_enabled = ac.ecn;
    ro->ein_enabled = ac.ein;
    ro->qlen_unit = ac.k_in_packets() ? SLUICE_AQM_UNIT_PACKETS : SLUICE_AQM_UNIT_BYTES;
    ro->ecn_k = ac.k();
    ro->ein_high_water = ac.high_water();
    ro->ein_samples = ac.ein_samples;
    ro->ein_threshold_per_s = threshold_per_s_;
    ro->sample_source = SLUICE_AQM_SRC_QDISC;
    ro->ein_at_departure = ac.ein && ac.ein_at_departure;
    ro->ein_field = ctx.config.get<EinConfig>().field;
    ro->ein_mask = ctx.config.get<EinConfig>().mask;
    bit_ = ctx.config.get<EinConfig>().bit;
    if constexpr (kTracepoint) {
      // The tracepoints see every qdisc of the machine: follow this port's
      // root only, by ifindex and network namespace (ours: the agent runs
      // in the interface's namespace).
      struct stat ns {};
      if (stat("/proc/self/ns/net", &ns) != 0) throw SysError("stat /proc/self/ns/net", errno);
      ro->port_ifindex = if_nametoindex(ifname_.c_str());
      ro->port_netns_ino = uint32_t(ns.st_ino);
      if (!ro->port_ifindex) throw Error("aqm on " + ifname_ + ": no such interface");
    }
    skel_.pin_maps(ctx.pin_dir);
    skel_.load();
    if constexpr (kTracepoint) {
      // A pinned backlog from an earlier run is stale: start from an empty
      // queue; the qdisc's next enqueue or dequeue sets the real one.
      sluice_aqm_backlog zero{};
      uint32_t k = 0;
      bpf_map_update_elem(bpf_map__fd(skel_->maps.sl_aqm_bklog_v1), &k, &zero, BPF_ANY);
      links_.emplace_back(skel_->progs.aqm_qdisc_enqueue, "tp_btf/qdisc_enqueue");
      links_.emplace_back(skel_->progs.aqm_qdisc_dequeue, "tp_btf/qdisc_dequeue");
    }
    attachment_.emplace_back(TcAttachment::attach(ifname_, Hook::Egress, bpf_program__fd(skel_->progs.aqm_egress),
                                                  "aqm_egress", kAqmTcPrio, ctx.attach_mode,
                                                  ctx.config.agent.state_dir));
    if (ro->ein_at_departure) attach_far_end(ctx);
    SLOG_INFO("AQM_ATTACHED", "{}: marking CE above {} {}{}; root qdisc {}, queue length from {} ({})", ifname_, ac.k(),
              ac.k_in_packets() ? "packets" : "bytes",
              ac.ein
                  ? fmt::format(", EIN ({}) when the queue grows faster than {} {}/s over {} samples, held above {}, "
                                "written {}",
                                bit_, threshold_per_s_, ac.k_in_packets() ? "packets" : "bytes", ac.ein_samples,
                                ac.high_water(),
                                ac.ein_at_departure ? "on departure at " + far_end_ : std::string("on arrival"))
                  : std::string(", EIN off"),
              kind_, source(), source_why_);
  }
  ~AqmModule() override {
    attachment_.clear();
    links_.clear();
  }

  // Pulser marks EIN at dequeue (§III-A): the first hook after the qdisc
  // is tc ingress where the port's link ends. In another namespace only a
  // tcx link can be attached and later detached from here (closing it);
  // a clsact filter would need that namespace's netlink again.
  void attach_far_end(const ModuleContext& ctx) {
    // Named variables, not a structured binding: clang before 16 cannot
    // capture a binding in the lambda below.
    const auto far = ctx.iface.far_end();
    const std::string& ns = far.first;
    const std::string& dev = far.second;
    far_end_ = ctx.iface.link_far_end;
    int fd = bpf_program__fd(skel_->progs.aqm_departure);
    auto attach = [&](AttachMode mode) {
      attachment_.emplace_back(TcAttachment::attach(dev, Hook::Ingress, fd, "aqm_departure", kAqmDepartureTcPrio, mode,
                                                    ctx.config.agent.state_dir));
    };
    const std::string what = "aqm on " + ifname_ + ": link_far_end \"" + far_end_ + "\"";
    if (!ns.empty() && ctx.attach_mode != AttachMode::Tcx)
      throw Error(what + " is in another network namespace, which needs tcx (Linux 6.6+) for ein_mark = departure");
    try {
      if (ns.empty()) attach(ctx.attach_mode);
      else run_in_netns(ns, [&] { attach(AttachMode::Tcx); });
    } catch (const std::exception& e) {
      throw Error(what + ": " + e.what());
    }
  }

  static const char* source() {
    return kTracepoint ? "tracepoint (tp_btf/qdisc_enqueue, qdisc_dequeue)" : "kern-ctx (bpf_cast_to_kern_ctx)";
  }

  std::string name() const override { return "aqm"; }

  std::vector<ProgramCounters> counters() const override {
    return {{"aqm", read_reason_counters(bpf_map__fd(skel_->maps.sl_counters))}};
  }

  sluice_aqm_state state() const {
    sluice_aqm_state s{};
    uint32_t k = 0;
    bpf_map_lookup_elem_flags(bpf_map__fd(skel_->maps.sl_aqm_state_v1), &k, &s, BPF_F_LOCK);
    return s;
  }

  nlohmann::json status() const override {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& t : attachment_)
      a.push_back({{"program", t.prog_name()}, {"hook", to_string(t.hook())}, {"mode", to_string(t.mode())}});
    if constexpr (kTracepoint) {
      a.push_back({{"program", "aqm_qdisc_enqueue"}, {"hook", "tp_btf/qdisc_enqueue"}, {"mode", "tracing"}});
      a.push_back({{"program", "aqm_qdisc_dequeue"}, {"hook", "tp_btf/qdisc_dequeue"}, {"mode", "tracing"}});
    }
    const char* unit = cfg_.k_in_packets() ? "packets" : "bytes";
    return {{"attachments", a},
            {"pin_dir", skel_.pin_dir()},
            {"root_qdisc", kind_},
            {"object", SkelOps<Skel>::kName},
            {"queue_source", kTracepoint ? "tracepoint" : "kern-ctx"},
            {"queue_source_why", source_why_},
            {"line_rate_mbps", line_rate_mbps_},
            {"ecn", cfg_.ecn},
            {"ecn_threshold", cfg_.k()},
            {"unit", unit},
            {"ein", cfg_.ein},
            {"ein_bit", bit_},
            {"ein_samples", cfg_.ein_samples},
            {"ein_threshold_per_s", threshold_per_s_},
            {"ein_high_water", cfg_.high_water()},
            {"ein_mark", cfg_.ein && cfg_.ein_at_departure ? "departure" : "arrival"},
            {"link_far_end", far_end_}};
  }

  nlohmann::json stats() const override {
    auto c = read_reason_counters(bpf_map__fd(skel_->maps.sl_counters));
    auto s = state();
    return {
        {"ce_marks", c[SLUICE_R_AQM_CE].packets + c[SLUICE_R_AQM_CE_EIN].packets},
        {"ein_marks",
         c[SLUICE_R_AQM_EIN].packets + c[SLUICE_R_AQM_CE_EIN].packets + c[SLUICE_R_AQM_DEPART_EIN].packets},
        {"not_ect_over_k", c[SLUICE_R_AQM_NOT_ECT].packets},
        {"rewrite_failed", c[SLUICE_R_AQM_REWRITE_FAILED].packets},
        {"ein_state", s.ein},
        {"incasts_detected", s.ein_on},
        {"ein_held_by_high_water", s.ein_hold},
        {"samples", s.samples},
        {"queue", s.qlen},
        {"avg_gradient_per_s", s.avg_gradient},
        {"qdisc_events", qdisc_events()},
    };
  }

  // aqm_compat: enqueue + dequeue events of the port's root qdisc seen by
  // the tracepoints (0 for aqm, which reads the qdisc directly).
  uint64_t qdisc_events() const {
    if constexpr (kTracepoint) {
      sluice_aqm_backlog b{};
      uint32_t k = 0;
      bpf_map_lookup_elem(bpf_map__fd(skel_->maps.sl_aqm_bklog_v1), &k, &b);
      return b.events;
    }
    return 0;
  }

  void metrics(std::vector<MetricSample>& out) const override {
    nlohmann::json st = stats();
    std::vector<std::pair<std::string, std::string>> l = {{"iface", ifname_}};
    out.push_back(
        {"sluice_aqm_ce_marks_total", "Packets CE-marked at K", true, l, double(st["ce_marks"].get<uint64_t>())});
    out.push_back(
        {"sluice_aqm_ein_marks_total", "Packets EIN-marked", true, l, double(st["ein_marks"].get<uint64_t>())});
    out.push_back({"sluice_aqm_not_ect_over_k_total", "Not-ECT packets left unmarked above K", true, l,
                   double(st["not_ect_over_k"].get<uint64_t>())});
    out.push_back({"sluice_aqm_incasts_total", "EIN 0->1 transitions (Algorithm 1)", true, l,
                   double(st["incasts_detected"].get<uint64_t>())});
    out.push_back(
        {"sluice_aqm_ein_state", "Current EIN state of the port", false, l, double(st["ein_state"].get<uint32_t>())});
    out.push_back({"sluice_aqm_queue", "Root qdisc queue length at the last sample (K's unit)", false, l,
                   double(st["queue"].get<uint64_t>())});
  }

 private:
  std::string ifname_;
  AqmConfig cfg_;
  uint64_t line_rate_mbps_ = 0;
  uint64_t threshold_per_s_ = 0;
  std::string kind_;
  std::string bit_;
  std::string source_why_;
  std::string far_end_;
  Skeleton<Skel> skel_;
  std::vector<BpfLink> links_;
  std::vector<TcAttachment> attachment_;
};

bool has_feature(const ModuleContext& ctx, Feature f, std::string* detail) {
  if (ctx.features) {
    auto it = ctx.features->find(f);
    if (it == ctx.features->end()) {
      *detail = "not probed";
      return false;
    }
    *detail = it->second.detail;
    return it->second.ok;
  }
  // Not probed (a module built outside the agent): the kfunc is usable
  // when the kernel's BTF has it; tracepoints are assumed.
  if (f != Feature::CastToKernCtx) return true;
  btf* b = btf__load_vmlinux_btf();
  bool has = b && btf__find_by_name_kind(b, "bpf_cast_to_kern_ctx", BTF_KIND_FUNC) >= 0;
  btf__free(b);
  *detail = has ? "kfunc in the kernel's BTF" : "kfunc bpf_cast_to_kern_ctx is not in the kernel's BTF (added in 6.2)";
  return has;
}

}  // namespace

std::unique_ptr<Module> make_aqm_module(const ModuleContext& ctx) {
  const std::string& ifname = ctx.iface.name;
  AqmQueueSource want = ctx.config.get<AqmConfig>().queue_source;
  std::string kf_detail, tp_detail;
  bool kfunc = has_feature(ctx, Feature::CastToKernCtx, &kf_detail);
  bool tp = has_feature(ctx, Feature::TpBtfQdisc, &tp_detail);
  if (want == AqmQueueSource::KernCtx) {
    if (!kfunc)
      throw Error("aqm on " + ifname + ": queue_source = \"kern-ctx\" but this kernel lacks bpf-cast-to-kern-ctx: " +
                  kf_detail + " (use \"tracepoint\" or \"auto\")");
    return std::make_unique<AqmModule<aqm>>(ctx, "queue_source = \"kern-ctx\"");
  }
  if (want == AqmQueueSource::Tracepoint) {
    if (!tp)
      throw Error("aqm on " + ifname +
                  ": queue_source = \"tracepoint\" but this kernel lacks tp-btf-qdisc: " + tp_detail);
    return std::make_unique<AqmModule<aqm_compat>>(ctx, "queue_source = \"tracepoint\"");
  }
  if (kfunc) return std::make_unique<AqmModule<aqm>>(ctx, "auto: the kernel has bpf_cast_to_kern_ctx");
  if (tp)
    return std::make_unique<AqmModule<aqm_compat>>(
        ctx, "auto: no bpf_cast_to_kern_ctx (" + kf_detail + "), qdisc tracepoints present");
  throw Error("aqm on " + ifname + ": no way to read the qdisc backlog: bpf-cast-to-kern-ctx: " + kf_detail +
              "; tp-btf-qdisc: " + tp_detail);
}

}  // namespace sluice
