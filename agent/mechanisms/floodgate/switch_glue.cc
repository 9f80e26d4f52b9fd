// Floodgate in sluiced switch mode: the agent half (switch_glue.h).
#include "mechanisms/floodgate/switch_glue.h"

#include <bpf/bpf.h>
#include <linux/pkt_cls.h>
#include <net/if.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <vector>

#include "core/bpf_util.h"
#include "core/config.h"
#include "core/log.h"
#include "core/module.h"
#include "core/tc.h"
#include "mechanisms/floodgate/agent_voq.h"
#include "mechanisms/floodgate/config.h"
#include "mechanisms/floodgate/logic.h"
#include "mechanisms/floodgate/switch_keys.h"
#include "mechanisms/pac/reinject.h"
#include "sluice/dstpause.h"
#include "sluice/floodgate_sw.h"
#include "switch/ecn.h"
#include "switch/tree.h"
// After sluice/floodgate_sw.h: its .bss names struct sl_fg_voq_cnt.
#include "floodgate_sw.skel.h"

SLUICE_SKELETON(floodgate_sw);

namespace sluice::floodgate {

namespace {

using namespace sw;
using Key = SwKey;  // (port_id, dst)

// A 32-bit PSN from the wire, placed next to a 64-bit cumulative count
// (serial arithmetic: the nearest value with those low 32 bits).
uint64_t unwrap(uint32_t psn, uint64_t near) {
  int64_t d = int32_t(psn - uint32_t(near));
  if (d < 0 && uint64_t(-d) > near) return 0;
  return uint64_t(int64_t(near) + d);
}

sl_fg_key bpf_key(const Key& k) {
  sl_fg_key b{};
  b.port_id = k.first;
  std::memcpy(b.dst, k.second.data(), 16);
  return b;
}

struct TxState {            // per (egress port, dst): the window toward the next hop
  uint64_t credit_psn = 0;  // cumulative bytes the downstream credited
  uint64_t voq_out = 0;     // bytes that left the VOQ
  uint64_t direct = 0, voq_in = 0, voq_in_pkts = 0;
  uint64_t voq_dropped = 0;  // bytes the VOQ tail-dropped (estimated from packets; exact with voq = "agent")
  uint64_t pending() const { return voq_in > voq_out + voq_dropped ? voq_in - voq_out - voq_dropped : 0; }
  uint32_t voq = 0;  // queue holding the dst, 0 = none
  uint64_t last_credit_ns = 0, last_syn_ns = 0;
  int64_t window = 0;
  sl_fg_ag written{};  // what sl_fg_ag_v1 holds for it (written only when it changes)
  bool ever_written = false;
};
struct RxState {          // per (ingress port, dst): credits returned upstream
  uint64_t credited = 0;  // the PSN: cumulative bytes credited
  uint64_t adj = 0;       // bytes a switchSYN showed were lost upstream of here
  uint64_t counted = 0, pkts = 0, pkts_credited = 0;
  uint32_t out_port = 0;
};
struct Group {          // a VOQ (port, queue)
  uint64_t bucket = 0;  // the last release's allowance
  uint64_t out_at = 0;  // bytes out of the VOQ at that release
  uint64_t out_total = 0;
  uint64_t drops_seen = 0;  // the queue's dropped packets at the last read
};

// Which of a FIFO's bytes are still queued, per contributor. Snapshots of
// cumulative counts (a total and its parts: destinations of a port's
// default queue, ingress ports of a destination) are taken as the counters
// are read; with `still` bytes queued now, the queue holds what entered
// after the total was now - still, so a part's share of it is what the
// part added since the newest snapshot at or below that total (an
// overestimate by at most what entered between two snapshots). Without a
// snapshot that old, the part's whole count since the oldest one.
template <class K>
class FifoShare {
 public:
  void snap(const std::map<K, uint64_t>& parts) {
    uint64_t total = 0;
    for (const auto& [k, v] : parts) total += v;
    if (!hist_.empty() && hist_.back().total == total) {
      hist_.back().parts = parts;
      return;
    }
    hist_.push_back({total, parts});
    if (hist_.size() > kKeep) hist_.pop_front();
  }
  // Bytes of `k` among the last `still` bytes that entered.
  uint64_t queued(const K& k, uint64_t still) const {
    if (hist_.empty() || !still) return 0;
    const Snap& now = hist_.back();
    uint64_t have = part(now, k);
    uint64_t at = now.total > still ? now.total - still : 0;
    const Snap* base = &hist_.front();
    for (auto it = hist_.rbegin(); it != hist_.rend(); ++it)
      if (it->total <= at) {
        base = &*it;
        break;
      }
    uint64_t before = part(*base, k);
    return std::min(still, have > before ? have - before : 0);
  }

