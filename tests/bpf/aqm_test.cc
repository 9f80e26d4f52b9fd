// aqm (bpf/switch/aqm.bpf.c) through BPF_PROG_TEST_RUN with scripted queue
// samples: the EIN marks follow Pulser's Algorithm 1 (checked against a
// direct implementation of it and against hand-computed cases), CE follows
// DCTCP step marking and RFC 3168, headers stay valid. Every case runs on
// both objects built from the source: aqm (backlog through
// bpf_cast_to_kern_ctx, 6.2+) and aqm_compat (backlog from the qdisc
// tracepoints, any kernel with tp-btf-qdisc).
#include <gtest/gtest.h>

#include <random>

#include "sluice/pulser.h"
#include "aqm.skel.h"
#include "aqm_compat.skel.h"
#include "core/bpf_util.h"
#include "lib/packet.h"
#include "lib/prog_test.h"

SLUICE_SKELETON(aqm);
SLUICE_SKELETON(aqm_compat);

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr int kNext = -1;

struct AqmParams {
  bool ecn = true, ein = true;
  uint64_t k = 20, hwm = 20;
  uint32_t n = 4;
  uint64_t threshold_per_s = 1000;  // packets/s
  uint8_t field = SLUICE_EIN_FIELD_TOS;
  uint16_t mask = 0x04;
  bool departure = false;  // [aqm] ein_mark = "departure"
};

// Pulser Algorithm 1, written as the paper states it (average gradient of
// the last N samples as Σ ΔQ / Σ ΔT, see aqm.bpf.c).
class Alg1 {
 public:
  explicit Alg1(const AqmParams& p) : p_(p) {}
  bool step(uint64_t t, uint64_t q) {
    s_.push_back({t, q});
    size_t span = std::min<size_t>(p_.n, s_.size() - 1);
    bool prev = ein_;
    ein_ = false;
    if (span) {
      auto [t0, q0] = s_[s_.size() - 1 - span];
      double dq = double(q) - double(q0);
      double dt = t > t0 ? double(t - t0) : 0;
      if (dt > 0 && dq > 0 && dq * 1e9 > double(p_.threshold_per_s) * dt) ein_ = true;
    }
    if (!ein_ && prev && q > p_.hwm) ein_ = true;
    return ein_;
  }

 private:
  AqmParams p_;
  std::vector<std::pair<uint64_t, uint64_t>> s_;
  bool ein_ = false;
};

// The parameter names the object: "aqm" or "aqm_compat".
class AqmTest : public ::testing::TestWithParam<std::string> {
 protected:
  bool compat() const { return GetParam() == "aqm_compat"; }
  // aqm reads the qdisc backlog through bpf_cast_to_kern_ctx; aqm_compat
  // needs nothing newer than 6.1.
  void SetUp() override {
    if (!compat()) SLUICE_REQUIRE_KERNEL(6, 2, "aqm (bpf_cast_to_kern_ctx)");
  }
  void load(const AqmParams& p) {
    require_root();
    skel_.reset();
    compat_skel_.reset();
    if (compat()) load_into(compat_skel_, p);
    else load_into(skel_, p);
  }
  template <typename S>
  void load_into(std::unique_ptr<Skeleton<S>>& sk, const AqmParams& p) {
    sk = std::make_unique<Skeleton<S>>();
    auto* ro = (*sk)->rodata;
    ro->ecn_enabled = p.ecn;
    ro->ein_enabled = p.ein;
    ro->qlen_unit = SLUICE_AQM_UNIT_PACKETS;
    ro->ecn_k = p.k;
    ro->ein_high_water = p.hwm;
    ro->ein_samples = p.n;
    ro->ein_threshold_per_s = p.threshold_per_s;
    ro->sample_source = SLUICE_AQM_SRC_SCRIPTED;
    ro->ein_field = p.field;
    ro->ein_mask = p.mask;
    ro->ein_at_departure = p.departure;
    sk->load();
    prog_ = bpf_program__fd((*sk)->progs.aqm_egress);
    departure_prog_ = bpf_program__fd((*sk)->progs.aqm_departure);
    script_map_ = bpf_map__fd((*sk)->maps.sl_aqm_scr_v1);
    counters_map_ = bpf_map__fd((*sk)->maps.sl_counters);
    state_map_ = bpf_map__fd((*sk)->maps.sl_aqm_state_v1);
  }
  int prog() const { return prog_; }
  void script(uint64_t t, uint64_t q) {
    sluice_aqm_script s{t, q};
    uint32_t k = 0;
    ASSERT_EQ(bpf_map_update_elem(script_map_, &k, &s, 0), 0);
  }
  uint64_t reason(uint32_t r) const { return read_reason_counters(counters_map_)[r].packets; }
  sluice_aqm_state state() const {
    sluice_aqm_state s{};
    uint32_t k = 0;
    bpf_map_lookup_elem_flags(state_map_, &k, &s, BPF_F_LOCK);
    return s;
  }
  // Runs one packet with the queue at q at time t; returns the output.
  Bytes run(const Bytes& pkt, uint64_t t, uint64_t q) {
    script(t, q);
    RunResult r = run_tc(prog(), pkt);
    EXPECT_EQ(r.retval, kNext);
    std::string why;
    EXPECT_TRUE(checksums_ok(r.out, &why)) << why;
    return r.out;
  }
  static uint8_t tos4(const Bytes& f) { return f[l3_offset(f) + 1]; }
  static uint8_t tclass6(const Bytes& f) {
    size_t l3 = l3_offset(f);
    return uint8_t((f[l3] & 0x0f) << 4 | f[l3 + 1] >> 4);
  }
  std::unique_ptr<Skeleton<aqm>> skel_;
  std::unique_ptr<Skeleton<aqm_compat>> compat_skel_;
  int prog_ = -1, departure_prog_ = -1, script_map_ = -1, counters_map_ = -1, state_map_ = -1;
};

