#include "switch/hold_path.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <linux/if_packet.h>
#include <linux/pkt_cls.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "core/bpf_util.h"
#include "core/checksum.h"
#include "core/error.h"
#include "core/event_loop.h"
#include "core/heartbeat.h"
#include "core/log.h"
#include "sluice/bfc.h"
#include "sluice/switch.h"
#include "swhold.skel.h"
#include "swhold_compat.skel.h"
#include "switch/tree.h"

SLUICE_SKELETON_TWIN(swhold, swhold_compat, sluice::liveness_object);

namespace sluice::sw {

namespace {
// The mark of the agent's re-injected frames (sw_hold_egress lets them
// pass): "sluice" in hex speak, as sluice-swbench uses.
constexpr uint32_t kReinjectMark = 0x5e1d;
// tc priority of sw_hold_egress on a held port (the slot swport's classifier
// has in the tree data path, which a held port does not attach).
constexpr uint32_t kHoldTcPrio = 0xA500;
// sw_hold_uq_ingress's slot: after swport's gate (kSwportTcPrio on ingress),
// which passes every data frame on.
constexpr uint32_t kHoldUqTcPrio = 0xA501;
// The watchdog's period in full-size frame times at the link rate.
// 2, as sluice-swbench's default (docs/switch.md: with a 1-frame target
// every missed dequeue event is the last; 4 cost the link 2-4%).
constexpr double kWatchdogPkts = 2;
// Frames per sendmmsg at most.
constexpr size_t kMaxBatch = 16;
// A port's frames go to the agent without a wake-up (arrival_quiet) only if
// the wake-up due then comes within this much: (target - low_water) frame
// times at the port's rate. It bounds how much later the logic sees a frame
// (on_enqueue: BFC's pause threshold, ECN marking) than with a wake-up per
// frame, to less than the agent's own wake-up latency (ring wait p50 60-100
// us on the 2-core machine, docs/switch.md). 1 Gbit/s (4 frames, 48 us) and
// 200 Mbit/s (1 frame, 61 us) qualify; 100 Mbit/s (121 us) and slower ports
// wake the agent for every frame as before: with 1.2 ms (10 Mbit/s) and
// with 121 us, integration_bfc_hold_test's pauses came too late and a
// queue overflowed (169 and 12 frames).
constexpr uint64_t kQuietMaxNs = 64'000;
// How long pump() consumes and sends in rounds before it lets the loop's
// other work run (the rest follows in a posted continuation). Bounded by
// time: under overload at 1 Gbit/s each round finds new frames. (Neither
// this bound nor kConsumeNs removed the ~1 s stalls of the loop's timers
// seen at 1 Gbit/s x 1.2, HEARTBEAT_PAUSED "1062 ms of it its own": their
// cause is not found, docs/switch.md "The held path's cost".)
constexpr uint64_t kMaxDrainNs = 2'000'000;
// How long one consume() takes frames from the ring. libbpf's
// ring_buffer__consume() returns only once it finds the ring empty; under
// overload (a frame's work slower than the arrivals, 1 Gbit/s x 1.2 on this
// machine) that is never, and meanwhile nothing is sent and no timer runs
// (the heartbeat found the loop's 5 ms stamp ~1.1 s late and withdrew).
// on_frame_cb ends the call with kOutOfTime once this has passed (looked at
// every kConsumeCheck frames). Bounded by time, not by a count of frames:
// taking the ring's backlog first keeps it in the held queues, where the
// logic sees it (marks, drops); a count of 64 between sends left it in the
// ring (ring wait 78 ms against 16 ms at 1 Gbit/s x 1.2).
constexpr uint64_t kConsumeNs = 2'000'000;
constexpr unsigned kConsumeCheck = 8;
constexpr int kOutOfTime = -EAGAIN;
// Frame buffers kept for reuse per port at most.
constexpr size_t kMaxSpare = 256;

}  // namespace

struct HoldPath::Obj {
  Skeleton<swhold> skel;
};

struct HoldPath::Timer {
  explicit Timer(boost::asio::io_context& io) : t(io) {}
  boost::asio::steady_timer t;
  uint64_t at_ns = 0;  // armed for (0: not armed)
};

struct HoldPath::Port {
  PortSpec spec;
  std::string name;
  std::unique_ptr<PortTree> root;    // declared before egress: detached first, removed after
  std::vector<TcAttachment> egress;  // sw_hold_egress, and sw_hold_uq_ingress on ingress
  std::unique_ptr<PortModel> model;
  std::vector<uint8_t> paused;     // what the logic set (the model's flag also drops for a release)
  std::vector<int64_t> allowance;  // bytes a release() still lets out of a paused queue
  std::unordered_map<uint64_t, std::vector<uint8_t>> frames;  // PacketMeta::id -> the frame
  int tx_fd = -1;
  sockaddr_ll ll{};
  uint32_t target = 1;
  uint32_t low_water = 0;  // a dequeue leaving at most this many wakes the agent (sl_sw_hold_port)
  HoldWatchdog wd{1};
  sl_sw_hold_state* st = nullptr;
  bool waiting = false;                           // frames to send, the qdisc at its target
  bool quiet = false;                             // arrival_quiet as last stored
  bool quiet_ok = false;                          // the port may be quiet at all (kQuietMaxNs)
  std::vector<std::vector<uint8_t>> batch;        // the frames of one sendmmsg
  std::vector<std::vector<uint8_t>> spare;        // sent frames' buffers, reused (no allocation per frame)
  uint64_t csum_completed = 0;                    // frames whose TCP/UDP checksum the agent completed
  uint64_t uq_tagged = 0, uq_already_tagged = 0;  // write_upstream_q: tags pushed, frames left as they were
  // The largest held_bytes per millisecond (what sluice-qmon reports for a
  // kernel qdisc; the bench's buffer p99).
  PerMsMax held_per_ms;
  uint64_t in = 0, logic_drops = 0, bad_queue = 0, sent = 0, send_errors = 0, flushed = 0, flush_lost = 0;
  uint64_t net_control_sent = 0;                // not IP or IPv6 ND, sent at once (on_frame)
  uint64_t held_bytes = 0, held_max_bytes = 0;  // bytes in the port's queues here, now and the most since start
  uint64_t ce_marked = 0, not_ect_over_k = 0;   // ecn_k_pkts: CE set; over K but Not-ECT (left alone)
  // Time from the divert (sw_hold_egress) to on_frame: the ring is a queue
  // no logic sees (not in depth(), not marked, not tail-dropped).
  uint64_t ring_wait_ns_sum = 0, ring_wait_ns_max = 0;
  ~Port() {
    if (tx_fd >= 0) close(tx_fd);
  }
};

uint32_t HoldPath::backlog_target(uint64_t rate_bps, uint32_t backlog_us) {
  // backlog_us of full-size frames at the rate, at least one. With the
  // default 100 us: at 100 Mbit/s one frame (a pause then waits for at most
  // that one), at 1 Gbit/s 8 (what the agent's wake-up latency needs to
  // keep the link busy; dp_bench's b1 and b8, docs/switch.md "Design B
  // measured").
  return uint32_t(std::max<long>(1, std::lround(double(backlog_us) * 1e-6 * double(rate_bps) / (1514.0 * 8))));
}

// The held bytes changed by `delta` at `now`: closes the milliseconds since
// the last change (each one's maximum; the bytes stayed as they were).
void HoldPath::note_held(Port& p, int64_t delta, uint64_t now) {
  p.held_bytes = uint64_t(std::max<int64_t>(0, int64_t(p.held_bytes) + delta));
  p.held_max_bytes = std::max(p.held_max_bytes, p.held_bytes);
  p.held_per_ms.set(p.held_bytes, now);
}

HoldPath::HoldPath(EventLoop& loop, uint64_t fail_open_ns, AttachMode mode, std::string state_dir, uint32_t backlog_us)
    : loop_(loop),
      mode_(mode),
      state_dir_(std::move(state_dir)),
      backlog_us_(backlog_us),
      obj_(std::make_unique<Obj>()) {
  obj_->skel->rodata->reinject_mark = kReinjectMark;
  obj_->skel->rodata->fail_open_ns = fail_open_ns;
  // A taken frame is "stolen" where the hook has the verdict (clsact): the
  // sender's stack sees it as sent. A drop (all tcx has) makes a local TCP
  // sender resend the segment (docs/switch.md: a host as its own NIC).
  obj_->skel->rodata->divert_verdict = mode == AttachMode::Clsact ? TC_ACT_STOLEN : TC_ACT_SHOT;
  obj_->skel.load();
  timer_ = std::make_unique<Timer>(loop_.io());
  try {
    for (bpf_program* prog : {obj_->skel->progs.sw_hold_enqueue, obj_->skel->progs.sw_hold_dequeue}) {
      bpf_link* l = bpf_program__attach(prog);
      if (!l) throw SysError(std::string("attach ") + bpf_program__name(prog), errno);
      tps_.push_back(l);
    }
    rb_ = ring_buffer__new(bpf_map__fd(obj_->skel->maps.sl_swh_ring_v1), &HoldPath::on_frame_cb, this, nullptr);
    if (!rb_) throw SysError("held-frame ring buffer", errno);
    check(ring_buffer__add(rb_, bpf_map__fd(obj_->skel->maps.sl_swh_wake_v1), &HoldPath::on_wake_cb, this),
          "wake-up ring buffer");
  } catch (...) {
    if (rb_) ring_buffer__free(rb_);
    for (bpf_link* l : tps_) bpf_link__destroy(l);
    throw;
  }
}

HoldPath::~HoldPath() {
  *alive_ = false;
  timer_->t.cancel();
  watch_.reset();
  // Egress first (new frames go straight to the qdisc), then what the
  // agent holds, then the root.
  for (auto& p : ports_) p->egress.clear();
  if (rb_)
    while (consume() > 0) {  // frames diverted before the detach
    }
  for (auto& p : ports_) flush(*p);
  while (!ports_.empty()) ports_.pop_back();
  if (rb_) ring_buffer__free(rb_);
  for (bpf_link* l : tps_) bpf_link__destroy(l);
}

sluice_liveness* HoldPath::liveness() { return &obj_->skel->bss->sw_live; }

std::string HoldPath::object_name() const { return obj_->skel.name(); }

void HoldPath::add_port(const PortSpec& spec) {
  if (spec.id >= SLUICE_SW_MAX_PORTS) throw Error("held port id out of range");
  auto p = std::make_unique<Port>();
  p->spec = spec;
  p->name = spec.cfg.name;
  p->model = std::make_unique<PortModel>(spec.cfg);
  p->paused.assign(spec.cfg.queues.size(), 0);
  p->allowance.assign(spec.cfg.queues.size(), 0);
  p->target = backlog_target(spec.cfg.rate_bps, backlog_us_);
  p->low_water = p->target / 2;
  p->quiet_ok = double(p->target - p->low_water) * 1514.0 * 8e9 / double(spec.cfg.rate_bps) <= double(kQuietMaxNs);
  // The dequeue wake-up comes (target - low_water) frames after a fill:
  // the watchdog waits that much longer, so that it fires for a missed
  // event, not before every wake-up (same 2 frames with a target of 1).
  p->wd =
      HoldWatchdog(uint64_t((kWatchdogPkts + p->target - p->low_water - 1) * 1514.0 * 8e9 / double(spec.cfg.rate_bps)));
  p->st = &obj_->skel->bss->hold[spec.id];
  std::memset(p->st, 0, sizeof(*p->st));
  struct stat ns {};
  if (stat("/proc/self/ns/net", &ns)) throw SysError("stat /proc/self/ns/net", errno);

  p->tx_fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);  // send only (protocol 0)
  if (p->tx_fd < 0) throw SysError("AF_PACKET socket for " + p->name, errno);
  if (setsockopt(p->tx_fd, SOL_SOCKET, SO_MARK, &kReinjectMark, sizeof(kReinjectMark)))
    throw SysError("SO_MARK on " + p->name, errno);
  p->ll.sll_family = AF_PACKET;
  p->ll.sll_ifindex = spec.ifindex;
  p->ll.sll_halen = 6;