 private:
  struct Snap {
    uint64_t total;
    std::map<K, uint64_t> parts;
  };
  static uint64_t part(const Snap& s, const K& k) {
    auto it = s.parts.find(k);
    return it == s.parts.end() ? 0 : it->second;
  }
  static constexpr size_t kKeep = 256;
  std::deque<Snap> hist_;
};

struct Stats {
  uint64_t credit_frames_out = 0, credit_recs_out = 0, credit_bytes_out = 0;
  uint64_t credit_frames_in = 0, credit_recs_in = 0, credit_bytes_in = 0, stale_credits = 0;
  uint64_t delayed_credits = 0, syns_sent = 0, syns_answered = 0, syn_lost_bytes = 0;
  uint64_t voq_engaged = 0, voq_drained = 0, releases = 0, release_failed = 0, ticks = 0;
  // Whole updates (both tables read, every destination) and, with voq =
  // "agent", releases on a credit frame (only its destinations).
  uint64_t full_updates = 0, credit_releases = 0;
  // voq = "agent": frames taken from the ring, sent again, refused by the
  // kernel on the way out, dropped at voq_limit_bytes, of an unknown port.
  uint64_t agent_frames_in = 0, agent_bytes_in = 0, agent_sent = 0, agent_send_errors = 0, agent_dropped = 0,
           agent_dropped_bytes = 0, agent_unknown = 0, agent_ce_marked = 0, agent_not_ect_over_k = 0;
  // Stolen -> sent again, per frame (the time a frame waited in the VOQ).
  uint64_t agent_wait_sum_us = 0, agent_wait_max_us = 0;
  // Releases that sent frames (one Reinjector::send_many each).
  uint64_t agent_send_calls = 0;
};

// skb->mark of the frames the agent sends again from its VOQs (fg_egress
// lets them pass).
constexpr uint32_t kVoqReinjectMark = 0x5e1f;

class SwitchFloodgate final : public Logic {
 public:
  SwitchFloodgate(const LogicContext& ctx, Config cfg)
      : cfg_(std::move(cfg)), ports_(*ctx.ports), voqs_(ctx.ports->size()) {
    cfg_.validate();
    const bool agent = cfg_.voq_agent;
    skel_->rodata->reinject_mark = agent ? kVoqReinjectMark : 0;
    skel_->rodata->divert_verdict = ctx.service->attach_mode == AttachMode::Clsact ? TC_ACT_STOLEN : TC_ACT_SHOT;
    // The ring is the VOQs' way in; without them one page.
    if (!agent) bpf_map__set_max_entries(skel_->maps.sl_fg_voq_v1, 4096);
    skel_.load();
    int pfd = bpf_map__fd(skel_->maps.sl_fg_port_v1);
    for (size_t i = 0; i < ports_.size(); ++i) {
      const PortConfig& pc = ports_[i];
      bool sf = pc.role == PortRole::kSwitchFacing;
      uint32_t nq = uint32_t(pc.queues.size());
      sl_fg_port fp{};
      fp.port_id = uint32_t(i);
      // VOQs in the agent need no queues of the tree: every switch-facing
      // port keeps windows.
      fp.windowed = sf && (agent || nq >= 2);
      fp.credits = sf;
      fp.nvoq = fp.windowed && !agent ? std::min<uint32_t>(cfg_.max_voqs, nq - 1) : 0;
      fp.htb_major = kHtbMajor;
      fp.voq_agent = fp.windowed && agent;
      fp.init_window = init_window(PortId(i));
      uint32_t ifindex = if_index(pc.name);
      if (!ifindex) throw Error("floodgate: no interface " + pc.name);
      by_ifindex_[ifindex] = uint32_t(i);
      reinj_.push_back(fp.voq_agent ? std::make_unique<pac::Reinjector>(pc.name, kVoqReinjectMark) : nullptr);
      check(bpf_map_update_elem(pfd, &ifindex, &fp, BPF_ANY), "floodgate port table");
      fp_.push_back(fp);
      att_.push_back(TcAttachment::attach(pc.name, Hook::Egress, bpf_program__fd(skel_->progs.fg_egress), "fg_egress",
                                          kSwitchTcPrio, ctx.service->attach_mode, ctx.config->agent.state_dir));
    }
    dropped_.assign(fp_.size(), 0);
    keys_ = std::make_unique<KeySlots>(bpf_map__fd(skel_->maps.sl_fg_keys_v1), bpf_map__fd(skel_->maps.sl_fg_tx_v1),
                                       bpf_map__fd(skel_->maps.sl_fg_rx_v1), &skel_->bss->fg_keys_lost);
    if (agent) {
      ring_ = ring_buffer__new(bpf_map__fd(skel_->maps.sl_fg_voq_v1), &SwitchFloodgate::on_ring, this, nullptr);
      if (!ring_) throw SysError("floodgate: VOQ ring", errno);
    }
  }
  ~SwitchFloodgate() override {
    // fg_egress detached first (nothing more is stolen), then every frame
    // still held goes out, window or not: nothing is lost on the way out.
    att_.clear();
    if (!ring_) return;
    ring_buffer__consume(ring_);
    voqs_.drain([&](const Key& k, AgentVoqs::Frame& f) { reinj_[k.first]->send(f.bytes.data(), f.bytes.size()); });
    ring_buffer__free(ring_);
  }
  SwitchFloodgate(const SwitchFloodgate&) = delete;
  SwitchFloodgate& operator=(const SwitchFloodgate&) = delete;
  std::string_view name() const override { return "floodgate"; }

  void on_start(Substrate& sw) override {
    sw_ = &sw;
    // VOQs are held from the start: a bucket of one frame.
    for (size_t p = 0; p < fp_.size(); ++p)
      for (uint32_t q = 1; q <= fp_[p].nvoq; ++q)
        if (!sw.release(PortId(p), QueueId(q), 0)) ++st_.release_failed;
    sw.arm_timer(sw.now_ns() + cfg_.credit_interval_ns);
  }
  // Design A: the data path never calls it (the BPF half decides).
  Verdict on_enqueue(const PacketMeta&, PortId) override { return Verdict::enqueue(0); }

