#include "mechanisms/pac/pac_core.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

namespace sluice::pac {

size_t FlowKeyHash::operator()(const sluice_pac_flow_key& k) const noexcept {
  // FNV-1a over the key bytes (the struct has no uninitialised padding: the
  // BPF side and we zero it).
  const auto* b = reinterpret_cast<const uint8_t*>(&k);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < sizeof(k); ++i) h = (h ^ b[i]) * 1099511628211ull;
  return static_cast<size_t>(h);
}

bool FlowKeyEq::operator()(const sluice_pac_flow_key& a, const sluice_pac_flow_key& b) const noexcept {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

std::string format_key(const sluice_pac_flow_key& k) {
  char r[INET6_ADDRSTRLEN] = "?", l[INET6_ADDRSTRLEN] = "?";
  int af = k.family == 6 ? AF_INET6 : AF_INET;
  inet_ntop(af, k.raddr, r, sizeof(r));
  inet_ntop(af, k.laddr, l, sizeof(l));
  return std::string(r) + ":" + std::to_string(ntohs(k.rport)) + " -> " + l + ":" + std::to_string(ntohs(k.lport));
}

uint64_t adapt_threshold(uint64_t threshold, double alpha, uint64_t buffer_size, uint64_t floor) {
  double t;
  if (alpha > 0) t = static_cast<double>(threshold) * (1.0 - alpha / 2.0);
  else t = std::min(static_cast<double>(threshold) * 2.0, static_cast<double>(buffer_size));
  uint64_t r = static_cast<uint64_t>(t);
  return std::max(r, std::min(floor, buffer_size));
}

std::optional<int64_t> DeviationCorrector::on_interval(double bw, int64_t in_flight, double alpha, bool holding) {
  std::optional<int64_t> out;
  if (holding && primed_ && bw_s_ > 0 && bw <= bw_s_ * lambda_) {
    // in_flight = min{in_flight, in_flight_S · BW_T / (BW_S · (1 − α/2))}
    double denom = bw_s_ * (1.0 - alpha / 2.0);
    double target = denom > 0 ? inflight_s_ * bw / denom : static_cast<double>(in_flight);
    if (target < 0) target = 0;
    if (target < static_cast<double>(in_flight)) {
      out = static_cast<int64_t>(target);
      in_flight = *out;
    }
  }
  double cur = static_cast<double>(std::max<int64_t>(in_flight, 0));
  if (!primed_) {
    bw_s_ = bw;
    inflight_s_ = cur;
    primed_ = true;
  } else {
    bw_s_ += gain_ * (bw - bw_s_);
    inflight_s_ += gain_ * (cur - inflight_s_);
  }
  return out;
}

bool PhaseTracker::on_interval(double received, double expected, double lambda) {
  double prev = prev_expected_;
  prev_expected_ = expected;
  if (ca_) return false;
  if (prev > 0 && received <= prev * lambda) ++drops_;
  else if (prev > 0) drops_ = 0;
  if (drops_ >= 2) {
    ca_ = true;
    return true;
  }
  return false;
}

size_t Engine::level_of_bytes(uint64_t bytes) const {
  size_t l = 0;
  while (l < p_.level_bytes.size() && bytes >= p_.level_bytes[l]) ++l;
  return l;
}

size_t Engine::held_at_level(size_t level) const { return level < held_per_level_.size() ? held_per_level_[level] : 0; }

void Engine::make_levels() {
  if (!rr_.empty()) return;
  rr_.resize(levels());
  ack_rr_.resize(levels());
  held_per_level_.assign(levels(), 0);
}

Engine::Flow& Engine::flow(const sluice_pac_flow_key& k) {
  make_levels();
  auto [it, inserted] = flows_.try_emplace(k);
  if (inserted) it->second.key = k;
  return it->second;
}

uint32_t Engine::trigger(const Flow& f, const HeldAck& a) const {
  bool ca = f.ce_ca || f.phase.ca() || (a.flags & SLUICE_PAC_EVF_CA);
  uint32_t t = sluice_pac_trigger(f.last_ack, f.ack_valid ? 1 : 0, a.ack, f.mss, f.window, ca ? 1 : 0,
                                  (a.flags & SLUICE_PAC_EVF_ECE) ? 1 : 0);
  if (p_.requests_yield && !a.req_bytes && f.ack_valid) {
    // Under a capped window an ACK moves the window's right edge by what it
    // acknowledges: that is all it can let out (a duplicate, nothing).
    int32_t d = sluice_pac_seq_delta(f.last_ack, a.ack);
    t = std::min<uint32_t>(t, d > 0 ? uint32_t(d) : 0u);
  }
  return std::max(t, a.req_bytes);
}

void Engine::enqueue_flow(Flow& f) {
  if (f.queued || f.q.empty()) return;
  f.rr_pos = rr_[f.level].insert(rr_[f.level].end(), &f);
  f.rr_seq = rr_seq_next_++;
  f.queued = true;
  head_changed(f);
}

void Engine::unlink_flow(Flow& f) {
  if (!f.queued) return;
  rr_[f.level].erase(f.rr_pos);
  f.queued = false;
  head_changed(f);
}

uint64_t Engine::hold_deadline(const HeldAck& a) const {
  uint64_t limit = a.req_bytes ? p_.max_hold_request_ns : p_.max_hold_ns;
  return a.enq_ns > ~uint64_t(0) - limit ? ~uint64_t(0) : a.enq_ns + limit;
}

void Engine::head_changed(Flow& f) {
  if (f.queued) next_hold_deadline_ = std::min(next_hold_deadline_, hold_deadline(f.q.front()));
  if (!p_.requests_yield) return;
  bool ack_head = f.queued && !f.q.front().req_bytes;
  if (f.ack_listed && (!ack_head || f.ack_level != f.level)) {
    ack_rr_[f.ack_level].erase(f.rr_seq);
    f.ack_listed = false;
  }
  if (ack_head && !f.ack_listed) {
    ack_rr_[f.level].emplace(f.rr_seq, &f);
    f.ack_listed = true;
    f.ack_level = f.level;
  }
}

void Engine::set_level(Flow& f, size_t level) {
  if (level == f.level) return;
  bool was = f.queued;
  unlink_flow(f);
  held_per_level_[f.level] -= f.q.size();
  f.level = level;
  held_per_level_[f.level] += f.q.size();
  if (was) enqueue_flow(f);
  ++st_.level_moves;
}

size_t Engine::drop_before(Flow& f, uint32_t ack) {
  size_t n = 0;
  while (!f.q.empty() && sluice_pac_seq_delta(f.q.front().ack, ack) > 0) {
    f.q.pop_front();
    ++n;
  }
  // Held ACKs are in ACK order per flow, but be safe against reordering.
  for (auto it = f.q.begin(); it != f.q.end();) {
    if (sluice_pac_seq_delta(it->ack, ack) > 0) {
      it = f.q.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  if (n) {
    held_ -= n;
    held_per_level_[f.level] -= n;
    f.dropped += n;
    if (f.q.empty()) unlink_flow(f);
    else head_changed(f);
  }
  return n;
}

void Engine::drop_all(Flow& f) {
  size_t n = f.q.size();
  if (!n) return;
  f.q.clear();
  held_ -= n;
  held_per_level_[f.level] -= n;
  f.dropped += n;
  st_.dropped_teardown += n;
  unlink_flow(f);
  push_ctl(f);
}

void Engine::push_ctl(Flow& f) {
  sluice_pac_flow_ctl c{};
  c.dropped = f.dropped;
  c.window = f.window;
  c.ca = f.phase.ca() ? 1 : 0;
  dp_.write_ctl(f.key, c);
}

void Engine::on_event(const sluice_pac_event& ev, uint64_t now_ns) {
  if (ev.type == SLUICE_PAC_EV_WAKE) return;  // release() follows
  Flow& f = flow(ev.key);
  f.bytes_rcvd = std::max<uint64_t>(f.bytes_rcvd, ev.bytes_rcvd);
  if (ev.mss) f.mss = ev.mss;
  if (ev.flags & SLUICE_PAC_EVF_CA) f.ce_ca = true;

  if (ev.type == SLUICE_PAC_EV_SEGMENT) {
    // A segment that is never held passed (or arrived). RST: the
    // connection is gone, held ACKs can only provoke RSTs: drop (counted).
    if (ev.tcp_flags & 0x04) {
      drop_all(f);
      return;
    }
    if (!(ev.flags & SLUICE_PAC_EVF_INGRESS)) {
      // Our own segment carried ACK `ev.ack` out ahead of the held ACKs:
      // held ACKs below it are superseded (cumulative ACK); ACKs equal to
      // it are kept (duplicates are never coalesced).
      if (!f.ack_valid || sluice_pac_seq_delta(f.last_ack, ev.ack) > 0) f.last_ack = ev.ack;
      f.ack_valid = true;
      size_t n = drop_before(f, ev.ack);
      if (n) {
        st_.dropped_superseded += n;
        push_ctl(f);
      }
    }
    update_wake();
    return;
  }
  if (ev.type != SLUICE_PAC_EV_HELD) return;
  ++st_.held_events;
  if (f.q.empty()) {
    // Nothing of this flow is held, so the kernel's ACK_prev is current.
    f.last_ack = ev.last_ack;
    f.ack_valid = ev.ack_valid != 0;
  }
  if (ev.retrans_segs > f.retrans_seen) {
    // PAC §III-D: a stale ACK (the sender retransmitted, e.g. after a
    // timeout): drop the held ACKs it makes out of order, move the rest to
    // the highest priority and put the flow back into slow start.
    f.retrans_seen = ev.retrans_segs;
    ++st_.stale_events;
    size_t n = drop_before(f, ev.ack);
    st_.dropped_stale += n;
    f.phase.reset_slow_start();
    f.ce_ca = false;
    f.boosted = true;
    set_level(f, 0);
    push_ctl(f);
  }
  HeldAck a;
  a.enq_ns = now_ns;
  a.ack = ev.ack;
  a.window = ev.window;
  a.flags = ev.flags;
  a.req_bytes = ev.req_bytes;
  a.frame_len = std::min<uint16_t>(ev.frame_len, SLUICE_PAC_FRAME_MAX);
  std::memcpy(a.frame.data(), ev.frame, a.frame_len);
  if (!f.boosted) set_level(f, level_of_bytes(f.bytes_rcvd));
  f.q.push_back(a);
  ++held_;
  ++held_per_level_[f.level];
  enqueue_flow(f);
}

Engine::Flow* Engine::head_flow() {
  for (auto& l : rr_)
    if (!l.empty()) return l.front();
  return nullptr;
}

// With requests_yield: the first flow, in MLFQ order, whose head is an ACK
// (ack_rr_ keeps them in each level's RR order).
Engine::Flow* Engine::first_ack_flow() const {
  for (const auto& l : ack_rr_)
    if (!l.empty()) return l.begin()->second;
  return nullptr;
}

uint64_t Engine::head_trigger() const {
  for (const auto& l : rr_)
    if (!l.empty()) {
      const Flow& f = *l.front();
      if (p_.requests_yield && f.q.front().req_bytes)
        if (uint64_t t = ack_trigger(); t != kNoAck) return t;
      return trigger(f, f.q.front());
    }
  return 0;
}

// Trigger of the first held ACK (not a request) in MLFQ order, or kNoAck.
uint64_t Engine::ack_trigger() const {
  const Flow* a = first_ack_flow();
  return a ? trigger(*a, a->q.front()) : kNoAck;
}

void Engine::send_head(Flow& f, uint64_t now_ns, ReleaseWhy why) {
  HeldAck a = std::move(f.q.front());
  f.q.pop_front();
  --held_;
  --held_per_level_[f.level];
  // Round robin within the level: the flow goes to the back.
  unlink_flow(f);
  if (f.q.empty()) {
    f.boosted = false;
  } else {
    enqueue_flow(f);
  }
  if (!dp_.send(f.key, a)) {
    ++st_.send_failures;
    f.dropped += 1;
    push_ctl(f);
    return;
  }
  if (!f.ack_valid || sluice_pac_seq_delta(f.last_ack, a.ack) > 0) f.last_ack = a.ack;
  f.ack_valid = true;
  switch (why) {
    case ReleaseWhy::Threshold: ++st_.released; break;
    case ReleaseWhy::QueueFull: ++st_.released_queue_full; break;
    case ReleaseWhy::MaxHold: ++st_.released_max_hold; break;
    case ReleaseWhy::Flush: ++st_.released_flush; break;
  }
  uint64_t us = now_ns > a.enq_ns ? (now_ns - a.enq_ns) / 1000 : 0;
  size_t b = 0;
  while (b < EngineStats::kHoldBucketsUs.size() && us > EngineStats::kHoldBucketsUs[b]) ++b;
  ++st_.hold_hist[b];
  st_.hold_sum_us += us;
  ++st_.hold_count;
}

size_t Engine::release(uint64_t now_ns) {
  size_t sent = 0;
  // Early releases first: a full queue releases rather than drops, and no
  // ACK waits longer than max_hold (held ACKs are never kept forever).
  while (held_ > p_.max_held) {
    Flow* f = head_flow();
    if (!f) break;
    send_head(*f, now_ns, ReleaseWhy::QueueFull);
    ++sent;
  }
  // The scan of every holding flow runs only once the bound says a head may
  // be due; it sends what is due, in the same order as a scan at every call
  // would, and recomputes the bound.
  if (held_ && p_.max_hold_ns && now_ns > next_hold_deadline_) {
    for (auto& l : rr_) {
      // Copy: send_head reorders the list.
      std::vector<Flow*> fl(l.begin(), l.end());
      for (Flow* fp : fl) {
        Flow& f = *fp;
        // A held request waits for its turn longer than an ACK: releasing
        // it early sets a whole response going at once. (Its sender's TCP
        // believes it sent; past its RTO it resends, and the duplicate is
        // harmless to the peer.)
        auto limit = [&](const HeldAck& a) { return a.req_bytes ? p_.max_hold_request_ns : p_.max_hold_ns; };
        while (!f.q.empty() && now_ns > f.q.front().enq_ns && now_ns - f.q.front().enq_ns > limit(f.q.front())) {
          send_head(f, now_ns, ReleaseWhy::MaxHold);
          ++sent;
        }
      }
    }
    next_hold_deadline_ = ~uint64_t(0);
    for (const auto& l : rr_)
      for (const Flow* f : l) next_hold_deadline_ = std::min(next_hold_deadline_, hold_deadline(f->q.front()));
  }
  // Algorithm 1 lines 9-14. With requests_yield a held ACK goes before
  // any held request, whether the request fits or not: a request that took
  // the room would leave the ACK (and its response) waiting.
  while (Flow* f = head_flow()) {
    if (p_.requests_yield && f->q.front().req_bytes)
      if (Flow* a = first_ack_flow()) f = a;
    if (!sluice_pac_fits(dp_.in_flight(), trigger(*f, f->q.front()), dp_.threshold())) break;
    send_head(*f, now_ns, ReleaseWhy::Threshold);
    ++sent;
  }
  update_wake();
  return sent;
}

size_t Engine::flush(uint64_t now_ns) {
  size_t sent = 0;
  while (Flow* f = head_flow()) {
    send_head(*f, now_ns, ReleaseWhy::Flush);
    ++sent;
  }
  update_wake();
  return sent;
}

// The room the kernel keeps for the first held ACK: with requests_yield
// (capped windows) only. There every ACK the kernel admits refills exactly
// the room its own data freed, so a flow whose ACK waits never sees room
// (released at max_hold, rounds of +40 to +480 ms at 100 Mbit/s). Without
// the cap, measured at 1 Gbit/s, keeping it sent more ACKs through the agent
// and was not clearly better (docs/pac.md).
void Engine::update_wake() {
  uint64_t ack = held_ && p_.requests_yield ? ack_trigger() : kNoAck;
  dp_.set_wake(held_, held_ ? head_trigger() : 0, ack == kNoAck ? 0 : ack);
}

void Engine::on_flow_sample(const sluice_pac_flow_key& key, uint64_t received, uint64_t triggered, bool ce_seen) {
  Flow& f = flow(key);
  bool changed = false;
  if (ce_seen && !f.ce_ca) f.ce_ca = true;
  if (f.phase.on_interval(double(received), double(triggered), p_.lambda)) changed = true;
  // The CA increment MSS²/Window needs the window: bytes per interval (one
  // average RTT). Rewritten when it moves by more than a quarter (each map
  // write is a syscall).
  uint32_t w = static_cast<uint32_t>(std::min<uint64_t>(received, UINT32_MAX));
  if (w && (f.phase.ca() || f.ce_ca) && (f.window == 0 || w > f.window + f.window / 4 || w + w / 4 < f.window)) {
    f.window = w;
    changed = true;
  }
  if (changed) push_ctl(f);
}

void Engine::forget(const sluice_pac_flow_key& key) {
  auto it = flows_.find(key);
  if (it == flows_.end()) return;
  Flow& f = it->second;
  if (!f.q.empty()) return;  // still holding: keep until released
  unlink_flow(f);
  flows_.erase(it);
}

std::vector<std::pair<sluice_pac_flow_key, uint32_t>> Engine::order() const {
  // Simulate strict priority + RR without sending.
  std::vector<std::pair<sluice_pac_flow_key, uint32_t>> out;
  std::vector<std::list<std::pair<sluice_pac_flow_key, std::deque<uint32_t>>>> lv(rr_.size());
  for (size_t l = 0; l < rr_.size(); ++l)
    for (const Flow* f : rr_[l]) {
      std::deque<uint32_t> acks;
      for (const auto& a : f->q) acks.push_back(a.ack);
      lv[l].push_back({f->key, acks});
    }
  for (auto& l : lv) {
    while (!l.empty()) {
      auto e = std::move(l.front());
      l.pop_front();
      out.push_back({e.first, e.second.front()});
      e.second.pop_front();
      if (!e.second.empty()) l.push_back(std::move(e));
    }
  }
  return out;
}

std::vector<uint32_t> Engine::queued_acks(const sluice_pac_flow_key& key) const {
  std::vector<uint32_t> out;
  auto it = flows_.find(key);
  if (it != flows_.end())
    for (const auto& a : it->second.q) out.push_back(a.ack);
  return out;
}

std::vector<sluice_pac_flow_key> Engine::holding_flows() const {
  std::vector<sluice_pac_flow_key> out;
  for (const auto& [k, f] : flows_)
    if (!f.q.empty()) out.push_back(k);
  return out;
}

bool Engine::flow_ca(const sluice_pac_flow_key& key) const {
  auto it = flows_.find(key);
  return it != flows_.end() && (it->second.phase.ca() || it->second.ce_ca);
}

std::string Engine::check() const {
  size_t listed = 0;
  for (size_t lv = 0; lv < rr_.size(); ++lv) {
    uint64_t prev_seq = 0;
    std::vector<const Flow*> acks;
    for (auto it = rr_[lv].begin(); it != rr_[lv].end(); ++it) {
      const Flow* f = *it;
      auto m = flows_.find(f->key);
      if (m == flows_.end() || &m->second != f) return "a listed flow is not in the flow table";
      if (!f->queued || f->level != lv || f->rr_pos != it) return "a listed flow is not at its recorded place";
      if (f->q.empty()) return "an empty flow is listed";
      if (it != rr_[lv].begin() && f->rr_seq <= prev_seq) return "a level's list is not in append order";
      prev_seq = f->rr_seq;
      if (p_.max_hold_ns && hold_deadline(f->q.front()) < next_hold_deadline_)
        return "a head is due before the max_hold bound";
      if (p_.requests_yield && !f->q.front().req_bytes) acks.push_back(f);
      ++listed;
    }
    if (p_.requests_yield) {
      if (acks.size() != ack_rr_[lv].size()) return "the ACK heads of a level differ from its queues";
      size_t i = 0;
      for (const auto& [seq, f] : ack_rr_[lv])
        if (acks[i++] != f || f->rr_seq != seq || !f->ack_listed || f->ack_level != lv)
          return "the ACK heads of a level are not in its RR order";
    }
  }
  for (const auto& [k, f] : flows_) {
    if (f.q.empty() == f.queued) return "a flow's queue and its listing disagree";
    if (f.queued) --listed;
  }
  if (listed) return "list entries and queued flows differ";
  return "";
}

}  // namespace sluice::pac