  // The port's shaper only: the queues are here.
  TreeSpec ts{p->name, spec.ifindex, spec.cfg.rate_bps, spec.buffer_bytes, spec.cfg.queues, spec.burst_bytes};
  ts.root_only = true;
  p->root = std::make_unique<PortTree>(ts);

  sl_sw_hold_port hp{spec.id, uint32_t(spec.cfg.queues.size()), uint32_t(ns.st_ino), p->low_water};
  uint32_t key = uint32_t(spec.ifindex);
  check(bpf_map_update_elem(bpf_map__fd(obj_->skel->maps.sl_swh_ports_v1), &key, &hp, BPF_ANY), "held port table");
  try {
    p->egress.push_back(TcAttachment::attach(p->name, Hook::Egress, bpf_program__fd(obj_->skel->progs.sw_hold_egress),
                                             "sw_hold_egress", kHoldTcPrio, mode_, state_dir_));
    if (spec.read_upstream_q)
      p->egress.push_back(TcAttachment::attach(p->name, Hook::Ingress,
                                               bpf_program__fd(obj_->skel->progs.sw_hold_uq_ingress),
                                               "sw_hold_uq_ingress", kHoldUqTcPrio, mode_, state_dir_));
  } catch (...) {
    bpf_map_delete_elem(bpf_map__fd(obj_->skel->maps.sl_swh_ports_v1), &key);
    throw;
  }
  std::lock_guard lk(mu_);
  by_ifindex_[spec.ifindex] = spec.id;
  if (ports_.size() <= spec.id) ports_.resize(spec.id + 1);
  ports_[spec.id] = std::move(p);
  SLOG_INFO("SWITCH_HOLD_PORT", "{}: held queues in sluiced, {} queue(s), kernel backlog {} frame(s)",
            ports_[spec.id]->name, spec.cfg.queues.size(), ports_[spec.id]->target);
}

