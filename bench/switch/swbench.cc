// sluice-swbench: the switch data-path benchmark's processes (driven by
// bench/switch/dp_bench.py, which builds the namespaces and the qdiscs).
//
//   sluice-swbench gen    --src IP --dst IP --flows N --rate-bps R --secs S
//       UDP flows (sport 4000+i -> dport 5000+i), paced to R wire bit/s in
//       total, each payload stamped with CLOCK_MONOTONIC ns (latency).
//       --spread-queues Q: source ports chosen so flow i hashes to queue
//       i % Q (for sluiced's pfc logic, which places flows by hash).
//   sluice-swbench switch --dev IF --design a|b --queues N --rate-bps R
//                         --src IP --dst IP --flows N
//       Design A: swport on IF (control-frame gate at ingress, queue
//       classifier at egress into an HTB tree 10: whose leaf 10:(q+1) holds a
//       TBF 1(q+1): at the link rate); a PAUSE frame for queue q changes that
//       TBF to a near-zero rate over netlink, RESUME restores it (a TBF
//       change refills its bucket, so the queue restarts at once; an HTB
//       class slowed to a stop does not, see docs/switch.md).
//   sluice-swbench sink   --dev IF --flows N --secs S [--pause-samples K]
//       swprobe on IF's ingress: throughput, one-way latency histogram, and
//       the pause experiment: send PAUSE(q) on IF, wait, read when q's last
//       packet arrived, send RESUME(q), check q flows again. JSON on stdout.
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netlink/route/qdisc.h>
#include <netlink/route/qdisc/tbf.h>
#include <netlink/route/tc.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/bpf_util.h"
#include "core/config.h"
#include "core/tc.h"
#include "sluice/switch.h"
#include "sluice/swprobe.h"
#include "switch/control.h"
#include "sluice/liveness.h"
#include "swport.skel.h"
#include "swport_compat.skel.h"
#include "core/heartbeat.h"
#include "swprobe.skel.h"
#include "swhold.skel.h"
#include "swhold_compat.skel.h"
#include "switch/hold_backlog.h"
#include "switch/port_model.h"

SLUICE_SKELETON_TWIN(swport, swport_compat, sluice::liveness_object);
SLUICE_SKELETON(swprobe);
SLUICE_SKELETON_TWIN(swhold, swhold_compat, sluice::liveness_object);

using namespace sluice;
using json = nlohmann::json;

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + ts.tv_nsec;
}

void sleep_until(uint64_t t) {
  timespec ts{time_t(t / 1'000'000'000ull), long(t % 1'000'000'000ull)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR && !g_stop) {
  }
}

constexpr uint16_t kSportBase = 4000, kDportBase = 5000;

// ---- gen ----
// Flow i's source port: 4000 + i, or with spread_queues = Q a port whose
// flow hash lands in queue i % Q of a switch that spreads unknown flows by
// hash % Q (sluiced's pfc logic), so that Q flows use Q distinct queues.
uint16_t gen_sport(const std::string& src, const std::string& dst, int i, int spread_queues, uint32_t& cursor) {
  if (spread_queues <= 0) return uint16_t(kSportBase + i);
  // Ports from 10000 up, each flow the first unused one that fits (about
  // Q tries per flow).
  for (; cursor < 65000; ++cursor) {
    auto sport = uint16_t(cursor);
    if (sw::flow_hash(src, dst, sport, uint16_t(kDportBase + i), IPPROTO_UDP) % uint32_t(spread_queues) ==
        uint32_t(i % spread_queues)) {
      ++cursor;
      return sport;
    }
  }
  throw Error("no source port puts flow " + std::to_string(i) + " in queue " + std::to_string(i % spread_queues));
}

