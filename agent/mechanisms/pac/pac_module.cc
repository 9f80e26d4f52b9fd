#include "mechanisms/pac/pac_module.h"

#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <unordered_map>

#include "core/event_loop.h"
#include "core/heartbeat.h"
#include "core/log.h"
#include "mechanisms/pac/reinject.h"
#include "pac_tc.skel.h"
#include "pac_tc_compat.skel.h"
#include "core/tc.h"

SLUICE_SKELETON_TWIN(pac_tc, pac_tc_compat, sluice::liveness_object);

namespace sluice::pac {

namespace {

// The idle reset leaves pac.bound alone for this long (at least) after a
// request left: a sender's application may answer later than an RTT.
constexpr uint64_t kRequestQuietNs = 20'000'000;

// The heartbeat thread keeps BPF diverting while this module's loop has run
// within this long. Longer, held ACKs would wait for a stuck loop until
// TCP's minimum RTO (200 ms) fires at the senders: fail open instead.
constexpr std::chrono::milliseconds kPacLoopStall{100};

template <typename T>
T load(const T* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
template <typename T, typename V>
void store(T* p, V v) {
  __atomic_store_n(p, static_cast<T>(v), __ATOMIC_RELEASE);
}

// Lowers *p to at most `v` without losing concurrent BPF adds.
void lower_to(__s64* p, __s64 v) {
  __s64 cur = load(p);
  while (cur > v && !__atomic_compare_exchange_n(p, &cur, v, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
  }
}

Params params_of(const PacConfig& c) {
  Params p;
  p.buffer_bytes = sluice_pac_payload_capacity(c.buffer_bytes);
  p.level_bytes = c.mlfq_level_bytes;
  p.lambda = c.lambda;
  p.max_held = c.max_held;
  p.max_hold_ns = uint64_t(c.max_hold_ms) * 1'000'000ull;
  p.max_hold_request_ns = uint64_t(c.max_hold_request_ms) * 1'000'000ull;
  p.requests_yield = c.hold_requests;
  p.ecn = c.ecn;
  return p;
}

}  // namespace

struct PacModule::Impl : Datapath {
  std::string ifname;
  PacConfig cfg;
  uint64_t fail_open_ns;
  uint64_t busy_poll_ns = 0;
  uint64_t poll_progress = 0;  // last wake-up or release (busy polling)
  bool poll_posted = false;
  uint64_t poll_ns = 0, poll_passes = 0;  // time spent polling, release passes it made
  EventLoop* loop = nullptr;
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);
  Skeleton<pac_tc> skel;
  sluice_pac_state* st = nullptr;  // mmapped .bss
  std::unique_ptr<Reinjector> reinjector;
  std::unique_ptr<Engine> engine;
  ring_buffer* rb = nullptr;
  std::vector<TcAttachment> attachments;
  std::unique_ptr<FdWatch> rb_watch;
  std::unique_ptr<PeriodicTimer> heartbeat, control;
  std::unique_ptr<HeartbeatThread::Registration> beat;  // refreshes st->live
  int flows_fd = -1, ctl_fd = -1;

  // Control interval state.
  uint64_t last_ctl_ns = 0, last_hb_ns = 0;
  uint64_t fail_opens_seen = 0;  // PAC_FAIL_OPEN packets at the last on_heartbeat()

  uint64_t fail_open_count() const {
    std::vector<sluice_counter> per_cpu(static_cast<size_t>(num_possible_cpus()));
    uint32_t r = SLUICE_R_PAC_FAIL_OPEN;
    uint64_t n = 0;
    if (bpf_map_lookup_elem(bpf_map__fd(skel->maps.sl_counters), &r, per_cpu.data()) == 0)
      for (const auto& c : per_cpu) n += c.packets;
    return n;
  }
  uint64_t prev_pkts = 0, prev_ce = 0, prev_bytes = 0;
  uint64_t interval_ns = 1'000'000;
  double alpha = 0;
  uint64_t corrections = 0, threshold_changes = 0, stalls = 0, expired = 0, ctl_write_failures = 0;
  uint64_t idle_resets = 0;
  uint64_t prev_held_events = 0;
  uint64_t last_expiry_ns = 0;
  std::unique_ptr<DeviationCorrector> corrector;
  // A flow's counters at the last scan that met it, and that scan's pass.
  struct PrevSample {
    uint64_t bytes = 0, trig = 0;
    uint32_t gen = 0;
  };
  std::unordered_map<sluice_pac_flow_key, PrevSample, FlowKeyHash, FlowKeyEq> prev_flow_bytes;
  size_t bpf_flows = 0;
  double avg_srtt_us = 0;
  // Largest response of unknown size (SLUICE_PAC_BF_GUESS) seen in the last
  // flow scan: once the pipe is idle those responses are over, and their
  // size is the next new flow's guess (pac.resp_guess).
  uint64_t guess_seen = 0;

  ~Impl() override {
    if (rb) ring_buffer__free(rb);
  }

  // Datapath
  int64_t in_flight() override { return admit_in_flight(); }
  // What the datapath compares with the threshold: the estimate of the
  // flows the bound does not cover, plus the bound (rwnd_cap_bytes with
  // cap_to_response; admit_in_flight() in bpf/host/pac.bpf.c).
  int64_t admit_in_flight() {
    int64_t a = load(&st->in_flight);
    if (cfg.rwnd_cap_bytes && cfg.cap_to_response) a += load(&st->bound);
    return a;
  }
  uint64_t threshold() override { return load(&st->threshold); }
  bool send(const sluice_pac_flow_key&, const HeldAck& a) override {
    HeldAck copy = a;
    return reinjector->send(copy.frame.data(), copy.frame_len);
  }
  // sl_pac_ctl_v2 is an array indexed by the flow's id (include/sluice/pac.h):
  // the id comes from the flow's entry.
  void write_ctl(const sluice_pac_flow_key& key, const sluice_pac_flow_ctl& ctl) override {
    sluice_pac_flow f{};
    if (bpf_map_lookup_elem(flows_fd, &key, &f) != 0 || !f.id) {
      ++ctl_write_failures;
      return;
    }
    sluice_pac_flow_ctl c = ctl;
    c.id = f.id;
    __u32 slot = f.id % SLUICE_PAC_CTL_SLOTS;
    if (bpf_map_update_elem(ctl_fd, &slot, &c, BPF_ANY) != 0) ++ctl_write_failures;
  }
  // Frees the control slot of flow `f` (its entry is going), if it is still its.
  void free_ctl(const sluice_pac_flow& f) {
    if (!f.id) return;
    __u32 slot = f.id % SLUICE_PAC_CTL_SLOTS;
    sluice_pac_flow_ctl c{};
    if (bpf_map_lookup_elem(ctl_fd, &slot, &c) == 0 && c.id == f.id) {
      c = sluice_pac_flow_ctl{};
      bpf_map_update_elem(ctl_fd, &slot, &c, BPF_ANY);
    }
  }
  void set_wake(uint64_t held, uint64_t room, uint64_t ack_room) override {
    store(&st->wake_room, room);
    store(&st->ack_room, ack_room);
    store(&st->held, held);
    // Consumed: the ingress program may wake us again.
    store(&st->wake_pending, 0u);
  }

  static int on_sample(void* ctx, void* data, size_t size) {
    auto* self = static_cast<Impl*>(ctx);
    if (size < offsetof(sluice_pac_event, frame)) return 0;
    sluice_pac_event ev;
    std::memset(&ev, 0, sizeof(ev));
    std::memcpy(&ev, data, std::min(size, sizeof(ev)));
    self->engine->on_event(ev, monotonic_ns());
    return 0;
  }

  void on_readable() {
    ring_buffer__consume(rb);
    poll_progress = monotonic_ns();
    wake_control(poll_progress);
    engine->release(poll_progress);
    poll_held();
  }

  // While ACKs are held, the next release is due the moment enough data
  // arrives (eq. 5). Sleeping until the ingress program's wake-up costs a
  // scheduler round trip (ring buffer -> irq_work -> epoll -> this loop),
  // which on a loaded host is longer than the buffer's slack (0.5 ms at
  // 1 Gbit/s, 128 KB). So the agent keeps polling the mmapped estimate and
  // the ring until busy_poll_us have passed without a release, then sleeps
  // in epoll again (every release re-arms the ingress wake-up). Nothing
  // held: no polling, the agent stays off the CPU. Polling runs in slices
  // of at most kPollSlice, posted back to the loop, so the heartbeat and
  // the control interval keep their timers.
  static constexpr uint64_t kPollSliceNs = 250'000;
  static void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#endif
  }
  void poll_held() {
    if (!busy_poll_ns || poll_posted) return;
    uint64_t start = monotonic_ns(), now = start;
    while (engine->held()) {
      int n = ring_buffer__consume(rb);
      bool fits = sluice_pac_fits(admit_in_flight(), load(&st->wake_room), load(&st->threshold));
      now = monotonic_ns();
      if (n > 0 || fits) {
        if (engine->release(now) || n > 0) poll_progress = now;
        ++poll_passes;
      }
      if (now - poll_progress > busy_poll_ns) break;
      if (now - start > kPollSliceNs) {
        poll_posted = true;
        std::weak_ptr<bool> w = alive;
        loop->post([this, w] {
          if (w.expired()) return;
          poll_posted = false;
          poll_held();
        });
        break;
      }
      cpu_relax();
    }
    poll_ns += now - start;
  }

