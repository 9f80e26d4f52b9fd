// Floodgate's switch half (Liu et al., CoNEXT '21, §3-§4) as a sluice switch
// logic (agent/switch/logic.h): per-destination sending windows toward the
// next hop, VOQs for destinations whose window ran out, aggregated credits,
// delayCredit, PSN loss recovery with switchSYN, VOQ grouping, and the
// first-hop ToR's dstPause/dstResume to its hosts (§4.3). I/O-free: it runs
// against the port model in unit tests and against the real data path in
// sluiced unchanged.
//
// Units. The paper counts packets; this logic counts wire BYTES (logic.h:
// with GSO a "packet" means anything up to 64 KB). Mapping:
//   window "decrease by one per packet"  -> decrease by the packet's wire bytes
//   "forward when window is left"        -> forward when window > 0 bytes (a
//                                           window may go below zero by at
//                                           most one packet, the one it let go)
//   credit "<dst, credits>"              -> credit_bytes (and credit_pkts =
//                                           wire segments, for the record)
//   PSN                                  -> byte sequence number, 32-bit serial
//   BDP, thre_credit, thre_off/on        -> bytes: BDP_nextHop = rate of the
//                                           egress port x hop RTT / 8
//
// Queues. Every port with a window (a switch-facing egress port) must have
// 1 + VOQs queues: queue 0 is the default queue (priority 0), queues 1..N
// the VOQs (priority 1, DRR among them): §7.2 "the queue reserved for
// non-incast traffic is strictly prioritized over the left VOQs ... the
// scheduler inquires the left VOQs based on a Round-Robin manner".
// VOQ v is one switch-wide FIFO (as the paper's software switch shares its
// VOQs among ports, §5.1): its packets sit in queue 1+v of their egress port,
// and only the physical queue holding the VOQ's head is unpaused, and only
// while the head's (port, dst) window is positive. So a VOQ that two
// destinations share (VOQs used up, §4.2 hashing) keeps its order across
// ports, which is what makes the §4.2 deadlock possible without grouping.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "switch/logic.h"

namespace sluice::floodgate {

using sw::Addr;
using sw::PortId;
using sw::QueueId;

struct Config {
  // T, the credit timer of every ingress port (§4.1). Paper: 10 us at
  // 100/400 Gbit/s. Default 500 us: the real data path's timers are event-
  // loop timers (~100 us late), and 500 us is 4 MTU frames at 100 Mbit/s and
  // 8 at 200 Mbit/s, the same order (a few to tens of packets) as the
  // paper's 10 us at its rates. docs/floodgate.md.
  uint64_t credit_interval_ns = 500'000;
  // RTT of one hop (BDP_nextHop = egress rate x hop_rtt / 8, §3.2). The lab
  // gives links a delay with its delay wire; 2 x the one-way delay.
  uint64_t hop_rtt_ns = 200'000;
  // VOQs the switch may use (§6 "set to 100"); each windowed port needs
  // 1 + this many queues (fewer queues cap it).
  uint32_t max_voqs = 100;
  // delayCredit (§4.1): no credit for D while D's VOQ holds more than this.
  // 0 = thre_credit_bdp x BDP_nextHop of the VOQ's egress port (§6.5: 10 BDP).
  uint64_t thre_credit_bytes = 0;
  uint32_t thre_credit_bdp = 10;
  // VOQ grouping (§4.2) on a middle-layer switch (windowed ports both up
  // and down): down_voqs VOQs for traffic leaving by a down port, the rest
  // for traffic leaving by an up port. 0 = half.
  bool voq_grouping = true;
  uint32_t down_voqs = 0;
  std::vector<PortId> up_ports;  // ports toward the core
  // Loss recovery (§4.3): after this long without a credit while data is
  // in flight, send switchSYN. "A relatively large timeout": 20 T.
  uint64_t syn_timeout_ns = 10'000'000;
  // dstPause (§4.3), on a first-hop ToR: pause a destination's source hosts
  // when its VOQ holds more than thre_off, resume below thre_on.
  // 0 = one-hop BDP (BDP_nextHop of the VOQ's egress port).
  bool dst_pause = false;
  uint64_t thre_off_bytes = 0;
  uint64_t thre_on_bytes = 0;
  // Where design A ([switch] datapath = "tree") keeps its VOQs. false
  // ([floodgate] voq = "tbf"): TBF leaves of the port's queue tree, paused
  // and released by netlink. true (voq = "agent"): a frame out of window is
  // stolen to sluiced, queued there per destination and sent again when
  // credits reopen the window; frames with window never leave the kernel.
  // The model logic (datapath = "hold") has its own queues and ignores it.
  bool voq_agent = false;
  // voq = "agent": bytes the VOQs of one egress port may hold together
  // (tail drop beyond; the held data path's 8 queues x 128 KB by default).
  uint64_t voq_limit_bytes = 1 << 20;
  // voq = "agent": DCTCP step marking in the agent's VOQs, which no qdisc
  // AQM sees: a frame joining a destination's VOQ that already holds more
  // than this many frames gets CE (if ECT). 0 = off. The held data path's
  // [switch] ecn_threshold_packets does the same for its queues.
  uint32_t voq_ecn_packets = 0;

