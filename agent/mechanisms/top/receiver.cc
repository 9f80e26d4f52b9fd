#include "mechanisms/top/receiver.h"

#include <algorithm>
#include <limits>

namespace sluice::top {

namespace {
constexpr uint32_t kMaxNackRuns = 16;     // NACK signals per check
constexpr uint32_t kMaxNackScan = 65536;  // IDs looked at per check
constexpr uint64_t kMaxFlowPackets = 1ull << 26;
}  // namespace

const char* spare_name(Spare s) {
  switch (s) {
    case Spare::kOff: return "off";
    case Spare::kProbe: return "probe";
    case Spare::kEvery: return "every";
  }
  return "?";
}

std::optional<Spare> parse_spare(const std::string& s) {
  if (s == "off") return Spare::kOff;
  if (s == "probe") return Spare::kProbe;
  if (s == "every") return Spare::kEvery;
  return std::nullopt;
}

std::optional<std::string> ReceiverConfig::validate() const {
  if (slot_ns == 0) return "slot_ns must be > 0";
  if (!(jitter >= 0 && jitter <= 0.5)) return "jitter must be in [0, 0.5]";
  if (rtt_ns == 0) return "rtt_ns must be > 0";
  if (reorder_threshold == 0) return "reorder_threshold must be >= 1";
  if (max_flows == 0) return "max_flows must be >= 1";
  if (auto e = prio.validate()) return "priority: " + *e;
  if (auto e = rate.validate()) return "rate: " + *e;
  return std::nullopt;
}

struct Receiver::Flow {
  explicit Flow(const RateParams& rp) : rc(rp) {}
  uint64_t id = 0;
  bool sized = false;
  uint16_t mss = 0;
  uint64_t size_bytes = 0;
  uint32_t total = 0;  // packets; 0 = unknown until FIN
  uint64_t start_ns = 0;
  uint64_t deadline_abs = 0;
  uint8_t prio_class = kPrioByObjective;
  std::vector<bool> got;
  uint32_t received = 0;
  uint32_t cum = 0;                               // every ID below has arrived
  std::unordered_map<uint32_t, uint64_t> nacked;  // ID -> last NACK time
  // Tokens: number of the last one, and those sent but not yet answered.
  uint32_t token_seq = 0;
  std::deque<std::pair<uint32_t, uint64_t>> outstanding;
  RateControl rc;
  double bucket = 1.0;
  // Credit-loss measurement over one period (ExpressPass): answers seen,
  // the newest token answered, tokens timed out beyond it.
  uint64_t period_start = 0;
  uint32_t echo_base = 0;
  uint32_t max_echo = 0;
  uint32_t echoes = 0;
  uint32_t lost_tail = 0;
  uint64_t last_progress = 0;
  uint64_t last_served = 0;
  uint32_t tokens_sent = 0;
  uint64_t last_token_at = 0;
  uint64_t sync_at = 0, first_token_at = 0, first_data_at = 0;
};

uint64_t ReceiverStats::token_data_quantile(double q) const {
  uint64_t n = 0;
  for (uint64_t c : token_data_ns) n += c;
  if (!n) return 0;
  uint64_t want = static_cast<uint64_t>(q * static_cast<double>(n)), seen = 0;
  for (size_t i = 0; i < token_data_ns.size(); i++) {
    seen += token_data_ns[i];
    if (seen > want || seen == n) return (i + 1) * kTokenDataBinNs;
  }
  return token_data_ns.size() * kTokenDataBinNs;
}

Receiver::Receiver(const ReceiverConfig& cfg) : cfg_(cfg) {
  if (cfg_.token_timeout_ns == 0) cfg_.token_timeout_ns = 2 * cfg_.rtt_ns + 2ull * cfg_.token_queue * cfg_.slot_ns;
  if (cfg_.tail_timeout_ns == 0) cfg_.tail_timeout_ns = 4 * cfg_.rtt_ns;
}

Receiver::~Receiver() = default;

std::vector<Completion> Receiver::take_completions() {
  std::vector<Completion> v;
  v.swap(done_);
  return v;
}

std::vector<ReceiverFlowView> Receiver::flows(uint64_t now) const {
  std::vector<ReceiverFlowView> v;
  for (const Flow* f : order_)
    v.push_back(
        {f->id, f->received, f->total, priority_of(*f, now), f->rc.rate(), f->tokens_sent, f->outstanding.size()});
  return v;
}

void Receiver::remember_closed(uint64_t id) {
  if (closed_.insert(id).second) closed_fifo_.push_back(id);
  while (closed_fifo_.size() > cfg_.closed_memory) {
    closed_.erase(closed_fifo_.front());
    closed_fifo_.pop_front();
  }
}

int Receiver::priority_of(const Flow& f, uint64_t now) const {
  if (f.prio_class != kPrioByObjective) return f.prio_class;
  switch (cfg_.objective) {
    case Objective::kFair: return 0;
    case Objective::kFct:
      // §3.2: a clairvoyant flow's class comes from its size; without a
      // size the flow falls back to LAS (§3.2 non-clairvoyant).
      if (f.sized) return fct_priority(cfg_.fct_class_remaining ? f.total - f.received : f.total, cfg_.prio);
      return las_priority(f.received, cfg_.prio);
    case Objective::kLas: return las_priority(f.received, cfg_.prio);
    case Objective::kDeadline:
      if (!f.deadline_abs) return cfg_.prio.classes - 1;
      return deadline_priority(static_cast<int64_t>(f.deadline_abs - now), cfg_.prio);
  }
  return 0;
}

void Receiver::on_packet(const Packet& p, uint64_t now, std::vector<Packet>& out) {
  auto done_again = [&](uint64_t id) {
    Packet d;
    d.type = Type::kDone;
    d.flow = id;
    d.tstamp_ns = now;
    out.push_back(d);
  };
  auto it = flows_.find(p.flow);
  switch (p.type) {
    case Type::kSync: {
      if (it != flows_.end()) return;  // a resent SYNC
      if (closed_.count(p.flow)) return done_again(p.flow);
      uint64_t pkts = p.sized ? (p.size_bytes + p.mss - 1) / p.mss : 0;
      if (flows_.size() >= cfg_.max_flows || pkts > kMaxFlowPackets) {
        stats_.flows_rejected++;
        return;
      }
      auto f = std::make_unique<Flow>(cfg_.rate);
      f->id = p.flow;
      f->sized = p.sized;
      f->mss = p.mss;
      f->size_bytes = p.sized ? p.size_bytes : 0;
      f->total = static_cast<uint32_t>(pkts);
      f->start_ns = p.tstamp_ns;
      f->deadline_abs = p.deadline_ns ? p.tstamp_ns + p.deadline_ns : 0;
      f->prio_class = p.prio_class;
      f->got.assign(f->total, false);
      f->period_start = now;
      f->last_progress = now;
      f->sync_at = now;
      order_.push_back(f.get());
      flows_.emplace(p.flow, std::move(f));
      stats_.flows_opened++;
      return;
    }
    case Type::kData:
      if (it == flows_.end()) {
        stats_.data_unknown_flow++;
        if (closed_.count(p.flow)) done_again(p.flow);
        return;
      }
      return on_data(*it->second, p, now, out);
    case Type::kFin: {
      if (it == flows_.end()) {
        if (closed_.count(p.flow)) return done_again(p.flow);
        stats_.bad_packets++;
        return;
      }
      Flow& f = *it->second;
      uint64_t pkts = (p.size_bytes + p.mss - 1) / p.mss;
      if (f.mss != p.mss || pkts > kMaxFlowPackets || pkts < f.got.size() || (f.total && pkts != f.total)) {
        stats_.bad_packets++;
        return;
      }
      if (!f.total) {
        f.total = static_cast<uint32_t>(pkts);
        f.size_bytes = p.size_bytes;
        f.got.resize(f.total, false);
      }
      maybe_close(f, now, out);
      if (flows_.count(p.flow)) nack_range(f, f.cum, f.total, now, out);
      return;
    }
    default: stats_.bad_packets++; return;
  }
}

void Receiver::on_data(Flow& f, const Packet& p, uint64_t now, std::vector<Packet>& out) {
  // Credit-loss feedback: the data packet names the token it answers.
  if (p.aux > f.token_seq) {
    stats_.bad_packets++;
    return;
  }
  if (p.aux > f.max_echo) f.max_echo = p.aux;
  if (!f.first_data_at) f.first_data_at = now;
  if (now >= p.tstamp_ns) {
    uint64_t bin = (now - p.tstamp_ns) / ReceiverStats::kTokenDataBinNs;
    stats_.token_data_ns[std::min<uint64_t>(bin, stats_.token_data_ns.size() - 1)]++;
  }
  // The receiver's probe (Spare::kProbe) came back: the path had room.
  if (probe_out_ && probe_flow_ == f.id && p.aux == probe_seq_) {
    f.rc.restore();
    probe_out_ = false;
  }
  f.echoes++;
  while (!f.outstanding.empty() && f.outstanding.front().first <= p.aux) f.outstanding.pop_front();

  uint32_t id = p.seq;
  if (f.total) {
    if (id >= f.total) {
      stats_.bad_packets++;
      return;
    }
  } else if (id >= f.got.size()) {
    if (id >= kMaxFlowPackets) {
      stats_.bad_packets++;
      return;
    }
    f.got.resize(static_cast<size_t>(id) + 1, false);
  }
  if (f.got[id]) {
    stats_.data_duplicate++;
    return;
  }
  f.got[id] = true;
  f.received++;
  stats_.data_received++;
  f.last_progress = now;
  f.nacked.erase(id);
  while (f.cum < f.got.size() && f.got[f.cum]) f.cum++;
  // §4.4 "Packet Loss": an ID well above a hole means the hole was lost.
  if (id >= f.cum + cfg_.reorder_threshold) nack_range(f, f.cum, id + 1 - cfg_.reorder_threshold, now, out);
  maybe_close(f, now, out);
}

void Receiver::nack_range(Flow& f, uint32_t from, uint32_t to, uint64_t now, std::vector<Packet>& out) {
  uint32_t runs = 0;
  uint32_t end = std::min<uint64_t>(to, static_cast<uint64_t>(from) + kMaxNackScan);
  end = std::min<uint64_t>(end, f.got.size());
  uint32_t i = from;
  while (i < end && runs < kMaxNackRuns) {
    auto want = [&](uint32_t k) {
      if (f.got[k]) return false;
      auto n = f.nacked.find(k);
      return n == f.nacked.end() || now - n->second >= cfg_.rtt_ns;
    };
    if (!want(i)) {
      i++;
      continue;
    }
    uint32_t j = i;
    while (j < end && want(j)) {
      f.nacked[j] = now;
      j++;
    }
    Packet n;
    n.type = Type::kNack;
    n.flow = f.id;
    n.seq = i;
    n.aux = j - i;
    n.tstamp_ns = now;
    out.push_back(n);
    stats_.nacks_sent++;
    stats_.nack_ids += j - i;
    runs++;
    i = j;
  }
}

void Receiver::maybe_close(Flow& f, uint64_t now, std::vector<Packet>& out) {
  if (!f.total || f.received < f.total) return;
  Packet d;
  d.type = Type::kDone;
  d.flow = f.id;
  d.tstamp_ns = now;
  out.push_back(d);
  Completion c;
  c.flow = f.id;
  c.size_bytes = f.size_bytes;
  c.start_ns = f.start_ns;
  c.done_ns = now;
  c.deadline_ns = f.deadline_abs;
  c.deadline_met = !f.deadline_abs || now <= f.deadline_abs;
  c.sync_ns = f.sync_at;
  c.first_token_ns = f.first_token_at;
  c.first_data_ns = f.first_data_at;
  done_.push_back(c);
  stats_.flows_closed++;
  remember_closed(f.id);
  uint64_t id = f.id;
  order_.erase(std::find(order_.begin(), order_.end(), &f));
  flows_.erase(id);  // f is gone
}

void Receiver::period_update(Flow& f, uint64_t now) {
  uint32_t span = f.max_echo - f.echo_base;
  uint32_t answered = std::min(f.echoes, span);
  uint32_t denom = span + f.lost_tail;
  if (denom > 0) f.rc.update(static_cast<double>(denom - answered) / denom);
  f.echo_base = f.max_echo;
  f.echoes = 0;
  f.lost_tail = 0;
  f.period_start = now;
}

void Receiver::on_slot(uint64_t now, std::vector<Packet>& out) {
  stats_.slots++;
  Flow* best = nullptr;
  int best_prio = 0;
  uint64_t best_key = 0;
  Flow* spare = nullptr;
  int spare_prio = 0;
  uint64_t spare_key = 0;
  std::vector<Flow*> snapshot = order_;  // tail NACKs never close a flow, but stay safe
  for (Flow* f : snapshot) {
    while (!f->outstanding.empty() && now - f->outstanding.front().second > cfg_.token_timeout_ns) {
      if (f->outstanding.front().first > f->max_echo) f->lost_tail++;
      f->outstanding.pop_front();
    }
    // One update per RTT (ExpressPass), but never over fewer than 32 slots:
    // a loss ratio of two or three tokens is noise.
    if (now - f->period_start >= std::max(cfg_.rtt_ns, 32 * cfg_.slot_ns)) period_update(*f, now);
    // Tail loss: tokens went out after the last arrival and none came back
    // within the timeout. A flow starved of tokens by higher classes is
    // not losing anything and is left alone.
    if (f->total && f->received < f->total && f->last_token_at > f->last_progress &&
        now - f->last_progress > cfg_.tail_timeout_ns && now - f->last_token_at > cfg_.token_timeout_ns) {
      nack_range(*f, f->cum, f->total, now, out);
      f->last_progress = now;
    }
    uint64_t needed = f->total ? f->total - f->received : std::numeric_limits<uint32_t>::max();
    bool wants = needed > f->outstanding.size();
    f->bucket = std::min(f->bucket + f->rc.rate(), wants ? 2.0 : 1.0);
    if (!wants) continue;
    int prio = priority_of(*f, now);
    uint64_t key = 0;
    switch (cfg_.objective) {
      case Objective::kFct: key = f->total ? f->total - f->received : UINT32_MAX; break;  // SRPT
      case Objective::kLas: key = f->received; break;
      case Objective::kDeadline: key = f->deadline_abs ? f->deadline_abs : UINT64_MAX; break;
      case Objective::kFair: key = 0; break;
    }
    auto better = [&](Flow* b, int bp, uint64_t bk) {
      return !b || prio < bp || (prio == bp && key < bk) ||
             (prio == bp && key == bk && f->last_served < b->last_served);
    };
    if (better(spare, spare_prio, spare_key)) {
      spare = f;
      spare_prio = prio;
      spare_key = key;
    }
    if (f->bucket < 1.0) continue;
    if (better(best, best_prio, best_key)) {
      best = f;
      best_prio = prio;
      best_key = key;
    }
  }
  // A slot no flow's rate allows goes to the best flow that wants a token
  // (ReceiverConfig::spare; with kProbe only while no probe is out); the
  // flow's bucket is left as it is, so the slots its rate gives it are not
  // reduced by the spare ones.
  bool from_spare = false;
  if (probe_out_ && now - probe_at_ > cfg_.token_timeout_ns) probe_out_ = false;
  bool spare_ok = cfg_.spare == Spare::kEvery || (cfg_.spare == Spare::kProbe && !probe_out_);
  if (!best && spare && spare_ok && cfg_.objective != Objective::kFair) {
    best = spare;
    best_prio = spare_prio;
    from_spare = true;
    stats_.slots_spare++;
  }
  if (!best) {
    stats_.slots_idle++;
    return;
  }
  Packet t;
  t.type = Type::kToken;
  t.flow = best->id;
  t.seq = ++best->token_seq;
  t.priority = static_cast<uint8_t>(best_prio);
  t.tstamp_ns = now;
  out.push_back(t);
  best->outstanding.emplace_back(t.seq, now);
  if (!from_spare) best->bucket -= 1.0;
  if (from_spare && cfg_.spare == Spare::kProbe) {
    probe_out_ = true;
    probe_flow_ = best->id;
    probe_seq_ = t.seq;
    probe_at_ = now;
  }
  best->last_served = ++serve_counter_;
  best->tokens_sent++;
  best->last_token_at = now;
  if (!best->first_token_at) best->first_token_at = now;
  stats_.tokens_sent[best_prio]++;
}

}  // namespace sluice::top