void HoldPath::start(Logic& logic) {
  logic_ = &logic;
  watch_ = loop_.watch_readable(ring_buffer__epoll_fd(rb_), [this] {
    consume();
    pump();
  });
}

int HoldPath::consume() {
  consume_until_ns_ = monotonic_ns() + kConsumeNs;
  consumed_ = 0;
  const int n = ring_buffer__consume(rb_);
  if (n == kOutOfTime) return int(consumed_);  // stopped by the clock: more may wait
  return std::max(n, 0);
}

HoldPath::Port& HoldPath::port(PortId p) const {
  if (p >= ports_.size() || !ports_[p]) throw Error("no held port " + std::to_string(p));
  return *ports_[p];
}

int HoldPath::on_wake_cb(void*, void*, size_t) { return 0; }  // the pump after the consume does the work

int HoldPath::on_frame_cb(void* self, void* data, size_t len) {
  auto* h = static_cast<HoldPath*>(self);
  if (len >= sizeof(sl_sw_hold_event)) h->on_frame(data);
  // A negative return ends ring_buffer__consume() with this frame taken.
  return ++h->consumed_ % kConsumeCheck || monotonic_ns() < h->consume_until_ns_ ? 0 : kOutOfTime;
}

bool HoldPath::network_control(const sl_sw_hold_event& ev) {
  if (!ev.is_ip) return true;
  return ev.family == 6 && ev.tuple.proto == SLUICE_IPPROTO_ICMPV6 && ev.l4_off < ev.len &&
         ev.l4_off < sizeof(ev.frame) && ev.frame[ev.l4_off] >= SLUICE_ND_TYPE_FIRST &&
         ev.frame[ev.l4_off] <= SLUICE_ND_TYPE_LAST;
}