  // The heartbeat is refreshed by the agent's heartbeat thread
  // (core/heartbeat.h) while this loop runs; here, on the loop, we check
  // whether it went stale since the last look -- the loop stalled past
  // kPacLoopStall, or the thread was late -- and BPF did fail open meanwhile
  // (a stale heartbeat from a running thread does not, bpf/lib/liveness.h).
  void on_heartbeat() {
    uint64_t now = monotonic_ns();
    uint64_t gap = beat ? beat->take_max_gap_ns() : 0;
    uint64_t opened = fail_open_count();
    bool failed_open = opened != fail_opens_seen;
    fail_opens_seen = opened;
    if (gap > fail_open_ns && failed_open) {
      // ACKs passed meanwhile may have overtaken held ones. Resynchronise
      // each holding flow with the kernel's last ACK (drops what is
      // superseded), then release the rest at once.
      ++stalls;
      for (const auto& k : engine->holding_flows()) {
        sluice_pac_flow f{};
        if (bpf_map_lookup_elem(flows_fd, &k, &f) != 0) continue;
        sluice_pac_event ev{};
        ev.type = SLUICE_PAC_EV_SEGMENT;
        ev.key = k;
        ev.ack = f.last_ack;
        ev.mss = f.mss;
        ev.bytes_rcvd = f.bytes_rcvd;
        engine->on_event(ev, now);
      }
      size_t n = engine->flush(now);
      SLOG_WARN("PAC_STALL", "{}: heartbeat went {} ms unrefreshed (> fail_open {} ms); released {} held ACKs", ifname,
                gap / 1'000'000, cfg.fail_open_ms, n);
    }
    last_hb_ns = now;
  }

