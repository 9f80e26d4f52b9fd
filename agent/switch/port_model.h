// A deterministic, in-process model of a switch: egress ports with a link
// rate, queues, a scheduler (strict priority between levels, DRR within a
// level, shaper groups, per-queue pause) and a simulated clock. It
// implements Substrate, so a Logic runs against it unchanged: unit tests,
// and the reference the real data path is compared with. No kernel, no I/O,
// no wall clock.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <queue>
#include <vector>

#include "switch/logic.h"
#include "switch/stats.h"

namespace sluice::sw {

// Serialization time of `bytes` at `rate_bps`, rounded up to a nanosecond.
uint64_t tx_time_ns(uint64_t bytes, uint64_t rate_bps);

// One egress port: queues and the scheduler. Time is passed in.
class PortModel {
 public:
  explicit PortModel(PortConfig cfg);

  const PortConfig& config() const { return cfg_; }
  size_t num_queues() const { return queues_.size(); }

  // Tail-drops (returns false, counts) when the queue's limit would be
  // exceeded; throws std::out_of_range for a queue that does not exist.
  bool enqueue(QueueId q, const PacketMeta& pkt);
  // The scheduler's choice at `now`: the queue whose head leaves next, or
  // nothing when every queue is empty, paused or held by its shaper.
  std::optional<QueueId> pick(uint64_t now);
  // Removes the head of q (the one pick() chose) and charges DRR and shaper.
  PacketMeta dequeue(QueueId q, uint64_t now);
  // Earliest time > now at which a shaper would let a waiting queue go, or
  // UINT64_MAX.
  uint64_t next_shaper_ns(uint64_t now) const;

  QueueDepth depth(QueueId q) const;
  bool paused(QueueId q) const { return at(q).paused; }
  void set_paused(QueueId q, bool p) { at(q).paused = p; }
  const QueueStats& stats(QueueId q) const { return at(q).stats; }
  CtrlStats& ctrl() { return ctrl_; }
  const CtrlStats& ctrl() const { return ctrl_; }

 private:
  struct Queue {
    QueueConfig cfg;
    std::deque<PacketMeta> pkts;
    QueueDepth depth;
    bool paused = false;
    int64_t deficit = 0;
    QueueStats stats;
  };
  struct Group {
    ShaperGroup cfg;
    double tokens = 0;  // bytes, may go negative after a packet (HTB-like)
    uint64_t last_ns = 0;
  };
  struct Level {
    std::vector<QueueId> queues;
    size_t pos = 0;
    bool fresh = true;  // the queue at pos has not had its quantum this turn
  };
  Queue& at(QueueId q);
  const Queue& at(QueueId q) const;
  void refill(Group& g, uint64_t now) const;
  bool eligible(QueueId q, uint64_t now);

  PortConfig cfg_;
  std::vector<Queue> queues_;
  mutable std::vector<Group> groups_;
  std::map<uint8_t, Level> levels_;  // by priority, 0 first
  CtrlStats ctrl_;
};

// A switch of PortModels driven by a Logic, with scheduled arrivals,
// control frames, timers and a log of departures.
class SwitchModel final : public Substrate {
 public:
  struct Departure {
    uint64_t id;
    PortId port;
    QueueId queue;
    uint64_t start_ns;  // the scheduler picked it
    uint64_t end_ns;    // its last bit left
    uint32_t wire_bytes;
  };
  struct SentControl {
    uint64_t at_ns;
    PortId port;
    std::vector<uint8_t> payload;  // encoded control payload (sl_ctrl_hdr on)
  };

  SwitchModel(std::vector<PortConfig> ports, Logic& logic);

  // A data packet arriving at `at_ns` (>= now) on pkt.in_port for
  // pkt.out_port. pkt.id is assigned if 0.
  void arrive(uint64_t at_ns, PacketMeta pkt);
  // A control payload arriving at `at_ns` on `port` (bytes as on the wire,
  // from sl_ctrl_hdr on; may be malformed).
  void arrive_control(uint64_t at_ns, PortId port, std::vector<uint8_t> payload);
  // Runs every event up to and including `until_ns`.
  void run_until(uint64_t until_ns);
  // Runs until no packet is queued or in flight and no arrival is pending
  // (timers alone do not keep it running), at most until `limit_ns`.
  void run_idle(uint64_t limit_ns);

  const std::vector<Departure>& departures() const { return departures_; }
  const std::vector<SentControl>& sent_control() const { return sent_; }
  const PortModel& port_model(PortId p) const { return ports_.at(p); }
  uint64_t dropped_by_logic() const { return logic_drops_; }

  // Substrate
  uint64_t now_ns() const override { return now_; }
  size_t num_ports() const override { return ports_.size(); }
  const PortConfig& port(PortId p) const override { return ports_.at(p).config(); }
  QueueDepth depth(PortId p, QueueId q) const override { return ports_.at(p).depth(q); }
  bool paused(PortId p, QueueId q) const override { return ports_.at(p).paused(q); }
  void set_paused(PortId p, QueueId q, bool paused) override { ports_.at(p).set_paused(q, paused); }
  void send_control(PortId p, const ControlFrame& frame) override;
  void arm_timer(uint64_t at_ns) override { timer_ns_ = at_ns; }

 private:
  struct Event {
    uint64_t at;
    uint64_t order;  // FIFO among equal times: deterministic
    bool control;
    PacketMeta pkt;
    PortId port;
    std::vector<uint8_t> payload;
    bool operator>(const Event& o) const { return at != o.at ? at > o.at : order > o.order; }
  };
  void deliver(Event& e);
  void serve_ports();
  uint64_t next_event_ns() const;

  std::vector<PortModel> ports_;
  std::vector<uint64_t> busy_until_;
  Logic& logic_;
  uint64_t now_ = 0;
  uint64_t next_id_ = 1;
  uint64_t order_ = 0;
  uint64_t logic_drops_ = 0;
  std::optional<uint64_t> timer_ns_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::vector<Departure> departures_;
  std::vector<SentControl> sent_;
};

}  // namespace sluice::sw