void HoldPath::on_frame(const void* data) {
  const auto& ev = *static_cast<const sl_sw_hold_event*>(data);
  if (ev.port_id >= ports_.size() || !ports_[ev.port_id] || ev.len > sizeof(ev.frame) || !logic_) return;
  std::lock_guard lk(mu_);
  Port& p = *ports_[ev.port_id];
  ++p.in;
  // Not IP (ARP, LLDP, a frame the program could not parse) or IPv6
  // neighbour discovery: the network's own control plane, not data a
  // logic schedules. Held behind a paused queue (flow hash 0: queue 0) it
  // starves the neighbour protocol: a router's ARP probes wait in the
  // paused queue, its entry for the neighbour fails, and it drops the
  // traffic of every queue toward that neighbour without a counter to
  // show. It goes to the port at once, as a switch CPU's own frames would.
  if (network_control(ev)) {
    if (send_now(p, ev.frame, ev.len)) ++p.net_control_sent;
    else ++p.send_errors;
    return;
  }
  PacketMeta m;
  m.id = next_id_++;
  m.wire_bytes = ev.len;
  m.segs = 1;  // frames up to SLUICE_SW_HOLD_FRAME_MAX only
  m.out_port = p.spec.id;
  // A frame that did not come in through a switch port (sent by this host,
  // or from an interface that is no port) has its egress port as in_port.
  auto in = by_ifindex_.find(int(ev.in_ifindex));
  m.in_port = in != by_ifindex_.end() ? in->second : p.spec.id;
  if (ev.is_ip) {
    std::memcpy(m.src.data(), ev.tuple.src, 16);
    std::memcpy(m.dst.data(), ev.tuple.dst, 16);
    m.sport = ntohs(ev.tuple.sport);
    m.dport = ntohs(ev.tuple.dport);
    m.proto = ev.tuple.proto;
    m.tos = ev.tos;
  }
  m.flow_hash = ev.flow_hash;
  if (ev.upstream_q < SLUICE_BFC_MAX_QUEUES) m.upstream_q = ev.upstream_q;
  m.enqueue_ns = monotonic_ns();
  if (m.enqueue_ns > ev.rx_ns) {  // both CLOCK_MONOTONIC
    p.ring_wait_ns_sum += m.enqueue_ns - ev.rx_ns;
    p.ring_wait_ns_max = std::max<uint64_t>(p.ring_wait_ns_max, m.enqueue_ns - ev.rx_ns);
  }
  Verdict v = logic_->on_enqueue(m, m.in_port);
  if (v.kind == Verdict::kDrop) {
    ++p.logic_drops;
    return;
  }
  if (v.queue >= p.model->num_queues()) {
    ++p.bad_queue;  // a logic bug: counted and dropped, never held
    return;
  }
  // DCTCP step marking (§3.1: CE when the queue exceeds K on arrival), by
  // the depth of the queue the frame joins.
  const bool over_k = p.spec.ecn_k_pkts && ev.is_ip && p.model->depth(v.queue).pkts > p.spec.ecn_k_pkts;
  if (!p.model->enqueue(v.queue, m)) {
    logic_->on_drop(m, p.spec.id, v.queue);
    return;
  }
  std::vector<uint8_t> buf;
  if (!p.spare.empty()) {
    buf = std::move(p.spare.back());
    p.spare.pop_back();
  }
  buf.assign(ev.frame, ev.frame + ev.len);
  note_held(p, int64_t(m.wire_bytes), m.enqueue_ns);
  auto& f = p.frames.emplace(m.id, std::move(buf)).first->second;
  if (ev.is_ip && complete_l4_checksum(f.data(), f.size(), ev.l3_off, ev.l4_off, ev.family, ev.tuple.proto))
    ++p.csum_completed;
  if (over_k) {
    const int r = mark_ce(f.data(), f.size(), ev.l3_off, ev.family);
    if (r > 0) ++p.ce_marked;
    else if (r < 0) ++p.not_ect_over_k;
  }
}