  // One pass over the flow table may span several control ticks: each tick
  // reads batches of kScanBatch entries for at most kScanSliceNs (and at
  // least one batch), and the next tick goes on from there. A full table
  // (65,536 entries) read at once took the loop for tens to hundreds of
  // milliseconds at every control interval, time the ring buffer and the
  // releases waited for (docs/operations.md "100,000 flows"). A small
  // table is still read whole at every tick.
  static constexpr size_t kScanBatch = 256;
  static constexpr uint64_t kScanSliceNs = 1'000'000;
  struct ScanPass {
    bool started = false;  // `batch` holds where the next tick goes on
    uint64_t batch = 0;
    uint64_t start_ns = 0, inserts = 0;  // pac.flow_inserts as it began
    size_t flows = 0, ticks = 0;
    double srtt_sum = 0, srtt_n = 0;
    uint64_t guess_max = 0;
    bool expiry = false;
    std::vector<sluice_pac_flow_key> gone;
    std::vector<sluice_pac_flow_key> quiet;  // unwatched_and_quiet(), swept after each tick's slice
  } pass;
  uint32_t pass_gen = 0;  // prev_flow_bytes entries seen in this pass carry it
  // The scan's cost (stats): per tick and per pass, and what it found.
  uint64_t scan_ticks = 0, scan_ns_total = 0, scan_ns_max = 0, scan_passes = 0, pass_ns_last = 0;
  size_t pass_ticks_last = 0;

  void scan_flows(uint64_t now) {
    std::vector<sluice_pac_flow_key> keys(kScanBatch);
    std::vector<sluice_pac_flow> vals(kScanBatch);
    uint64_t t0 = monotonic_ns();
    if (!pass.started) {
      pass = ScanPass{};
      pass.start_ns = now;
      pass.inserts = load(&st->flow_inserts);
      pass.expiry = now - last_expiry_ns > 1'000'000'000ull;
      if (++pass_gen == 0) pass_gen = 1;
    }
    ++pass.ticks;
    bool done = false;
    for (bool first = true; !done && (first || monotonic_ns() - t0 < kScanSliceNs); first = false) {
      // Always a whole batch: the kernel returns whole hash buckets, and a
      // bucket larger than what is asked for fails the call (ENOSPC).
      __u32 count = static_cast<__u32>(kScanBatch);
      int rc = bpf_map_lookup_batch(flows_fd, pass.started ? &pass.batch : nullptr, &pass.batch, keys.data(),
                                    vals.data(), &count, nullptr);
      int err = rc ? errno : 0;
      pass.started = true;
      for (__u32 i = 0; i < count; ++i) sample_flow(keys[i], vals[i], now);
      if (rc || count == 0) {
        if (rc && err != ENOENT) SLOG_DEBUG("PAC_SCAN", "{}: flow table read: {}", ifname, std::strerror(err));
        done = true;
      }
    }
    if (!pass.quiet.empty()) {
      sweep_quiet(pass.quiet);
      pass.quiet.clear();
    }
    uint64_t t1 = monotonic_ns();
    ++scan_ticks;
    scan_ns_total += t1 - t0;
    scan_ns_max = std::max(scan_ns_max, t1 - t0);
    if (done) finish_pass(now, t1);
  }

  // A flow whose response began and that still holds a share (of the
  // bound, or expected bytes) with no quiet_timer armed: its timer could not
  // be allocated (pac.timer_fails). Once quiet for the time its timer would
  // have waited, the datapath's own check clears it (pac_quiet_sweep).
  bool unwatched_and_quiet(const sluice_pac_flow& f, uint64_t now) const {
    if (!f.cur_burst || (f.bflags & SLUICE_PAC_BF_LISTED)) return false;
    bool share = cfg.rwnd_cap_bytes && cfg.cap_to_response && f.contrib && f.bepoch == uint8_t(load(&st->bound_epoch));
    bool expect = cfg.trigger_age_min_us && f.expect && f.epoch == load(&st->epoch);
    if (!share && !expect) return false;
    uint64_t floor = cfg.trigger_age_min_us ? uint64_t(cfg.trigger_age_min_us) * 1000 : 1'000'000ull;
    uint64_t quiet = std::max<uint64_t>(uint64_t(f.srtt_us) * 2000, floor);
    return now > f.last_ns + quiet;
  }
  uint64_t quiet_swept = 0;  // shares pac_quiet_sweep cleared
  void sweep_quiet(const std::vector<sluice_pac_flow_key>& keys) {
    int fd = bpf_program__fd(skel->progs.pac_quiet_sweep);
    for (const auto& k : keys) {
      skel->bss->sweep_key = k;
      LIBBPF_OPTS(bpf_test_run_opts, o);
      if (bpf_prog_test_run_opts(fd, &o) == 0 && o.retval == 1) ++quiet_swept;
    }
  }