  void on_control(const ControlFrame& f, PortId port) override {
    uint64_t now = sw_->now_ns();
    if (f.type == CtrlType::kCredit) {
      ++st_.credit_frames_in;
      std::vector<Key> credited;
      for (const auto& r : f.credits) {
        ++st_.credit_recs_in;
        Key k{port, r.dst};
        auto it = tx_.find(k);
        if (it == tx_.end()) {
          ++st_.stale_credits;
          continue;
        }
        TxState& t = it->second;
        t.last_credit_ns = now;
        uint64_t psn = std::min(unwrap(r.psn, t.credit_psn), t.direct + t.voq_out);
        if (psn <= t.credit_psn) {
          if (psn < t.credit_psn) ++st_.stale_credits;
          continue;
        }
        st_.credit_bytes_in += psn - t.credit_psn;
        t.credit_psn = psn;  // §4.3: the window follows the PSN, a lost credit is repaired by the next
        write_ag(k, t);
        credited.push_back(k);
      }
      if (ring_) release_credited(now, credited);
      else update_voqs(now);
    } else if (f.type == CtrlType::kSwitchSyn) {
      // §4.3: answer at once with our PSN; bytes the upstream sent that never
      // arrived are counted as forwarded so its window is not lost for ever.
      // The answer credits only what left (as every credit): bytes still
      // held here (a VOQ behind a slow last hop is the usual reason for the
      // silence) stay uncredited, or the upstream's window would grow by
      // what this switch already buffers.
      read_rx();
      std::vector<CreditRec> recs;
      for (const auto& r : f.syns) {
        ++st_.syns_answered;
        RxState& x = rx_[Key{port, r.dst}];
        uint64_t have = x.counted + x.adj;
        uint64_t next = unwrap(r.next_psn, have);
        if (next > have) {
          st_.syn_lost_bytes += next - have;
          x.adj += next - have;
        }
        recs.push_back(credit_rec(Key{port, r.dst}, x));
      }
      send_credits(port, recs);
    }
  }

  void on_timer(uint64_t now) override {
    ++st_.ticks;
    update_voqs(now);
    credits(now);
    sw_->arm_timer(now + cfg_.credit_interval_ns);
  }

  nlohmann::json view() const {
    nlohmann::json w = nlohmann::json::array();
    for (const auto& [k, t] : tx_)
      w.push_back({{"port", ports_[k.first].name},
                   {"dst", addr_str(k.second)},
                   {"window_bytes", t.window},
                   {"init_window_bytes", fp_[k.first].init_window},
                   {"next_psn", t.direct + t.voq_out},
                   {"credit_psn", t.credit_psn},
                   {"voq", t.voq},
                   {"voq_in_bytes", t.voq_in},
                   {"voq_out_bytes", t.voq_out},
                   {"voq_dropped_bytes", t.voq_dropped},
                   {"voq_held_bytes", t.pending()}});
    nlohmann::json c = nlohmann::json::array();
    for (const auto& [k, x] : rx_)
      c.push_back({{"in_port", ports_[k.first].name},
                   {"dst", addr_str(k.second)},
                   {"forwarded_bytes", x.counted},
                   {"credited_psn", x.credited},
                   {"lost_adjust_bytes", x.adj}});
    uint32_t in_use = 0;
    for (const auto& [k, t] : tx_) in_use += t.voq != 0;
    nlohmann::json v = {
        {"credit_interval_us", cfg_.credit_interval_ns / 1000},
        {"hop_rtt_us", cfg_.hop_rtt_ns / 1000},
        {"max_voqs", cfg_.max_voqs},
        {"syn_timeout_ms", cfg_.syn_timeout_ns / 1'000'000},
        {"thre_credit_bdp", cfg_.thre_credit_bdp},
        {"thre_credit_bytes", cfg_.thre_credit_bytes},
        {"ports", port_view()},
        {"voqs_in_use", in_use},
        {"credits_sent",
         {{"frames", st_.credit_frames_out}, {"records", st_.credit_recs_out}, {"bytes", st_.credit_bytes_out}}},
        {"credits_received",
         {{"frames", st_.credit_frames_in},
          {"records", st_.credit_recs_in},
          {"bytes", st_.credit_bytes_in},
          {"stale", st_.stale_credits}}},
        {"delayed_credits", st_.delayed_credits},
        {"updates", {{"ticks", st_.ticks}, {"full", st_.full_updates}, {"on_credit", st_.credit_releases}}},
        {"keys",
         {{"tx", keys_->tx().size()}, {"rx", keys_->rx().size()}, {"lost", keys_->lost()}, {"walks", keys_->walks()}}},
        {"switch_syns", {{"sent", st_.syns_sent}, {"answered", st_.syns_answered}, {"lost_bytes", st_.syn_lost_bytes}}},
        {"voq",
         {{"engaged", st_.voq_engaged},
          {"drained", st_.voq_drained},
          {"releases", st_.releases},
          {"release_failed", st_.release_failed}}},
        {"dst_pause", "not run in switch mode"},
        {"windows", w},
        {"credit_state", c}};
    v["voq_in"] = ring_ ? "agent" : "tbf";
    if (ring_) {
      auto* cnt = skel_->bss->fg_voq_cnt;
      uint64_t stolen = 0, too_big = 0, ring_full = 0, reinjected = 0;
      for (size_t p = 0; p < fp_.size() && p < SLUICE_SW_MAX_PORTS; ++p) {
        stolen += __atomic_load_n(&cnt[p].stolen, __ATOMIC_RELAXED);
        too_big += __atomic_load_n(&cnt[p].too_big, __ATOMIC_RELAXED);
        ring_full += __atomic_load_n(&cnt[p].ring_full, __ATOMIC_RELAXED);
        reinjected += __atomic_load_n(&cnt[p].reinjected, __ATOMIC_RELAXED);
      }
      v["agent_voq"] = {{"limit_bytes", cfg_.voq_limit_bytes},
                        {"held_bytes", voqs_.held_total()},
                        {"voqs", voqs_.size()},
                        {"stolen", stolen},
                        {"too_big_passed", too_big},
                        {"ring_full_passed", ring_full},
                        {"reinjected_seen", reinjected},
                        {"frames_in", st_.agent_frames_in},
                        {"bytes_in", st_.agent_bytes_in},
                        {"sent", st_.agent_sent},
                        {"send_calls", st_.agent_send_calls},
                        {"send_errors", st_.agent_send_errors},
                        {"dropped", st_.agent_dropped},
                        {"dropped_bytes", st_.agent_dropped_bytes},
                        {"unknown", st_.agent_unknown},
                        {"ecn_packets", cfg_.voq_ecn_packets},
                        {"ce_marked", st_.agent_ce_marked},
                        {"not_ect_over_k", st_.agent_not_ect_over_k},
                        {"wait_us_mean", st_.agent_sent + st_.agent_send_errors
                                             ? st_.agent_wait_sum_us / (st_.agent_sent + st_.agent_send_errors)
                                             : 0},
                        {"wait_us_max", st_.agent_wait_max_us}};
    }
    return v;
  }

