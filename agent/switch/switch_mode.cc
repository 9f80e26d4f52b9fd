#include "switch/switch_mode.h"

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <netlink/errno.h>
#include <netlink/route/tc.h>

#include <boost/asio/steady_timer.hpp>
#include <algorithm>
#include <cstring>
#include <mutex>

#include "core/bpf_util.h"
#include "core/event_loop.h"
#include "core/features.h"
#include "core/heartbeat.h"
#include "core/log.h"
#include "core/tc.h"
#include "sluice/switch.h"
#include "sluice/liveness.h"
#include "swport.skel.h"
#include "swport_compat.skel.h"
#include "switch/control.h"
#include "switch/hold_path.h"
#include "switch/registry.h"
#include "switch/stats.h"
#include "switch/switch_config.h"
#include "switch/tree.h"

SLUICE_SKELETON_TWIN(swport, swport_compat, sluice::liveness_object);

namespace sluice {

namespace {

using namespace sw;

struct SwPort {
  uint32_t id = 0;
  PortConfig cfg;
  int ifindex = 0;
  std::array<uint8_t, 6> mac{};
  std::unique_ptr<PortTree> tree;  // declared before att: detached first, removed after (null when held)
  std::vector<TcAttachment> att;
  int tx_fd = -1;
  std::vector<uint8_t> paused;
  CtrlStats ctrl;               // agent side: in, out, out_rejected
  uint64_t agent_rejected = 0;  // passed the BPF gate, failed the agent's re-check
  uint64_t pause_failures = 0;  // netlink changes that failed
  uint64_t pause_changes = 0;
  uint64_t kicks = 0;                // wake-up frames after a resume or release (SwitchMode::kick)
  std::vector<ClassCounters> cache;  // last read of the tree
  uint64_t cache_ns = 0;
  // Pause/resume changes made for a control frame, the last kLatencySamples:
  // frame at the ingress program -> change acknowledged by the kernel
  // (react_us), and the netlink change alone (netlink_us).
  static constexpr size_t kLatencySamples = 1024;
  std::vector<uint32_t> react_us, netlink_us;
  size_t latency_next = 0;
  uint64_t latency_total = 0;
  ~SwPort() {
    if (tx_fd >= 0) close(tx_fd);
  }
};

class SwitchMode final : public HostService, public Substrate {
 public:
  explicit SwitchMode(const ServiceContext& ctx);
  ~SwitchMode() override;

  // HostService
  void status(nlohmann::json& out) const override;
  void metrics(std::vector<MetricSample>& out) const override;

  // Substrate
  uint64_t now_ns() const override { return monotonic_ns(); }
  size_t num_ports() const override { return ports_.size(); }
  const PortConfig& port(PortId p) const override { return ports_.at(p)->cfg; }
  QueueDepth depth(PortId p, QueueId q) const override;
  bool paused(PortId p, QueueId q) const override;
  void set_paused(PortId p, QueueId q, bool paused) override;
  void send_control(PortId p, const ControlFrame& frame) override;
  void arm_timer(uint64_t at_ns) override;
  bool release(PortId p, QueueId q, uint64_t bytes) override;
  void kick(SwPort& sp);  // with mu_ held
  static bool send_frame(const SwPort& sp, const std::vector<uint8_t>& frame, uint16_t ethertype);
  uint64_t dropped(PortId p, QueueId q) const override;

 private:
  static int on_ring(void* self, void* data, size_t len);
  // Control frames waiting in the ring to the logic (not re-entered: the
  // held data path calls it between frames, also from inside a consume).
  void consume_control() {
    if (consuming_) return;
    consuming_ = true;
    ring_buffer__consume(rb_);
    consuming_ = false;
  }
  bool consuming_ = false;
  void on_ctrl(const sl_sw_ctrl_event& ev);
  const std::vector<ClassCounters>& counters(const SwPort& p, uint64_t max_age_ns) const;
  // BPF counters of port_id: slot -> {packets, bytes}, summed over CPUs.
  std::vector<sl_sw_counter> bpf_counters(uint32_t port_id) const;
  nlohmann::json port_json(const SwPort& p) const;