HoldRecord HoldPath::record(const Port& p) const {
  HoldRecord r;
  r.events = __atomic_load_n(&p.st->events, __ATOMIC_SEQ_CST);
  r.qlen = __atomic_load_n(&p.st->qlen, __ATOMIC_SEQ_CST);
  r.sent_at_ev = __atomic_load_n(&p.st->sent_at_ev, __ATOMIC_SEQ_CST);
  return r;
}

uint64_t HoldPath::kernel_backlog(const Port& p) const {
  return hold_backlog(record(p), __atomic_load_n(&p.st->agent_sent, __ATOMIC_SEQ_CST));
}

void HoldPath::pump() {
  std::lock_guard lk(mu_);
  pump_ports();
  // Frames a port's egress handed over without a wake-up while the port
  // waited (arrival_quiet) are taken here: after pump_ports() stored the
  // ports' flags, the ring is consumed until it is empty (the other half
  // of submit_frame's handshake in swhold.bpf.c), each batch sent at once.
  if (draining_ || !rb_) return;
  draining_ = true;
  const uint64_t until = monotonic_ns() + kMaxDrainNs;
  for (;;) {
    if (monotonic_ns() > until) {
      // The loop's other work (timers, control frames) gets its turn.
      std::weak_ptr<bool> alive = alive_;
      loop_.post([this, alive] {
        auto a = alive.lock();
        if (a && *a) pump();
      });
      break;
    }
    __atomic_store_n(&obj_->skel->bss->hold_quiet_pending, 0u, __ATOMIC_SEQ_CST);
    if (consume() == 0) break;
    pump_ports();
  }
  draining_ = false;
}

void HoldPath::pump_ports() {
  // A queue resumed while another port was pumped (a credit or RESUME
  // polled between frames, a logic resuming a queue of another port from
  // on_dequeue) is sent now, not at the next wake-up: the ports again,
  // a bounded number of rounds.
  for (int round = 0; round < 4; ++round) {
    resumed_ = false;
    for (auto& p : ports_)
      if (p) pump(*p);
    if (!resumed_) break;
  }
  arm_watchdog();
}