PacketSpec tcp_data(uint8_t tos = 0x02 /* ECT(0) */) {
  PacketSpec s;
  s.tos = tos;
  s.payload = 1000;
  return s;
}

TEST_P(AqmTest, EinFollowsAlgorithm1OnAHandScript) {
  AqmParams p;  // N = 4, threshold 1000 packets/s, HWM = K = 20
  load(p);
  Bytes pkt = build(tcp_data());
  // Samples 1 ms apart. Queue growth over the last 4 samples must exceed
  // 1000/s, i.e. more than 4 packets over 4 ms.
  struct S {
    uint64_t q;
    bool ein;
    const char* why;
  } hand[] = {
      {0, false, "first sample: no gradient yet"},
      {2, true, "2 packets in 1 ms = 2000/s > 1000/s"},
      {3, true, "3 packets in 2 ms = 1500/s"},
      {4, true, "4 in 3 ms"},
      {5, true, "5 in 4 ms = 1250/s"},
      {5, false, "3 in 4 ms = 750/s, queue 5 below HighWaterMark 20"},
      {30, true, "27 in 4 ms"},
      {31, true, "still growing"},
      {31, true, "26 in 4 ms"},
      {31, true, "26 in 4 ms"},
      {31, true, "no growth over the last 4 samples but queue 31 > HWM 20: kept (lines 10-14)"},
      {25, true, "shrinking, still above HWM: kept"},
      {20, false, "queue 20 is not above HWM 20: released"},
      {25, false, "-6 in 4 ms and EIN_prev was 0: not set though above HWM"},
  };
  Alg1 ref(p);
  uint64_t t = 1'000'000'000;
  for (const auto& h : hand) {
    SCOPED_TRACE(h.why);
    t += 1'000'000;
    Bytes out = run(pkt, t, h.q);
    bool ein = tos4(out) & 0x04;
    EXPECT_EQ(ein, h.ein);
    EXPECT_EQ(ein, ref.step(t, h.q)) << "reference Algorithm 1 disagrees";
    EXPECT_EQ(state().ein, h.ein ? 1u : 0u);
  }
  auto st = state();
  EXPECT_EQ(st.samples, sizeof(hand) / sizeof(hand[0]));
  EXPECT_EQ(st.ein_on, 2u) << "two incasts detected (0 -> 1 transitions)";
  EXPECT_EQ(st.ein_hold, 2u) << "two samples kept by HighWaterMark";
}

