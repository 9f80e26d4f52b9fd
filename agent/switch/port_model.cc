#include "switch/port_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace sluice::sw {

uint64_t tx_time_ns(uint64_t bytes, uint64_t rate_bps) {
  if (!rate_bps) return 0;
  return (bytes * 8ull * 1'000'000'000ull + rate_bps - 1) / rate_bps;
}

PortModel::PortModel(PortConfig cfg) : cfg_(std::move(cfg)) {
  if (cfg_.queues.empty() || cfg_.queues.size() > SLUICE_SW_MAX_QUEUES)
    throw std::invalid_argument("port " + cfg_.name + ": needs 1.." + std::to_string(SLUICE_SW_MAX_QUEUES) + " queues");
  if (!cfg_.rate_bps) throw std::invalid_argument("port " + cfg_.name + ": rate must be > 0");
  for (const auto& g : cfg_.groups) {
    if (!g.rate_bps) throw std::invalid_argument("port " + cfg_.name + ": shaper group rate must be > 0");
    groups_.push_back(Group{g, double(g.burst_bytes), 0});
  }
  queues_.resize(cfg_.queues.size());
  for (size_t i = 0; i < queues_.size(); ++i) {
    const auto& qc = cfg_.queues[i];
    if (!qc.quantum) throw std::invalid_argument("port " + cfg_.name + ": quantum must be > 0");
    if (qc.shaper_group >= int(groups_.size()))
      throw std::invalid_argument("port " + cfg_.name + ": queue " + std::to_string(i) + " names shaper group " +
                                  std::to_string(qc.shaper_group) + " that does not exist");
    queues_[i].cfg = qc;
    levels_[qc.priority].queues.push_back(static_cast<QueueId>(i));
  }
}

PortModel::Queue& PortModel::at(QueueId q) {
  if (q >= queues_.size()) throw std::out_of_range("port " + cfg_.name + " has no queue " + std::to_string(q));
  return queues_[q];
}
const PortModel::Queue& PortModel::at(QueueId q) const { return const_cast<PortModel*>(this)->at(q); }

bool PortModel::enqueue(QueueId q, const PacketMeta& pkt) {
  Queue& Q = at(q);
  if (Q.cfg.limit_bytes && Q.depth.bytes + pkt.wire_bytes > Q.cfg.limit_bytes) {
    ++Q.stats.dropped;
    return false;
  }
  Q.pkts.push_back(pkt);
  Q.depth.bytes += pkt.wire_bytes;
  Q.depth.pkts += 1;
  Q.depth.segs += pkt.segs;
  ++Q.stats.pkts_in;
  Q.stats.bytes_in += pkt.wire_bytes;
  return true;
}

QueueDepth PortModel::depth(QueueId q) const { return at(q).depth; }

void PortModel::refill(Group& g, uint64_t now) const {
  if (now > g.last_ns) {
    g.tokens = std::min<double>(g.cfg.burst_bytes, g.tokens + double(now - g.last_ns) * double(g.cfg.rate_bps) / 8e9);
    g.last_ns = now;
  }
}

bool PortModel::eligible(QueueId q, uint64_t now) {
  Queue& Q = queues_[q];
  if (Q.pkts.empty() || Q.paused) return false;
  if (Q.cfg.shaper_group >= 0) {
    Group& g = groups_[Q.cfg.shaper_group];
    refill(g, now);
    if (g.tokens < 0) return false;
  }
  return true;
}

// Strict priority between levels; deficit round robin inside a level
// (Shreedhar & Varghese), skipping paused queues without giving them quantum
// (BFC §3.3: "deficit round robin ... among the queues that are not paused").
std::optional<QueueId> PortModel::pick(uint64_t now) {
  for (auto& [prio, L] : levels_) {
    const size_t n = L.queues.size();
    // A queue whose quantum is smaller than its head packet needs several
    // turns; bound the scan by the worst case of a 64 KB head.
    size_t budget = n * (1 + 65536 / 64) + 1;
    bool any = false;
    for (QueueId q : L.queues) any |= eligible(q, now);
    if (!any) continue;
    while (budget--) {
      QueueId q = L.queues[L.pos];
      Queue& Q = queues_[q];
      if (!eligible(q, now)) {
        if (Q.pkts.empty()) Q.deficit = 0;
        L.pos = (L.pos + 1) % n;
        L.fresh = true;
        continue;
      }
      if (L.fresh) {
        Q.deficit += Q.cfg.quantum;
        L.fresh = false;
      }
      if (int64_t(Q.pkts.front().wire_bytes) <= Q.deficit) return q;
      L.pos = (L.pos + 1) % n;
      L.fresh = true;
    }
  }
  return std::nullopt;
}

PacketMeta PortModel::dequeue(QueueId q, uint64_t now) {
  Queue& Q = at(q);
  if (Q.pkts.empty()) throw std::logic_error("dequeue from an empty queue");
  PacketMeta pkt = Q.pkts.front();
  Q.pkts.pop_front();
  Q.depth.bytes -= pkt.wire_bytes;
  Q.depth.pkts -= 1;
  Q.depth.segs -= pkt.segs;
  ++Q.stats.pkts_out;
  Q.stats.bytes_out += pkt.wire_bytes;
  Q.deficit -= pkt.wire_bytes;
  if (Q.cfg.shaper_group >= 0) {
    Group& g = groups_[Q.cfg.shaper_group];
    refill(g, now);
    g.tokens -= pkt.wire_bytes;
  }
  Level& L = levels_[Q.cfg.priority];
  if (Q.pkts.empty() || int64_t(Q.pkts.front().wire_bytes) > Q.deficit) {
    if (Q.pkts.empty()) Q.deficit = 0;
    if (L.queues[L.pos] == q) {
      L.pos = (L.pos + 1) % L.queues.size();
      L.fresh = true;
    }
  }
  return pkt;
}

uint64_t PortModel::next_shaper_ns(uint64_t now) const {
  uint64_t best = std::numeric_limits<uint64_t>::max();
  for (const auto& Q : queues_) {
    if (Q.pkts.empty() || Q.paused || Q.cfg.shaper_group < 0) continue;
    const Group& g = groups_[Q.cfg.shaper_group];
    // Tokens as of now (refill() is lazy).
    double tokens = std::min<double>(
        g.cfg.burst_bytes, g.tokens + double(now > g.last_ns ? now - g.last_ns : 0) * double(g.cfg.rate_bps) / 8e9);
    if (tokens >= 0) continue;
    uint64_t wait = uint64_t(std::ceil(-tokens * 8e9 / double(g.cfg.rate_bps)));
    best = std::min(best, now + std::max<uint64_t>(wait, 1));
  }
  return best;
}

SwitchModel::SwitchModel(std::vector<PortConfig> ports, Logic& logic) : logic_(logic) {
  if (ports.empty() || ports.size() > SLUICE_SW_MAX_PORTS)
    throw std::invalid_argument("a switch needs 1.." + std::to_string(SLUICE_SW_MAX_PORTS) + " ports");
  for (auto& p : ports) ports_.emplace_back(std::move(p));
  busy_until_.assign(ports_.size(), 0);
  logic_.on_start(*this);
}

void SwitchModel::arrive(uint64_t at_ns, PacketMeta pkt) {
  if (at_ns < now_) throw std::invalid_argument("arrival in the past");
  if (pkt.in_port >= ports_.size() || pkt.out_port >= ports_.size())
    throw std::out_of_range("packet names a port the switch does not have");
  if (!pkt.id) pkt.id = next_id_++;
  Event e{at_ns, order_++, false, pkt, pkt.in_port, {}};
  events_.push(std::move(e));
}

void SwitchModel::arrive_control(uint64_t at_ns, PortId port, std::vector<uint8_t> payload) {
  if (at_ns < now_) throw std::invalid_argument("arrival in the past");
  if (port >= ports_.size()) throw std::out_of_range("control frame on a port the switch does not have");
  Event e{at_ns, order_++, true, {}, port, std::move(payload)};
  events_.push(std::move(e));
}

void SwitchModel::send_control(PortId p, const ControlFrame& frame) {
  PortModel& port = ports_.at(p);
  int reason = SL_CTRL_R_OK;
  auto bytes = encode(frame, &reason);
  if (reason != SL_CTRL_R_OK) {
    ++port.ctrl().out_rejected;
    return;
  }
  ++port.ctrl().out;
  sent_.push_back({now_, p, std::move(bytes)});
}

void SwitchModel::deliver(Event& e) {
  if (e.control) {
    PortModel& port = ports_[e.port];
    ControlFrame f;
    int r = accept_control(static_cast<uint8_t>(port.config().role), e.payload.data(), e.payload.size(), &f);
    if (r != SL_CTRL_R_OK) {
      ++port.ctrl().rejected;
      ++port.ctrl().by_reason[r];
      return;
    }
    ++port.ctrl().in;
    logic_.on_control(f, e.port);
    return;
  }
  PacketMeta pkt = e.pkt;
  Verdict v = logic_.on_enqueue(pkt, pkt.in_port);
  if (v.kind == Verdict::kDrop) {
    ++logic_drops_;
    return;
  }
  pkt.enqueue_ns = now_;
  if (!ports_[pkt.out_port].enqueue(v.queue, pkt)) logic_.on_drop(pkt, pkt.out_port, v.queue);
}

void SwitchModel::serve_ports() {
  for (PortId p = 0; p < ports_.size(); ++p) {
    if (busy_until_[p] > now_) continue;
    auto q = ports_[p].pick(now_);
    if (!q) continue;
    PacketMeta pkt = ports_[p].dequeue(*q, now_);
    uint64_t end = now_ + tx_time_ns(pkt.wire_bytes, ports_[p].config().rate_bps);
    busy_until_[p] = end;
    departures_.push_back({pkt.id, p, *q, now_, end, pkt.wire_bytes});
    logic_.on_dequeue(pkt, p, *q);
  }
}

uint64_t SwitchModel::next_event_ns() const {
  uint64_t t = std::numeric_limits<uint64_t>::max();
  if (!events_.empty()) t = events_.top().at;
  if (timer_ns_) t = std::min(t, std::max(*timer_ns_, now_));
  for (PortId p = 0; p < ports_.size(); ++p) {
    bool queued = false;
    for (QueueId q = 0; q < ports_[p].num_queues(); ++q) queued |= ports_[p].depth(q).pkts > 0;
    if (!queued) continue;
    if (busy_until_[p] > now_) t = std::min(t, busy_until_[p]);
    else t = std::min(t, ports_[p].next_shaper_ns(now_));
  }
  return t;
}

void SwitchModel::run_until(uint64_t until_ns) {
  for (;;) {
    // Everything due now, in a fixed order: arrivals, timer, then the links.
    while (!events_.empty() && events_.top().at <= now_) {
      Event e = events_.top();
      events_.pop();
      deliver(e);
    }
    if (timer_ns_ && *timer_ns_ <= now_) {
      timer_ns_.reset();
      logic_.on_timer(now_);
      continue;  // the timer may have paused/resumed something
    }
    serve_ports();
    uint64_t t = next_event_ns();
    if (t <= now_) continue;  // something became due while serving
    if (t > until_ns) {
      now_ = std::max(now_, until_ns);
      return;
    }
    now_ = t;
  }
}

void SwitchModel::run_idle(uint64_t limit_ns) {
  while (now_ < limit_ns) {
    bool busy = !events_.empty();
    for (PortId p = 0; p < ports_.size() && !busy; ++p) {
      if (busy_until_[p] > now_) busy = true;
      for (QueueId q = 0; q < ports_[p].num_queues() && !busy; ++q)
        busy = ports_[p].depth(q).pkts > 0 && !ports_[p].paused(q);
    }
    if (!busy) return;
    uint64_t t = next_event_ns();
    run_until(std::min(limit_ns, t == std::numeric_limits<uint64_t>::max() ? limit_ns : t));
  }
}

}  // namespace sluice::sw