  // Throws std::invalid_argument with a clear message.
  void validate() const;
};

struct Stats {
  uint64_t forwarded = 0;     // packets let through by their window (queue 0)
  uint64_t voq_enqueued = 0;  // packets put into a VOQ
  uint64_t voq_released = 0;  // packets that left a VOQ
  uint64_t voq_hashed = 0;    // VOQ chosen by hash: none free in the group (§4.2)
  uint64_t voq_desync = 0;    // VOQ entries the substrate dropped unannounced (found by reconcile)
  uint64_t dropped = 0;       // packets the substrate tail-dropped and told us (on_drop)
  uint64_t no_window = 0;     // packets on ports without a window (last hop, host ports)
  uint64_t credit_frames_out = 0, credit_records_out = 0, credit_bytes_out = 0;
  uint64_t credit_frames_in = 0, credit_records_in = 0, credit_bytes_in = 0;
  uint64_t credit_unknown = 0;   // credit for a (port, dst) we never sent to: ignored
  uint64_t credit_ahead = 0;     // credit PSN beyond what we sent: clamped
  uint64_t credits_delayed = 0;  // records held back by delayCredit
  uint64_t syn_out = 0, syn_in = 0;
  uint64_t syn_lost_bytes = 0;  // bytes a switchSYN showed never arrived (credited)
  uint64_t dst_pause_out = 0, dst_resume_out = 0;
  uint32_t voqs_in_use = 0, voqs_in_use_max = 0;
};

class FloodgateLogic final : public sw::Logic {
 public:
  explicit FloodgateLogic(Config cfg);

  std::string_view name() const override { return "floodgate"; }
  void on_start(sw::Substrate& sw) override;
  sw::Verdict on_enqueue(const sw::PacketMeta& pkt, PortId in_port) override;
  void on_dequeue(const sw::PacketMeta& pkt, PortId out_port, QueueId q) override;
  void on_drop(const sw::PacketMeta& pkt, PortId out_port, QueueId q) override;
  void on_control(const sw::ControlFrame& frame, PortId port) override;
  void on_timer(uint64_t now_ns) override;

  // Views (sluicectl floodgate, tests).
  const Config& config() const { return cfg_; }
  const Stats& stats() const { return stats_; }
  bool has_window(PortId out) const;
  int64_t initial_window(PortId out) const;
  // Sending window toward `out` for dst (initial when nothing was sent).
  int64_t window(PortId out, const Addr& dst) const;
  // Bytes sent toward `out` for dst not yet covered by a credit.
  int64_t inflight(PortId out, const Addr& dst) const;
  // VOQ index holding dst, or -1.
  int voq_of(const Addr& dst) const;
  uint64_t voq_bytes(int voq) const;
  uint32_t num_voqs() const { return uint32_t(voqs_.size()); }
  // [first, end) of the VOQs traffic leaving by `out` may use.
  std::pair<uint32_t, uint32_t> voq_group(PortId out) const;
  bool dst_paused(const Addr& dst, PortId host_port) const;