int run_gen(const std::string& src, const std::string& dst, int flows, uint64_t rate_bps, double secs, int payload,
            int spread_queues) {
  std::vector<int> fds;
  uint32_t cursor = 10000;
  for (int i = 0; i < flows; ++i) {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(gen_sport(src, dst, i, spread_queues, cursor));
    inet_pton(AF_INET, src.c_str(), &a.sin_addr);
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a))) throw SysError("bind", errno);
    a.sin_port = htons(kDportBase + i);
    inet_pton(AF_INET, dst.c_str(), &a.sin_addr);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a))) throw SysError("connect", errno);
    int sndbuf = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    fds.push_back(fd);
  }
  const uint64_t wire = uint64_t(payload) + 8 + 20 + 14;
  const double gap_ns = double(wire) * 8e9 / double(rate_bps);
  std::vector<uint8_t> buf(payload, 0x5a);
  const uint64_t start = mono_ns(), end = start + uint64_t(secs * 1e9);
  uint64_t sent = 0, errors = 0;
  double next = double(start);
  int f = 0;
  while (!g_stop) {
    uint64_t now = mono_ns();
    if (now >= end) break;
    // Send everything due; sleep when ahead by more than 50 us (batches keep
    // the generator's own cost low at 1 Gbit/s).
    if (double(now) < next) {
      if (next - double(now) > 50'000) sleep_until(uint64_t(next) - 20'000);
      continue;
    }
    uint64_t ts = mono_ns();
    std::memcpy(buf.data(), &ts, 8);
    if (send(fds[f], buf.data(), buf.size(), MSG_DONTWAIT) < 0) ++errors;
    else ++sent;
    f = (f + 1) % flows;
    next += gap_ns;
  }
  for (int fd : fds) close(fd);
  json j{{"sent", sent}, {"send_errors", errors}, {"secs", double(mono_ns() - start) / 1e9}};
  std::cout << j.dump() << std::endl;
  return 0;
}

// ---- switch (design A) ----
class TbfPauser {
 public:
  TbfPauser(int ifindex, uint64_t rate_bps, uint32_t limit) : ifindex_(ifindex), rate_(rate_bps), limit_(limit) {
    sk_ = nl_socket_alloc();
    if (!sk_ || nl_connect(sk_, NETLINK_ROUTE)) throw Error("netlink connect");
  }
  ~TbfPauser() { nl_socket_free(sk_); }
  // A near-zero rate holds the queue; 1600-byte bucket so queued full-size
  // frames stay admissible (a bucket below the frame size drops them).
  int set(uint16_t queue, bool paused) {
    rtnl_qdisc* q = rtnl_qdisc_alloc();
    rtnl_tc_set_ifindex(TC_CAST(q), ifindex_);
    rtnl_tc_set_parent(TC_CAST(q), TC_HANDLE(0x10, queue + 1));
    rtnl_tc_set_handle(TC_CAST(q), TC_HANDLE(0x100 + queue + 1, 0));
    rtnl_tc_set_kind(TC_CAST(q), "tbf");
    rtnl_qdisc_tbf_set_limit(q, int(limit_));
    rtnl_qdisc_tbf_set_rate(q, paused ? 1000 : int(rate_ / 8), bucket(), 0);
    int rc = rtnl_qdisc_add(sk_, q, 0);
    rtnl_qdisc_put(q);
    return rc;
  }
  int bucket() const { return int(std::max<uint64_t>(3200, rate_ / 8 / 10000)); }  // 100 us, >= 2 frames

 private:
  nl_sock* sk_ = nullptr;
  int ifindex_;
  uint64_t rate_;
  uint32_t limit_;
};

struct SwitchCtx {
  TbfPauser* pauser;
  std::vector<uint64_t> apply_ns;  // ring rx -> netlink change acked
  uint64_t frames = 0, failed = 0;
};

int on_ctrl(void* ctx, void* data, size_t) {
  auto* c = static_cast<SwitchCtx*>(ctx);
  auto* ev = static_cast<sl_sw_ctrl_event*>(data);
  sw::ControlFrame f;
  // Re-validated with the same parser the classifier ran.
  if (sw::accept_control(SL_PORT_SWITCH_FACING, ev->frame + ev->payload_off, ev->len - ev->payload_off, &f) !=
      SL_CTRL_R_OK)
    return 0;
  ++c->frames;
  if (f.type == sw::CtrlType::kPause || f.type == sw::CtrlType::kResume)
    for (const auto& r : f.queues)
      if (c->pauser->set(r.queue, f.type == sw::CtrlType::kPause) < 0) ++c->failed;
  c->apply_ns.push_back(mono_ns() - ev->rx_ns);
  return 0;
}