// ein_mark = "departure": packets entering the queue get CE as before but
// no EIN; the program at the far end of the link writes EIN on TCP data
// that leaves while Algorithm 1 says incast, and on nothing else.
TEST_P(AqmTest, DepartureWritesEinOnDataLeavingDuringAnIncast) {
  AqmParams p;  // N = 4, threshold 1000 packets/s, HWM = K = 20
  p.departure = true;
  load(p);
  Bytes data = build(tcp_data());
  PacketSpec ack_spec;
  ack_spec.tos = 0x02;
  Bytes ack = build(ack_spec);
  PacketSpec udp_spec;
  udp_spec.proto = 17;
  Bytes udp = build(udp_spec);
  auto depart = [&](const Bytes& pkt) {
    RunResult r = run_tc(departure_prog_, pkt);
    EXPECT_EQ(r.retval, kNext);
    std::string why;
    EXPECT_TRUE(checksums_ok(r.out, &why)) << why;
    return r.out;
  };
  uint64_t t = 1'000'000'000;
  // Quiet queue: nothing is marked anywhere.
  run(data, t += 1'000'000, 0);
  EXPECT_EQ(depart(data), data);
  // An incast: 30 packets in 1 ms. On arrival: CE (over K) but no EIN.
  Bytes in = run(data, t += 1'000'000, 30);
  EXPECT_EQ(state().ein, 1u);
  EXPECT_EQ(tos4(in) & 0x04, 0) << "EIN is not written on arrival";
  EXPECT_EQ(tos4(in) & 0x03, 0x03) << "CE still is";
  // Leaving during the incast: data gets EIN (and keeps its ECN field);
  // a pure ACK and UDP pass untouched.
  Bytes out = depart(in);
  EXPECT_EQ(tos4(out), uint8_t(tos4(in) | 0x04));
  EXPECT_EQ(depart(ack), ack);
  EXPECT_EQ(depart(udp), udp);
  EXPECT_EQ(reason(SLUICE_R_AQM_DEPART_EIN), 1u);
  EXPECT_EQ(reason(SLUICE_R_AQM_EIN), 0u);
  // The queue drains below HighWaterMark and the last N samples no longer
  // rise: EIN is released and departures are left alone again.
  for (int i = 0; i < 5; ++i) run(data, t += 1'000'000, 10);
  EXPECT_EQ(state().ein, 0u);
  EXPECT_EQ(depart(data), data);
  EXPECT_EQ(reason(SLUICE_R_AQM_DEPART_EIN), 1u);
  EXPECT_EQ(reason(SLUICE_R_AQM_DEPART_NONE), 4u);
}

TEST_P(AqmTest, EinMatchesAlgorithm1OnRandomScripts) {
  for (uint32_t n : {1u, 5u, 50u, 255u}) {
    SCOPED_TRACE("N = " + std::to_string(n));
    AqmParams p;
    p.n = n;
    p.k = 30;
    p.hwm = 25;
    p.threshold_per_s = 2083;  // 0.25 × 100 Mbit/s in 1514-byte frames
    load(p);
    Alg1 ref(p);
    std::mt19937_64 rng(1234 + n);
    Bytes pkt = build(tcp_data());
    uint64_t t = 5'000'000'000, q = 0;
    int marked = 0, mismatches = 0;
    for (int i = 0; i < 1500; ++i) {
      // Bursts (incast), drains, plateaus, with uneven spacing.
      int phase = (i / 150) % 4;
      t += 20'000 + rng() % 400'000;
      int64_t d = phase == 0 ? int64_t(rng() % 4) : phase == 1 ? -int64_t(rng() % 3) : int64_t(rng() % 3) - 1;
      q = uint64_t(std::max<int64_t>(0, int64_t(q) + d));
      script(t, q);
      RunResult r = run_tc(prog(), pkt);
      bool ein = tos4(r.out) & 0x04;
      bool want = ref.step(t, q);
      if (ein != want && ++mismatches < 5) ADD_FAILURE() << "sample " << i << ": q=" << q << " marked " << ein;
      marked += ein;
    }
    EXPECT_EQ(mismatches, 0);
    EXPECT_GT(marked, 0) << "the script must exercise marking";
    EXPECT_LT(marked, 1500) << "and not marking";
  }
}

