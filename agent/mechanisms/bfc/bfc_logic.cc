#include "mechanisms/bfc/bfc_logic.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace sluice::bfc {

namespace {

// A 32-bit finalizer (murmur3 fmix32): the substrate's flow hash is FNV-1a,
// whose low bits are weak for a power-of-two modulus.
uint32_t mix(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

bool active(uint32_t pkts, bool paused) { return pkts > 0 && !paused; }

}  // namespace

Config Config::variant_named(std::string_view name) {
  Config c;
  c.variant = std::string(name);
  if (name == "bfc") return c;
  if (name == "bfc-stochastic") {
    c.assign = Assign::kStochastic;
    return c;
  }
  if (name == "bfc-single") {
    c.assign = Assign::kSingle;
    return c;
  }
  if (name == "bfc-nosticky") {
    c.sticky = false;
    return c;
  }
  throw std::invalid_argument("unknown bfc variant '" + std::string(name) +
                              "' (bfc, bfc-stochastic, bfc-single, bfc-nosticky)");
}

std::string Config::check() const {
  if (!flow_table_factor || flow_table_factor > 10'000) return "flow_table_factor must be 1..10000 (entries per queue)";
  if (!hrtt_ns && !th_fixed_bytes) return "hrtt_ns must be > 0 (or th_fixed_bytes set)";
  if (hrtt_ns > 1'000'000'000) return "hrtt_ns must be <= 1 s";
  if (!bitmap_interval_ns) return "bitmap_interval_ns must be > 0";
  if (sample_ns > 1'000'000'000) return "sample_ns must be <= 1 s";
  if (pause_expiry_ns && pause_expiry_ns <= bitmap_interval_ns)
    return "pause_expiry_ns must be 0 (never) or longer than bitmap_interval_ns";
  return "";
}

BfcLogic::BfcLogic(Config cfg) : cfg_(std::move(cfg)) {
  std::string err = cfg_.check();
  if (!err.empty()) throw std::invalid_argument("bfc: " + err);
}

void BfcLogic::on_start(sw::Substrate& sw) {
  sw::Logic::on_start(sw);
  ports_.assign(sw.num_ports(), Port{});
  for (PortId p = 0; p < sw.num_ports(); ++p) {
    const auto& pc = sw.port(p);
    Port& P = ports_[p];
    P.nq = static_cast<uint32_t>(pc.queues.size());
    P.rate_bps = pc.rate_bps;
    P.q.assign(P.nq, QueueState{});
    P.table.assign(size_t(cfg_.flow_table_factor) * P.nq, Entry{});
    P.pause_counter.assign(SLUICE_SW_MAX_QUEUES, 0);
  }
  next_bitmap_ns_ = sw.now_ns() + cfg_.bitmap_interval_ns;
  uint64_t first = cfg_.sample_ns ? cfg_.sample_ns : cfg_.bitmap_interval_ns;
  if (!cfg_.sample_ns && cfg_.trace_ns) first = std::min(first, cfg_.trace_ns);
  sw.arm_timer(sw.now_ns() + first);
}

BfcLogic::Entry& BfcLogic::entry(PortId out, uint32_t flow_hash) {
  auto& t = ports_[out].table;
  return t[mix(flow_hash) % t.size()];
}

uint64_t BfcLogic::threshold_bytes(PortId p) const {
  if (cfg_.th_fixed_bytes) return cfg_.th_fixed_bytes;
  const Port& P = ports_.at(p);
  // §3.3.2: Th = HRTT · μ / N_active, the one-hop BDP at the drain rate a
  // queue gets under fair queuing.
  uint64_t n = P.n_active ? P.n_active : 1;
  uint64_t th = cfg_.hrtt_ns * P.rate_bps / 8'000'000'000ull / n;
  return th < cfg_.th_min_bytes ? cfg_.th_min_bytes : th;
}

uint32_t BfcLogic::active_queues(PortId p) const { return ports_.at(p).n_active; }

uint32_t BfcLogic::pause_counter(PortId in_port, uint16_t upstream_q) const {
  if (in_port >= ports_.size() || upstream_q >= SLUICE_SW_MAX_QUEUES) return 0;
  return ports_[in_port].pause_counter[upstream_q];
}

std::vector<std::pair<uint16_t, uint32_t>> BfcLogic::pause_counters(PortId p) const {
  std::vector<std::pair<uint16_t, uint32_t>> out;
  const auto& pc = ports_.at(p).pause_counter;
  for (size_t q = 0; q < pc.size(); ++q)
    if (pc[q]) out.emplace_back(static_cast<uint16_t>(q), pc[q]);
  return out;
}

uint32_t BfcLogic::live_entries(PortId p) const {
  uint32_t n = 0;
  for (const auto& e : ports_.at(p).table) n += e.size > 0;
  return n;
}

uint32_t BfcLogic::table_entries(PortId p) const { return static_cast<uint32_t>(ports_.at(p).table.size()); }

uint32_t BfcLogic::flows_in_queue(PortId p, QueueId q) const { return ports_.at(p).q.at(q).flows; }

uint32_t BfcLogic::table_index(PortId p, uint32_t flow_hash) const {
  return static_cast<uint32_t>(mix(flow_hash) % ports_.at(p).table.size());
}

QueueId BfcLogic::entry_queue(PortId p, uint32_t flow_hash) const {
  return ports_.at(p).table[table_index(p, flow_hash)].queue;
}

// §3.3.1 "assigned to an empty queue if one is available, sharing queues
// only if all are in use". The paper then picks a random queue; we take the
// least-loaded one (bytes), which the random choice approximates in
// hardware. Among empty queues, one not paused by the downstream first
// (a new flow in a paused queue would wait for an unrelated flow's pause).
// The search starts at a rotating position (§4: "a different rotating
// starting point") so back-to-back new flows spread out.
QueueId BfcLogic::choose_queue(PortId out, uint32_t flow_hash) {
  Port& P = ports_[out];
  switch (cfg_.assign) {
    case Assign::kSingle: return 0;
    case Assign::kStochastic: return static_cast<QueueId>(mix(flow_hash ^ 0x9e3779b9u) % P.nq);
    case Assign::kDynamic: break;
  }
  const uint32_t start = P.cursor;
  P.cursor = (P.cursor + 1) % P.nq;
  QueueId empty_paused = sw::kNoQueue;
  QueueId least = sw::kNoQueue;
  uint64_t least_bytes = std::numeric_limits<uint64_t>::max();
  for (uint32_t i = 0; i < P.nq; ++i) {
    QueueId q = static_cast<QueueId>((start + i) % P.nq);
    sw::QueueDepth d = sw_->depth(out, q);
    if (d.pkts == 0) {
      if (!P.q[q].paused) return q;
      if (empty_paused == sw::kNoQueue) empty_paused = q;
      continue;
    }
    if (d.bytes < least_bytes) {
      least_bytes = d.bytes;
      least = q;
    }
  }
  return empty_paused != sw::kNoQueue ? empty_paused : least;
}

void BfcLogic::set_active(Port& P, QueueState& Q, bool was_active) {
  bool now_active = active(Q.pkts, Q.paused);
  if (now_active && !was_active) ++P.n_active;
  if (!now_active && was_active && P.n_active) --P.n_active;
}

sw::Verdict BfcLogic::on_enqueue(const sw::PacketMeta& pkt, PortId in_port) {
  const PortId out = pkt.out_port;
  if (out >= ports_.size()) return sw::Verdict::enqueue(0);  // the substrate rejects it
  Port& P = ports_[out];
  const uint64_t now = sw_->now_ns();
  if (cfg_.sample_ns) {
    // Sampled mode: the data path's classifier puts a flow nobody placed in
    // flow_hash % queues (SL_SW_PORT_HASH_DEFAULT), or queue 0 for
    // bfc-single; say the same so a model run agrees with sluiced.
    return sw::Verdict::enqueue(cfg_.assign == Assign::kSingle ? 0 : static_cast<QueueId>(pkt.flow_hash % P.nq));
  }

  // §3.3.1 On Enqueue: a flow with no packets in the switch may take a new
  // queue — with sticky assignment only once its entry has also been idle
  // for the sticky threshold (§3.3.2 "Sticky queue assignment").
  Entry& e = entry(out, pkt.flow_hash);
  if (e.size == 0) {
    bool reassign = e.queue == sw::kNoQueue || cfg_.assign != Assign::kDynamic || !cfg_.sticky ||
                    now - e.ts >= cfg_.sticky_threshold_ns();
    if (reassign) {
      e.queue = choose_queue(out, pkt.flow_hash);
      ++ctr_.assignments;
    }
    // A collision: this flow becomes active in a queue that already holds
    // another active flow (§3.2, Fig. 21b).
    if (P.q[e.queue].flows > 0) ++ctr_.collisions;
    ++P.q[e.queue].flows;
    e.last_hash = pkt.flow_hash;
  } else if (e.last_hash != pkt.flow_hash) {
    ++ctr_.table_index_shared;
  }
  ++e.size;
  e.ts = now;
  const QueueId q = e.queue;

  // §3.3.2 On Enqueue: a packet arriving at a queue above Th counts against
  // the upstream queue it came from; the first such packet pauses it.
  if (pkt.upstream_q < SLUICE_SW_MAX_QUEUES && in_port < ports_.size() &&
      sw_->depth(out, q).bytes > threshold_bytes(out)) {
    ++ctr_.above_th;
    if (marks_.try_emplace(pkt.id, Mark{in_port, pkt.upstream_q}).second) {
      Port& I = ports_[in_port];
      if (I.pause_counter[pkt.upstream_q]++ == 0) {
        ++I.nonzero;
        I.ever_paused = true;
        send_queue_frame(in_port, sw::CtrlType::kPause, pkt.upstream_q);
      }
      I.last_nonzero_ns = now;
    }
  }

  QueueState& Q = P.q[q];
  bool was = active(Q.pkts, Q.paused);
  ++Q.pkts;
  set_active(P, Q, was);
  return sw::Verdict::enqueue(q);
}

void BfcLogic::release(const sw::PacketMeta& pkt, PortId out, QueueId q) {
  if (out >= ports_.size()) return;
  Port& P = ports_[out];
  const uint64_t now = sw_->now_ns();

  // §3.3.1 On Dequeue: size -= 1 (and the timestamp, §3.3.2).
  Entry& e = entry(out, pkt.flow_hash);
  if (e.size > 0) {
    --e.size;
    e.ts = now;
    if (e.size == 0 && e.queue < P.nq && P.q[e.queue].flows) --P.q[e.queue].flows;
  }
  if (q < P.nq) {
    QueueState& Q = P.q[q];
    bool was = active(Q.pkts, Q.paused);
    if (Q.pkts) --Q.pkts;
    set_active(P, Q, was);
  }

  // §3.3.2 On Dequeue: a packet that incremented a pause counter
  // decrements it; the last one out resumes the upstream queue.
  auto it = marks_.find(pkt.id);
  if (it == marks_.end()) return;
  Mark m = it->second;
  marks_.erase(it);
  Port& I = ports_[m.in_port];
  uint32_t& c = I.pause_counter[m.upstream_q];
  if (!c) return;
  I.last_nonzero_ns = now;
  if (--c == 0) {
    --I.nonzero;
    send_queue_frame(m.in_port, sw::CtrlType::kResume, m.upstream_q);
  }
}

void BfcLogic::on_dequeue(const sw::PacketMeta& pkt, PortId out_port, QueueId q) { release(pkt, out_port, q); }

void BfcLogic::on_drop(const sw::PacketMeta& pkt, PortId out_port, QueueId q) {
  ++ctr_.drops_undone;
  release(pkt, out_port, q);
}

void BfcLogic::send_queue_frame(PortId port, sw::CtrlType type, uint16_t upstream_q) {
  Port& P = ports_[port];
  sw::ControlFrame f{type};
  f.queues.push_back({upstream_q, ++P.seq});
  sw_->send_control(port, f);
  if (type == sw::CtrlType::kPause) ++ctr_.pauses_sent;
  else ++ctr_.resumes_sent;
}

// §3.3.2 "we also periodically send a bitmap of the queues that should be
// paused at the upstream (using the pause counter)". It carries the port's
// current sequence number, so the upstream never lets it undo a newer
// PAUSE/RESUME (include/sluice/wire.h).
void BfcLogic::send_bitmap(PortId port) {
  Port& P = ports_[port];
  sw::ControlFrame f{sw::CtrlType::kPauseBitmap};
  for (uint16_t first = 0; first < SLUICE_SW_MAX_QUEUES; first += SLUICE_CTRL_BITMAP_QUEUES) {
    sw::BitmapRec r;
    r.first_queue = first;
    r.seq = P.seq;
    for (uint32_t i = 0; i < SLUICE_CTRL_BITMAP_QUEUES && first + i < SLUICE_SW_MAX_QUEUES; ++i)
      if (P.pause_counter[first + i]) r.paused |= uint64_t(1) << i;
    f.bitmaps.push_back(r);
  }
  sw_->send_control(port, f);
  ++ctr_.bitmaps_sent;
}

void BfcLogic::apply_pause(PortId port, QueueId q, bool paused, uint32_t seq, bool from_bitmap) {
  Port& P = ports_[port];
  if (q >= P.nq) {
    ++ctr_.bad_queue_rx;
    return;
  }
  QueueState& Q = P.q[q];
  if (Q.have_seq) {
    // A PAUSE/RESUME must be newer than what we applied; a bitmap may carry
    // the same number (taken after that change).
    bool stale = from_bitmap ? seq_after(Q.last_seq, seq) : !seq_after(seq, Q.last_seq);
    if (stale) {
      ++ctr_.stale_rx;
      return;
    }
  }
  Q.have_seq = true;
  Q.last_seq = seq;
  if (paused) Q.refreshed_ns = sw_->now_ns();
  if (Q.paused == paused) return;
  if (from_bitmap) ++ctr_.bitmap_repairs;
  bool was = active(Q.pkts, Q.paused);
  Q.paused = paused;
  sw_->set_paused(port, q, paused);
  set_active(P, Q, was);
}

void BfcLogic::on_control(const sw::ControlFrame& f, PortId port) {
  if (port >= ports_.size()) return;
  switch (f.type) {
    case sw::CtrlType::kPause:
    case sw::CtrlType::kResume: {
      bool pause = f.type == sw::CtrlType::kPause;
      for (const auto& r : f.queues) {
        if (pause) ++ctr_.pauses_rx;
        else ++ctr_.resumes_rx;
        apply_pause(port, r.queue, pause, r.seq, false);
      }
      return;
    }
    case sw::CtrlType::kPauseBitmap:
      ++ctr_.bitmaps_rx;
      for (const auto& r : f.bitmaps) {
        for (uint32_t i = 0; i < SLUICE_CTRL_BITMAP_QUEUES; ++i) {
          uint32_t q = uint32_t(r.first_queue) + i;
          bool bit = (r.paused >> i) & 1;
          if (q >= ports_[port].nq) {
            if (bit) ++ctr_.bad_queue_rx;
            continue;
          }
          apply_pause(port, static_cast<QueueId>(q), bit, r.seq, true);
        }
      }
      return;
    default: return;  // credits, dstPause...: not BFC's
  }
}

void BfcLogic::bitmaps_and_expiry(uint64_t now) {
  for (PortId p = 0; p < ports_.size(); ++p) {
    Port& P = ports_[p];
    if (P.ever_paused && (P.nonzero > 0 || now - P.last_nonzero_ns <= 3 * cfg_.bitmap_interval_ns)) send_bitmap(p);
    if (!cfg_.pause_expiry_ns) continue;
    for (QueueId q = 0; q < P.nq; ++q) {
      QueueState& Q = P.q[q];
      if (!Q.paused || now - Q.refreshed_ns < cfg_.pause_expiry_ns) continue;
      ++ctr_.expired;
      bool was = active(Q.pkts, Q.paused);
      Q.paused = false;
      Q.have_seq = false;  // a restarted downstream starts its sequence anew
      sw_->set_paused(p, q, false);
      set_active(P, Q, was);
    }
  }
}

// Sampled mode (design A: no per-packet calls). Every sample_ns:
//  * each queue's packet count and N_active come from depth() (the kernel's
//    backlog), so Th = HRTT·μ/N_active (§3.3.2) is computed as in the
//    per-packet mode;
//  * the pause counter of (switch-facing ingress port s, upstreamQ q) is 1
//    while some other port's egress queue q holds more than its Th, else 0;
//    PAUSE goes out on 0→1, RESUME on 1→0, bitmaps as in the per-packet mode.
// How this differs from §3.3.2, said plainly: (1) upstreamQ is not read from
// the packet: a flow's upstream queue is taken to be its queue here, which
// holds when the upstream is a sluice switch with the same number of queues
// hashing flows the same way (flow_hash % queues) — so the assignment is
// stochastic, not dynamic, in this mode; (2) the pause goes to every
// switch-facing port other than the congested one, not only to the ingress
// the above-Th packets came from; (3) PAUSE fires up to one sample late, and
// RESUME when the queue is sampled at or below Th, which is earlier than the
// paper's "when the last packet that arrived above Th leaves" (the queue
// then still holds up to Th bytes, so the link keeps busy through the
// upstream's resume delay); (4) host-facing ports are never paused (hosts
// hold a queue through their own agent; not in this mode).
void BfcLogic::sample(uint64_t now) {
  ++ctr_.samples;
  std::vector<std::vector<uint64_t>> bytes(ports_.size());
  for (PortId p = 0; p < ports_.size(); ++p) {
    Port& P = ports_[p];
    bytes[p].assign(P.nq, 0);
    for (QueueId q = 0; q < P.nq; ++q) {
      sw::QueueDepth d = sw_->depth(p, q);
      bytes[p][q] = d.bytes;
      QueueState& Q = P.q[q];
      bool was = active(Q.pkts, Q.paused);
      Q.pkts = d.pkts;
      set_active(P, Q, was);
    }
  }
  std::vector<uint64_t> th(ports_.size());
  for (PortId p = 0; p < ports_.size(); ++p) th[p] = threshold_bytes(p);
  record_trace(now, bytes, th);
  for (PortId s = 0; s < ports_.size(); ++s) {
    if (sw_->port(s).role != sw::PortRole::kSwitchFacing) continue;
    Port& I = ports_[s];
    for (uint16_t q = 0; q < SLUICE_SW_MAX_QUEUES; ++q) {
      bool want = false;
      for (PortId e = 0; e < ports_.size() && !want; ++e) want = e != s && q < ports_[e].nq && bytes[e][q] > th[e];
      uint32_t& c = I.pause_counter[q];
      if (want) {
        ++ctr_.above_th;
        I.last_nonzero_ns = now;
        if (c == 0) {
          c = 1;
          ++I.nonzero;
          I.ever_paused = true;
          send_queue_frame(s, sw::CtrlType::kPause, q);
        }
      } else if (c) {
        c = 0;
        --I.nonzero;
        I.last_nonzero_ns = now;
        send_queue_frame(s, sw::CtrlType::kResume, q);
      }
    }
  }
}

// The Fig. 7 trace: each queue that holds data, or held data at the
// previous record, with its port's Th then.
void BfcLogic::record_trace(uint64_t now, const std::vector<std::vector<uint64_t>>& bytes,
                            const std::vector<uint64_t>& th) {
  last_bytes_.resize(ports_.size());
  for (PortId p = 0; p < ports_.size(); ++p) {
    last_bytes_[p].resize(ports_[p].nq, 0);
    for (QueueId q = 0; q < ports_[p].nq; ++q) {
      if (bytes[p][q] || last_bytes_[p][q]) {
        TracePoint tp{now, p, q, bytes[p][q], th[p]};
        if (trace_.size() < kTraceCap) trace_.push_back(tp);
        else trace_[trace_next_] = tp;
        trace_next_ = (trace_next_ + 1) % kTraceCap;
      }
      last_bytes_[p][q] = bytes[p][q];
    }
  }
}

// Per-packet mode: the trace every kTraceNs from the substrate's depths (no
// effect on the pause state, which the packets drive).
void BfcLogic::trace_depths(uint64_t now) {
  std::vector<std::vector<uint64_t>> bytes(ports_.size());
  std::vector<uint64_t> th(ports_.size());
  for (PortId p = 0; p < ports_.size(); ++p) {
    bytes[p].assign(ports_[p].nq, 0);
    for (QueueId q = 0; q < ports_[p].nq; ++q) bytes[p][q] = sw_->depth(p, q).bytes;
    th[p] = threshold_bytes(p);
  }
  record_trace(now, bytes, th);
}

std::vector<BfcLogic::TracePoint> BfcLogic::trace() const {
  if (trace_.size() < kTraceCap) return trace_;
  std::vector<TracePoint> out(trace_.begin() + long(trace_next_), trace_.end());
  out.insert(out.end(), trace_.begin(), trace_.begin() + long(trace_next_));
  return out;
}

void BfcLogic::on_timer(uint64_t now) {
  if (!cfg_.sample_ns) {
    if (cfg_.trace_ns) trace_depths(now);
    if (now >= next_bitmap_ns_) {
      bitmaps_and_expiry(now);
      next_bitmap_ns_ = now + cfg_.bitmap_interval_ns;
    }
    sw_->arm_timer(std::min(next_bitmap_ns_, cfg_.trace_ns ? now + cfg_.trace_ns : UINT64_MAX));
    return;
  }
  sample(now);
  if (now >= next_bitmap_ns_) {
    bitmaps_and_expiry(now);
    next_bitmap_ns_ = now + cfg_.bitmap_interval_ns;
  }
  sw_->arm_timer(now + cfg_.sample_ns);
}

}  // namespace sluice::bfc
