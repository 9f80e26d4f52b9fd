#include "mechanisms/top/sender.h"

#include <algorithm>
#include <set>
#include <stdexcept>

namespace sluice::top {

std::optional<std::string> SenderConfig::validate() const {
  if (mss == 0) return "mss must be > 0";
  if (rtt_ns == 0) return "rtt_ns must be > 0";
  if (max_flows == 0) return "max_flows must be >= 1";
  return std::nullopt;
}

struct Sender::Flow {
  uint64_t id = 0;
  FlowSpec spec;
  uint32_t total = 0;
  uint32_t next_new = 0;
  std::vector<uint64_t> sent_at;  // per ID, last (re)send time
  std::set<uint32_t> resend;      // NACKed IDs, lowest first
  bool got_token = false;
  uint64_t start_ns = 0;
  uint64_t last_sync = 0;
  uint64_t last_activity = 0;
  uint64_t fin_sent_at = 0;
  bool fin_sent = false;
  uint64_t tokens = 0;
  uint32_t sync_retries = 0;
  uint64_t first_token_at = 0;
};

Sender::Sender(const SenderConfig& cfg) : cfg_(cfg), next_id_(cfg.flow_id_base) {}
Sender::~Sender() = default;

std::vector<SenderCompletion> Sender::take_completions() {
  std::vector<SenderCompletion> v;
  v.swap(done_);
  return v;
}

std::vector<SenderFlowView> Sender::flows() const {
  std::vector<SenderFlowView> v;
  for (const auto& [id, f] : flows_) v.push_back({id, f->next_new, f->total, f->resend.size(), f->tokens});
  return v;
}

Packet Sender::sync_of(const Flow& f, Type t, uint64_t now) const {
  Packet p;
  p.type = t;
  p.flow = f.id;
  p.tstamp_ns = t == Type::kSync ? f.start_ns : now;
  p.mss = cfg_.mss;
  p.prio_class = f.spec.prio_class;
  p.sized = f.spec.clairvoyant;
  p.size_bytes = (f.spec.clairvoyant || t == Type::kFin) ? f.spec.size_bytes : 0;
  p.deadline_ns = f.spec.deadline_ns;
  return p;
}

uint64_t Sender::open_flow(const FlowSpec& spec, uint64_t now, std::vector<Packet>& out) {
  if (spec.size_bytes == 0) throw std::invalid_argument("TOP flow of 0 bytes");
  if (spec.prio_class != kPrioByObjective && spec.prio_class >= kPriorities)
    throw std::invalid_argument("TOP priority class must be 0..5");
  uint64_t pkts = (spec.size_bytes + cfg_.mss - 1) / cfg_.mss;
  if (pkts > (1ull << 26)) throw std::invalid_argument("TOP flow larger than 2^26 packets");
  if (flows_.size() >= cfg_.max_flows) throw std::invalid_argument("TOP sender: too many open flows");
  auto f = std::make_unique<Flow>();
  f->id = next_id_++;
  f->spec = spec;
  f->total = static_cast<uint32_t>(pkts);
  f->sent_at.assign(f->total, 0);
  f->start_ns = now;
  f->last_sync = now;
  f->last_activity = now;
  out.push_back(sync_of(*f, Type::kSync, now));
  stats_.syncs_sent++;
  uint64_t id = f->id;
  flows_.emplace(id, std::move(f));
  return id;
}

void Sender::on_packet(const Packet& p, uint64_t now, std::vector<Packet>& out) {
  auto it = flows_.find(p.flow);
  if (p.type == Type::kToken) {
    if (p.priority < kPriorities) stats_.tokens_received[p.priority]++;
    if (it == flows_.end()) {
      stats_.tokens_unknown_flow++;
      return;
    }
    Flow& f = *it->second;
    if (!f.got_token) f.first_token_at = now;
    f.got_token = true;
    f.last_activity = now;
    f.tokens++;
    std::optional<uint32_t> id;
    bool resent = false;
    // §4.4 "Packet Loss": a NACKed ID goes out on the flow's next token, at
    // most once per RTT.
    for (uint32_t r : f.resend) {
      if (now - f.sent_at[r] >= cfg_.rtt_ns) {
        id = r;
        resent = true;
        break;
      }
    }
    if (id) {
      f.resend.erase(*id);
    } else if (f.next_new < f.total) {
      id = f.next_new++;
    }
    if (!id) {
      stats_.tokens_unused++;
      if (!f.spec.clairvoyant && f.fin_sent && now - f.fin_sent_at >= cfg_.rtt_ns) {
        out.push_back(sync_of(f, Type::kFin, now));
        f.fin_sent_at = now;
        stats_.fins_sent++;
      }
      return;
    }
    Packet d;
    d.type = Type::kData;
    d.flow = f.id;
    d.seq = *id;
    d.aux = p.seq;
    d.priority = p.priority;
    d.tstamp_ns = p.tstamp_ns;
    uint64_t off = static_cast<uint64_t>(*id) * cfg_.mss;
    d.len = static_cast<uint16_t>(std::min<uint64_t>(cfg_.mss, f.spec.size_bytes - off));
    out.push_back(d);
    f.sent_at[*id] = now;
    stats_.data_sent++;
    if (resent) stats_.data_resent++;
    // Non-clairvoyant (§4.4): FIN with the final size once the last new
    // packet is out.
    if (!f.spec.clairvoyant && !f.fin_sent && f.next_new == f.total) {
      out.push_back(sync_of(f, Type::kFin, now));
      f.fin_sent = true;
      f.fin_sent_at = now;
      stats_.fins_sent++;
    }
    return;
  }
  if (p.type == Type::kNack) {
    if (it == flows_.end()) return;
    Flow& f = *it->second;
    stats_.nacks_received++;
    uint64_t end = std::min<uint64_t>(static_cast<uint64_t>(p.seq) + p.aux, f.next_new);
    for (uint64_t i = p.seq; i < end; i++) f.resend.insert(static_cast<uint32_t>(i));
    return;
  }
  if (p.type == Type::kDone) {
    if (it == flows_.end()) return;
    Flow& f = *it->second;
    done_.push_back({f.id, f.spec.size_bytes, f.start_ns, now, f.first_token_at});
    stats_.flows_done++;
    flows_.erase(it);
    return;
  }
  stats_.bad_packets++;
}

void Sender::on_timer(uint64_t now, std::vector<Packet>& out) {
  uint64_t sync_retry = cfg_.sync_retry_ns ? cfg_.sync_retry_ns : 4 * cfg_.rtt_ns;
  uint64_t probe = cfg_.probe_ns ? cfg_.probe_ns : 8 * cfg_.rtt_ns;
  for (auto& [id, fp] : flows_) {
    Flow& f = *fp;
    if (!f.got_token) {
      // Backs off: a flow may wait long for its first token behind higher
      // classes without anything being lost.
      if (now - f.last_sync >= sync_retry << std::min<uint32_t>(f.sync_retries, 6)) {
        f.sync_retries++;
        out.push_back(sync_of(f, Type::kSync, now));
        f.last_sync = now;
        stats_.syncs_sent++;
      }
      continue;
    }
    // Everything sent and no DONE: the DONE or the tail may be lost. A FIN
    // tells the receiver the size again; it answers DONE or NACKs the tail.
    if (f.next_new == f.total && f.resend.empty() && now - f.last_activity >= probe) {
      out.push_back(sync_of(f, Type::kFin, now));
      f.last_activity = now;
      stats_.fins_sent++;
    }
  }
}

}  // namespace sluice::top
