#include "mechanisms/floodgate/logic.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace sluice::floodgate {

namespace {

bool zero(const Addr& a) {
  for (uint8_t b : a)
    if (b) return false;
  return true;
}

uint64_t bit(PortId p) { return p < 64 ? uint64_t{1} << p : 0; }

// CRC-32 (IEEE 802.3, reflected) of a destination address: §4.2 "a hash
// function, e.g. CRC, ... using the destination IP as the hash key".
uint32_t crc32(const Addr& a) {
  uint32_t c = 0xffffffffu;
  for (uint8_t b : a) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}

// Serial arithmetic on 32-bit byte sequence numbers (RFC 1982).
int64_t diff(uint32_t a, uint32_t b) { return int64_t(int32_t(a - b)); }

}  // namespace

void Config::validate() const {
  auto bad = [](const std::string& m) { throw std::invalid_argument("floodgate: " + m); };
  if (!credit_interval_ns) bad("credit interval T must be > 0");
  if (!max_voqs || max_voqs >= SLUICE_SW_MAX_QUEUES)
    bad("max_voqs must be 1.." + std::to_string(SLUICE_SW_MAX_QUEUES - 1));
  if (!thre_credit_bytes && !thre_credit_bdp) bad("thre_credit must be > 0 (bytes or BDPs)");
  if (syn_timeout_ns < 2 * credit_interval_ns)
    bad("syn_timeout must be at least 2 credit intervals (a silence is longer than T)");
  if (down_voqs >= max_voqs) bad("down_voqs must leave VOQs for the up group (< max_voqs)");
  if (thre_off_bytes && thre_on_bytes > thre_off_bytes) bad("thre_on must not exceed thre_off");
  if (voq_agent && voq_limit_bytes < 1536) bad("voq_limit_bytes must hold at least one frame (1536)");
  for (PortId p : up_ports)
    if (p >= SLUICE_SW_MAX_PORTS) bad("up port " + std::to_string(p) + " out of range");
}

FloodgateLogic::FloodgateLogic(Config cfg) : cfg_(std::move(cfg)) { cfg_.validate(); }

