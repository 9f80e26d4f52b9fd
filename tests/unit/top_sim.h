// A deterministic discrete-event network for the TOP protocol logic: hosts
// on one switch (a star), every link `rate_bps` with `prop_ns` each way.
// Each switch egress toward a host is a TOP port as top-tpds20 §3.1 asks of
// a switch (R1): signals first; tokens in 6 strict-priority queues of
// `token_queue` packets each, served together at `token_share` of the link;
// data with the rest, in a queue of `data_queue_bytes` (overflow counted as
// data loss). Senders drop expired tokens as the XDP program does (§4.3,
// R2), with per-host clock offsets. A drop hook injects token/data loss.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <vector>

#include "mechanisms/top/receiver.h"
#include "mechanisms/top/sender.h"
#include "sluice/top.h"

namespace sluice::top::sim {

struct NetConfig {
  double rate_bps = 1e9;
  uint64_t prop_ns = 5'000;
  // token / (token + full data frame) as frames on the wire (wire.h), so the
  // group passes one token per receiver pacing slot, as top-switch.sh does.
  double token_share = token_group_share();
  size_t token_queue = 8;
  // Tokens the group passes back to back after a quiet spell (its bucket);
  // HTB's default burst in the lab's tree is 16 (tc-scripts/top-switch.sh).
  double token_burst = 2;
  uint64_t data_queue_bytes = 1 << 20;
  bool expiry = true;
  uint64_t expiry_threshold_ns = 0;  // 0: derived as §5.1 does
};

// Ethernet + IPv4 + UDP headers, FCS, preamble and inter-frame gap.
inline uint64_t frame_bytes(const Packet& p) { return frame_on_wire(wire_bytes(p)); }
// The token limiter charges every token its frame, as HTB does.
constexpr double kTok = static_cast<double>(kTokenFrameBytes);

class Net {
 public:
  using DropHook = std::function<bool(const Packet&)>;

  Net(const NetConfig& nc, int hosts, const ReceiverConfig& rc, const SenderConfig& sc) : nc_(nc) {
    for (int h = 0; h < hosts; h++) {
      auto host = std::make_unique<Host>();
      host->id = h;
      SenderConfig s = sc;
      s.flow_id_base = static_cast<uint64_t>(h + 1) << 32;
      host->sender = std::make_unique<Sender>(s);
      host->receiver = std::make_unique<Receiver>(rc);
      host->nic.rate_bps = nc.rate_bps;
      host->port.rate_bps = nc.rate_bps;
      hosts_.push_back(std::move(host));
    }
    slot_ns_ = rc.slot_ns;
    rtt_ns_ = sc.rtt_ns;
    if (!nc_.expiry_threshold_ns) {
      // §5.1: T = base one-way delay + 2 x max per-hop token queueing, the
      // latter a full token queue drained at the token rate.
      double one_way = 2.0 * nc_.prop_ns + 2 * kTok * 8e9 / nc_.rate_bps;
      double per_hop = nc_.token_queue * kTok * 8e9 / (nc_.rate_bps * nc_.token_share);
      nc_.expiry_threshold_ns = static_cast<uint64_t>(one_way + 2 * per_hop);
    }
  }

  uint64_t now() const { return now_; }
  const NetConfig& config() const { return nc_; }
  Sender& sender(int h) { return *hosts_[h]->sender; }
  Receiver& receiver(int h) { return *hosts_[h]->receiver; }
  void set_clock_offset(int h, int64_t off) { hosts_[h]->clock_offset = off; }
  void set_correction(int h, int64_t c) { hosts_[h]->correction = c; }
  void set_drop(DropHook d) { drop_ = std::move(d); }
  // Sees every packet as its host hands it to the NIC (before the NIC's
  // queue), with now() the host's send time.
  void set_sent(std::function<void(int host, const Packet&)> f) { sent_ = std::move(f); }

  // Opens a flow from src to dst at time `at`.
  void open(int src, int dst, FlowSpec spec, uint64_t at) {
    pending_opens_++;
    schedule(at, [this, src, dst, spec] {
      pending_opens_--;
      std::vector<Packet> out;
      uint64_t id = hosts_[src]->sender->open_flow(spec, clock(src), out);
      route_[id] = {src, dst};
      emit(src, out);
      arm_sender_timer(src);
    });
  }

  void run_until(uint64_t t) {
    while (!events_.empty() && events_.top().at <= t) step();
    if (now_ < t) now_ = t;
  }
  // Runs until every flow is done or `limit`; true when all finished.
  bool run_all(uint64_t limit) {
    while (!events_.empty() && now_ <= limit) {
      step();
      bool busy = false;
      for (auto& h : hosts_) busy |= h->sender->open_flows() > 0 || !h->receiver->idle();
      if (!busy && opened_all()) return true;
    }
    return false;
  }