  SwitchConfig cfg_;
  const LogicInfo* info_;
  EventLoop& loop_;
  mutable std::mutex mu_;  // ports_' counters and pause state vs metric scrapes
  std::vector<std::unique_ptr<SwPort>> ports_;
  Skeleton<swport> skel_;
  ring_buffer* rb_ = nullptr;
  std::unique_ptr<FdWatch> ring_watch_;
  std::unique_ptr<HeartbeatThread::Registration> beat_;
  boost::asio::steady_timer timer_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::unique_ptr<Logic> logic_;
  // [switch] datapath = "hold": the queues in this process (null for "tree").
  std::unique_ptr<HoldPath> hold_;
  std::unique_ptr<HeartbeatThread::Registration> hold_beat_;
  uint64_t frame_rx_ns_ = 0;  // ingress time of the control frame being handed to the logic
};

SwitchMode::SwitchMode(const ServiceContext& ctx)
    : cfg_(ctx.config.get<SwitchConfig>()), info_(find_logic(cfg_.logic)), loop_(ctx.loop), timer_(ctx.loop.io()) {
  if (!info_) throw Error("[switch] logic \"" + cfg_.logic + "\" is not a switch logic (" + logic_names() + ")");
  skel_->rodata->fail_open_ns = uint64_t(cfg_.fail_open_ms) * 1'000'000;
  skel_->rodata->ctrl_defer_ns = uint64_t(cfg_.control_defer_us) * 1'000;
  skel_.load();
  // Alive before anything is attached, then every fail_open_ms / 4 by the
  // heartbeat thread (core/heartbeat.h), while this loop has run within
  // fail_open_ms: a stuck loop fails open as before, a busy CPU does not.
  beat_ =
      loop_.heartbeats().add_fail_open(&skel_->bss->sw_live, std::chrono::milliseconds(cfg_.fail_open_ms), "switch");
  try {
    if (cfg_.datapath == SwitchDatapath::kHold) {
      if (ctx.features) {
        auto f = ctx.features->find(Feature::TpBtfQdisc);
        if (f == ctx.features->end() || !f->second.ok)
          throw Error("[switch] datapath = \"hold\" needs the qdisc tracepoints (tp-btf-qdisc, Linux 5.17+): " +
                      (f == ctx.features->end() ? std::string("not probed") : f->second.detail));
      }
      hold_ = std::make_unique<HoldPath>(loop_, uint64_t(cfg_.fail_open_ms) * 1'000'000, ctx.attach_mode,
                                         ctx.config.agent.state_dir, cfg_.hold_backlog_us);
      // swhold's egress passes every frame once this is stale (fail open).
      hold_beat_ = loop_.heartbeats().add_fail_open(hold_->liveness(), std::chrono::milliseconds(cfg_.fail_open_ms),
                                                    "switch-hold");
    }
    for (size_t i = 0; i < cfg_.ports.size(); ++i) {
      const SwitchPortEntry& e = cfg_.ports[i];
      auto p = std::make_unique<SwPort>();
      p->id = uint32_t(i);
      p->cfg.name = e.name;
      p->cfg.role = e.role;
      p->cfg.rate_bps = uint64_t(cfg_.port_rate_mbit(e)) * 1'000'000;
      p->cfg.queues.assign(cfg_.port_queues(e), QueueConfig{});
      // Held queues tail-drop at buffer_bytes in the agent (the tree's
      // leaves do it in the kernel).
      if (hold_)
        for (auto& q : p->cfg.queues) q.limit_bytes = cfg_.port_buffer(e);
      if (info_->layout) info_->layout(LogicContext{&ctx.config, nullptr, &ctx, hold_ != nullptr}, p->cfg);
      p->paused.assign(p->cfg.queues.size(), 0);
      p->ifindex = int(if_nametoindex(e.name.c_str()));
      if (!p->ifindex) throw Error("[switch] port " + e.name + " (" + e.where + "): no such interface");
      int fd = socket(AF_INET, SOCK_DGRAM, 0);
      ifreq ifr{};
      std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", e.name.c_str());
      if (fd >= 0 && ioctl(fd, SIOCGIFHWADDR, &ifr) == 0) std::memcpy(p->mac.data(), ifr.ifr_hwaddr.sa_data, 6);
      if (fd >= 0) close(fd);

      if (hold_) {
        // upstreamQ (LogicInfo::upstream_q_tag): popped on every port, pushed
        // toward switches only (a host's stack never sees the tag).
        const bool uq = info_->upstream_q_tag;
        hold_->add_port({PortId(i), p->ifindex, p->cfg, cfg_.port_buffer(e), cfg_.burst_bytes, uq,
                         uq && e.role == PortRole::kSwitchFacing, cfg_.ecn_threshold_packets});
      } else {
        TreeSpec spec{e.name, p->ifindex, p->cfg.rate_bps, cfg_.port_buffer(e), p->cfg.queues, cfg_.burst_bytes};
        p->tree = std::make_unique<PortTree>(spec);
      }

      // Held: the entry serves the ingress gate only (htb_major 0: the
      // classifier, not attached, would steer nothing).
      sl_sw_port sp{uint32_t(i),
                    uint32_t(e.role),
                    uint32_t(p->cfg.queues.size()),
                    hold_ ? 0u : kHtbMajor,
                    info_->hash_flows ? uint32_t(SL_SW_PORT_HASH_DEFAULT) : 0u,
                    0};
      uint32_t key = uint32_t(p->ifindex);
      check(bpf_map_update_elem(bpf_map__fd(skel_->maps.sl_sw_ports_v1), &key, &sp, BPF_ANY), "port table");
      p->att.push_back(TcAttachment::attach(e.name, Hook::Ingress, bpf_program__fd(skel_->progs.sw_ingress),
                                            "sw_ingress", kSwportTcPrio, ctx.attach_mode, ctx.config.agent.state_dir));
      if (!hold_)
        p->att.push_back(TcAttachment::attach(e.name, Hook::Egress, bpf_program__fd(skel_->progs.sw_egress),
                                              "sw_egress", kSwportTcPrio, ctx.attach_mode, ctx.config.agent.state_dir));

      // Control frames this switch sends: raw, not receiving (protocol 0),
      // into the never-paused fallback class (HTB honours skb->priority).
      p->tx_fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
      if (p->tx_fd < 0) throw SysError("AF_PACKET socket for " + e.name, errno);
      int prio = int(TC_HANDLE(kHtbMajor, kFallbackMinor));
      setsockopt(p->tx_fd, SOL_SOCKET, SO_PRIORITY, &prio, sizeof(prio));
      ports_.push_back(std::move(p));
    }
    rb_ = ring_buffer__new(bpf_map__fd(skel_->maps.sl_sw_ctrl_v1), &SwitchMode::on_ring, this, nullptr);
    if (!rb_) throw SysError("control-frame ring buffer", errno);
    ring_watch_ = loop_.watch_readable(ring_buffer__epoll_fd(rb_), [this] {
      consume_control();
      if (hold_) hold_->pump();  // a resume or release: send now
    });

    std::vector<PortConfig> pcs;
    for (const auto& p : ports_) pcs.push_back(p->cfg);
    LogicContext lc{&ctx.config, &pcs, &ctx, hold_ != nullptr};
    logic_ = info_->make(lc);
    logic_->on_start(*this);
    if (hold_) {
      hold_->set_control_poll([this] { consume_control(); });
      hold_->start(*logic_);
    }
  } catch (...) {
    hold_beat_.reset();
    hold_.reset();
    ring_watch_.reset();
    if (rb_) ring_buffer__free(rb_);
    rb_ = nullptr;
    while (!ports_.empty()) ports_.pop_back();
    throw;
  }
  SLOG_INFO("SWITCH_STARTED", "switch mode: logic {}, {} port(s), data path {}", info_->name, ports_.size(),
            hold_ ? "hold" : "tree");
}

SwitchMode::~SwitchMode() {
  *alive_ = false;
  timer_.cancel();
  beat_.reset();
  ring_watch_.reset();
  if (rb_) ring_buffer__free(rb_);
  // Held: egress detached, held frames sent to the ports, roots removed
  // (the heartbeat first: it writes into the object's .bss).
  hold_beat_.reset();
  hold_.reset();
  logic_.reset();
  // Each port: programs detached, then its tree removed.
  while (!ports_.empty()) ports_.pop_back();
  SLOG_INFO("SWITCH_STOPPED", "switch mode stopped: programs detached, queue trees removed");
}

int SwitchMode::on_ring(void* self, void* data, size_t len) {
  if (len >= sizeof(sl_sw_ctrl_event)) static_cast<SwitchMode*>(self)->on_ctrl(*static_cast<sl_sw_ctrl_event*>(data));
  return 0;
}

void SwitchMode::on_ctrl(const sl_sw_ctrl_event& ev) {
  if (ev.port_id >= ports_.size()) return;
  SwPort& p = *ports_[ev.port_id];
  ControlFrame f;
  int r = SL_CTRL_R_TRUNCATED;
  // The gate already checked it; checked again with the same parser so a
  // logic never sees a frame the agent would refuse.
  if (ev.len <= sizeof(ev.frame) && ev.payload_off < ev.len)
    r = accept_control(uint8_t(p.cfg.role), ev.frame + ev.payload_off, ev.len - ev.payload_off, &f);
  {
    std::lock_guard lk(mu_);
    if (r != SL_CTRL_R_OK) {
      ++p.agent_rejected;
      return;
    }
    ++p.ctrl.in;
  }
  frame_rx_ns_ = ev.rx_ns;
  logic_->on_control(f, PortId(ev.port_id));
  frame_rx_ns_ = 0;
}

const std::vector<ClassCounters>& SwitchMode::counters(const SwPort& p, uint64_t max_age_ns) const {
  uint64_t now = monotonic_ns();
  auto& sp = const_cast<SwPort&>(p);
  if (p.cache.empty() || now - p.cache_ns > max_age_ns) {
    auto c = p.tree->read();
    if (!c.empty()) {
      sp.cache = std::move(c);
      sp.cache_ns = now;
    }
  }
  return p.cache;
}

QueueDepth SwitchMode::depth(PortId p, QueueId q) const {
  if (hold_) return hold_->depth(p, q);
  std::lock_guard lk(mu_);
  const auto& c = counters(*ports_.at(p), 1'000'000);
  if (q >= ports_.at(p)->cfg.queues.size() || q >= c.size()) return {};
  return {c[q].backlog, c[q].qlen, c[q].qlen};
}

uint64_t SwitchMode::dropped(PortId p, QueueId q) const {
  if (hold_) return hold_->dropped(p, q);
  std::lock_guard lk(mu_);
  const auto& c = counters(*ports_.at(p), 1'000'000);
  if (q >= ports_.at(p)->cfg.queues.size() || q >= c.size()) return 0;
  return c[q].drops;
}

bool SwitchMode::paused(PortId p, QueueId q) const {
  std::lock_guard lk(mu_);
  const SwPort& sp = *ports_.at(p);
  return q < sp.paused.size() && sp.paused[q];
}

void SwitchMode::set_paused(PortId p, QueueId q, bool paused) {
  SwPort& sp = *ports_.at(p);
  if (q >= sp.paused.size()) return;
  const uint64_t t0 = monotonic_ns();
  int rc = 0;
  if (hold_) hold_->set_paused(p, q, paused);  // in the agent's queues: no netlink
  else rc = sp.tree->set_paused(q, paused);
  const uint64_t t1 = monotonic_ns();
  std::lock_guard lk(mu_);
  if (rc >= 0 && frame_rx_ns_ && t1 > frame_rx_ns_) {
    auto us = [](uint64_t ns) { return uint32_t(std::min<uint64_t>(ns / 1000, UINT32_MAX)); };
    if (sp.react_us.size() < SwPort::kLatencySamples) {
      sp.react_us.push_back(us(t1 - frame_rx_ns_));
      sp.netlink_us.push_back(us(t1 - t0));
    } else {
      sp.react_us[sp.latency_next] = us(t1 - frame_rx_ns_);
      sp.netlink_us[sp.latency_next] = us(t1 - t0);
    }
    sp.latency_next = (sp.latency_next + 1) % SwPort::kLatencySamples;
    ++sp.latency_total;
  }
  if (rc < 0) {
    ++sp.pause_failures;
    SLOG_WARN("SWITCH_PAUSE_FAILED", "{} queue {}: {} failed: {}", sp.cfg.name, q, paused ? "pause" : "resume",
              nl_geterror(rc));
    return;
  }
  if (bool(sp.paused[q]) != paused) ++sp.pause_changes;
  sp.paused[q] = paused;
  if (!paused && !hold_) kick(sp);
}

// A TBF change refills the leaf's bucket but does not wake the port: the
// qdisc is dequeued again only when a packet is enqueued on it or a
// watchdog fires, and a paused leaf's watchdog is set for when its 1000 B/s
// would let the next frame out (~1.5 s for an MTU frame). On a port that
// carries nothing but the held queue, a resume or release then waits that
// long (measured: a single TCP flow through a Floodgate VOQ at 0.2 Mbit/s).
// So after one, the switch sends a minimal frame through the fallback
// class: its enqueue runs the port's qdisc, which finds the queue's new
// tokens. The frame (EtherType 0x88B6, IEEE local experimental 2, to the
// link-local control group that bridges do not forward) is for no one: the
// neighbour's stack has no handler for it and drops it.
void SwitchMode::kick(SwPort& sp) {
  static constexpr uint16_t kKickEthertype = 0x88B6;
  std::vector<uint8_t> f(60, 0);
  std::memcpy(&f[0], kCtrlGroupMac.data(), 6);
  std::memcpy(&f[6], sp.mac.data(), 6);
  f[12] = kKickEthertype >> 8;
  f[13] = kKickEthertype & 0xff;
  if (send_frame(sp, f, kKickEthertype)) ++sp.kicks;  // the caller holds mu_
}

bool SwitchMode::release(PortId p, QueueId q, uint64_t bytes) {
  SwPort& sp = *ports_.at(p);
  if (q >= sp.paused.size()) return false;
  if (hold_) {
    if (!hold_->release(p, q, bytes)) return false;
    std::lock_guard lk(mu_);
    sp.paused[q] = 1;
    return true;
  }
  int rc = sp.tree->release(q, bytes);
  std::lock_guard lk(mu_);
  if (rc < 0) {
    ++sp.pause_failures;
    return false;
  }
  sp.paused[q] = 1;
  kick(sp);
  return true;
}

void SwitchMode::send_control(PortId p, const ControlFrame& frame) {
  SwPort& sp = *ports_.at(p);
  int reason = SL_CTRL_R_OK;
  auto payload = encode(frame, &reason);
  if (payload.empty() || reason != SL_CTRL_R_OK) {
    std::lock_guard lk(mu_);
    ++sp.ctrl.out_rejected;
    return;
  }
  bool sent = send_frame(sp, ethernet_frame(sp.mac, payload), SLUICE_CTRL_ETHERTYPE);
  std::lock_guard lk(mu_);
  if (sent) ++sp.ctrl.out;
  else ++sp.ctrl.out_rejected;
}

// A whole Ethernet frame out of the port, to the control group address,
// into the never-paused fallback class (the socket's priority).
bool SwitchMode::send_frame(const SwPort& sp, const std::vector<uint8_t>& frame, uint16_t ethertype) {
  sockaddr_ll to{};
  to.sll_family = AF_PACKET;
  to.sll_ifindex = sp.ifindex;
  to.sll_protocol = htons(ethertype);
  to.sll_halen = 6;
  std::memcpy(to.sll_addr, kCtrlGroupMac.data(), 6);
  return sendto(sp.tx_fd, frame.data(), frame.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)) ==
         ssize_t(frame.size());
}

void SwitchMode::arm_timer(uint64_t at_ns) {
  // steady_clock is CLOCK_MONOTONIC on Linux, the clock of now_ns().
  // sw_ingress defers control frames that arrive shortly before it
  // ([switch] control_defer_us): the handler below reads them first.
  __atomic_store_n(&skel_->bss->sw_next_timer_ns, at_ns, __ATOMIC_RELAXED);
  timer_.expires_at(std::chrono::steady_clock::time_point(std::chrono::nanoseconds(at_ns)));
  std::weak_ptr<bool> alive = alive_;
  timer_.async_wait([this, alive](const boost::system::error_code& ec) {
    auto a = alive.lock();
    if (ec || !a || !*a) return;
    // Control frames that arrived before the timer go to the logic first:
    // after a stall of this loop, a refresh waiting in the ring must not
    // lose to the timer that expires the pause it refreshes.
    consume_control();
    logic_->on_timer(monotonic_ns());
    if (hold_) hold_->pump();
  });
}

std::vector<sl_sw_counter> SwitchMode::bpf_counters(uint32_t port_id) const {
  std::vector<sl_sw_counter> out(SL_SW_CNT_SLOTS);
  std::vector<sl_sw_counter> cpu(num_possible_cpus());
  int fd = bpf_map__fd(skel_->maps.sl_sw_cnt_v1);
  for (uint32_t s = 0; s < SL_SW_CNT_SLOTS; ++s) {
    uint32_t idx = port_id * SL_SW_CNT_SLOTS + s;
    if (bpf_map_lookup_elem(fd, &idx, cpu.data())) continue;
    for (const auto& c : cpu) {
      out[s].packets += c.packets;
      out[s].bytes += c.bytes;
    }
  }
  return out;
}

// One port as `sluicectl switch` shows it. Per queue: depth now, paused,
// packets out (left the class), dropped (tail drop at its leaf), in = out +
// dropped + queued (every packet the classifier put there). Control frames:
// in = accepted and handed to the logic, rejected = dropped by the gate (by
// reason) or by the agent's re-check, out = sent by the logic.
nlohmann::json SwitchMode::port_json(const SwPort& p) const {
  auto bc = bpf_counters(p.id);
  std::vector<ClassCounters> cc;
  if (!hold_) cc = counters(p, 0);
  nlohmann::json qs = nlohmann::json::array();
  auto row = [](const ClassCounters& c) {
    return nlohmann::json{{"depth_bytes", c.backlog}, {"depth_pkts", c.qlen}, {"pkts_in", c.packets + c.drops + c.qlen},
                          {"pkts_out", c.packets},    {"bytes_out", c.bytes}, {"dropped", c.drops}};
  };
  for (size_t q = 0; q < p.cfg.queues.size() && !hold_; ++q) {
    nlohmann::json j = q < cc.size() ? row(cc[q]) : nlohmann::json::object();
    j["queue"] = q;
    j["paused"] = bool(p.paused[q]);
    qs.push_back(j);
  }
  nlohmann::json fallback = cc.size() > p.cfg.queues.size() ? row(cc.back()) : nlohmann::json::object();
  uint64_t rejected = p.agent_rejected;
  nlohmann::json by_reason = nlohmann::json::object();
  for (int r = 0; r < SL_CTRL_R_COUNT; ++r) {
    if (r == SL_CTRL_R_OK || !bc[r].packets) continue;
    rejected += bc[r].packets;
    by_reason[std::string(ctrl_reason_name(r))] = bc[r].packets;
  }
  if (bc[SL_SW_CNT_CTRL_RING_FULL].packets) {
    rejected += bc[SL_SW_CNT_CTRL_RING_FULL].packets;
    by_reason["RING_FULL"] = bc[SL_SW_CNT_CTRL_RING_FULL].packets;
  }
  if (p.agent_rejected) by_reason["AGENT_RECHECK"] = p.agent_rejected;
  auto summary = [&](std::vector<uint32_t> v) {
    std::sort(v.begin(), v.end());
    auto pct = [&](double f) { return v.empty() ? 0u : v[size_t(f * double(v.size() - 1))]; };
    return nlohmann::json{{"samples", v.size()}, {"p50", pct(0.5)}, {"p99", pct(0.99)}, {"max", pct(1.0)}};
  };
  nlohmann::json out = {{"name", p.cfg.name},
                        {"port_id", p.id},
                        {"ifindex", p.ifindex},
                        {"role", port_role_name(p.cfg.role)},
                        {"rate_bps", p.cfg.rate_bps},
                        {"buffer_bytes", p.tree ? p.tree->spec().buffer_bytes : 0},
                        {"burst_bytes", p.tree ? p.tree->burst_bytes() : 0},
                        {"queues", qs},
                        {"fallback", fallback},
                        {"classified_pkts", bc[SL_SW_CNT_DATA_CLASSIFIED].packets},
                        {"fail_open_pkts", bc[SL_SW_CNT_DATA_FAIL_OPEN].packets},
                        {"net_control_pkts", bc[SL_SW_CNT_DATA_NET_CONTROL].packets},
                        {"pause_changes", p.pause_changes},
                        {"pause_failures", p.pause_failures},
                        {"kicks", p.kicks},
                        // Control frame at the ingress program -> pause/resume in place,
                        // over the last 1024 changes a frame caused (us).
                        {"pause_apply_us", summary(p.react_us)},
                        {"pause_netlink_us", summary(p.netlink_us)},
                        {"pause_apply_total", p.latency_total},
                        {"control",
                         {{"in", p.ctrl.in},
                          {"out", p.ctrl.out},
                          {"out_rejected", p.ctrl.out_rejected},
                          {"rejected", rejected},
                          {"rejected_by_reason", by_reason}}},
                        {"datapath", hold_ ? "hold" : "tree"}};
  if (hold_) {
    // The queues and the data path's counters: status() adds them from the
    // agent's queues (outside mu_: a logic holding the queues' lock may
    // call set_paused(), which takes mu_).
    out["buffer_bytes"] = p.cfg.queues.empty() ? 0 : p.cfg.queues[0].limit_bytes;
    out.erase("fallback");
    out.erase("classified_pkts");
    out.erase("kicks");
  } else {
    out["tree"] = {{"handles", p.tree->handles()}, {"replaced", p.tree->replaced()}};
  }
  return out;
}

void SwitchMode::status(nlohmann::json& out) const {
  nlohmann::json ports = nlohmann::json::array();
  {
    std::lock_guard lk(mu_);
    for (const auto& p : ports_) ports.push_back(port_json(*p));
  }
  if (hold_)
    for (auto& pj : ports) {
      pj.update(hold_->port_json(PortId(pj["port_id"].get<uint32_t>())));
      pj["fail_open_pkts"] = pj["hold"]["fail_open_pkts"];
    }
  uint64_t hb = __atomic_load_n(&skel_->bss->sw_live.heartbeat_ns, __ATOMIC_RELAXED), now = monotonic_ns();
  nlohmann::json j = {{"logic", info_->name},
                      {"fail_open_ms", cfg_.fail_open_ms},
                      {"object", skel_.name()},
                      {"datapath", hold_ ? "hold" : "tree"},
                      {"heartbeat_age_ms", now > hb ? double(now - hb) / 1e6 : 0.0},
                      {"ports", ports}};
  if (hold_) j["hold_object"] = hold_->object_name();
  // Outside mu_: a view may read depth()/paused(), which take it.
  if (info_->view) j["logic_state"] = info_->view(*logic_, *this);
  out["switch"] = j;
}

void SwitchMode::metrics(std::vector<MetricSample>& out) const {
  nlohmann::json st;
  status(st);
  for (const auto& p : st["switch"]["ports"]) {
    std::string port = p["name"];
    for (const auto& q : p["queues"]) {
      std::vector<std::pair<std::string, std::string>> l = {{"port", port},
                                                            {"queue", std::to_string(q["queue"].get<int>())}};
      auto num = [&](const char* k) { return q.contains(k) ? q[k].get<double>() : 0.0; };
      out.push_back(
          {"sluice_switch_queue_depth_bytes", "Bytes queued in a switch port's queue", false, l, num("depth_bytes")});
      out.push_back({"sluice_switch_queue_depth_packets", "Packets queued in a switch port's queue", false, l,
                     num("depth_pkts")});
      out.push_back(
          {"sluice_switch_queue_paused", "1 while the queue is paused", false, l, q["paused"].get<bool>() ? 1.0 : 0.0});
      for (const auto& [k, what] : {std::pair{"pkts_in", "in"}, {"pkts_out", "out"}, {"dropped", "dropped"}}) {
        auto lw = l;
        lw.emplace_back("what", what);
        out.push_back({"sluice_switch_queue_packets_total", "Packets into, out of and dropped by a switch queue", true,
                       lw, num(k)});
      }
    }
    const auto& c = p["control"];
    for (const char* dir : {"in", "out", "rejected"})
      out.push_back({"sluice_switch_control_frames_total",
                     "Control frames per switch port: in (to the logic), out (sent), rejected (dropped)",
                     true,
                     {{"port", port}, {"dir", dir}},
                     c[dir].get<double>()});
    for (auto it = c["rejected_by_reason"].begin(); it != c["rejected_by_reason"].end(); ++it)
      out.push_back({"sluice_switch_control_rejected_total",
                     "Control frames rejected per switch port and reason",
                     true,
                     {{"port", port}, {"reason", it.key()}},
                     it.value().get<double>()});
  }
}

}  // namespace

std::unique_ptr<HostService> make_switch_service(const ServiceContext& ctx) {
  if (ctx.config.get<SwitchConfig>().ports.empty()) return nullptr;
  return std::make_unique<SwitchMode>(ctx);
}

std::string switch_used_by(const Config& cfg) { return cfg.get<SwitchConfig>().ports.empty() ? "" : "[switch] ports"; }

}  // namespace sluice
