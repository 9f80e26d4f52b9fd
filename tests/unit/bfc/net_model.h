// A small network of port-model switches (agent/switch/port_model.h) joined
// by links with a propagation delay: data leaves a port when its last bit
// is sent and reaches the peer port `delay` later (store and forward);
// control frames a logic sends on a port reach the peer after the same
// delay. Senders are nodes too (a host NIC is a one-egress-port switch
// whose queues obey pause, as BFC's NIC does), so one Logic class runs at
// every hop. Deterministic: the nodes advance in lock step of `step_ns`,
// which must not exceed the shortest link delay.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "switch/logic.h"
#include "switch/port_model.h"

namespace sluice::sw::testnet {

class Net {
 public:
  struct Hop {
    int node;
    PortId out_port;
  };
  struct Delivery {
    int flow;
    uint64_t id;
    uint64_t at_ns;
    uint32_t bytes;
  };

  int add_node(std::vector<PortConfig> ports, std::unique_ptr<Logic> logic) {
    auto n = std::make_unique<Node>();
    n->logic = std::move(logic);
    n->sw = std::make_unique<SwitchModel>(std::move(ports), *n->logic);
    nodes_.push_back(std::move(n));
    return int(nodes_.size() - 1);
  }
  // A bidirectional link between port pa of node a and port pb of node b.
  void link(int a, PortId pa, int b, PortId pb, uint64_t delay_ns) {
    if (delay_ns < min_delay_) min_delay_ = delay_ns;
    links_[{a, pa}] = {b, pb, delay_ns};
    links_[{b, pb}] = {a, pa, delay_ns};
  }
  // A flow enters route[0].node on port `in_port` (the host's application
  // side) and follows the route; the last hop's port leads to its receiver.
  int add_flow(std::vector<Hop> route, PortId in_port, uint32_t flow_hash) {
    flows_.push_back({std::move(route), in_port, flow_hash});
    delivered_.push_back(0);
    return int(flows_.size() - 1);
  }
  // n packets of `bytes` handed to the flow's sender at `at_ns`.
  void send(int flow, uint64_t at_ns, int n, uint32_t bytes) {
    const Flow& f = flows_.at(flow);
    for (int i = 0; i < n; ++i) {
      PacketMeta p;
      p.id = next_id_++;
      p.wire_bytes = bytes;
      p.flow_hash = f.hash;
      p.in_port = f.in_port;
      p.out_port = f.route[0].out_port;
      p.upstream_q = kNoQueue;  // from the application: no upstream queue
      where_[p.id] = {flow, 0, p};
      node(f.route[0].node).arrive(std::max(at_ns, node(f.route[0].node).now_ns()), p);
    }
  }

  void run_until(uint64_t until_ns, uint64_t step_ns) {
    if (step_ns > min_delay_) throw std::invalid_argument("step longer than a link delay");
    while (now_ < until_ns) {
      now_ = std::min(until_ns, now_ + step_ns);
      for (auto& n : nodes_) n->sw->run_until(now_);
      for (int i = 0; i < int(nodes_.size()); ++i) harvest(i);
      if (sampler_) sampler_(now_);
    }
  }
  void on_step(std::function<void(uint64_t)> f) { sampler_ = std::move(f); }

  SwitchModel& node(int i) { return *nodes_.at(i)->sw; }
  Logic& logic(int i) { return *nodes_.at(i)->logic; }
  const std::vector<Delivery>& deliveries() const { return deliveries_; }
  uint64_t delivered_bytes(int flow) const { return delivered_.at(flow); }
  uint64_t now() const { return now_; }

 private:
  struct Node {
    std::unique_ptr<Logic> logic;
    std::unique_ptr<SwitchModel> sw;
    size_t dep_seen = 0, ctl_seen = 0;
  };
  struct Peer {
    int node;
    PortId port;
    uint64_t delay;
  };
  struct Flow {
    std::vector<Hop> route;
    PortId in_port;
    uint32_t hash;
  };
  struct Where {
    int flow;
    size_t hop;
    PacketMeta meta;
  };

  void harvest(int i) {
    Node& n = *nodes_[i];
    const auto& deps = n.sw->departures();
    for (; n.dep_seen < deps.size(); ++n.dep_seen) {
      const auto& d = deps[n.dep_seen];
      auto it = where_.find(d.id);
      if (it == where_.end()) throw std::logic_error("departure of an unknown packet");
      Where& w = it->second;
      const Flow& f = flows_[w.flow];
      if (w.hop + 1 == f.route.size()) {  // left the last hop: at the receiver
        deliveries_.push_back({w.flow, d.id, d.end_ns, d.wire_bytes});
        delivered_[w.flow] += d.wire_bytes;
        where_.erase(it);
        continue;
      }
      auto l = links_.find({i, d.port});
      if (l == links_.end()) throw std::logic_error("route leaves a port without a link");
      const Peer& peer = l->second;
      w.hop += 1;
      if (f.route[w.hop].node != peer.node) throw std::logic_error("route does not follow the links");
      PacketMeta p = w.meta;
      p.in_port = peer.port;
      p.out_port = f.route[w.hop].out_port;
      p.upstream_q = d.queue;  // BFC §3.3.2: the sender writes the queue it sent from
      p.enqueue_ns = 0;
      w.meta = p;
      SwitchModel& dst = node(peer.node);
      dst.arrive(std::max(d.end_ns + peer.delay, dst.now_ns()), p);
    }
    const auto& ctl = n.sw->sent_control();
    for (; n.ctl_seen < ctl.size(); ++n.ctl_seen) {
      const auto& c = ctl[n.ctl_seen];
      auto l = links_.find({i, c.port});
      if (l == links_.end()) continue;  // toward a receiver host: not modelled
      const Peer& peer = l->second;
      if (drop_control_ && drop_control_(i, c)) continue;
      SwitchModel& dst = node(peer.node);
      dst.arrive_control(std::max(c.at_ns + peer.delay, dst.now_ns()), peer.port, c.payload);
    }
  }

 public:
  // Drops control frames for which f returns true (lost-frame tests).
  void drop_control_if(std::function<bool(int, const SwitchModel::SentControl&)> f) { drop_control_ = std::move(f); }

 private:
  std::vector<std::unique_ptr<Node>> nodes_;
  std::map<std::pair<int, PortId>, Peer> links_;
  std::vector<Flow> flows_;
  std::map<uint64_t, Where> where_;
  std::vector<Delivery> deliveries_;
  std::vector<uint64_t> delivered_;
  std::function<void(uint64_t)> sampler_;
  std::function<bool(int, const SwitchModel::SentControl&)> drop_control_;
  uint64_t min_delay_ = UINT64_MAX;
  uint64_t now_ = 0;
  uint64_t next_id_ = 1;
};

}  // namespace sluice::sw::testnet
