// A network of port-model switches (agent/switch/port_model.h) for
// model-level tests of switch logics: switches and hosts joined by links
// with a propagation delay, data packets routed by destination, control
// frames carried one hop, hosts that send per-destination queues at their
// link rate and obey dstPause/dstResume. Deterministic: simulated time
// advances in steps of the link delay (every arrival is then in a switch's
// future, as SwitchModel requires).
#pragma once

#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "switch/logic.h"
#include "switch/port_model.h"

namespace sluice::fabric {

using namespace sluice::sw;

class Fabric {
 public:
  struct End {
    bool host = false;
    size_t node = 0;  // switch or host index
    PortId port = 0;  // the switch port (for a host: its ToR's port)
  };
  struct Host {
    std::string name;
    Addr addr{};
    uint64_t rate_bps = 0;
    size_t sw = 0;
    PortId port = 0;
    uint64_t next_free_ns = 0;
    std::map<Addr, std::deque<PacketMeta>> queues;  // per destination (§4.3 host queues)
    Addr last_served{};
    std::set<Addr> paused;
    std::map<Addr, uint32_t> pause_seq;
    std::deque<std::pair<uint64_t, std::vector<uint8_t>>> ctrl_in;  // (arrival, payload)
    uint64_t rx_bytes = 0;
    uint64_t last_rx_ns = 0;
    uint64_t pauses = 0, resumes = 0;
  };
  struct Switch {
    std::string name;
    std::unique_ptr<Logic> logic;
    std::unique_ptr<SwitchModel> model;
    std::vector<End> peer;  // per port
    std::map<Addr, PortId> route;
    size_t dep_seen = 0, ctl_seen = 0;
    std::vector<uint64_t> max_port_bytes;  // sampled each step, all queues
  };

  explicit Fabric(uint64_t delay_ns) : delay_(delay_ns) {}

  size_t add_switch(std::string name, std::vector<PortConfig> ports, std::unique_ptr<Logic> logic) {
    Switch s;
    s.name = std::move(name);
    s.logic = std::move(logic);
    s.peer.resize(ports.size());
    s.max_port_bytes.assign(ports.size(), 0);
    s.model = std::make_unique<SwitchModel>(std::move(ports), *s.logic);
    sws_.push_back(std::move(s));
    return sws_.size() - 1;
  }
  size_t add_host(std::string name, const std::string& addr, uint64_t rate, size_t sw, PortId port) {
    Host h;
    h.name = std::move(name);
    h.addr = addr_parse(addr);
    h.rate_bps = rate;
    h.sw = sw;
    h.port = port;
    hosts_.push_back(std::move(h));
    sws_[sw].peer[port] = End{true, hosts_.size() - 1, port};
    return hosts_.size() - 1;
  }
  void link(size_t a, PortId pa, size_t b, PortId pb) {
    sws_[a].peer[pa] = End{false, b, pb};
    sws_[b].peer[pb] = End{false, a, pa};
  }
  void route(size_t sw, size_t host, PortId port) { sws_[sw].route[hosts_[host].addr] = port; }

  // `bytes` from host `src` to host `dst`, in MTU frames, sent from
  // `start_ns` on at the host's link rate (after what it already has
  // queued for dst; destinations share the link round robin).
  void send(size_t src, size_t dst, uint64_t bytes, uint64_t start_ns = 0, uint32_t mtu = 1514) {
    Host& h = hosts_[src];
    for (uint64_t b = 0; b < bytes; b += mtu) {
      PacketMeta p;
      p.id = next_id_++;
      p.wire_bytes = uint32_t(std::min<uint64_t>(mtu, bytes - b));
      p.src = h.addr;
      p.dst = hosts_[dst].addr;
      p.proto = 6;
      p.enqueue_ns = start_ns;  // not before (the switch sets its own on enqueue)
      h.queues[p.dst].push_back(p);
    }
  }

  // Drops control frames leaving switch `sw` by `port` while `pred` says so.
  std::function<bool(size_t sw, PortId port, const std::vector<uint8_t>&)> drop_ctrl;

  void run_until(uint64_t until) {
    while (now_ < until) step();
  }
  // Runs until every host queue is empty and every sent byte arrived, or no
  // byte moved anywhere for `stall_ns`, or `limit_ns`. True when all arrived.
  bool run_to_completion(uint64_t limit_ns, uint64_t stall_ns) {
    uint64_t last_progress = now_, last_moved = moved_;
    while (now_ < limit_ns) {
      step();
      if (moved_ != last_moved) last_moved = moved_, last_progress = now_;
      if (all_delivered()) return true;
      if (now_ - last_progress >= stall_ns) return false;
    }
    return all_delivered();
  }
  bool all_delivered() const {
    for (const auto& h : hosts_)
      for (const auto& [d, q] : h.queues)
        if (!q.empty()) return false;
    return inflight_.empty();
  }

  uint64_t now() const { return now_; }
  Host& host(size_t i) { return hosts_[i]; }
  Switch& sw(size_t i) { return sws_[i]; }
  size_t packets_in_network() const { return inflight_.size(); }
  uint64_t ctrl_bytes() const { return ctrl_bytes_; }
  // Data bytes over all links (a packet counts once per link it crossed).
  uint64_t data_bytes() const { return data_bytes_; }
  uint64_t ctrl_dropped() const { return ctrl_dropped_; }