// Keeps the port's qdisc at `target` frames (ARCHITECTURE: a shallow kernel
// backlog shapes at the link rate; the queues live here). The same loop as
// sluice-swbench's design B.
void HoldPath::pump(Port& p) {
  bool waiting = false, quiet = false;
  for (;;) {
    // Up to the target in one sendmmsg (at 1 Gbit/s the target is 8 frames;
    // one syscall per frame was the agent's largest cost).
    const uint64_t in_kernel = kernel_backlog(p);
    p.batch.clear();
    while (in_kernel + p.batch.size() < p.target && p.batch.size() < kMaxBatch) {
      // A PAUSE that arrived since the last frame applies before this one.
      if (poll_control_) poll_control_();
      const uint64_t now = monotonic_ns();
      auto q = p.model->pick(now);
      if (!q) break;
      PacketMeta m = p.model->dequeue(*q, now);
      note_held(p, -int64_t(m.wire_bytes), now);
      if (p.allowance[*q] > 0) {  // a release() of a paused queue
        p.allowance[*q] -= int64_t(m.wire_bytes);
        if (p.allowance[*q] <= 0) {
          p.allowance[*q] = 0;
          p.model->set_paused(*q, true);
        }
      }
      auto it = p.frames.find(m.id);
      if (logic_) logic_->on_dequeue(m, p.spec.id, *q);
      if (it == p.frames.end()) continue;
      if (p.spec.write_upstream_q) push_upstream_q(p, it->second, *q);
      p.batch.push_back(std::move(it->second));
      p.frames.erase(it);
    }
    if (!p.batch.empty()) {
      const size_t n = p.batch.size();
      std::array<mmsghdr, kMaxBatch> msgs{};
      std::array<iovec, kMaxBatch> iov{};
      for (size_t i = 0; i < n; ++i) {
        iov[i] = {p.batch[i].data(), p.batch[i].size()};
        msgs[i].msg_hdr.msg_name = &p.ll;
        msgs[i].msg_hdr.msg_namelen = sizeof(p.ll);
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
      }
      // Counted before the send: a frame can be enqueued and even dequeued
      // inside the call, and that event must see it as sent; what was not
      // sent is taken back.
      uint64_t sent = __atomic_load_n(&p.st->agent_sent, __ATOMIC_RELAXED);
      __atomic_store_n(&p.st->agent_sent, sent + n, __ATOMIC_SEQ_CST);
      int r = sendmmsg(p.tx_fd, msgs.data(), unsigned(n), 0);
      const size_t ok = r > 0 ? size_t(r) : 0;
      if (ok < n) {
        p.send_errors += n - ok;
        __atomic_fetch_sub(&p.st->agent_sent, uint64_t(n - ok), __ATOMIC_SEQ_CST);
      }
      p.sent += ok;
      for (auto& b : p.batch)
        if (p.spare.size() < kMaxSpare) p.spare.push_back(std::move(b));
      p.batch.clear();
      continue;  // the backlog is read again
    }
    waiting = false;
    for (uint16_t q = 0; q < p.model->num_queues() && !waiting; ++q)
      waiting = p.model->depth(q).pkts && !p.model->paused(q);
    if (!waiting) break;
    // Ask the dequeue hook for a wake-up, then re-check: the backlog may
    // have drained between the check and the request.
    __atomic_store_n(&p.st->want_wake, 1u, __ATOMIC_SEQ_CST);
    if (kernel_backlog(p) >= p.target) {
      quiet = p.quiet_ok;  // a dequeue wakes the agent (or the watchdog does)
      break;
    }
    // Below the target and nothing picked: only a shaper holds the
    // waiting queues; the watchdog timer comes back for them.
    if (!p.model->pick(monotonic_ns())) break;
  }
  // Frames in the kernel above the low-water mark: the dequeue that brings
  // the qdisc down to it wakes the agent, and frames arriving meanwhile
  // wait in the ring for that wake-up (they could not leave before those in
  // the kernel anyway) instead of waking the agent each (one wake-up per
  // (target - low_water) frames at full load instead of one per frame or
  // two). Same handshake as above.
  if (p.quiet_ok && !quiet && kernel_backlog(p) > p.low_water) {
    __atomic_store_n(&p.st->want_wake, 1u, __ATOMIC_SEQ_CST);
    quiet = kernel_backlog(p) > p.low_water;
  }
  p.waiting = waiting;
  // While a wake-up is due anyway, this port's frames need not wake the
  // agent (submit_frame in swhold.bpf.c); pump() consumes the ring after
  // this store.
  if (quiet != p.quiet) {
    p.quiet = quiet;
    __atomic_store_n(&p.st->arrival_quiet, quiet ? 1u : 0u, __ATOMIC_SEQ_CST);
  }
  p.wd.due(monotonic_ns(), record(p).events, waiting || quiet);
}

// upstreamQ for the next hop (sluice/bfc.h: one 802.1Q tag, VID base +
// queue, inserted after the MAC addresses). AF_PACKET and veth take a
// tagged frame of MTU + 4 bytes (integration_bfc_hold_test sends 1514 + 4).
void HoldPath::push_upstream_q(Port& p, std::vector<uint8_t>& f, QueueId q) {
  if (f.size() < 14) return;
  const uint16_t type = uint16_t(f[12] << 8 | f[13]);
  if (type == 0x8100 || type == 0x88a8 || type == 0x9100) {
    ++p.uq_already_tagged;  // never double-tagged
    return;
  }
  const uint16_t tci = sl_bfc_queue_tci(q);
  const uint8_t tag[4] = {uint8_t(SLUICE_BFC_TPID >> 8), uint8_t(SLUICE_BFC_TPID & 0xff), uint8_t(tci >> 8),
                          uint8_t(tci)};
  f.insert(f.begin() + 12, tag, tag + 4);
  ++p.uq_tagged;
}

void HoldPath::sync(Port& p) {
  const uint64_t before = kernel_backlog(p);
  sl_sw_hold_sync_ctx c{p.spec.id};
  LIBBPF_OPTS(bpf_test_run_opts, o, .ctx_in = &c, .ctx_size_in = sizeof(c));
  if (bpf_prog_test_run_opts(bpf_program__fd(obj_->skel->progs.sw_hold_sync), &o) == 0)
    p.wd.synced(monotonic_ns(), record(p).events, before, kernel_backlog(p));
}