int run_switch(const std::string& dev, int queues, uint64_t rate_bps, const std::string& src, const std::string& dst,
               int flows, uint32_t limit) {
  int ifindex = int(if_nametoindex(dev.c_str()));
  if (!ifindex) throw Error("no interface " + dev);
  Skeleton<swport> skel;
  skel.load();
  auto mode = AttachMode::Clsact;
  std::vector<TcAttachment> att;
  att.push_back(TcAttachment::attach(dev, Hook::Ingress, bpf_program__fd(skel->progs.sw_ingress), "sw_ingress", 0xA300,
                                     mode, "/run/sluice-swbench"));
  att.push_back(TcAttachment::attach(dev, Hook::Egress, bpf_program__fd(skel->progs.sw_egress), "sw_egress", 0xA300,
                                     mode, "/run/sluice-swbench"));
  sl_sw_port p{0, SL_PORT_SWITCH_FACING, uint32_t(queues), 0x10, 0, 0};
  uint32_t key = uint32_t(ifindex);
  check(bpf_map_update_elem(bpf_map__fd(skel->maps.sl_sw_ports_v1), &key, &p, BPF_ANY), "sl_sw_ports_v1");
  // The logic of this benchmark: flow i on queue i % queues.
  for (int i = 0; i < flows; ++i) {
    sl_sw_flow_key k{0, sw::flow_hash(src, dst, uint16_t(kSportBase + i), uint16_t(kDportBase + i), IPPROTO_UDP)};
    uint32_t q = uint32_t(i % queues);
    check(bpf_map_update_elem(bpf_map__fd(skel->maps.sl_sw_flowq_v1), &k, &q, BPF_ANY), "sl_sw_flowq_v1");
  }
  TbfPauser pauser(ifindex, rate_bps, limit);
  SwitchCtx ctx{&pauser, {}, 0, 0};
  ring_buffer* rb = ring_buffer__new(bpf_map__fd(skel->maps.sl_sw_ctrl_v1), on_ctrl, &ctx, nullptr);
  if (!rb) throw SysError("ring_buffer__new", errno);
  std::cerr << "swbench switch: ready on " << dev << " (" << queues << " queues)" << std::endl;
  while (!g_stop) ring_buffer__poll(rb, 100);
  ring_buffer__free(rb);
  std::sort(ctx.apply_ns.begin(), ctx.apply_ns.end());
  auto pct = [&](double p) {
    return ctx.apply_ns.empty() ? 0.0 : double(ctx.apply_ns[size_t(p * double(ctx.apply_ns.size() - 1))]) / 1000.0;
  };
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  json j{{"frames", ctx.frames},
         {"netlink_failed", ctx.failed},
         {"apply_us_p50", pct(0.5)},
         {"apply_us_p99", pct(0.99)},
         {"cpu_s",
          double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6}};
  std::cout << j.dump() << std::endl;
  return 0;
}

// ---- switch (design B: held queues in this process) ----
struct HoldCtx {
  sw::PortModel* port;
  std::unordered_map<uint64_t, std::vector<uint8_t>> frames;
  uint64_t next_id = 1;
  uint64_t dropped = 0, ctrl = 0;
  std::vector<uint64_t> apply_ns;
  bool bpf_pause = false;  // sw_hold_ingress applies PAUSE/RESUME; the loop mirrors it
};