TEST_P(AqmTest, CeFollowsDctcpStepMarkingAndRfc3168) {
  AqmParams p;
  p.ein = false;  // CE alone here
  load(p);
  uint64_t t = 1'000'000'000;
  auto at = [&](const PacketSpec& s, uint64_t q) {
    t += 1'000'000;
    return run(build(s), t, q);
  };
  EXPECT_EQ(tos4(at(tcp_data(0x02), 20)) & 3, 0x02) << "queue at K: not above, unmarked";
  EXPECT_EQ(tos4(at(tcp_data(0x02), 21)) & 3, 0x03) << "ECT(0) above K: CE";
  EXPECT_EQ(tos4(at(tcp_data(0x01), 21)) & 3, 0x03) << "ECT(1) above K: CE";
  Bytes not_ect = build(tcp_data(0x00));
  EXPECT_EQ(at(tcp_data(0x00), 50), not_ect) << "Not-ECT is never CE-marked (RFC 3168): packet unchanged";
  Bytes ce = build(tcp_data(0x03));
  EXPECT_EQ(at(tcp_data(0x03), 50), ce) << "already CE: unchanged";
  PacketSpec udp;
  udp.proto = 17;
  udp.tos = 0x02;
  udp.payload = 200;
  EXPECT_EQ(tos4(at(udp, 50)) & 3, 0x03) << "any ECN-capable IP packet is marked";
  PacketSpec v6 = tcp_data(0x02 | 0xa0);
  v6.ipv6 = true;
  v6.src = "fd00::1";
  v6.dst = "fd00::2";
  EXPECT_EQ(tclass6(at(v6, 50)), 0xa3) << "IPv6: CE in the traffic class, DSCP kept";
  PacketSpec arp;
  arp.ethertype = 0x0806;
  Bytes arp_pkt = build(arp);
  EXPECT_EQ(at(arp, 50), arp_pkt) << "non-IP untouched";
  EXPECT_EQ(reason(SLUICE_R_AQM_CE), 4u);
  EXPECT_EQ(reason(SLUICE_R_AQM_NOT_ECT), 1u);
  EXPECT_EQ(reason(SLUICE_R_AQM_ALREADY_CE), 1u);
  EXPECT_EQ(reason(SLUICE_R_AQM_UNMARKED), 1u);
  EXPECT_EQ(reason(SLUICE_R_PASS_NOT_IP), 1u);
  EXPECT_EQ(reason(SLUICE_R_AQM_EIN) + reason(SLUICE_R_AQM_CE_EIN), 0u) << "EIN disabled";
}

TEST_P(AqmTest, EinGoesOnTcpDataOnly) {
  AqmParams p;
  p.ecn = false;  // EIN alone here
  load(p);
  uint64_t t = 1'000'000'000;
  auto at = [&](const PacketSpec& s, uint64_t q) {
    t += 1'000'000;
    return run(build(s), t, q);
  };
  at(tcp_data(), 0);
  EXPECT_TRUE(tos4(at(tcp_data(0x00), 10)) & 0x04) << "EIN does not need ECT; ECN bits untouched";
  EXPECT_EQ(tos4(at(tcp_data(0x00), 20)), 0x04);
  PacketSpec ack;  // pure ACK
  Bytes ack_pkt = build(ack);
  EXPECT_EQ(at(ack, 30), ack_pkt) << "pure ACKs carry no EIN";
  PacketSpec udp;
  udp.proto = 17;
  udp.payload = 100;
  Bytes udp_pkt = build(udp);
  EXPECT_EQ(at(udp, 40), udp_pkt) << "EIN is for TCP";
  EXPECT_EQ(tos4(at(tcp_data(0x02), 50)) & 3, 0x02) << "ecn = false: no CE above K";
  PacketSpec v6 = tcp_data(0x02);
  v6.ipv6 = true;
  v6.src = "fd00::1";
  v6.dst = "fd00::2";
  EXPECT_EQ(tclass6(at(v6, 60)), 0x06) << "IPv6: EIN bit in the traffic class";
  EXPECT_GE(reason(SLUICE_R_AQM_EIN), 3u);
}

TEST_P(AqmTest, EinInTheIpv4ReservedFlag) {
  AqmParams p;
  p.ecn = false;
  p.field = SLUICE_EIN_FIELD_IPV4_RSV;
  p.mask = SLUICE_EIN_IPV4_RSV_FLAG;
  load(p);
  uint64_t t = 1'000'000'000;
  PacketSpec df = tcp_data(0x02);
  df.frag_off = 0x4000;  // DF
  run(build(df), t += 1'000'000, 0);
  Bytes out = run(build(df), t += 1'000'000, 10);
  size_t l3 = l3_offset(out);
  EXPECT_EQ(out[l3 + 6], 0xc0) << "reserved flag set, DF kept";
  EXPECT_EQ(out[l3 + 1], 0x02) << "TOS untouched";
  PacketSpec v6 = tcp_data(0x02);
  v6.ipv6 = true;
  v6.src = "fd00::1";
  v6.dst = "fd00::2";
  Bytes v6pkt = build(v6);
  EXPECT_EQ(run(v6pkt, t += 1'000'000, 20), v6pkt) << "IPv6 has no such bit: unmarked";
}

INSTANTIATE_TEST_SUITE_P(Objects, AqmTest, ::testing::Values("aqm", "aqm_compat"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