 private:
  static uint32_t if_index(const std::string& n) { return if_nametoindex(n.c_str()); }

  // Per port: windowed or not, VOQs, the initial window (§3.2).
  nlohmann::json port_view() const {
    nlohmann::json v = nlohmann::json::array();
    for (size_t i = 0; i < fp_.size(); ++i) {
      v.push_back({{"port", ports_[i].name},
                   {"windowed", bool(fp_[i].windowed)},
                   {"credits", bool(fp_[i].credits)},
                   {"voqs", fp_[i].nvoq},
                   {"init_window_bytes", fp_[i].init_window}});
      if (fp_[i].voq_agent) {
        v.back()["voq_agent"] = true;
        v.back()["voq_held_bytes"] = voqs_.held(uint32_t(i));
        v.back()["voq_held_max_bytes"] = voqs_.held_max(uint32_t(i));
        v.back()["voq_dropped"] = dropped_[i];
      }
    }
    return v;
  }

  uint64_t bdp(PortId p) const { return ports_[p].rate_bps / 8 * cfg_.hop_rtt_ns / 1'000'000'000; }
  uint64_t init_window(PortId p) const {
    // §3.2: BDP_nextHop + C_out * T.
    return bdp(p) + ports_[p].rate_bps / 8 * cfg_.credit_interval_ns / 1'000'000'000;
  }
  uint64_t thre_credit(PortId p) const {
    return cfg_.thre_credit_bytes ? cfg_.thre_credit_bytes : uint64_t(cfg_.thre_credit_bdp) * bdp(p);
  }

  void write_ag(const Key& k, TxState& t) {
    sl_fg_ag a{t.credit_psn, t.voq_out, t.voq, 0, t.voq_out + t.voq_dropped};
    if (t.ever_written && !std::memcmp(&a, &t.written, sizeof(a))) return;
    sl_fg_key bk = bpf_key(k);
    if (bpf_map_update_elem(bpf_map__fd(skel_->maps.sl_fg_ag_v1), &bk, &a, BPF_ANY)) return;
    t.written = a;
    t.ever_written = true;
  }

  // One slot's counters as BPF last wrote them (atomic adds there).
  static sl_fg_tx load(const sl_fg_tx& a) {
    sl_fg_tx v{};
    v.direct_bytes = __atomic_load_n(&a.direct_bytes, __ATOMIC_ACQUIRE);
    v.direct_pkts = __atomic_load_n(&a.direct_pkts, __ATOMIC_ACQUIRE);
    v.voq_bytes = __atomic_load_n(&a.voq_bytes, __ATOMIC_ACQUIRE);
    v.voq_pkts = __atomic_load_n(&a.voq_pkts, __ATOMIC_ACQUIRE);
    v.voq_q = __atomic_load_n(&a.voq_q, __ATOMIC_ACQUIRE);
    return v;
  }
  static sl_fg_rx load(const sl_fg_rx& a) {
    sl_fg_rx v{};
    v.bytes = __atomic_load_n(&a.bytes, __ATOMIC_ACQUIRE);
    v.pkts = __atomic_load_n(&a.pkts, __ATOMIC_ACQUIRE);
    v.out_port = __atomic_load_n(&a.out_port, __ATOMIC_ACQUIRE);
    return v;
  }
  // Every key keys_ knows, with its counters as read from the .bss (no
  // syscall; walking the table cost two an entry on every tick).
  template <class V, class F>
  static void each(const V* slots, const std::map<Key, uint32_t>& keys, F&& fn) {
    for (const auto& [k, slot] : keys) fn(k, load(slots[slot]));
  }

  // voq = "agent": a frame fg_egress stole (its window was exhausted, or
  // its destination already waits here) joins its destination's VOQ, or
  // is dropped when the port's VOQs hold voq_limit_bytes.
  static int on_ring(void* ctx, void* data, size_t size) {
    auto* self = static_cast<SwitchFloodgate*>(ctx);
    if (size < sizeof(sl_dp_frame)) return 0;
    self->on_frame(*static_cast<const sl_dp_frame*>(data));
    return 0;
  }
  void on_frame(const sl_dp_frame& ev) {
    auto pit = by_ifindex_.find(ev.ifindex);
    if (pit == by_ifindex_.end() || ev.len > SLUICE_DP_FRAME_MAX || !reinj_[pit->second]) {
      ++st_.agent_unknown;
      return;
    }
    Key k{pit->second, {}};
    std::memcpy(k.second.data(), ev.dst.addr, 16);
    TxState& t = tx_state(k, now_);
    arrived_.push_back(k);
    ++st_.agent_frames_in;
    st_.agent_bytes_in += ev.len;
    if (voqs_.held(k.first) + ev.len > cfg_.voq_limit_bytes) {
      // Tail drop; the bytes count as left (credited upstream, §4.1).
      t.voq_dropped += ev.len;
      ++st_.agent_dropped;
      ++dropped_[k.first];
      st_.agent_dropped_bytes += ev.len;
      return;
    }
    const bool over_k = cfg_.voq_ecn_packets && voqs_.frames(k) > cfg_.voq_ecn_packets;
    AgentVoqs::Frame& f = voqs_.push(k, ev.frame, ev.len, ev.tx_ns);
    if (over_k) {
      // DCTCP step marking in the VOQ (no qdisc AQM sees it), as the held
      // data path marks its queues.
      const int r = mark_ce_frame(f.bytes.data(), f.bytes.size());
      if (r > 0) ++st_.agent_ce_marked;
      else if (r < 0) ++st_.agent_not_ect_over_k;
    }
    if (!t.voq) {
      t.voq = 1;
      ++st_.voq_engaged;
    }
  }

  // voq = "agent": each held destination sends from the head of its VOQ
  // while its window is open (§3.2: init_window - in flight > 0, the same
  // rule fg_egress applies), so a credit releases at once what it allows.
  // A VOQ whose frames are all out and whose stolen bytes are all seen is
  // given up: the destination goes back to the kernel's window check. An
  // emptied VOQ is erased at once (AgentVoqs::release), so a destination
  // still held (stolen bytes not yet read from the ring) or with frames
  // dropped at voq_limit_bytes is settled here without one.
  void release_agent() {
    arrived_.clear();
    for (auto& [k, t] : tx_) {
      if (voqs_.has(k)) release_one(k, t);
      else if (t.voq || t.voq_dropped) settle(k, t);
    }
  }

  // voq = "agent", on a credit frame: only the credited destinations and
  // those whose frames just arrived from the ring are released (§4.1: a
  // credit releases at once), each one's BPF counts read by its key; the
  // rest of update_voqs (every destination's counts, the FIFO snapshots,
  // switchSYN) waits for the next tick. A whole update per credit frame
  // read both tables entry by entry and kept the agents busy for most of
  // the run (docs/floodgate.md "Why the Poisson flows were slow").
  void release_credited(uint64_t now, std::vector<Key> keys) {
    now_ = now;
    ++st_.credit_releases;
    ring_buffer__consume(ring_);
    keys.insert(keys.end(), arrived_.begin(), arrived_.end());
    arrived_.clear();
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    keys_->learn();
    for (const Key& k : keys) {
      if (!voqs_.has(k)) continue;
      TxState& t = tx_state(k, now);
      if (auto slot = keys_->tx_slot(k)) take_tx(t, load(skel_->bss->fg_tx[*slot]));
      release_one(k, t);
    }
  }

  TxState& tx_state(const Key& k, uint64_t now) {
    auto [it, fresh] = tx_.try_emplace(k);
    if (fresh) it->second.last_credit_ns = now;
    return it->second;
  }
  static void take_tx(TxState& t, const sl_fg_tx& v) {
    t.direct = v.direct_bytes;
    t.voq_in = v.voq_bytes;
    t.voq_in_pkts = v.voq_pkts;
  }

  // One destination's VOQ: frames from its head while its window is open,
  // sent together (one sendmmsg per release instead of a send per frame:
  // the re-sent frames' syscalls were the agents' largest single cost,
  // docs/floodgate.md "The agents' priority and their wake-ups").
  void release_one(const Key& k, TxState& t) {
    const int64_t window = int64_t(fp_[k.first].init_window) - int64_t(t.direct + t.voq_out - t.credit_psn);
    batch_.clear();
    const size_t sent = voqs_.release(k, window, [&](AgentVoqs::Frame& f) {
      const uint64_t len = f.bytes.size();
      const uint64_t waited_us = now_ > f.stolen_ns ? (now_ - f.stolen_ns) / 1000 : 0;
      st_.agent_wait_sum_us += waited_us;
      st_.agent_wait_max_us = std::max(st_.agent_wait_max_us, waited_us);
      t.voq_out += len;
      batch_.push_back(std::move(f.bytes));
    });
    if (sent) {
      ++st_.releases;
      out_.clear();
      for (auto& b : batch_) out_.push_back({b.data(), b.size()});
      // A frame the kernel refuses (its queue full) is lost at this port
      // as a direct one dropped there would be: it counts as sent, and a
      // switchSYN repairs the window (§4.3).
      const size_t ok = reinj_[k.first]->send_many(out_.data(), out_.size());
      st_.agent_sent += ok;
      st_.agent_send_errors += out_.size() - ok;
      ++st_.agent_send_calls;
    }
    settle(k, t);
  }
  // The destination goes back to the kernel's window check once it has no
  // frames here and every byte fg_egress stole for it is finished (sent
  // again or dropped); what it finished goes to sl_fg_ag_v1.
  void settle(const Key& k, TxState& t) {
    if (t.voq && !voqs_.has(k) && t.voq_in <= t.voq_out + t.voq_dropped) {
      t.voq = 0;
      ++st_.voq_drained;
    }
    write_ag(k, t);
  }

  // Reads the BPF counters, accounts what left each VOQ, engages and drains
  // VOQs, releases as much as the window allows, and sends switchSYN after
  // a silence (§4.1, §4.3).
  void update_voqs(uint64_t now) {
    // The ring before the map: BPF counts a frame before it submits it, so
    // the map then counts every frame the agent holds.
    now_ = now;
    ++st_.full_updates;
    if (ring_) ring_buffer__consume(ring_);
    keys_->learn();
    std::map<std::pair<uint32_t, uint32_t>, std::vector<Key>> groups;
    std::map<uint32_t, std::map<Addr, uint64_t>> direct;  // per windowed port: entered its default queue, per dst
    each(skel_->bss->fg_tx, keys_->tx(), [&](const Key& k, const sl_fg_tx& v) {
      if (k.first >= fp_.size()) return;
      TxState& t = tx_state(k, now);
      take_tx(t, v);
      // What entered the default queue: with window, and (voq = "agent")
      // sent again from the VOQ, which takes the same queue.
      direct[k.first][k.second] = v.direct_bytes + (ring_ ? t.voq_out : 0);
      if (!ring_ && !t.voq && t.pending() && v.voq_q) {
        t.voq = v.voq_q;
        ++st_.voq_engaged;
        write_ag(k, t);
      }
      if (t.voq && !ring_) groups[{k.first, t.voq}].push_back(k);
    });
    for (const auto& [p, parts] : direct) q0_[p].snap(parts);
    if (ring_) release_agent();
    for (auto& [pq, keys] : groups) {
      auto [p, q] = pq;
      uint64_t backlog = sw_->depth(PortId(p), QueueId(q)).bytes;
      uint64_t pending = 0;
      for (const Key& k : keys) pending += tx_[k].pending();
      // The VOQ is a FIFO: what is not queued any more has left or was
      // tail-dropped (the leaf's drop count, in packets of the VOQ's average
      // size); shared by several destinations, split in proportion to what
      // each had in it. Only what left counts toward the window.
      Group& g = groups_[pq];
      uint64_t drops = sw_->dropped(PortId(p), QueueId(q));
      uint64_t new_drops = drops > g.drops_seen ? drops - g.drops_seen : 0;
      g.drops_seen = std::max(g.drops_seen, drops);
      uint64_t drained = pending > backlog ? pending - backlog : 0, given = 0, out = 0;
      for (size_t i = 0; i < keys.size(); ++i) {
        TxState& t = tx_[keys[i]];
        uint64_t pk = t.pending();
        uint64_t d = i + 1 == keys.size() ? drained - given : (pending ? drained * pk / pending : 0);
        d = std::min(d, pk);
        given += d;
        uint64_t avg = t.voq_in_pkts ? t.voq_in / t.voq_in_pkts : 1500;
        uint64_t dropped = std::min(d, pending ? new_drops * avg * pk / pending : 0);
        t.voq_dropped += dropped;
        t.voq_out += d - dropped;
        out += d - dropped;
      }
      g.out_total += out;
      int64_t allow = INT64_MAX;
      bool held = false;
      for (const Key& k : keys) {
        TxState& t = tx_[k];
        t.window = int64_t(fp_[p].init_window) - int64_t(t.direct + t.voq_out - t.credit_psn);
        if (t.pending()) {
          held = true;
          allow = std::min(allow, t.window);
        }
      }
      if (!held && backlog == 0) {
        // Drained: the destinations go back to the window (§4.1), and the
        // bucket left from the last release is taken back.
        for (const Key& k : keys) {
          tx_[k].voq = 0;
          write_ag(k, tx_[k]);
        }
        ++st_.voq_drained;
        if (g.bucket > g.out_total - g.out_at + kMinRelease && !sw_->release(PortId(p), QueueId(q), 0))
          ++st_.release_failed;
        g.bucket = 0;
        g.out_at = g.out_total;
        continue;
      }
      for (const Key& k : keys) write_ag(k, tx_[k]);
      int64_t left = int64_t(g.bucket) - int64_t(g.out_total - g.out_at);
      if (left < 0) left = 0;
      if (held && allow != INT64_MAX && allow - left >= int64_t(kMinRelease)) {
        if (sw_->release(PortId(p), QueueId(q), uint64_t(allow))) {
          ++st_.releases;
          g.bucket = uint64_t(allow);
          g.out_at = g.out_total;
        } else {
          ++st_.release_failed;
        }
      }
    }
    // switchSYN (§4.3): data in flight, no credit for syn_timeout, nothing of
    // it still queued here.
    std::map<uint32_t, ControlFrame> syns;
    for (auto& [k, t] : tx_) {
      t.window = int64_t(fp_[k.first].init_window) - int64_t(t.direct + t.voq_out - t.credit_psn);
      if (t.direct + t.voq_out <= t.credit_psn) continue;
      if (now - t.last_credit_ns < cfg_.syn_timeout_ns || now - t.last_syn_ns < cfg_.syn_timeout_ns) continue;
      if (sw_->depth(PortId(k.first), 0).bytes) continue;
      t.last_syn_ns = now;
      ControlFrame& f = syns[k.first];
      f.type = CtrlType::kSwitchSyn;
      if (f.syns.size() < SLUICE_CTRL_MAX_RECORDS) f.syns.push_back({k.second, uint32_t(t.direct + t.voq_out)});
    }
    for (auto& [p, f] : syns) {
      st_.syns_sent += f.syns.size();
      sw_->send_control(PortId(p), f);
    }
  }

  void read_rx() {
    std::map<Addr, std::map<uint32_t, uint64_t>> by_dst;  // per dst: forwarded per ingress port
    keys_->learn();
    each(skel_->bss->fg_rx, keys_->rx(), [&](const Key& k, const sl_fg_rx& v) {
      if (k.first >= fp_.size()) return;
      RxState& x = rx_[k];
      x.counted = v.bytes;
      x.pkts = v.pkts;
      x.out_port = v.out_port;
      by_dst[k.second][k.first] = v.bytes;
    });
    for (const auto& [d, parts] : by_dst) in_[d].snap(parts);
  }

  // Bytes from ingress port k.first for dst k.second still in this switch:
  // of its egress port's default queue and its VOQ there. Credits cover
  // only bytes that left (§4.1 "forwarded"). Both queues are FIFOs, so
  // what is still queued is the newest of what entered (FifoShare): of a
  // switch-facing egress port's default queue, the dst's share of its
  // newest bytes (a host-facing port's queue is its host's: all of it);
  // of those, this ingress port's share of the dst's newest bytes. Not
  // the whole queue: bytes of other destinations or from other upstream
  // ports would hold this port's credits back (and its window, and
  // switchSYNs that answer for them).
  uint64_t queued(const Key& k, const RxState& x) const {
    if (x.out_port >= fp_.size()) return 0;
    uint64_t depth0 = sw_->depth(PortId(x.out_port), 0).bytes;
    uint64_t q = depth0;
    if (fp_[x.out_port].windowed) {
      auto f = q0_.find(x.out_port);
      q = f == q0_.end() ? depth0 : f->second.queued(k.second, depth0);
    }
    auto it = tx_.find(Key{x.out_port, k.second});
    if (it != tx_.end()) q += it->second.pending();
    auto in = in_.find(k.second);
    return in == in_.end() ? q : in->second.queued(k.first, q);
  }

  CreditRec credit_rec(const Key& k, RxState& x) {
    uint64_t have = x.counted + x.adj;
    uint64_t q = queued(k, x);
    uint64_t upto = have > q ? have - q : 0;
    CreditRec r;
    r.dst = k.second;
    if (upto > x.credited) {
      r.credit_bytes = uint32_t(std::min<uint64_t>(upto - x.credited, UINT32_MAX));
      st_.credit_bytes_out += upto - x.credited;
      x.credited = upto;
    }
    r.psn = uint32_t(x.credited);
    r.credit_pkts = uint16_t(std::min<uint64_t>(x.pkts - x.pkts_credited, 0xffff));
    x.pkts_credited = x.pkts;
    return r;
  }

  void send_credits(PortId p, const std::vector<CreditRec>& recs) {
    for (size_t i = 0; i < recs.size(); i += SLUICE_CTRL_MAX_RECORDS) {
      ControlFrame f;
      f.type = CtrlType::kCredit;
      f.credits.assign(recs.begin() + long(i), recs.begin() + long(std::min(recs.size(), i + SLUICE_CTRL_MAX_RECORDS)));
      ++st_.credit_frames_out;
      st_.credit_recs_out += f.credits.size();
      sw_->send_control(p, f);
    }
  }

  // Every T, per ingress port: one credit frame with a record for every
  // destination that has something to return; none when nothing (§4.1).
  void credits(uint64_t /*now*/) {
    read_rx();
    std::map<uint32_t, std::vector<CreditRec>> out;
    for (auto& [k, x] : rx_) {
      uint64_t have = x.counted + x.adj;
      // Host-facing ingress ports are counted (read_rx's FIFO shares) but
      // return no credits.
      if (have <= x.credited || k.first >= fp_.size() || !fp_[k.first].credits) continue;
      // delayCredit (§4.1): none for D while its VOQ here is long.
      auto it = tx_.find(Key{x.out_port, k.second});
      if (it != tx_.end() && it->second.pending() > thre_credit(PortId(x.out_port))) {
        ++st_.delayed_credits;
        continue;
      }
      uint64_t before = x.credited;
      CreditRec r = credit_rec(k, x);
      if (x.credited > before) out[k.first].push_back(r);
    }
    for (auto& [p, recs] : out) send_credits(PortId(p), recs);
  }

  static constexpr uint64_t kMinRelease = 1518;
  Config cfg_;
  std::vector<PortConfig> ports_;
  Skeleton<floodgate_sw> skel_;
  std::vector<sl_fg_port> fp_;
  std::vector<TcAttachment> att_;
  // voq = "agent": the ring, per port its re-injection socket (windowed
  // ports) and the VOQs.
  ring_buffer* ring_ = nullptr;
  std::map<uint32_t, uint32_t> by_ifindex_;
  std::vector<std::unique_ptr<pac::Reinjector>> reinj_;
  // One release's frames (their bytes moved out of the VOQ) and their
  // pointers for Reinjector::send_many; kept to reuse the allocations.
  std::vector<std::vector<uint8_t>> batch_;
  std::vector<pac::Reinjector::Frame> out_;
  AgentVoqs voqs_;
  std::vector<uint64_t> dropped_;   // frames dropped at voq_limit_bytes
  std::vector<Key> arrived_;        // destinations with frames from the ring since the last release
  std::unique_ptr<KeySlots> keys_;  // the tables' keys and their slots in .bss
  uint64_t now_ = 0;
  std::map<Key, TxState> tx_;
  std::map<Key, RxState> rx_;
  std::map<std::pair<uint32_t, uint32_t>, Group> groups_;
  std::map<uint32_t, FifoShare<Addr>> q0_;  // per windowed port: its default queue, by dst
  std::map<Addr, FifoShare<uint32_t>> in_;  // per dst: what this switch holds of it, by ingress port
  Stats st_;
};

}  // namespace

std::unique_ptr<sw::Logic> make_switch_logic(const sw::LogicContext& ctx) {
  // [floodgate] (config.h), its up_ports named against the switch's ports;
  // defaults without a configuration.
  Config cfg;
  if (ctx.config) {
    std::vector<std::string> names;
    if (ctx.ports)
      for (const auto& p : *ctx.ports) names.push_back(p.name);
    cfg = ctx.config->get<Section>().resolve(names);
  }
  // Every packet passes through the substrate's queues ([switch] datapath =
  // "hold", the port model, a simulator): the I/O-free logic itself, per
  // packet; its VOQs are paused queues of the egress port, released at once
  // (layout() gave them their priority level).
  if (ctx.per_packet && ctx.service && cfg.voq_agent)
    throw Error(
        "[floodgate] voq = \"agent\" is for [switch] datapath = \"tree\" (the held data path queues "
        "every frame in sluiced already)");
  if (ctx.per_packet || !ctx.service || !ctx.ports || !ctx.config) return std::make_unique<FloodgateLogic>(cfg);
  // Design A ("tree"): the BPF half and the agent half above.
  return std::make_unique<SwitchFloodgate>(ctx, cfg);
}

void switch_layout(const sw::LogicContext& ctx, sw::PortConfig& port) {
  // §7.2: "the queue reserved for non-incast traffic is strictly
  // prioritized over the left VOQs", and DRR among the VOQs (logic.h).
  // Design A keeps its tree as it was measured (one level; fg_egress steers).
  if (!ctx.per_packet || port.queues.size() < 2) return;
  port.queues[0].priority = 0;
  for (size_t q = 1; q < port.queues.size(); ++q) port.queues[q].priority = 1;
}

namespace {
// The model logic's state (config.h view()) with the values in force and
// per port its window and VOQs, in the keys design A's view also has.
nlohmann::json model_view(const FloodgateLogic& fg, const sw::Substrate& sw) {
  std::vector<std::string> names;
  for (size_t p = 0; p < sw.num_ports(); ++p) names.push_back(sw.port(PortId(p)).name);
  nlohmann::json v = view(fg, names);
  const Config& c = fg.config();
  const floodgate::Stats& s = fg.stats();
  nlohmann::json ports = nlohmann::json::array();
  for (size_t p = 0; p < sw.num_ports(); ++p) {
    const bool w = fg.has_window(PortId(p));
    ports.push_back({{"port", names[p]},
                     {"windowed", w},
                     {"credits", sw.port(PortId(p)).role == sw::PortRole::kSwitchFacing},
                     {"voqs", w ? fg.num_voqs() : 0u},
                     {"init_window_bytes", fg.initial_window(PortId(p))}});
  }
  v["datapath"] = "per packet";
  v["credit_interval_us"] = c.credit_interval_ns / 1000;
  v["hop_rtt_us"] = c.hop_rtt_ns / 1000;
  v["max_voqs"] = c.max_voqs;
  v["syn_timeout_ms"] = c.syn_timeout_ns / 1'000'000;
  v["thre_credit_bdp"] = c.thre_credit_bdp;
  v["thre_credit_bytes"] = c.thre_credit_bytes;
  v["voq_grouping"] = c.voq_grouping;
  v["dst_pause_enabled"] = c.dst_pause;
  v["ports"] = ports;
  v["credits_sent"] = {
      {"frames", s.credit_frames_out}, {"records", s.credit_records_out}, {"bytes", s.credit_bytes_out}};
  v["credits_received"] = {{"frames", s.credit_frames_in},
                           {"records", s.credit_records_in},
                           {"bytes", s.credit_bytes_in},
                           {"unknown", s.credit_unknown},
                           {"ahead", s.credit_ahead}};
  v["delayed_credits"] = s.credits_delayed;
  v["switch_syns"] = {{"sent", s.syn_out}, {"answered", s.syn_in}, {"lost_bytes", s.syn_lost_bytes}};
  return v;
}
}  // namespace

nlohmann::json switch_view(const sw::Logic& logic, const sw::Substrate& sw) {
  if (auto* s = dynamic_cast<const SwitchFloodgate*>(&logic)) return s->view();
  if (auto* f = dynamic_cast<const FloodgateLogic*>(&logic)) return model_view(*f, sw);
  return nlohmann::json::object();
}

}  // namespace sluice::floodgate