  void sample_flow(const sluice_pac_flow_key& k, const sluice_pac_flow& f, uint64_t now) {
    ++pass.flows;
    if (unwatched_and_quiet(f, now)) pass.quiet.push_back(k);
    if ((f.bflags & SLUICE_PAC_BF_GUESS) && !f.fin_rst)
      pass.guess_max = std::max<uint64_t>(pass.guess_max, f.cur_burst);
    auto& prev = prev_flow_bytes[k];
    uint64_t d = f.bytes_rcvd >= prev.bytes ? f.bytes_rcvd - prev.bytes : f.bytes_rcvd;
    uint64_t dt_trig = f.trig_sum >= prev.trig ? f.trig_sum - prev.trig : f.trig_sum;
    prev = {f.bytes_rcvd, f.trig_sum, pass_gen};
    if (d || dt_trig) {
      engine->on_flow_sample(k, d, dt_trig, f.ce_seen);
      // §III-C: the control interval is the average RTT of the flows;
      // weighted by the bytes each brought in this interval, so an idle
      // control connection (one RTT sample per second) does not stretch
      // the interval of the flows that carry the traffic.
      if (f.srtt_us && d) {
        pass.srtt_sum += double(f.srtt_us) * double(d);
        pass.srtt_n += double(d);
      }
    }
    if (pass.expiry) {
      uint64_t idle = now > f.last_ns ? now - f.last_ns : 0;
      uint64_t limit = (f.fin_rst ? 10ull : uint64_t(cfg.idle_timeout_s)) * 1'000'000'000ull;
      if (idle > limit && engine->queued_acks(k).empty()) pass.gone.push_back(k);
    }
  }

  // The LRU table's evictions at the end of the last full pass: the flows
  // the programs had inserted by then that are neither in the table nor
  // removed by the agent; inserts counted when the pass began, so a flow
  // that came during it is no eviction. Never lower than an earlier figure.
  // The other count: flows a pass met that the next pass did not find and
  // the agent did not remove (misses flows that came and went between two
  // passes; counts flows inserted by anyone). The larger is reported.
  uint64_t evicted_seen = 0, gone_unseen = 0;
  uint64_t evicted() const { return std::max(evicted_seen, gone_unseen); }

  void finish_pass(uint64_t now, uint64_t end_ns) {
    pass.started = false;
    ++scan_passes;
    pass_ns_last = end_ns - pass.start_ns;
    pass_ticks_last = pass.ticks;
    bpf_flows = pass.flows;
    uint64_t ins = pass.inserts, left = expired + bpf_flows;
    evicted_seen = std::max(evicted_seen, ins > left ? ins - left : 0);
    guess_seen = pass.guess_max;
    if (pass.srtt_n) avg_srtt_us = pass.srtt_sum / pass.srtt_n;
    // Flows this pass did not meet left the table: the LRU evicted them for
    // newer flows (or the agent removed them). Their samples and the
    // engine's state of them go too (it keeps a flow that still holds ACKs).
    for (auto it = prev_flow_bytes.begin(); it != prev_flow_bytes.end();) {
      if (it->second.gen == pass_gen) {
        ++it;
        continue;
      }
      engine->forget(it->first);
      it = prev_flow_bytes.erase(it);
      ++gone_unseen;
    }
    if (pass.expiry) {
      last_expiry_ns = now;
      for (const auto& k : pass.gone) {
        sluice_pac_flow f{};
        if (bpf_map_lookup_elem(flows_fd, &k, &f) == 0) {
          if (f.contrib && f.bepoch == uint8_t(load(&st->bound_epoch)))
            __atomic_fetch_sub(&st->bound, __s64(f.contrib), __ATOMIC_ACQ_REL);
          free_ctl(f);
        }
        bpf_map_delete_elem(flows_fd, &k);
        prev_flow_bytes.erase(k);
        engine->forget(k);
        ++expired;
      }
    }
  }