 private:
  void step() {
    const uint64_t t = now_ + delay_;  // step = delay: arrivals land in the future
    for (auto& h : hosts_) emit(h, t);
    for (auto& s : sws_) s.model->run_until(t);
    now_ = t;
    for (size_t i = 0; i < sws_.size(); ++i) collect(i);
    for (auto& s : sws_)
      for (PortId p = 0; p < s.model->num_ports(); ++p) {
        uint64_t b = 0;
        for (QueueId q = 0; q < s.model->port(p).queues.size(); ++q) b += s.model->depth(p, q).bytes;
        s.max_port_bytes[p] = std::max(s.max_port_bytes[p], b);
      }
  }

  // Host transmitter: round robin over destinations that are not paused.
  void emit(Host& h, uint64_t t) {
    for (;;) {
      uint64_t at = std::max(h.next_free_ns, now_);
      while (!h.ctrl_in.empty() && h.ctrl_in.front().first <= at) {
        apply_ctrl(h, h.ctrl_in.front().second);
        h.ctrl_in.pop_front();
      }
      if (at >= t) return;
      std::deque<PacketMeta>* q = nullptr;
      uint64_t wake = t;  // the next flow start or control frame
      auto it = h.queues.upper_bound(h.last_served);
      for (size_t n = 0; n < h.queues.size() && !q; ++n, ++it) {
        if (it == h.queues.end()) it = h.queues.begin();
        if (it->second.empty() || h.paused.count(it->first)) continue;
        if (it->second.front().enqueue_ns > at) {
          wake = std::min(wake, it->second.front().enqueue_ns);
          continue;
        }
        q = &it->second, h.last_served = it->first;
      }
      if (!q) {
        if (!h.ctrl_in.empty()) wake = std::min(wake, h.ctrl_in.front().first);
        if (wake >= t) return;
        h.next_free_ns = wake;
        continue;
      }
      PacketMeta p = q->front();
      q->pop_front();
      p.enqueue_ns = 0;
      uint64_t end = at + tx_time_ns(p.wire_bytes, h.rate_bps);
      h.next_free_ns = end;
      p.in_port = h.port;
      Switch& s = sws_[h.sw];
      p.out_port = s.route.at(p.dst);
      inflight_[p.id] = p;
      data_bytes_ += p.wire_bytes;
      s.model->arrive(end + delay_, p);
    }
  }

  void apply_ctrl(Host& h, const std::vector<uint8_t>& payload) {
    ControlFrame f;
    if (accept_control(SL_PORT_HOST_UPLINK, payload.data(), payload.size(), &f) != SL_CTRL_R_OK) return;
    for (const auto& r : f.dsts) {
      auto& last = h.pause_seq[r.dst];
      if (last && int32_t(r.seq - last) <= 0) continue;  // older than what we applied
      last = r.seq;
      if (f.type == CtrlType::kDstPause) h.paused.insert(r.dst), ++h.pauses;
      else h.paused.erase(r.dst), ++h.resumes;
    }
  }

  void collect(size_t i) {
    Switch& s = sws_[i];
    const auto& deps = s.model->departures();
    for (; s.dep_seen < deps.size(); ++s.dep_seen) {
      const auto& d = deps[s.dep_seen];
      auto it = inflight_.find(d.id);
      if (it == inflight_.end()) continue;
      ++moved_;
      data_bytes_ += d.wire_bytes;
      const End& e = s.peer.at(d.port);
      const uint64_t at = d.end_ns + delay_;
      if (e.host) {
        Host& h = hosts_[e.node];
        EXPECT_EQ(h.addr, it->second.dst) << s.name << " delivered to the wrong host";
        h.rx_bytes += it->second.wire_bytes;
        h.last_rx_ns = std::max(h.last_rx_ns, at);
        inflight_.erase(it);
        continue;
      }
      Switch& n = sws_[e.node];
      PacketMeta p = it->second;
      p.in_port = e.port;
      p.out_port = n.route.at(p.dst);
      it->second = p;
      n.model->arrive(at, p);
    }
    const auto& ctl = s.model->sent_control();
    for (; s.ctl_seen < ctl.size(); ++s.ctl_seen) {
      const auto& c = ctl[s.ctl_seen];
      ctrl_bytes_ += std::max<size_t>(60, 14 + c.payload.size());
      if (drop_ctrl && drop_ctrl(i, c.port, c.payload)) {
        ++ctrl_dropped_;
        continue;
      }
      const End& e = s.peer.at(c.port);
      if (e.host) hosts_[e.node].ctrl_in.push_back({c.at_ns + delay_, c.payload});
      else sws_[e.node].model->arrive_control(c.at_ns + delay_, e.port, c.payload);
    }
  }

  uint64_t delay_;
  uint64_t now_ = 0;
  uint64_t next_id_ = 1;
  uint64_t moved_ = 0;
  uint64_t ctrl_bytes_ = 0, data_bytes_ = 0, ctrl_dropped_ = 0;
  std::vector<Switch> sws_;
  std::vector<Host> hosts_;
  std::map<uint64_t, PacketMeta> inflight_;
};

}  // namespace sluice::fabric