  struct PortStats {
    std::array<uint64_t, kPriorities> token_drops{};
    std::array<uint64_t, kPriorities> tokens_expired{};
    uint64_t data_drops = 0;
    uint64_t max_data_bytes = 0;
    uint64_t token_bytes = 0, data_bytes = 0;
  };
  PortStats totals() const {
    PortStats t;
    for (auto& h : hosts_) {
      for (int p = 0; p < kPriorities; p++) {
        t.token_drops[p] += h->port.stats.token_drops[p];
        t.tokens_expired[p] += h->expired[p];
      }
      t.data_drops += h->port.stats.data_drops;
      t.max_data_bytes = std::max(t.max_data_bytes, h->port.stats.max_data_bytes);
      t.token_bytes += h->port.stats.token_bytes;
      t.data_bytes += h->port.stats.data_bytes;
    }
    return t;
  }
  uint64_t injected_drops() const { return injected_; }

 private:
  struct Ev {
    uint64_t at;
    uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Ev& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  struct Port {
    double rate_bps = 0;
    bool busy = false;
    bool wake_armed = false;
    std::deque<Packet> signal, data;
    std::array<std::deque<Packet>, kPriorities> tokens;
    uint64_t data_bytes = 0;
    double credit = -1;  // token bytes allowed now (< 0: a full bucket, set on first use)
    uint64_t credit_at = 0;
    PortStats stats;
    bool top = false;  // switch port (TOP queues) or host NIC (FIFO)
  };
  struct Host {
    int id = 0;
    std::unique_ptr<Sender> sender;
    std::unique_ptr<Receiver> receiver;
    Port nic, port;  // nic: host -> switch; port: switch -> host
    int64_t clock_offset = 0;
    int64_t correction = 0;
    bool slot_armed = false, timer_armed = false;
    std::array<uint64_t, kPriorities> expired{};
  };