int on_hold(void* ctx, void* data, size_t) {
  auto* c = static_cast<HoldCtx*>(ctx);
  auto* ev = static_cast<sl_sw_hold_event*>(data);
  sw::PacketMeta m;
  m.id = c->next_id++;
  m.wire_bytes = ev->len;
  if (!c->port->enqueue(uint16_t(ev->queue), m)) {
    ++c->dropped;
    return 0;
  }
  c->frames.emplace(m.id, std::vector<uint8_t>(ev->frame, ev->frame + ev->len));
  return 0;
}
int on_wake(void*, void*, size_t) { return 0; }
int on_hold_ctrl(void* ctx, void* data, size_t) {
  auto* c = static_cast<HoldCtx*>(ctx);
  auto* ev = static_cast<sl_sw_ctrl_event*>(data);
  sw::ControlFrame f;
  if (sw::accept_control(SL_PORT_SWITCH_FACING, ev->frame + ev->payload_off, ev->len - ev->payload_off, &f) !=
      SL_CTRL_R_OK)
    return 0;
  ++c->ctrl;
  if (f.type == sw::CtrlType::kPause || f.type == sw::CtrlType::kResume)
    for (const auto& r : f.queues)
      if (!c->bpf_pause && r.queue < c->port->num_queues())
        c->port->set_paused(r.queue, f.type == sw::CtrlType::kPause);
  c->apply_ns.push_back(mono_ns() - ev->rx_ns);
  return 0;
}