  struct WindowView {
    PortId port;
    Addr dst;
    int64_t window, inflight;
  };
  struct VoqView {
    uint32_t voq;
    uint64_t bytes;
    uint32_t pkts;
    std::vector<Addr> dsts;
    bool grouped;       // VOQ grouping active on this switch
    bool up_group;      // in the up group (when grouped)
    Addr head;          // destination of the packet at the head
    PortId head_port;   // and the port it leaves by
    bool head_blocked;  // the head's window is used up
  };
  struct PauseView {
    Addr dst;
    uint64_t ports;  // bit p = host port p paused for dst
  };
  std::vector<WindowView> windows() const;
  std::vector<VoqView> voqs() const;
  std::vector<PauseView> paused() const;

 private:
  using Key = std::pair<PortId, Addr>;
  // Upstream side, per (egress port, dst) (§4.2, §4.3).
  struct Window {
    uint32_t next_psn = 0;       // bytes forwarded toward the port for dst
    uint32_t credit_psn = 0;     // newest PSN a credit carried
    uint64_t queued = 0;         // forwarded into queue 0, not yet left
    uint64_t last_heard_ns = 0;  // last credit, or start of waiting
    uint64_t last_syn_ns = 0;
  };
  // Downstream side, per (ingress port, dst) (§4.1, §4.3).
  struct Credit {
    uint32_t recv_psn = 0;      // bytes received from the port for dst
    uint32_t fwd_psn = 0;       // of those, bytes that left this switch (or were lost)
    uint32_t credited_psn = 0;  // PSN of the last credit sent
    uint32_t fwd_segs = 0, credited_segs = 0;
  };
  struct Entry {
    uint64_t id;
    PortId port;
    Addr dst;
    uint32_t bytes;
  };
  struct Voq {
    std::deque<Entry> q;
    uint64_t bytes = 0;
    std::map<PortId, uint32_t> per_port;  // entries per egress port
    std::map<Addr, uint32_t> per_dst;     // entries per dst
    std::map<PortId, bool> suspect;       // fewer packets queued than entries (reconcile)
  };
  struct Pause {
    uint64_t senders = 0;  // host ports that sent to dst while it had a VOQ
    uint64_t paused = 0;   // host ports we told to pause
    uint64_t thre_on = 0;  // resume below this (set when pausing)
    std::map<PortId, uint64_t> last_sent_ns;
  };

  uint64_t bdp(PortId p) const;
  bool up(PortId p) const { return p < up_.size() && up_[p]; }
  bool switch_port(PortId p) const;
  uint64_t thre_credit(int voq) const;
  uint64_t thre_off(int voq) const;
  uint64_t thre_on(int voq) const;
  int64_t window_of(PortId out, const Window& w) const;
  Window& win(PortId out, const Addr& dst);
  void forward(PortId out, const Addr& dst, uint32_t bytes);
  uint32_t allocate(PortId out, const Addr& dst);
  void push(uint32_t v, const sw::PacketMeta& pkt);
  void erase(uint32_t v, std::deque<Entry>::iterator it);
  void reconcile(uint32_t v);
  void refresh(uint32_t v);
  void set_paused(PortId p, QueueId q, bool paused);
  void left(const sw::PacketMeta& pkt, PortId out, QueueId q, bool sent);
  void on_credit(const sw::ControlFrame& f, PortId port);
  void on_syn(const sw::ControlFrame& f, PortId port);
  void send_credits(PortId port, std::vector<sw::CreditRec> recs);
  // Makes the credit record for (port, dst) if one is due; false if nothing
  // to return or delayed.
  bool take_credit(PortId port, const Addr& dst, Credit& c, sw::CreditRec* rec);
  void check_pause(const Addr& dst, PortId in_port);
  void check_resume();
  void send_dst(PortId port, sw::CtrlType type, const Addr& dst);
  void count_voqs();

  Config cfg_;
  std::vector<bool> up_;
  std::vector<int64_t> w0_;  // per port; 0 = no window
  uint32_t down_end_ = 0;    // VOQs [0, down_end_) down group, rest up; 0 = one group
  std::map<Key, Window> win_;
  std::map<Key, Credit> cred_;
  std::vector<Voq> voqs_;
  std::map<Addr, uint32_t> dst_voq_;
  std::map<Addr, Pause> pause_;
  std::map<PortId, uint32_t> dst_seq_;  // dstPause seq per host port
  Stats stats_;
};

}  // namespace sluice::floodgate
