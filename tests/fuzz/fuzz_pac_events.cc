// PAC's agent engine fed what the BPF side and the map scans hand it: ring
// buffer records (sluice_pac_event, any bytes, possibly short, as
// on_sample copies them), flow samples, forgets, releases at any time, and
// a datapath whose in-flight, threshold and send results vary. Invariants:
// every held ACK is accounted exactly once (released by one of the rules,
// a failed send, or dropped for a counted reason, or still held); the
// per-level counts add up to the total; a flush empties the queue.
#include <vector>

#include "fuzz_input.h"
#include "mechanisms/pac/pac_core.h"

using namespace sluice::pac;

namespace {

struct Dp : Datapath {
  int64_t inflight = 0;
  uint64_t thr = 0;
  bool fail = false;
  uint64_t sends = 0;
  int64_t in_flight() override { return inflight; }
  uint64_t threshold() override { return thr; }
  bool send(const sluice_pac_flow_key&, const HeldAck& a) override {
    FUZZ_CHECK(a.frame_len <= SLUICE_PAC_FRAME_MAX);
    ++sends;
    if (fail) return false;
    inflight += a.req_bytes ? a.req_bytes : SLUICE_PAC_DEFAULT_MSS;
    return true;
  }
  void write_ctl(const sluice_pac_flow_key&, const sluice_pac_flow_ctl&) override {}
  void set_wake(uint64_t, uint64_t, uint64_t) override {}
};

// A few distinct flows, so events meet each other's queues.
sluice_pac_flow_key key_of(uint8_t i) {
  sluice_pac_flow_key k{};
  k.family = (i & 8) ? 6 : 4;
  k.raddr[0] = 0x0100000a + (i & 3);
  k.laddr[0] = 0x0200000a;
  k.rport = uint16_t(40000 + (i & 7));
  k.lport = 5201;
  return k;
}

void check(const Engine& e) {
  const EngineStats& s = e.stats();
  size_t per_level = 0;
  for (size_t l = 0; l < e.levels(); ++l) per_level += e.held_at_level(l);
  FUZZ_CHECK(per_level == e.held());
  uint64_t out = s.released + s.released_queue_full + s.released_max_hold + s.released_flush + s.send_failures +
                 s.dropped_stale + s.dropped_superseded + s.dropped_teardown;
  FUZZ_CHECK(s.held_events == out + e.held());
  size_t queued = 0;
  for (const auto& k : e.holding_flows()) queued += e.queued_acks(k).size();
  FUZZ_CHECK(queued == e.held());
  FUZZ_CHECK(e.order().size() == e.held());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sluice::fuzz::Input in(data, size);
  Params p;
  p.max_held = 1 + in.take<uint8_t>() % 64;
  uint8_t nlev = in.take<uint8_t>() % 4;
  p.level_bytes.clear();
  for (uint8_t i = 0; i < nlev; ++i) p.level_bytes.push_back(uint64_t(i + 1) * (1 + in.take<uint16_t>()));
  p.max_hold_ns = in.take<uint16_t>() * 1000ull;
  p.requests_yield = in.take<uint8_t>() & 1;
  Dp dp;
  dp.thr = in.take<uint32_t>();
  Engine e(p, dp);
  uint64_t now = 1'000'000'000;
  while (!in.empty()) {
    uint8_t op = in.take<uint8_t>();
    now += in.take<uint16_t>() * 100ull;
    switch (op % 8) {
      case 0:
      case 1: {
        // A record as on_sample copies it: at least up to `frame`, the rest
        // zero when short.
        sluice_pac_event ev;
        size_t n = in.take_bytes(&ev, sizeof(ev));
        if (n < offsetof(sluice_pac_event, frame)) break;
        if (op & 8) ev.key = key_of(op >> 4);
        e.on_event(ev, now);
        break;
      }
      case 2: e.release(now); break;
      case 3: {
        uint8_t i = in.take<uint8_t>();
        e.on_flow_sample(key_of(i), in.take<uint32_t>(), in.take<uint32_t>(), i & 0x80);
        break;
      }
      case 4: e.forget(key_of(in.take<uint8_t>())); break;
      case 5: dp.inflight = in.take<int32_t>(); break;
      case 6: dp.fail = !dp.fail; break;
      case 7: {
        e.flush(now);
        FUZZ_CHECK(e.held() == 0);
        break;
      }
    }
    check(e);
  }
  e.flush(now);
  FUZZ_CHECK(e.held() == 0);
  check(e);
  return 0;
}