int run_switch_b(const std::string& dev, int queues, uint64_t rate_bps, const std::string& src, const std::string& dst,
                 int flows, uint32_t limit, uint32_t backlog, double watchdog_pkts, bool bpf_pause) {
  int ifindex = int(if_nametoindex(dev.c_str()));
  if (!ifindex) throw Error("no interface " + dev);
  struct stat ns {};
  if (stat("/proc/self/ns/net", &ns)) throw SysError("stat /proc/self/ns/net", errno);
  const uint32_t mark = 0x5e1d;
  Skeleton<swport> gate;
  gate.load();
  // The per-port object with one port (id 0); fail_open_ns stays 0 (no
  // heartbeat here: never fails open).
  Skeleton<swhold> hold;
  hold->rodata->reinject_mark = mark;
  hold.load();
  sl_sw_hold_port hp{0, uint32_t(queues), uint32_t(ns.st_ino), backlog / 2};
  uint32_t hkey = uint32_t(ifindex);
  check(bpf_map_update_elem(bpf_map__fd(hold->maps.sl_swh_ports_v1), &hkey, &hp, BPF_ANY), "sl_swh_ports_v1");
  bpf_link* tp_deq = bpf_program__attach(hold->progs.sw_hold_dequeue);
  if (!tp_deq) throw SysError("attach qdisc_dequeue", errno);
  bpf_link* tp_enq = bpf_program__attach(hold->progs.sw_hold_enqueue);
  if (!tp_enq) throw SysError("attach qdisc_enqueue", errno);
  const int sync_fd = bpf_program__fd(hold->progs.sw_hold_sync);
  auto mode = AttachMode::Clsact;
  std::vector<TcAttachment> att;
  if (bpf_pause)  // before the gate, which still hands every frame to the agent
    att.push_back(TcAttachment::attach(dev, Hook::Ingress, bpf_program__fd(hold->progs.sw_hold_ingress),
                                       "sw_hold_ingress", 0xA2FF, mode, "/run/sluice-swbench"));
  att.push_back(TcAttachment::attach(dev, Hook::Ingress, bpf_program__fd(gate->progs.sw_ingress), "sw_ingress", 0xA300,
                                     mode, "/run/sluice-swbench"));
  att.push_back(TcAttachment::attach(dev, Hook::Egress, bpf_program__fd(hold->progs.sw_hold_egress), "sw_hold_egress",
                                     0xA300, mode, "/run/sluice-swbench"));
  sl_sw_port p{0, SL_PORT_SWITCH_FACING, uint32_t(queues), 0, 0, 0};
  uint32_t key = uint32_t(ifindex);
  check(bpf_map_update_elem(bpf_map__fd(gate->maps.sl_sw_ports_v1), &key, &p, BPF_ANY), "sl_sw_ports_v1");
  for (int i = 0; i < flows; ++i) {
    sl_sw_flow_key k{0, sw::flow_hash(src, dst, uint16_t(kSportBase + i), uint16_t(kDportBase + i), IPPROTO_UDP)};
    uint32_t q = uint32_t(i % queues);
    check(bpf_map_update_elem(bpf_map__fd(hold->maps.sl_swh_flowq_v1), &k, &q, BPF_ANY), "flow queue");
  }
  // The agent-side scheduler is the substrate's own port model: DRR over
  // the queues that are not paused.
  sw::PortConfig pc;
  pc.name = dev;
  pc.rate_bps = rate_bps;
  pc.queues.assign(size_t(queues), sw::QueueConfig{0, 1514, limit, -1});
  sw::PortModel port(pc);
  HoldCtx ctx{&port, {}, 1, 0, 0, {}, bpf_pause};
  int fd = socket(AF_PACKET, SOCK_RAW, 0);  // send only
  if (fd < 0) throw SysError("AF_PACKET", errno);
  if (setsockopt(fd, SOL_SOCKET, SO_MARK, &mark, sizeof(mark))) throw SysError("SO_MARK", errno);
  sockaddr_ll ll{};
  ll.sll_family = AF_PACKET;
  ll.sll_ifindex = ifindex;
  ll.sll_halen = 6;
  ring_buffer* rb = ring_buffer__new(bpf_map__fd(hold->maps.sl_swh_ring_v1), on_hold, &ctx, nullptr);
  if (!rb) throw SysError("ring_buffer__new", errno);
  check(ring_buffer__add(rb, bpf_map__fd(hold->maps.sl_swh_wake_v1), on_wake, &ctx), "ring add wake");
  check(ring_buffer__add(rb, bpf_map__fd(gate->maps.sl_sw_ctrl_v1), on_hold_ctrl, &ctx), "ring add ctrl");
  auto* st = &hold->bss->hold[0];
  uint64_t send_errors = 0;
  auto record = [st]() {
    sw::HoldRecord r;
    r.events = __atomic_load_n(&st->events, __ATOMIC_SEQ_CST);
    r.qlen = __atomic_load_n(&st->qlen, __ATOMIC_SEQ_CST);
    r.sent_at_ev = __atomic_load_n(&st->sent_at_ev, __ATOMIC_SEQ_CST);
    return r;
  };
  auto kernel_backlog = [&]() {
    return sw::hold_backlog(record(), __atomic_load_n(&st->agent_sent, __ATOMIC_SEQ_CST));
  };
  // One packet time of a full-size frame at the link rate.
  const double pkt_ns = 1514.0 * 8e9 / double(rate_bps);
  sw::HoldWatchdog wd(uint64_t(std::max(1.0, watchdog_pkts) * pkt_ns));
  std::cerr << "swbench switch: ready on " << dev << " (design B, " << queues << " queues, backlog " << backlog
            << ", watchdog " << wd.period_ns() / 1000 << " us)" << std::endl;
  pollfd pfd{ring_buffer__epoll_fd(rb), POLLIN, 0};
  bool waiting = false;
  // --bpf-pause: the queues sw_hold_ingress paused, mirrored into the model
  // whenever its generation moves; and checked again right before a frame
  // is released, so a PAUSE that arrived since the mirror holds it.
  uint64_t pause_gen = 0;
  auto* bss = hold->bss;
  auto mirror_pauses = [&]() {
    uint64_t g = __atomic_load_n(&bss->hold_pause_gen[0], __ATOMIC_ACQUIRE);
    if (g == pause_gen) return;
    pause_gen = g;
    for (uint16_t q = 0; q < port.num_queues(); ++q)
      port.set_paused(q, __atomic_load_n(&bss->hold_paused[0][q], __ATOMIC_RELAXED) != 0);
  };
  while (!g_stop) {
    // Sleep until a ring has data (frames, a wake-up, a control frame),
    // or until the watchdog is due.
    uint64_t now = mono_ns(), dl = wd.deadline_ns();
    uint64_t wait_ns = dl ? (dl > now ? dl - now : 0) : 100'000'000;
    timespec ts{time_t(wait_ns / 1'000'000'000), long(wait_ns % 1'000'000'000)};
    if (ppoll(&pfd, 1, &ts, nullptr) < 0 && errno != EINTR) throw SysError("ppoll", errno);
    ring_buffer__consume(rb);
    for (;;) {
      // Keep the port's qdisc at `backlog` packets (ARCHITECTURE: a shallow
      // kernel backlog shapes at the link rate; the queues live here).
      for (;;) {
        if (kernel_backlog() >= backlog) break;
        if (bpf_pause) mirror_pauses();
        auto q = port.pick(mono_ns());
        if (!q) break;
        sw::PacketMeta m = port.dequeue(*q, mono_ns());
        auto it = ctx.frames.find(m.id);
        // Counted before the send: the frame can be enqueued and even
        // dequeued inside sendto, and that event must see it as sent.
        uint64_t sent = __atomic_load_n(&st->agent_sent, __ATOMIC_RELAXED);
        __atomic_store_n(&st->agent_sent, sent + 1, __ATOMIC_SEQ_CST);
        if (sendto(fd, it->second.data(), it->second.size(), 0, reinterpret_cast<sockaddr*>(&ll), sizeof(ll)) < 0) {
          ++send_errors;
          __atomic_store_n(&st->agent_sent, sent, __ATOMIC_SEQ_CST);
        }
        ctx.frames.erase(it);
      }
      waiting = false;
      for (uint16_t q = 0; q < port.num_queues() && !waiting; ++q) waiting = port.depth(q).pkts && !port.paused(q);
      if (!waiting) break;
      // Ask the dequeue hook for a wake-up, then re-check: the backlog may
      // have drained between the check and the request.
      __atomic_store_n(&st->want_wake, 1u, __ATOMIC_SEQ_CST);
      if (kernel_backlog() >= backlog) break;
    }
    now = mono_ns();
    if (wd.due(now, record().events, waiting)) {
      uint64_t before = kernel_backlog();
      LIBBPF_OPTS(bpf_test_run_opts, topts);
      sl_sw_hold_sync_ctx sctx{0};
      topts.ctx_in = &sctx;
      topts.ctx_size_in = sizeof(sctx);
      if (bpf_prog_test_run_opts(sync_fd, &topts)) throw SysError("run sw_hold_sync", errno);
      wd.synced(now, record().events, before, kernel_backlog());
    }
  }
  ring_buffer__free(rb);
  bpf_link__destroy(tp_deq);
  bpf_link__destroy(tp_enq);
  close(fd);
  std::sort(ctx.apply_ns.begin(), ctx.apply_ns.end());
  auto pct = [&](double p) {
    return ctx.apply_ns.empty() ? 0.0 : double(ctx.apply_ns[size_t(p * double(ctx.apply_ns.size() - 1))]) / 1000.0;
  };
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  json j{{"frames", ctx.ctrl},
         {"apply_us_p50", pct(0.5)},
         {"apply_us_p99", pct(0.99)},
         {"backlog_target", backlog},
         {"diverted", st->diverted},
         {"ring_full", st->ring_full},
         {"passed_big", st->passed_big},
         {"wakeups", st->wakeups},
         {"agent_sent", st->agent_sent},
         {"dequeued_events", st->dequeued},
         {"events", st->events},
         {"qdisc_sent", st->q_sent},
         {"qdisc_drops", st->q_drops},
         {"qlen", st->qlen},
         {"sent_at_ev", st->sent_at_ev},
         {"want_wake", st->want_wake},
         {"watchdog_us", double(wd.period_ns()) / 1000.0},
         {"bpf_pause", bpf_pause},
         {"bpf_pause_changes", bss->hold_pause_gen[0]},
         {"watchdog_fired", wd.fired()},
         {"watchdog_fixed", wd.fixed()},
         {"watchdog_fixed_frames", wd.fixed_frames()},
         {"syncs", st->syncs},
         {"queue_drops", ctx.dropped},
         {"send_errors", send_errors},
         {"cpu_s",
          double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6}};
  std::cout << j.dump() << std::endl;
  return 0;
}