// The watchdog (and a shaper's next send time) on the loop's timer.
void HoldPath::arm_watchdog() {
  uint64_t at = 0;
  const uint64_t now = monotonic_ns();
  for (auto& p : ports_) {
    if (!p || !(p->waiting || p->quiet)) continue;
    uint64_t d = p->wd.deadline_ns();
    uint64_t s = p->model->next_shaper_ns(now);
    if (s != UINT64_MAX && (!d || s < d)) d = s;
    if (d && (!at || d < at)) at = d;
  }
  if (!at || at == timer_->at_ns) return;
  timer_->at_ns = at;
  timer_->t.expires_at(std::chrono::steady_clock::time_point(std::chrono::nanoseconds(at)));
  std::weak_ptr<bool> alive = alive_;
  timer_->t.async_wait([this, alive](const boost::system::error_code& ec) {
    auto a = alive.lock();
    if (ec || !a || !*a) return;
    std::lock_guard lk(mu_);
    timer_->at_ns = 0;
    const uint64_t t = monotonic_ns();
    for (auto& p : ports_)
      if (p && p->wd.due(t, record(*p).events, p->waiting || p->quiet)) sync(*p);
    pump();
  });
}

// One frame to the port's root qdisc now, counted in agent_sent before the
// send (the qdisc tracepoints may see it inside the call) and taken back if
// the send fails.
bool HoldPath::send_now(Port& p, const uint8_t* frame, size_t len) {
  const uint64_t sent = __atomic_load_n(&p.st->agent_sent, __ATOMIC_RELAXED);
  __atomic_store_n(&p.st->agent_sent, sent + 1, __ATOMIC_SEQ_CST);
  if (sendto(p.tx_fd, frame, len, 0, reinterpret_cast<sockaddr*>(&p.ll), sizeof(p.ll)) < 0) {
    __atomic_store_n(&p.st->agent_sent, sent, __ATOMIC_SEQ_CST);
    return false;
  }
  return true;
}