  uint64_t clock(int h) const { return now_ + hosts_[h]->clock_offset; }
  bool opened_all() const { return pending_opens_ == 0; }
  void schedule(uint64_t at, std::function<void()> fn) { events_.push({at, seq_++, std::move(fn)}); }
  void step() {
    Ev e = events_.top();
    events_.pop();
    now_ = e.at;
    e.fn();
  }
  uint64_t tx_ns(const Port& p, const Packet& pk) const {
    return static_cast<uint64_t>(frame_bytes(pk) * 8e9 / p.rate_bps);
  }
  int dst_of(int from, const Packet& p) const {
    auto it = route_.find(p.flow);
    if (it == route_.end()) return -1;
    return it->second.first == from ? it->second.second : it->second.first;
  }
  void emit(int h, const std::vector<Packet>& out) {
    for (const Packet& p : out) {
      if (sent_) sent_(h, p);
      Packet q = p;
      enqueue(hosts_[h]->nic, q, [this, h, q] { at_switch(h, q); });
    }
  }
  // Host NIC: FIFO; delivery callback after serialization + propagation.
  void enqueue(Port& port, const Packet& p, std::function<void()> deliver) {
    nic_q_[&port].push_back({p, std::move(deliver)});
    if (!port.busy) nic_next(port);
  }
  void nic_next(Port& port) {
    auto& q = nic_q_[&port];
    if (q.empty()) {
      port.busy = false;
      return;
    }
    port.busy = true;
    auto [p, deliver] = std::move(q.front());
    q.pop_front();
    uint64_t t = tx_ns(port, p);
    schedule(now_ + t, [this, &port] { nic_next(port); });
    schedule(now_ + t + nc_.prop_ns, std::move(deliver));
  }
  void at_switch(int from, const Packet& p) {
    if (drop_ && drop_(p)) {
      injected_++;
      return;
    }
    int to = dst_of(from, p);
    if (to < 0) return;
    Port& port = hosts_[to]->port;
    switch (p.type) {
      case Type::kToken: {
        auto& q = port.tokens[p.priority];
        if (q.size() >= nc_.token_queue) {
          port.stats.token_drops[p.priority]++;
          return;
        }
        q.push_back(p);
        break;
      }
      case Type::kData:
        if (port.data_bytes + frame_bytes(p) > nc_.data_queue_bytes) {
          port.stats.data_drops++;
          return;
        }
        port.data.push_back(p);
        port.data_bytes += frame_bytes(p);
        port.stats.max_data_bytes = std::max(port.stats.max_data_bytes, port.data_bytes);
        break;
      default: port.signal.push_back(p);
    }
    if (!port.busy) port_next(to);
  }
  void refill(Port& port) {
    double add = (now_ - port.credit_at) * port.rate_bps * nc_.token_share / 8e9;
    if (port.credit < 0) port.credit = nc_.token_burst * kTok, add = 0;
    port.credit = std::min(nc_.token_burst * kTok, port.credit + add);
    port.credit_at = now_;
  }
  void port_next(int to) {
    Port& port = hosts_[to]->port;
    refill(port);
    Packet p;
    bool have = false;
    if (!port.signal.empty()) {
      p = port.signal.front();
      port.signal.pop_front();
      have = true;
    }
    if (!have) {
      for (auto& q : port.tokens) {
        if (q.empty()) continue;
        if (port.credit >= kTok) {
          p = q.front();
          q.pop_front();
          port.credit -= kTok;
          port.stats.token_bytes += kTokenFrameBytes;
          have = true;
        }
        break;
      }
    }
    if (!have && !port.data.empty()) {
      p = port.data.front();
      port.data.pop_front();
      port.data_bytes -= frame_bytes(p);
      port.stats.data_bytes += frame_bytes(p);
      have = true;
    }
    if (!have) {
      port.busy = false;
      bool tokens_waiting = false;
      for (auto& q : port.tokens) tokens_waiting |= !q.empty();
      if (tokens_waiting && !port.wake_armed) {
        port.wake_armed = true;
        uint64_t wait = static_cast<uint64_t>((kTok - port.credit) * 8e9 / (port.rate_bps * nc_.token_share)) + 1;
        schedule(now_ + wait, [this, to] {
          hosts_[to]->port.wake_armed = false;
          if (!hosts_[to]->port.busy) port_next(to);
        });
      }
      return;
    }
    port.busy = true;
    uint64_t t = tx_ns(port, p);
    schedule(now_ + t, [this, to] { port_next(to); });
    schedule(now_ + t + nc_.prop_ns, [this, to, p] { at_host(to, p); });
  }
  void at_host(int h, const Packet& p) {
    Host& host = *hosts_[h];
    std::vector<Packet> out;
    switch (p.type) {
      case Type::kToken: {
        // §4.3: the sender drops a token whose sojourn on the synced clock
        // exceeds T (the XDP program's test, same function).
        int64_t soj = sluice_top_sojourn_ns(clock(h), p.tstamp_ns, host.correction);
        if (nc_.expiry && sluice_top_token_expired(soj, nc_.expiry_threshold_ns, 0)) {
          host.expired[p.priority]++;
          return;
        }
        host.sender->on_packet(p, clock(h), out);
        break;
      }
      case Type::kNack:
      case Type::kDone: host.sender->on_packet(p, clock(h), out); break;
      default: host.receiver->on_packet(p, clock(h), out); arm_slot(h);
    }
    emit(h, out);
  }
  void arm_slot(int h) {
    Host& host = *hosts_[h];
    if (host.slot_armed || host.receiver->idle()) return;
    host.slot_armed = true;
    // Receivers pace with jitter (as ExpressPass does) so that two token
    // streams at one limiter do not phase-lock; deterministic per seed.
    rng_ = rng_ * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t jitter = (rng_ >> 33) % (slot_ns_ / 2 + 1);
    schedule(now_ + slot_ns_ * 3 / 4 + jitter, [this, h] {
      Host& host = *hosts_[h];
      host.slot_armed = false;
      std::vector<Packet> out;
      host.receiver->on_slot(clock(h), out);
      emit(h, out);
      arm_slot(h);
    });
  }
  void arm_sender_timer(int h) {
    Host& host = *hosts_[h];
    if (host.timer_armed || host.sender->open_flows() == 0) return;
    host.timer_armed = true;
    schedule(now_ + rtt_ns_, [this, h] {
      Host& host = *hosts_[h];
      host.timer_armed = false;
      std::vector<Packet> out;
      host.sender->on_timer(clock(h), out);
      emit(h, out);
      arm_sender_timer(h);
    });
  }

  NetConfig nc_;
  std::vector<std::unique_ptr<Host>> hosts_;
  std::map<uint64_t, std::pair<int, int>> route_;
  std::map<Port*, std::deque<std::pair<Packet, std::function<void()>>>> nic_q_;
  std::priority_queue<Ev, std::vector<Ev>, std::greater<Ev>> events_;
  uint64_t now_ = 0, seq_ = 0, slot_ns_ = 0, rtt_ns_ = 0, injected_ = 0;
  int pending_opens_ = 0;
  uint64_t rng_ = 1;
  DropHook drop_;
  std::function<void(int, const Packet&)> sent_;
};

}  // namespace sluice::top::sim