  void on_control() {
    uint64_t now = monotonic_ns();
    uint64_t dt = last_ctl_ns ? now - last_ctl_ns : interval_ns;
    last_ctl_ns = now;
    uint64_t pkts = load(&st->data_pkts), ce = load(&st->ce_pkts), bytes = load(&st->data_bytes);
    uint64_t dp = pkts - prev_pkts, dce = ce - prev_ce, db = bytes - prev_bytes;
    prev_pkts = pkts;
    prev_ce = ce;
    prev_bytes = bytes;
    // α: fraction of CE-marked data segments in this interval (§III-B).
    alpha = dp ? std::min(1.0, double(dce) / double(dp)) : 0.0;
    if (cfg.ecn) {
      uint64_t thr = load(&st->threshold);
      uint64_t nt = adapt_threshold(thr, alpha, engine->params().buffer_bytes, engine->params().min_threshold);
      if (nt != thr) {
        store(&st->threshold, nt);
        ++threshold_changes;
      }
    }
    double dt_s = double(dt) / 1e9;
    double bw = dt_s > 0 ? double(db) / dt_s : 0;
    int64_t inflight = load(&st->in_flight);
    uint64_t held_ev = engine->stats().held_events;
    bool holding = (engine->held() > 0 || held_ev != prev_held_events);
    prev_held_events = held_ev;
    // A request that left recently may still wait for its sender's
    // application (a new connection's server thread, a busy host): its
    // response will come. Lowering the estimate then (eq. 6 sees the
    // throughput drop, the idle rule sees nothing arrive) released the
    // other held requests into it, and every new connection's first window
    // met at the bottleneck (docs/pac.md, "New connections").
    uint64_t req_quiet = std::max<uint64_t>(uint64_t(4 * avg_srtt_us * 1000), kRequestQuietNs);
    uint64_t last_req = load(&st->last_request_ns);
    bool req_waiting = cfg.hold_requests && last_req && now <= last_req + req_quiet;
    auto c = corrector->on_interval(bw, inflight, alpha, holding);
    if (c && !req_waiting) {
      lower_to(&st->in_flight, *c);
      // Per-flow expected bytes are part of what was just removed.
      __atomic_fetch_add(&st->epoch, 1u, __ATOMIC_ACQ_REL);
      ++corrections;
    }
    // The estimate says bytes are in flight, but nothing arrived and
    // nothing was released for max(2 RTT, trigger_age_min): the pipe is
    // empty (a bottleneck cannot stay busy and deliver nothing). What the
    // estimate holds never comes; with ACKs held on it, nothing ever would
    // (docs/pac.md, the per-flow correction).
    inflight = admit_in_flight();
    if (cfg.trigger_age_min_us && inflight > 0 && !req_waiting) {
      uint64_t idle = std::max<uint64_t>(uint64_t(2 * avg_srtt_us * 1000), uint64_t(cfg.trigger_age_min_us) * 1000);
      uint64_t last = std::max<uint64_t>(load(&st->last_data_ns), load(&st->last_trigger_ns));
      if (last && now > last + idle) {
        lower_to(&st->in_flight, 0);
        __atomic_fetch_add(&st->epoch, 1u, __ATOMIC_ACQ_REL);
        // Nothing moves: every response of unknown size has ended, so the
        // next new flow need not count its whole window (request_burst()).
        // Only where the bound covers these flows (capped windows): there a
        // wrong guess is bounded by the window. Without the cap the guess
        // caps eq. (3) triggers (resp_size() in bpf/host/pac_estimate.h),
        // and an idle moment in the middle of a response (its ACKs held,
        // its sender slow to answer) would publish a partial size that
        // lets the rest of every new flow's response arrive uncounted.
        if (guess_seen && cfg.rwnd_cap_bytes && cfg.cap_to_response) store(&st->resp_guess, guess_seen);
        // The bound too, but not while a request that left recently may
        // still be waiting for its sender's application: its response
        // will come, and the bound (which cannot drift) counts it. Cleared
        // then, the bound lets further requests out, and their responses
        // meet it at the bottleneck. Shares that outlive their response are
        // cleared per flow by the datapath (flow_watch); this clears what
        // is left when nothing moves at all.
        if (load(&st->bound) != 0 && (!last_req || now > last_req + req_quiet)) {
          store(&st->bound, __s64(0));
          __atomic_fetch_add(&st->bound_epoch, 1u, __ATOMIC_ACQ_REL);
        }
        ++idle_resets;
      }
    }
    if (load(&st->in_flight) < 0) {
      __s64 cur = load(&st->in_flight);
      while (cur < 0 &&
             !__atomic_compare_exchange_n(&st->in_flight, &cur, __s64(0), false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      }
    }
    if (dp || engine->held() || pass.started || now - last_expiry_ns > 1'000'000'000ull) scan_flows(now);
    engine->release(now);
    uint64_t want = control_period(now);
    if (want != interval_ns) {
      interval_ns = want;
      control->set_period(std::chrono::nanoseconds(interval_ns));
    }
  }
  // Control interval = average RTT of the flows (§III-C), floored; slow
  // ticks while idle.
  uint64_t control_period(uint64_t now) const {
    uint64_t want = uint64_t(avg_srtt_us * 1000);
    want = std::clamp<uint64_t>(want, uint64_t(cfg.control_interval_min_us) * 1000, 100'000'000ull);
    // Slow ticks only once the interface has been quiet for a while: a
    // single interval without data in the middle of a transfer is exactly
    // when eq. (6) and the idle-pipe rule must keep running.
    uint64_t last_data = load(&st->last_data_ns);
    if (!engine->held() && (!last_data || now > last_data + 200'000'000ull))
      want = std::max<uint64_t>(want, 20'000'000ull);
    return want;
  }
  // The first hold after an idle spell: the slow tick would leave the
  // control (eq. 6, the idle rule, the flow scan that clears quiet flows)
  // up to 20 ms behind the first incast, so the fast ticks start now (a
  // period change alone takes effect only after the pending slow tick).
  void wake_control(uint64_t now) {
    if (!engine->held()) return;
    uint64_t want = control_period(now);
    if (want >= interval_ns) return;
    interval_ns = want;
    control = loop->every(std::chrono::nanoseconds(interval_ns), [this] { on_control(); });
  }
};

PacModule::PacModule(const ModuleContext& ctx) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.ifname = ctx.iface.name;
  m.cfg = ctx.config.get<PacConfig>();
  m.fail_open_ns = uint64_t(m.cfg.fail_open_ms) * 1'000'000ull;
  m.busy_poll_ns = uint64_t(m.cfg.busy_poll_us) * 1000ull;
  m.loop = &ctx.loop;
  auto& s = m.skel;
  s->rodata->reinject_mark = m.cfg.reinject_mark;
  s->rodata->fail_open_ns = m.fail_open_ns;
  s->rodata->account_requests = m.cfg.account_requests ? 1 : 0;
  s->rodata->cap_to_response = m.cfg.cap_to_response ? 1 : 0;
  s->rodata->hold_requests = m.cfg.hold_requests ? 1 : 0;
  s->rodata->request_max_bytes = m.cfg.request_max_bytes;
  s->rodata->trigger_age_min_ns = uint64_t(m.cfg.trigger_age_min_us) * 1000ull;
  s->rodata->rwnd_cap_bytes = m.cfg.rwnd_cap_bytes;
  s->rodata->n_local_ports = static_cast<__u32>(m.cfg.local_ports.size());
  for (size_t i = 0; i < m.cfg.local_ports.size(); ++i) {
    s->rodata->local_ports[i].lo = m.cfg.local_ports[i].lo;
    s->rodata->local_ports[i].hi = m.cfg.local_ports[i].hi;
  }
  s->rodata->n_remote_ports = static_cast<__u32>(m.cfg.remote_ports.size());
  for (size_t i = 0; i < m.cfg.remote_ports.size(); ++i) {
    s->rodata->remote_ports[i].lo = m.cfg.remote_ports[i].lo;
    s->rodata->remote_ports[i].hi = m.cfg.remote_ports[i].hi;
  }
  s->rodata->n_prefixes = static_cast<__u32>(m.cfg.remote_prefixes.size());
  for (size_t i = 0; i < m.cfg.remote_prefixes.size(); ++i) {
    const auto& p = m.cfg.remote_prefixes[i];
    s->rodata->prefixes[i].family = static_cast<__u8>(p.family);
    s->rodata->prefixes[i].len = p.len;
    std::memcpy(const_cast<__u32*>(s->rodata->prefixes[i].addr), p.addr, 16);
  }
  s.pin_maps(ctx.pin_dir);
  s.load();
  m.st = &s->bss->pac;
  m.flows_fd = bpf_map__fd(s->maps.sl_pac_flows_v2);
  m.ctl_fd = bpf_map__fd(s->maps.sl_pac_ctl_v2);
  // The pinned maps are re-adopted (load() reused them: the verdict
  // counters go on, the ring and the tables are the same objects), but a
  // previous run's flows are not: their held ACKs died with that process,
  // and what their entries count (expected bytes, bound shares, the epochs
  // they are valid in, their ids and quiet timers) refers to that process's
  // .bss, which is not pinned and starts at zero here. Start them clean:
  // each flow is known again from its next segment (docs/operations.md
  // "kill -9 under traffic").
  {
    // Keys first, then the deletes (restarting a key walk from the first
    // bucket after each delete was quadratic in a full table).
    std::vector<sluice_pac_flow_key> old;
    for_each_entry<sluice_pac_flow_key, sluice_pac_flow>(
        m.flows_fd, [&old](const sluice_pac_flow_key& k, const sluice_pac_flow&) { old.push_back(k); });
    size_t forgotten = 0;
    for (const auto& k : old)
      if (bpf_map_delete_elem(m.flows_fd, &k) == 0) ++forgotten;
    if (forgotten)
      SLOG_INFO("PAC_READOPTED",
                "{}: re-adopted the pinned PAC maps under {}; {} flows of the previous run start clean (their held "
                "ACKs died with it)",
                m.ifname, ctx.pin_dir, forgotten);
    // The control array: every slot free (ids restart with the .bss).
    std::vector<__u32> slots(SLUICE_PAC_CTL_SLOTS);
    std::vector<sluice_pac_flow_ctl> zero(SLUICE_PAC_CTL_SLOTS);
    for (__u32 i = 0; i < SLUICE_PAC_CTL_SLOTS; ++i) slots[i] = i;
    __u32 count = SLUICE_PAC_CTL_SLOTS;
    if (bpf_map_update_batch(m.ctl_fd, slots.data(), zero.data(), &count, nullptr) != 0)
      for (__u32 i = 0; i < SLUICE_PAC_CTL_SLOTS; ++i) bpf_map_update_elem(m.ctl_fd, &slots[i], &zero[i], BPF_ANY);
  }
  store(&m.st->threshold, sluice_pac_payload_capacity(m.cfg.buffer_bytes));
  m.reinjector = std::make_unique<Reinjector>(m.ifname, m.cfg.reinject_mark);
  m.engine = std::make_unique<Engine>(params_of(m.cfg), m);
  m.corrector = std::make_unique<DeviationCorrector>(m.cfg.lambda, m.engine->params().ewma_gain);
  m.rb = ring_buffer__new(bpf_map__fd(s->maps.sl_pac_evt_v1), &Impl::on_sample, &m, nullptr);
  if (!m.rb) throw SysError("PAC: ring buffer", errno);
  // Alive before attaching, so the first ACKs are already controlled.
  uint32_t hb_ms = std::min(ctx.config.agent.heartbeat_ms, m.cfg.fail_open_ms / 3);
  m.beat = ctx.loop.heartbeats().add(&m.st->live, std::chrono::milliseconds(std::max<uint32_t>(hb_ms, 1)),
                                     kPacLoopStall, std::chrono::milliseconds(m.cfg.fail_open_ms), "PAC " + m.ifname);
  // A held request must look sent to TCP (TC_ACT_STOLEN), which only
  // cls_bpf honours; tcx turns it into "next". hold_requests therefore
  // attaches through clsact whatever agent.attach_mode says.
  AttachMode mode = m.cfg.hold_requests ? AttachMode::Clsact : ctx.attach_mode;
  if (mode != ctx.attach_mode)
    SLOG_INFO("PAC_CLSACT", "{}: pac.hold_requests needs TC_ACT_STOLEN: attaching through clsact", m.ifname);
  m.attachments.push_back(TcAttachment::attach(m.ifname, Hook::Ingress, bpf_program__fd(s->progs.pac_ingress),
                                               "pac_ingress", kPacTcPrio, mode, ctx.config.agent.state_dir));
  m.attachments.push_back(TcAttachment::attach(m.ifname, Hook::Egress, bpf_program__fd(s->progs.pac_egress),
                                               "pac_egress", kPacTcPrio, mode, ctx.config.agent.state_dir));
  m.rb_watch = ctx.loop.watch_readable(ring_buffer__epoll_fd(m.rb), [&m] { m.on_readable(); });
  m.heartbeat = ctx.loop.every(std::chrono::milliseconds(std::max<uint32_t>(hb_ms, 1)), [&m] { m.on_heartbeat(); });
  m.control = ctx.loop.every(std::chrono::nanoseconds(m.interval_ns), [&m] { m.on_control(); });
  SLOG_INFO(
      "PAC_STARTED",
      "{}: PAC buffer {} B (threshold {} B of payload), MLFQ {} levels, fail-open after {} ms, re-inject mark {:#x}",
      m.ifname, m.cfg.buffer_bytes, sluice_pac_payload_capacity(m.cfg.buffer_bytes), m.engine->levels(),
      m.cfg.fail_open_ms, m.cfg.reinject_mark);
}

PacModule::~PacModule() {
  if (!impl_) return;
  Impl& m = *impl_;
  m.alive.reset();
  m.control.reset();
  m.heartbeat.reset();
  m.beat.reset();
  m.rb_watch.reset();
  // Held ACKs are released, never kept: drain the ring, then send all.
  if (m.rb) ring_buffer__consume(m.rb);
  size_t n = m.engine ? m.engine->flush(monotonic_ns()) : 0;
  if (n) SLOG_INFO("PAC_FLUSHED", "{}: released {} held ACKs on shutdown", m.ifname, n);
  while (!m.attachments.empty()) m.attachments.pop_back();
}

std::vector<ProgramCounters> PacModule::counters() const {
  return {{"pac", read_reason_counters(bpf_map__fd(impl_->skel->maps.sl_counters))}};
}

nlohmann::json PacModule::status() const {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& t : impl_->attachments)
    a.push_back({{"program", t.prog_name()}, {"hook", to_string(t.hook())}, {"mode", to_string(t.mode())}});
  return {{"attachments", a}, {"pin_dir", impl_->skel.pin_dir()}, {"object", impl_->skel.name()}};
}

nlohmann::json PacModule::stats() const {
  const Impl& m = *impl_;
  const auto& es = m.engine->stats();
  nlohmann::json levels = nlohmann::json::array();
  for (size_t l = 0; l < m.engine->levels(); ++l) levels.push_back(m.engine->held_at_level(l));
  nlohmann::json hist = nlohmann::json::array();
  for (size_t b = 0; b < es.hold_hist.size(); ++b)
    hist.push_back({{"le_us", b < EngineStats::kHoldBucketsUs.size() ? nlohmann::json(EngineStats::kHoldBucketsUs[b])
                                                                     : nlohmann::json("+Inf")},
                    {"count", es.hold_hist[b]}});
  uint64_t now = monotonic_ns(), hb = load(&m.st->live.heartbeat_ns);
  return {
      {"in_flight_bytes", load(&m.st->in_flight)},
      {"threshold_bytes", load(&m.st->threshold)},
      {"alpha", m.alpha},
      {"control_interval_us", m.interval_ns / 1000},
      {"avg_srtt_us", m.avg_srtt_us},
      {"held", m.engine->held()},
      {"held_per_level", levels},
      {"flows", m.bpf_flows},
      {"agent_flows", m.engine->flows()},
      {"heartbeat_age_ms", hb && now > hb ? (now - hb) / 1'000'000 : 0},
      {"object", m.skel.name()},
      {"corrections", m.corrections},
      {"idle_resets", m.idle_resets},
      {"phantom_bytes", load(&m.st->phantom_bytes)},
      {"phantom_events", load(&m.st->phantom_events)},
      {"rwnd_clamped", load(&m.st->rwnd_clamped)},
      {"new_flows", load(&m.st->new_flows)},
      {"first_window_bytes", load(&m.st->first_window)},
      {"resp_cut_bytes", load(&m.st->resp_cut)},
      {"uncounted_bytes", load(&m.st->uncounted)},
      {"bound_bytes", load(&m.st->bound)},
      {"threshold_changes", m.threshold_changes},
      {"stalls", m.stalls},
      {"busy_poll_us", m.poll_ns / 1000},
      {"busy_poll_passes", m.poll_passes},
      {"expired_flows", m.expired},
      // The LRU table's evictions: flows the programs inserted that are
      // neither in the table (at the last full scan) nor removed by the agent.
      {"flow_inserts", load(&m.st->flow_inserts)},
      {"timer_fails", load(&m.st->timer_fails)},
      {"quiet_swept", m.quiet_swept},
      {"flows_evicted", m.evicted()},
      {"scan_passes", m.scan_passes},
      {"scan_tick_us_max", m.scan_ns_max / 1000},
      {"scan_tick_us_mean", m.scan_ticks ? double(m.scan_ns_total) / double(m.scan_ticks) / 1000.0 : 0.0},
      {"scan_pass_ms_last", double(m.pass_ns_last) / 1e6},
      {"scan_pass_ticks_last", m.pass_ticks_last},
      {"held_events", es.held_events},
      {"released", es.released},
      {"released_queue_full", es.released_queue_full},
      {"released_max_hold", es.released_max_hold},
      {"released_flush", es.released_flush},
      {"send_failures", es.send_failures},
      {"dropped_stale", es.dropped_stale},
      {"dropped_superseded", es.dropped_superseded},
      {"dropped_teardown", es.dropped_teardown},
      {"stale_events", es.stale_events},
      {"hold_time_mean_us", es.hold_count ? double(es.hold_sum_us) / double(es.hold_count) : 0.0},
      {"hold_time_hist", hist},
  };
}

void PacModule::metrics(std::vector<MetricSample>& out) const {
  const Impl& m = *impl_;
  const std::string& ifn = m.ifname;
  const auto& es = m.engine->stats();
  auto g = [&](const char* name, const char* help, double v) {
    out.push_back({name, help, false, {{"iface", ifn}}, v});
  };
  auto c = [&](const char* name, const char* help, std::vector<std::pair<std::string, std::string>> l, double v) {
    l.insert(l.begin(), {"iface", ifn});
    out.push_back({name, help, true, l, v});
  };
  g("sluice_pac_in_flight_bytes", "PAC in-flight estimate (eq. 4/5)", double(load(&m.st->in_flight)));
  g("sluice_pac_threshold_bytes", "PAC threshold (eq. 2)", double(load(&m.st->threshold)));
  g("sluice_pac_alpha", "Fraction of CE-marked data in the last control interval", m.alpha);
  g("sluice_pac_flows", "Flows in the PAC table", double(m.bpf_flows));
  for (size_t l = 0; l < m.engine->levels(); ++l)
    out.push_back({"sluice_pac_held_acks",
                   "ACKs held in the MLFQ",
                   false,
                   {{"iface", ifn}, {"level", std::to_string(l)}},
                   double(m.engine->held_at_level(l))});
  c("sluice_pac_corrections_total", "Deviation corrections applied (eq. 6)", {}, double(m.corrections));
  c("sluice_pac_idle_resets_total", "In-flight estimate cleared: nothing arrived or left for 2 RTT", {},
    double(m.idle_resets));
  c("sluice_pac_phantom_bytes_total", "Expected bytes written off: triggered, never arrived (trigger age)", {},
    double(load(&m.st->phantom_bytes)));
  c("sluice_pac_new_flows_total", "Flows started by our SYN, SYN-ACK or first data segment", {},
    double(load(&m.st->new_flows)));
  c("sluice_pac_timer_fails_total", "Attempts to arm a flow's quiet timer that failed (allocation)", {},
    double(load(&m.st->timer_fails)));
  c("sluice_pac_quiet_swept_total", "Shares of quiet flows without a timer that the agent's flow scan cleared", {},
    double(m.quiet_swept));
  c("sluice_pac_flow_inserts_total", "Flows the datapath inserted into the PAC table", {},
    double(load(&m.st->flow_inserts)));
  c("sluice_pac_flows_evicted_total", "Flows the PAC table (LRU) evicted for newer ones", {}, double(m.evicted()));
  c("sluice_pac_first_window_bytes_total", "Bytes counted for new flows' first windows", {},
    double(load(&m.st->first_window)));
  c("sluice_pac_response_cut_bytes_total", "Trigger bytes removed by the response cap (cap_to_response)", {},
    double(load(&m.st->resp_cut)));
  c("sluice_pac_uncounted_bytes_total", "Data that arrived while the in-flight estimate was already 0", {},
    double(load(&m.st->uncounted)));
  c("sluice_pac_released_total", "Held ACKs re-injected", {{"why", "threshold"}}, double(es.released));
  c("sluice_pac_released_total", "Held ACKs re-injected", {{"why", "queue_full"}}, double(es.released_queue_full));
  c("sluice_pac_released_total", "Held ACKs re-injected", {{"why", "max_hold"}}, double(es.released_max_hold));
  c("sluice_pac_released_total", "Held ACKs re-injected", {{"why", "flush"}}, double(es.released_flush));
  c("sluice_pac_dropped_total", "Held ACKs dropped", {{"why", "stale"}}, double(es.dropped_stale));
  c("sluice_pac_dropped_total", "Held ACKs dropped", {{"why", "superseded"}}, double(es.dropped_superseded));
  c("sluice_pac_dropped_total", "Held ACKs dropped", {{"why", "teardown"}}, double(es.dropped_teardown));
  c("sluice_pac_dropped_total", "Held ACKs dropped", {{"why", "send_failure"}}, double(es.send_failures));
  c("sluice_pac_busy_poll_seconds_total", "Time the agent polled for room while ACKs were held", {},
    double(m.poll_ns) / 1e9);
  c("sluice_pac_stalls_total", "Agent loop stalls longer than fail_open_ms", {}, double(m.stalls));
  uint64_t cum = 0;
  for (size_t b = 0; b < es.hold_hist.size(); ++b) {
    cum += es.hold_hist[b];
    std::string le = b < EngineStats::kHoldBucketsUs.size() ? std::to_string(EngineStats::kHoldBucketsUs[b]) : "+Inf";
    c("sluice_pac_hold_time_us_bucket", "Time ACKs spent held (µs)", {{"le", le}}, double(cum));
  }
  c("sluice_pac_hold_time_us_sum", "Time ACKs spent held (µs)", {}, double(es.hold_sum_us));
  c("sluice_pac_hold_time_us_count", "Time ACKs spent held (µs)", {}, double(es.hold_count));
}

std::unique_ptr<Module> make_pac_module(const ModuleContext& ctx) { return std::make_unique<PacModule>(ctx); }

}  // namespace sluice::pac