// ---- sink ----
struct Sink {
  Skeleton<swprobe>* skel;
  int flows;
  std::vector<sl_swprobe_flow> read() {
    std::vector<sl_swprobe_flow> v(flows);
    for (int i = 0; i < flows; ++i) {
      uint32_t k = uint32_t(i);
      bpf_map_lookup_elem(bpf_map__fd((*skel)->maps.sl_swp_flows_v1), &k, &v[i]);
    }
    return v;
  }
  std::vector<uint64_t> lat() {
    std::vector<uint64_t> h(SLUICE_SWPROBE_LAT_BUCKETS);
    for (uint32_t b = 0; b < h.size(); ++b) bpf_map_lookup_elem(bpf_map__fd((*skel)->maps.sl_swp_lat_v1), &b, &h[b]);
    return h;
  }
};

double hist_pct(const std::vector<uint64_t>& h, double p) {
  uint64_t n = 0;
  for (auto x : h) n += x;
  if (!n) return -1;
  uint64_t want = uint64_t(p * double(n - 1)), acc = 0;
  for (size_t b = 0; b < h.size(); ++b) {
    acc += h[b];
    if (acc > want) return double(b) + 0.5;
  }
  return double(h.size());
}

int run_sink(const std::string& dev, int flows, double secs, int samples, int pause_queue, double settle_ms) {
  int ifindex = int(if_nametoindex(dev.c_str()));
  if (!ifindex) throw Error("no interface " + dev);
  Skeleton<swprobe> skel;
  skel->rodata->n_flows = uint32_t(flows);
  skel.load();
  auto mode = AttachMode::Clsact;
  auto att = TcAttachment::attach(dev, Hook::Ingress, bpf_program__fd(skel->progs.swprobe_ingress), "swprobe_ingress",
                                  0xA300, mode, "/run/sluice-swbench");
  Sink s{&skel, flows};
  std::cerr << "swbench sink: ready on " << dev << std::endl;
  // Warm-up, then a window.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto a = s.read();
  auto la = s.lat();
  uint64_t t0 = mono_ns();
  std::this_thread::sleep_for(std::chrono::duration<double>(secs));
  auto b = s.read();
  auto lb = s.lat();
  uint64_t t1 = mono_ns();
  uint64_t bytes = 0, pkts = 0;
  json per_flow = json::array();
  for (int i = 0; i < flows; ++i) {
    bytes += b[i].bytes - a[i].bytes;
    pkts += b[i].pkts - a[i].pkts;
    per_flow.push_back(b[i].pkts - a[i].pkts);
  }
  for (size_t i = 0; i < lb.size(); ++i) lb[i] -= la[i];
  json j{{"window_s", double(t1 - t0) / 1e9},
         {"bytes", bytes},
         {"pkts", pkts},
         {"bps", double(bytes) * 8e9 / double(t1 - t0)},
         {"per_flow_pkts", per_flow},
         {"lat_us_p50", hist_pct(lb, 0.5)},
         {"lat_us_p99", hist_pct(lb, 0.99)}};

  if (samples > 0) {
    int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    if (fd < 0) throw SysError("AF_PACKET socket", errno);
    sockaddr_ll ll{};
    ll.sll_family = AF_PACKET;
    ll.sll_ifindex = ifindex;
    ll.sll_halen = 6;
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, dev.c_str(), IFNAMSIZ - 1);
    if (ioctl(fd, SIOCGIFHWADDR, &ifr)) throw SysError("SIOCGIFHWADDR", errno);
    std::array<uint8_t, 6> mac;
    std::memcpy(mac.data(), ifr.ifr_hwaddr.sa_data, 6);
    uint32_t seq = 1;
    auto send_frame = [&](sw::CtrlType t, uint16_t q) {
      sw::ControlFrame f{t};
      f.queues = {{q, seq++}};
      auto frame = sw::ethernet_frame(mac, sw::encode(f));
      if (sendto(fd, frame.data(), frame.size(), 0, reinterpret_cast<sockaddr*>(&ll), sizeof(ll)) < 0)
        throw SysError("send control frame", errno);
    };
    std::vector<double> react_us;
    uint64_t not_resumed = 0, stopped_late = 0;
    const uint16_t q = uint16_t(pause_queue);
    for (int k = 0; k < samples && !g_stop; ++k) {
      uint64_t sent_ns = mono_ns();
      send_frame(sw::CtrlType::kPause, q);
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(settle_ms));
      auto before = s.read();
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(settle_ms));
      auto after = s.read();
      // Still arriving a settle period later: the pause did not hold.
      if (after[q].pkts != before[q].pkts) ++stopped_late;
      uint64_t last = after[q].last_ns;
      react_us.push_back(last > sent_ns ? double(last - sent_ns) / 1000.0 : 0.0);
      send_frame(sw::CtrlType::kResume, q);
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(settle_ms));
      if (s.read()[q].pkts == after[q].pkts) ++not_resumed;
    }
    close(fd);
    std::vector<double> r = react_us;
    std::sort(r.begin(), r.end());
    auto pct = [&](double p) { return r.empty() ? -1.0 : r[size_t(p * double(r.size() - 1))]; };
    j["pause_samples"] = r.size();
    j["pause_react_us_p50"] = pct(0.5);
    j["pause_react_us_p99"] = pct(0.99);
    j["pause_react_us_max"] = r.empty() ? -1.0 : r.back();
    j["pause_not_holding"] = stopped_late;
    j["pause_not_resumed"] = not_resumed;
  }
  std::cout << j.dump() << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sluice switch data-path benchmark processes"};
  app.require_subcommand(1);
  std::string src = "10.9.1.1", dst = "10.9.2.1", dev, design = "a";
  bool bpf_pause = false;
  int flows = 32, queues = 32, payload = 1472, samples = 0, pause_queue = 0;
  uint64_t rate = 100'000'000;
  uint32_t limit = 131072, backlog = 2;
  double watchdog_pkts = 2;
  double secs = 3, settle_ms = 10;
  auto* gen = app.add_subcommand("gen", "UDP flows paced to a total rate");
  gen->add_option("--src", src);
  gen->add_option("--dst", dst);
  gen->add_option("--flows", flows)->check(CLI::Range(1, SLUICE_SWPROBE_MAX_FLOWS));
  gen->add_option("--rate-bps", rate)->required();
  gen->add_option("--secs", secs);
  gen->add_option("--payload", payload)->check(CLI::Range(8, 1472));
  int spread = 0;
  gen->add_option("--spread-queues", spread,
                  "pick source ports so flow i hashes to queue i % N (sluiced logics that hash flows)")
      ->check(CLI::Range(0, SLUICE_SW_MAX_QUEUES));
  auto* swc = app.add_subcommand("switch", "design A switch port: classifier + pause over netlink");
  swc->add_option("--dev", dev)->required();
  swc->add_option("--queues", queues)->check(CLI::Range(1, SLUICE_SW_MAX_QUEUES));
  swc->add_option("--rate-bps", rate)->required();
  swc->add_option("--limit", limit, "per-queue limit, bytes");
  swc->add_option("--design", design)->check(CLI::IsMember({"a", "b"}));
  swc->add_option("--backlog", backlog, "design B: packets kept in the port's qdisc")->check(CLI::Range(1, 1000));
  swc->add_option("--watchdog-pkts", watchdog_pkts,
                  "design B: re-read the port's qdisc after this many packet times without a qdisc event")
      ->check(CLI::Range(1.0, 1e6));
  swc->add_flag("--bpf-pause", bpf_pause,
                "design B: PAUSE/RESUME records applied by a tc ingress program, checked before each release");
  swc->add_option("--src", src);
  swc->add_option("--dst", dst);
  swc->add_option("--flows", flows);
  auto* sink = app.add_subcommand("sink", "receiver probe, throughput, latency, pause experiment");
  sink->add_option("--dev", dev)->required();
  sink->add_option("--flows", flows)->check(CLI::Range(1, SLUICE_SWPROBE_MAX_FLOWS));
  sink->add_option("--secs", secs);
  sink->add_option("--pause-samples", samples);
  sink->add_option("--pause-queue", pause_queue);
  sink->add_option("--settle-ms", settle_ms);
  CLI11_PARSE(app, argc, argv);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  try {
    if (*gen) return run_gen(src, dst, flows, rate, secs, payload, spread);
    if (*swc && design == "b")
      return run_switch_b(dev, queues, rate, src, dst, flows, limit, backlog, watchdog_pkts, bpf_pause);
    if (*swc) return run_switch(dev, queues, rate, src, dst, flows, limit);
    if (*sink) return run_sink(dev, flows, secs, samples, pause_queue, settle_ms);
  } catch (const std::exception& e) {
    std::cerr << "sluice-swbench: " << e.what() << std::endl;
    return 1;
  }
  return 2;
}