void FloodgateLogic::on_start(sw::Substrate& s) {
  Logic::on_start(s);
  const size_t n = s.num_ports();
  up_.assign(n, false);
  for (PortId p : cfg_.up_ports) {
    if (p >= n) throw std::invalid_argument("floodgate: up port " + std::to_string(p) + " does not exist");
    up_[p] = true;
  }
  w0_.assign(n, 0);
  uint32_t nvoq = cfg_.max_voqs;
  bool any = false, any_up = false, any_down = false;
  for (PortId p = 0; p < n; ++p) {
    const auto& pc = s.port(p);
    // §3.2: the last-hop ToR keeps no window: only switch-facing egress
    // ports have one (a host-facing port is the last hop).
    if (pc.role != sw::PortRole::kSwitchFacing) continue;
    if (pc.queues.size() < 2)
      throw std::invalid_argument("floodgate: port " + pc.name + " needs a default queue and at least one VOQ (has " +
                                  std::to_string(pc.queues.size()) + " queue)");
    for (size_t q = 1; q < pc.queues.size(); ++q)
      if (pc.queues[q].priority <= pc.queues[0].priority)
        throw std::invalid_argument("floodgate: port " + pc.name + " queue " + std::to_string(q) +
                                    ": VOQs need a lower priority than queue 0 (§7.2)");
    nvoq = std::min<uint32_t>(nvoq, uint32_t(pc.queues.size() - 1));
    any = true;
    (up_[p] ? any_up : any_down) = true;
    // §4.2: window = BDP_nextHop + C_out * T.
    w0_[p] = int64_t(bdp(p) + (unsigned __int128)pc.rate_bps * cfg_.credit_interval_ns / 8 / 1'000'000'000);
    if (w0_[p] <= 0) w0_[p] = 1;
  }
  voqs_.assign(any ? nvoq : 0, Voq{});
  down_end_ = 0;
  // §4.2 VOQ grouping: only a middle-layer switch (windows both up and
  // down) needs it.
  if (cfg_.voq_grouping && any_up && any_down) {
    if (nvoq < 2) throw std::invalid_argument("floodgate: VOQ grouping needs at least 2 VOQs");
    down_end_ = cfg_.down_voqs ? std::min(cfg_.down_voqs, nvoq - 1) : nvoq / 2;
  }
  s.arm_timer(s.now_ns() + cfg_.credit_interval_ns);
}

uint64_t FloodgateLogic::bdp(PortId p) const {
  return uint64_t((unsigned __int128)sw_->port(p).rate_bps * cfg_.hop_rtt_ns / 8 / 1'000'000'000);
}

bool FloodgateLogic::switch_port(PortId p) const {
  return sw_ && p < sw_->num_ports() && sw_->port(p).role == sw::PortRole::kSwitchFacing;
}

bool FloodgateLogic::has_window(PortId out) const { return out < w0_.size() && w0_[out] > 0; }
int64_t FloodgateLogic::initial_window(PortId out) const { return has_window(out) ? w0_[out] : 0; }

uint64_t FloodgateLogic::thre_credit(int v) const {
  if (cfg_.thre_credit_bytes) return cfg_.thre_credit_bytes;
  if (v < 0 || voqs_[v].q.empty()) return UINT64_MAX;
  return std::max<uint64_t>(1, cfg_.thre_credit_bdp * bdp(voqs_[v].q.front().port));
}
uint64_t FloodgateLogic::thre_off(int v) const {
  if (cfg_.thre_off_bytes) return cfg_.thre_off_bytes;
  if (v < 0 || voqs_[v].q.empty()) return UINT64_MAX;
  return bdp(voqs_[v].q.front().port);
}
uint64_t FloodgateLogic::thre_on(int v) const {
  if (cfg_.thre_on_bytes) return cfg_.thre_on_bytes;
  if (cfg_.thre_off_bytes) return cfg_.thre_off_bytes;
  if (v < 0 || voqs_[v].q.empty()) return UINT64_MAX;
  return bdp(voqs_[v].q.front().port);
}

// §4.3: the remaining window is initial - (next_send - last_credit).
int64_t FloodgateLogic::window_of(PortId out, const Window& w) const {
  return w0_[out] - diff(w.next_psn, w.credit_psn);
}

int64_t FloodgateLogic::window(PortId out, const Addr& dst) const {
  if (!has_window(out)) return 0;
  auto it = win_.find({out, dst});
  return it == win_.end() ? w0_[out] : window_of(out, it->second);
}

int64_t FloodgateLogic::inflight(PortId out, const Addr& dst) const {
  auto it = win_.find({out, dst});
  return it == win_.end() ? 0 : diff(it->second.next_psn, it->second.credit_psn);
}

FloodgateLogic::Window& FloodgateLogic::win(PortId out, const Addr& dst) { return win_[{out, dst}]; }

void FloodgateLogic::forward(PortId out, const Addr& dst, uint32_t bytes) {
  Window& w = win(out, dst);
  // The silence a switchSYN waits for starts when we start waiting.
  if (w.next_psn == w.credit_psn) w.last_heard_ns = sw_->now_ns();
  w.next_psn += bytes;  // §4.2: forwarding decreases the window
}

int FloodgateLogic::voq_of(const Addr& dst) const {
  auto it = dst_voq_.find(dst);
  return it == dst_voq_.end() ? -1 : int(it->second);
}

uint64_t FloodgateLogic::voq_bytes(int v) const { return v < 0 || size_t(v) >= voqs_.size() ? 0 : voqs_[v].bytes; }

std::pair<uint32_t, uint32_t> FloodgateLogic::voq_group(PortId out) const {
  const uint32_t n = uint32_t(voqs_.size());
  if (!down_end_) return {0, n};
  return up(out) ? std::pair<uint32_t, uint32_t>{down_end_, n} : std::pair<uint32_t, uint32_t>{0, down_end_};
}

// §4.2 "allocate VOQs for incast flows dynamically": an empty VOQ of the
// packet's group if there is one, else one chosen by a hash of dst.
uint32_t FloodgateLogic::allocate(PortId out, const Addr& dst) {
  auto [lo, hi] = voq_group(out);
  for (uint32_t v = lo; v < hi; ++v)
    if (voqs_[v].q.empty()) return v;
  ++stats_.voq_hashed;
  return lo + crc32(dst) % (hi - lo);
}

void FloodgateLogic::push(uint32_t v, const sw::PacketMeta& pkt) {
  Voq& V = voqs_[v];
  V.q.push_back({pkt.id, pkt.out_port, pkt.dst, pkt.wire_bytes});
  V.bytes += pkt.wire_bytes;
  ++V.per_port[pkt.out_port];
  ++V.per_dst[pkt.dst];
  dst_voq_[pkt.dst] = v;
  ++stats_.voq_enqueued;
  count_voqs();
  refresh(v);
}

void FloodgateLogic::erase(uint32_t v, std::deque<Entry>::iterator it) {
  Voq& V = voqs_[v];
  V.bytes -= it->bytes;
  if (--V.per_port[it->port] == 0) V.per_port.erase(it->port);
  if (--V.per_dst[it->dst] == 0) {
    V.per_dst.erase(it->dst);
    dst_voq_.erase(it->dst);
  }
  V.q.erase(it);
  count_voqs();
}

void FloodgateLogic::count_voqs() {
  uint32_t n = 0;
  for (const auto& V : voqs_) n += !V.q.empty();
  stats_.voqs_in_use = n;
  stats_.voqs_in_use_max = std::max(stats_.voqs_in_use_max, n);
}

void FloodgateLogic::set_paused(PortId p, QueueId q, bool paused) {
  if (sw_->paused(p, q) != paused) sw_->set_paused(p, q, paused);
}

// A VOQ is one FIFO: only the physical queue holding its head may send, and
// only while the head's window is left (§4.2: "only VOQs with adequate
// sending windows can transmit", §7.3).
void FloodgateLogic::refresh(uint32_t v) {
  Voq& V = voqs_[v];
  if (V.q.empty()) return;
  const Entry& h = V.q.front();
  const bool go = window(h.port, h.dst) > 0;
  for (const auto& [p, n] : V.per_port) set_paused(p, QueueId(1 + v), !(p == h.port && go));
}

// The substrate may tail-drop a packet we put into a VOQ (a queue limit);
// then its entry never leaves. Drops only hit the newest arrival, so when a
// physical queue holds fewer packets than our entries for it on two timer
// ticks in a row, the newest entries are gone.
void FloodgateLogic::reconcile(uint32_t v) {
  Voq& V = voqs_[v];
  std::vector<std::pair<PortId, uint32_t>> lost;
  for (const auto& [p, n] : V.per_port) {
    uint32_t d = sw_->depth(p, QueueId(1 + v)).pkts;
    auto& s = V.suspect[p];
    if (d < n && s) lost.push_back({p, n - d});
    s = d < n;
  }
  for (auto [p, k] : lost) {
    V.suspect.erase(p);
    for (auto it = V.q.end(); k && it != V.q.begin();) {
      --it;
      if (it->port != p) continue;
      erase(v, it);
      it = V.q.end();  // erase invalidates; rescan from the back
      --k;
      ++stats_.voq_desync;
    }
  }
  refresh(v);
}

sw::Verdict FloodgateLogic::on_enqueue(const sw::PacketMeta& pkt, PortId in) {
  const bool ip = !zero(pkt.dst);
  // Downstream side (§4.1): bytes received from an upstream switch, for the
  // PSN a switchSYN is compared with. Hosts keep no window: nothing to
  // credit for what they send.
  // A packet whose in_port is its out_port was sent by the switch itself
  // (the substrate's convention for frames from no switch port): no
  // upstream to credit.
  if (ip && in != pkt.out_port && switch_port(in)) cred_[{in, pkt.dst}].recv_psn += pkt.wire_bytes;
  const PortId out = pkt.out_port;
  if (!ip || !has_window(out)) {
    ++stats_.no_window;
    return sw::Verdict::enqueue(0);
  }
  uint32_t v;
  auto it = dst_voq_.find(pkt.dst);
  if (it != dst_voq_.end()) {
    v = it->second;  // §4.2: a destination with a VOQ keeps using it
  } else {
    Window& w = win(out, pkt.dst);
    if (window_of(out, w) > 0) {
      forward(out, pkt.dst, pkt.wire_bytes);
      w.queued += pkt.wire_bytes;
      ++stats_.forwarded;
      return sw::Verdict::enqueue(0);
    }
    v = allocate(out, pkt.dst);  // window exhausted: incast (§3.2)
  }
  push(v, pkt);
  if (cfg_.dst_pause && sw_->port(in).role == sw::PortRole::kHostFacing) check_pause(pkt.dst, in);
  return sw::Verdict::enqueue(QueueId(1 + v));
}

void FloodgateLogic::on_dequeue(const sw::PacketMeta& pkt, PortId out, QueueId q) { left(pkt, out, q, true); }

// The substrate tail-dropped a packet on_enqueue placed (its queue's limit).
void FloodgateLogic::on_drop(const sw::PacketMeta& pkt, PortId out, QueueId q) {
  if (!zero(pkt.dst)) ++stats_.dropped;
  left(pkt, out, q, false);
}

// A packet on_enqueue placed leaves this switch's queues: sent, or dropped.
void FloodgateLogic::left(const sw::PacketMeta& pkt, PortId out, QueueId q, bool sent) {
  if (zero(pkt.dst)) return;
  // §4.1: what left this switch is what we return credits for (a packet
  // that left frees its buffer; at the last hop it left at the bottleneck's
  // rate, which is what paces the upstream windows, §3.2). A dropped one
  // frees its buffer too: credited as if it had left, or the upstream's
  // window would shrink by it for good.
  if (pkt.in_port != out && switch_port(pkt.in_port)) {
    auto c = cred_.find({pkt.in_port, pkt.dst});
    if (c != cred_.end()) {
      c->second.fwd_psn += pkt.wire_bytes;
      c->second.fwd_segs += pkt.segs;
    }
  }
  if (!has_window(out)) return;
  if (q == 0) {
    auto w = win_.find({out, pkt.dst});
    if (w == win_.end()) return;
    w->second.queued -= std::min<uint64_t>(w->second.queued, pkt.wire_bytes);
    // Dropped: counted as forwarded at on_enqueue (synchronously before
    // the drop: no credit can cover it) but never sent; the window gets it
    // back.
    if (!sent) w->second.next_psn -= pkt.wire_bytes;  // serial PSN (diff()): wraps like the addition
    return;
  }
  const uint32_t v = q - 1u;
  if (v >= voqs_.size()) return;
  Voq& V = voqs_[v];
  auto it = std::find_if(V.q.begin(), V.q.end(), [&](const Entry& e) { return e.id == pkt.id; });
  if (it == V.q.end()) return;
  if (sent && it != V.q.begin()) ++stats_.voq_desync;
  erase(v, it);
  if (sent) {
    // §4.2: the packet leaves its VOQ now; this is its forwarding.
    forward(out, pkt.dst, pkt.wire_bytes);
    ++stats_.voq_released;
  }
  refresh(v);
  if (cfg_.dst_pause) check_resume();
}

void FloodgateLogic::on_control(const sw::ControlFrame& f, PortId port) {
  if (!switch_port(port)) return;  // the substrate's gate already ensures this
  if (f.type == sw::CtrlType::kCredit) on_credit(f, port);
  else if (f.type == sw::CtrlType::kSwitchSyn) on_syn(f, port);
}

// §4.2 "update per-dst window": a credit raises the window of (port, dst)
// and releases its VOQ. The PSN makes it exact even after lost credit
// frames (§4.3): window = initial - (next_send - credit PSN).
void FloodgateLogic::on_credit(const sw::ControlFrame& f, PortId port) {
  ++stats_.credit_frames_in;
  std::vector<uint32_t> touched;
  for (const auto& r : f.credits) {
    ++stats_.credit_records_in;
    stats_.credit_bytes_in += r.credit_bytes;
    auto it = win_.find({port, r.dst});
    if (it == win_.end() || !has_window(port)) {
      ++stats_.credit_unknown;  // never sent there: changes nothing
      continue;
    }
    Window& w = it->second;
    uint32_t psn = r.psn;
    if (diff(psn, w.next_psn) > 0) {
      ++stats_.credit_ahead;  // more than we ever sent: a bogus frame
      psn = w.next_psn;
    }
    if (diff(psn, w.credit_psn) > 0) w.credit_psn = psn;  // older frames change nothing
    w.last_heard_ns = sw_->now_ns();
    int v = voq_of(r.dst);
    if (v >= 0) touched.push_back(uint32_t(v));
  }
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  for (uint32_t v : touched) refresh(v);
}

bool FloodgateLogic::take_credit(PortId, const Addr& dst, Credit& c, sw::CreditRec* rec) {
  const uint32_t pending = c.fwd_psn - c.credited_psn;
  if (!pending) return false;  // §4.1: nothing to return, skip
  const int v = voq_of(dst);
  // §4.1 delayCredit: not while D's VOQ here is longer than thre_credit.
  if (v >= 0 && voq_bytes(v) > thre_credit(v)) {
    ++stats_.credits_delayed;
    return false;
  }
  rec->dst = dst;
  rec->credit_bytes = pending;
  rec->psn = c.fwd_psn;
  rec->credit_pkts = uint16_t(std::min<uint32_t>(c.fwd_segs - c.credited_segs, 0xffff));
  c.credited_psn = c.fwd_psn;
  c.credited_segs = c.fwd_segs;
  return true;
}

void FloodgateLogic::send_credits(PortId port, std::vector<sw::CreditRec> recs) {
  for (size_t i = 0; i < recs.size(); i += SLUICE_CTRL_MAX_RECORDS) {
    sw::ControlFrame f{sw::CtrlType::kCredit};
    const size_t end = std::min(recs.size(), i + SLUICE_CTRL_MAX_RECORDS);
    f.credits.assign(recs.begin() + long(i), recs.begin() + long(end));
    ++stats_.credit_frames_out;
    for (const auto& r : f.credits) {
      ++stats_.credit_records_out;
      stats_.credit_bytes_out += r.credit_bytes;
    }
    sw_->send_control(port, f);
  }
}

// §4.3: a switchSYN asks for a credit carrying our PSN. Bytes the upstream
// sent (its next_psn) that never arrived here are lost on the link: we count
// them as forwarded so the credit returns them to the window.
void FloodgateLogic::on_syn(const sw::ControlFrame& f, PortId port) {
  ++stats_.syn_in;
  std::vector<sw::CreditRec> out;
  auto answer = [&](const Addr& dst, Credit& c) {
    sw::CreditRec r;
    if (!take_credit(port, dst, c, &r)) r = sw::CreditRec{dst, 0, c.credited_psn, 0};
    out.push_back(r);
  };
  if (f.syns.empty()) {  // every destination of this port
    for (auto& [k, c] : cred_)
      if (k.first == port) answer(k.second, c);
  } else {
    for (const auto& s : f.syns) {
      Credit& c = cred_[{port, s.dst}];
      const int64_t lost = diff(s.next_psn, c.recv_psn);
      if (lost > 0) {
        c.recv_psn += uint32_t(lost);
        c.fwd_psn += uint32_t(lost);
        stats_.syn_lost_bytes += uint64_t(lost);
      }
      answer(s.dst, c);
    }
  }
  if (!out.empty()) send_credits(port, std::move(out));
}

void FloodgateLogic::on_timer(uint64_t now) {
  // §4.1: per ingress port, every T, one credit frame <dst, credits> for
  // what left since the last one; skipped when there is nothing.
  std::map<PortId, std::vector<sw::CreditRec>> credits;
  for (auto& [k, c] : cred_) {
    sw::CreditRec r;
    if (take_credit(k.first, k.second, c, &r)) credits[k.first].push_back(r);
  }
  for (auto& [p, recs] : credits) send_credits(p, std::move(recs));

  // §4.3: after a long silence with data in flight, switchSYN.
  std::map<PortId, std::vector<sw::SwitchSynRec>> syns;
  for (auto& [k, w] : win_) {
    if (diff(w.next_psn, w.credit_psn) <= 0) continue;
    // Wait until all we forwarded has left (a SYN must not overtake data);
    // an empty default queue means what is still counted was dropped here.
    if (w.queued && sw_->depth(k.first, 0).pkts == 0) w.queued = 0;
    if (w.queued) continue;
    if (now - std::max(w.last_heard_ns, w.last_syn_ns) < cfg_.syn_timeout_ns) continue;
    syns[k.first].push_back({k.second, w.next_psn});
    w.last_syn_ns = now;
  }
  for (auto& [p, recs] : syns) {
    for (size_t i = 0; i < recs.size(); i += SLUICE_CTRL_MAX_RECORDS) {
      sw::ControlFrame f{sw::CtrlType::kSwitchSyn};
      f.syns.assign(recs.begin() + long(i), recs.begin() + long(std::min(recs.size(), i + SLUICE_CTRL_MAX_RECORDS)));
      ++stats_.syn_out;
      sw_->send_control(p, f);
    }
  }
  for (uint32_t v = 0; v < voqs_.size(); ++v)
    if (!voqs_[v].q.empty()) reconcile(v);
  if (cfg_.dst_pause) check_resume();
  sw_->arm_timer(now + cfg_.credit_interval_ns);
}

void FloodgateLogic::send_dst(PortId port, sw::CtrlType type, const Addr& dst) {
  sw::ControlFrame f{type};
  f.dsts = {{dst, ++dst_seq_[port]}};
  if (type == sw::CtrlType::kDstPause) ++stats_.dst_pause_out;
  else ++stats_.dst_resume_out;
  sw_->send_control(port, f);
}

// §4.3 dstPause: a first-hop ToR whose VOQ for D exceeds thre_off tells
// D's source hosts (the host ports that sent to D) to pause D.
void FloodgateLogic::check_pause(const Addr& dst, PortId in) {
  Pause& P = pause_[dst];
  P.senders |= bit(in);
  const int v = voq_of(dst);
  if (v < 0 || voq_bytes(v) <= thre_off(v)) return;
  P.thre_on = thre_on(v);
  const uint64_t now = sw_->now_ns();
  for (PortId h = 0; h < 64 && h < sw_->num_ports(); ++h) {
    if (!(P.senders & bit(h))) continue;
    auto& last = P.last_sent_ns[h];
    // A paused host that still sends did not hear us (or its packets were
    // in flight): say it again, at most once per T.
    if (!(P.paused & bit(h)) || (h == in && now - last >= cfg_.credit_interval_ns)) {
      send_dst(h, sw::CtrlType::kDstPause, dst);
      P.paused |= bit(h);
      last = now;
    }
  }
}

// §4.3 dstResume below thre_on.
void FloodgateLogic::check_resume() {
  for (auto it = pause_.begin(); it != pause_.end();) {
    Pause& P = it->second;
    const int v = voq_of(it->first);
    if (P.paused && voq_bytes(v) < P.thre_on) {
      for (PortId h = 0; h < 64 && h < sw_->num_ports(); ++h)
        if (P.paused & bit(h)) send_dst(h, sw::CtrlType::kDstResume, it->first);
      P.paused = 0;
    }
    if (!P.paused && v < 0) it = pause_.erase(it);
    else ++it;
  }
}

bool FloodgateLogic::dst_paused(const Addr& dst, PortId host_port) const {
  auto it = pause_.find(dst);
  return it != pause_.end() && (it->second.paused & bit(host_port));
}

std::vector<FloodgateLogic::WindowView> FloodgateLogic::windows() const {
  std::vector<WindowView> out;
  for (const auto& [k, w] : win_)
    out.push_back({k.first, k.second, window_of(k.first, w), diff(w.next_psn, w.credit_psn)});
  return out;
}

std::vector<FloodgateLogic::VoqView> FloodgateLogic::voqs() const {
  std::vector<VoqView> out;
  for (uint32_t v = 0; v < voqs_.size(); ++v) {
    const Voq& V = voqs_[v];
    if (V.q.empty()) continue;
    const Entry& h = V.q.front();
    VoqView x{v,     V.bytes, uint32_t(V.q.size()),      {}, down_end_ != 0, down_end_ && v >= down_end_,
              h.dst, h.port,  window(h.port, h.dst) <= 0};
    for (const auto& [d, n] : V.per_dst) x.dsts.push_back(d);
    out.push_back(std::move(x));
  }
  return out;
}

std::vector<FloodgateLogic::PauseView> FloodgateLogic::paused() const {
  std::vector<PauseView> out;
  for (const auto& [d, P] : pause_)
    if (P.paused) out.push_back({d, P.paused});
  return out;
}

}  // namespace sluice::floodgate