// Stop: every held frame to the port, paused or not (the logic is going
// away), as fast as the root qdisc's limit lets it drain; then the root is
// removed once its backlog has left. Each phase gives up after kFlushStallNs
// without progress (a frame sent, the root's backlog shrinking), the whole
// stop after kFlushMaxNs: a slow machine (a loaded host, an emulated CPU)
// gets the time it needs, a stuck port does not hold the exit for good.
// Frames not sent, and frames still in the root when it goes, are counted
// lost and logged.
void HoldPath::flush(Port& p) {
  constexpr uint64_t kFlushStallNs = 1'000'000'000ull, kFlushMaxNs = 10'000'000'000ull;
  const uint64_t deadline = monotonic_ns() + kFlushMaxNs;
  uint64_t progress_at = monotonic_ns();
  auto stalled = [&] {
    const uint64_t now = monotonic_ns();
    return now > deadline || now - progress_at > kFlushStallNs;
  };
  const uint64_t room = std::max<uint64_t>(1, p.spec.buffer_bytes / 1514 / 2);
  for (uint16_t q = 0; q < p.model->num_queues(); ++q) p.model->set_paused(q, false);
  uint64_t idle_polls = 0;
  for (;;) {
    auto q = p.model->pick(monotonic_ns());
    if (!q) {
      // Shaper-held queues: let them go too.
      bool any = false;
      for (uint16_t i = 0; i < p.model->num_queues(); ++i) any |= p.model->depth(i).pkts > 0;
      if (!any || stalled()) break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      continue;
    }
    if (kernel_backlog(p) >= room) {
      if (stalled()) break;
      if (++idle_polls % 8 == 0) sync(p);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      continue;
    }
    PacketMeta m = p.model->dequeue(*q, monotonic_ns());
    auto it = p.frames.find(m.id);
    if (it == p.frames.end()) continue;
    if (p.spec.write_upstream_q) push_upstream_q(p, it->second, *q);
    if (send_now(p, it->second.data(), it->second.size())) {
      ++p.flushed;
      progress_at = monotonic_ns();
    }
    p.frames.erase(it);
  }
  p.flush_lost = p.frames.size();
  // Let the root's backlog leave before the root (and with it what it
  // holds) is deleted.
  progress_at = monotonic_ns();
  uint64_t left = UINT64_MAX;
  for (;;) {
    sync(p);
    const uint64_t qlen = record(p).qlen;
    if (qlen == 0) {
      left = 0;
      break;
    }
    if (qlen < left) progress_at = monotonic_ns();
    left = qlen;
    if (stalled()) break;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  p.flush_lost += left;
  if (p.flushed || p.flush_lost)
    SLOG_INFO("SWITCH_HOLD_FLUSHED",
              "{}: {} held frame(s) sent to the port on stop, {} lost ({} still in the root qdisc)", p.name, p.flushed,
              p.flush_lost, left);
}

QueueDepth HoldPath::depth(PortId p, QueueId q) const {
  std::lock_guard lk(mu_);
  Port& P = port(p);
  return q < P.model->num_queues() ? P.model->depth(q) : QueueDepth{};
}

bool HoldPath::paused(PortId p, QueueId q) const {
  std::lock_guard lk(mu_);
  Port& P = port(p);
  return q < P.paused.size() && P.paused[q];
}

void HoldPath::set_paused(PortId p, QueueId q, bool paused) {
  std::lock_guard lk(mu_);
  Port& P = port(p);
  if (q >= P.paused.size()) return;
  if (!paused && P.model->paused(q)) resumed_ = true;
  P.paused[q] = paused;
  P.allowance[q] = 0;
  P.model->set_paused(q, paused);
  // A resume is sent by the caller's pump() (never from inside a logic's
  // callback: calls into the logic are not re-entrant).
}

bool HoldPath::release(PortId p, QueueId q, uint64_t bytes) {
  std::lock_guard lk(mu_);
  Port& P = port(p);
  if (q >= P.paused.size()) return false;
  // At least one frame leaves: the model lets the head go while the
  // allowance is positive, then pauses the queue again (pump()).
  P.paused[q] = 1;
  P.allowance[q] = std::max<int64_t>(1, int64_t(std::min<uint64_t>(bytes, INT64_MAX)));
  P.model->set_paused(q, false);
  resumed_ = true;
  return true;
}

uint64_t HoldPath::dropped(PortId p, QueueId q) const {
  std::lock_guard lk(mu_);
  Port& P = port(p);
  return q < P.model->num_queues() ? P.model->stats(q).dropped : 0;
}

nlohmann::json HoldPath::port_json(PortId id) const {
  std::lock_guard lk(mu_);
  const Port& p = port(id);
  nlohmann::json qs = nlohmann::json::array();
  for (uint16_t q = 0; q < p.model->num_queues(); ++q) {
    const auto& s = p.model->stats(q);
    const auto d = p.model->depth(q);
    qs.push_back({{"queue", q},
                  {"depth_bytes", d.bytes},
                  {"depth_pkts", d.pkts},
                  {"pkts_in", s.pkts_in + s.dropped},
                  {"pkts_out", s.pkts_out},
                  {"bytes_out", s.bytes_out},
                  {"dropped", s.dropped},
                  {"paused", bool(p.paused[q])}});
  }
  const sl_sw_hold_state& st = *p.st;
  // p99 and max of the per-millisecond maxima of the held bytes (the last
  // 10 minutes).
  const PerMsMax::Summary held = p.held_per_ms.summary();
  return {{"queues", qs},
          {"held", {{"ms_intervals", held.intervals}, {"ms_max_p99_bytes", held.p99}, {"ms_max_bytes", held.max}}},
          {"hold",
           {{"backlog_target", p.target},
            {"kernel_backlog", kernel_backlog(p)},
            {"frames_in", p.in},
            {"logic_drops", p.logic_drops},
            {"bad_queue", p.bad_queue},
            {"sent", p.sent},
            {"send_errors", p.send_errors},
            {"net_control_sent", p.net_control_sent},
            {"csum_completed", p.csum_completed},
            {"held_bytes", p.held_bytes},
            {"held_max_bytes", p.held_max_bytes},
            {"uq_tagged", p.uq_tagged},
            {"uq_already_tagged", p.uq_already_tagged},
            {"uq_popped", st.uq_popped},
            {"uq_foreign", st.uq_foreign},
            {"uq_bad", st.uq_bad},
            {"uq_failed", st.uq_failed},
            {"ecn_threshold_packets", p.spec.ecn_k_pkts},
            {"ce_marked", p.ce_marked},
            {"ring_wait_us_mean", p.in ? double(p.ring_wait_ns_sum) / 1e3 / double(p.in) : 0.0},
            {"ring_wait_us_max", double(p.ring_wait_ns_max) / 1e3},
            {"not_ect_over_k", p.not_ect_over_k},
            {"diverted", st.diverted},
            {"fail_open_pkts", st.fail_open},
            {"passed_big", st.passed_big},
            {"ring_full", st.ring_full},
            {"wakeups", st.wakeups},
            {"quiet_frames", st.quiet},
            {"late_wakes", st.late_wakes},
            {"qdisc_events", st.events},
            {"qdisc_sent", st.q_sent},
            {"qdisc_drops", st.q_drops},
            {"watchdog_us", double(p.wd.period_ns()) / 1000.0},
            {"watchdog_fired", p.wd.fired()},
            {"watchdog_fixed", p.wd.fixed()}}}};
}

}  // namespace sluice::sw
