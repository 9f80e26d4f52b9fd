// Random and mutated frames through BPF_PROG_TEST_RUN: for each program,
// SLUICE_BPF_RANDOM_FRAMES (default 10^6) frames - valid packets from the
// builder with random fields, then truncated, bit-flipped, with a bad IHL,
// IPv6 extension chains, stacked VLAN tags, zero-length and oversized TCP
// options, or plain random bytes. Invariants: every run succeeds, the
// verdict is one the program may return, and every frame is counted under
// exactly one reason. The seed and inputs per second are
// printed; a failure names the frame.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <cstdlib>
#include <random>
#include <set>

#include "flowstat.skel.h"
#include "core/bpf_util.h"
#include "lib/packet.h"
#include "lib/prog_test.h"
#include "sluice/flow.h"
#include "sluice/pac.h"  // before the skeleton: it names these structs
#include "pac_tc.skel.h"
#include "pac_tc_compat.skel.h"
#include "core/heartbeat.h"
#include "ein.skel.h"

SLUICE_SKELETON(flowstat);
SLUICE_SKELETON_TWIN(pac_tc, pac_tc_compat, sluice::liveness_object);
SLUICE_SKELETON(ein);

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr int kNext = -1;

size_t frames() {
  const char* e = std::getenv("SLUICE_BPF_RANDOM_FRAMES");
  return e ? std::strtoull(e, nullptr, 10) : 1'000'000;
}

class FrameGen {
 public:
  explicit FrameGen(uint64_t seed) : rng_(seed) {}
  Bytes next() {
    uint32_t kind = pick(16);
    if (kind == 0) {
      // Plain random bytes (BPF_PROG_TEST_RUN needs an Ethernet header).
      Bytes b(14 + pick(300));
      for (auto& x : b) x = uint8_t(rng_());
      return b;
    }
    Bytes b = build(spec());
    switch (kind) {
      case 1:
      case 2: return truncate(b, 14 + pick(uint32_t(b.size() - 13)));
      case 3:
      case 4: {
        for (uint32_t i = 0, n = 1 + pick(8); i < n; ++i) b[pick(uint32_t(b.size()))] ^= uint8_t(1u << pick(8));
        return b;
      }
      case 5: {
        // IHL anywhere in 0..15 (IPv4 without VLAN: byte 14).
        if (b[12] == 0x08 && b[13] == 0x00) b[14] = uint8_t(0x40 | pick(16));
        return b;
      }
      case 6: {
        // IPv6 extension chain: hop-by-hop/routing/fragment/dst-opts
        // headers, each pointing at the next, inserted before the L4 header.
        if (b[12] != 0x86 || b[13] != 0xdd) return b;
        static const uint8_t ext[] = {0, 43, 44, 60};
        uint8_t l4 = b[20];
        Bytes chain;
        uint32_t n = 1 + pick(6);
        uint8_t first = ext[pick(4)];
        uint8_t cur = first;
        for (uint32_t i = 0; i < n; ++i) {
          uint8_t nxt = i + 1 < n ? ext[pick(4)] : (pick(8) ? l4 : uint8_t(pick(256)));
          uint32_t len8 = cur == 44 ? 0 : pick(3);
          size_t at = chain.size();
          chain.resize(at + 8 + 8 * len8, 0);
          chain[at] = nxt;
          chain[at + 1] = uint8_t(len8);
          cur = nxt;
        }
        b[20] = first;
        b.insert(b.begin() + 54, chain.begin(), chain.end());
        uint16_t pl = uint16_t((b[18] << 8 | b[19]) + chain.size());
        b[18] = uint8_t(pl >> 8);
        b[19] = uint8_t(pl);
        return b;
      }
      case 7: {
        // One to three more 802.1Q/802.1ad tags.
        for (uint32_t i = 0, n = 1 + pick(3); i < n; ++i) {
          uint8_t tag[4] = {uint8_t(pick(2) ? 0x81 : 0x88), uint8_t(pick(2) ? 0x00 : 0xa8), uint8_t(pick(256)),
                            uint8_t(pick(256))};
          b.insert(b.begin() + 12, tag, tag + 4);
        }
        return b;
      }
      default: return b;
    }
  }

 private:
  uint32_t pick(uint32_t n) { return n ? uint32_t(rng_() % n) : 0; }
  PacketSpec spec() {
    PacketSpec s;
    s.ipv6 = pick(3) == 0;
    if (s.ipv6) {
      s.src = pick(2) ? "fd00::1" : "fd00::2";
      s.dst = pick(2) ? "fd00::2" : "fd00::1";
    } else {
      s.src = pick(2) ? "10.0.0.1" : "10.0.0.2";
      s.dst = pick(2) ? "10.0.0.2" : "10.0.0.1";
    }
    uint32_t p = pick(10);
    s.proto = p < 7 ? 6 : p < 9 ? 17 : uint8_t(pick(256));
    s.sport = pick(2) ? 5201 : uint16_t(1 + pick(65535));
    s.dport = pick(2) ? 40000 : uint16_t(1 + pick(65535));
    s.tos = uint8_t(pick(256));
    s.seq = uint32_t(rng_());
    s.ack = uint32_t(rng_());
    s.flags = uint8_t(pick(4) ? 0x10 | (pick(256) & 0x2f) : pick(256));
    s.window = uint16_t(pick(65536));
    if (pick(8) == 0) s.frag_off = uint16_t(pick(65536));
    if (pick(6) == 0) s.vlan = int(pick(4096));
    s.payload = pick(4) ? 0 : pick(1500);
    if (s.proto == 6 && pick(2)) {
      // Options: real ones, zero-length ones, and lengths past the header.
      uint32_t n = 1 + pick(6);
      for (uint32_t i = 0; i < n && s.tcp_options.size() < 40; ++i) {
        switch (pick(6)) {
          case 0: {
            auto t = tcp_opt_timestamps(uint32_t(rng_()), uint32_t(rng_()));
            s.tcp_options.insert(s.tcp_options.end(), t.begin(), t.end());
            break;
          }
          case 1: {
            auto t = tcp_opt_sack({{uint32_t(rng_()), uint32_t(rng_())}});
            s.tcp_options.insert(s.tcp_options.end(), t.begin(), t.end());
            break;
          }
          case 2: s.tcp_options.push_back(1); break;                                          // NOP
          case 3: s.tcp_options.insert(s.tcp_options.end(), {uint8_t(pick(256)), 0}); break;  // zero length
          case 4:
            s.tcp_options.insert(s.tcp_options.end(), {uint8_t(pick(256)), uint8_t(40 + pick(216))});
            break;                                    // oversized
          case 5: s.tcp_options.push_back(0); break;  // EOL
        }
      }
      if (s.tcp_options.size() > 40) s.tcp_options.resize(40);
    }
    return s;
  }
  std::mt19937_64 rng_;
};

uint64_t total_packets(int counters_fd) {
  uint64_t n = 0;
  for (const auto& c : read_reason_counters(counters_fd)) n += c.packets;
  return n;
}

// One frame through BPF_PROG_TEST_RUN: the verdict, or nullopt when the
// kernel refuses the frame before any program sees it (EINVAL: the test-run
// interface wants a complete network header for the EtherType it finds).
std::optional<int> run_frame(int prog_fd, const Bytes& pkt) {
  LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = pkt.data(), .data_size_in = static_cast<__u32>(pkt.size()));
  if (bpf_prog_test_run_opts(prog_fd, &o) == 0) return static_cast<int>(o.retval);
  int e = errno;
  EXPECT_EQ(e, EINVAL) << "BPF_PROG_TEST_RUN: " << std::strerror(e);
  return std::nullopt;
}

// Runs generated frames through prog_fd until frames() of them reached the
// program; returns inputs per second.
double drive(const char* name, int prog_fd, const std::set<int>& verdicts, int counters_fd, bool counted_once,
             uint64_t seed) {
  size_t n = frames(), ran = 0, refused = 0;
  FrameGen g(seed);
  uint64_t before = total_packets(counters_fd);
  auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; ran < n; ++i) {
    Bytes f = g.next();
    std::optional<int> v = run_frame(prog_fd, f);
    if (!v) {
      if (++refused > n) {
        ADD_FAILURE() << name << ": the kernel refused more frames than it ran";
        return 0;
      }
      continue;
    }
    ++ran;
    if (!verdicts.count(*v)) {
      std::string hex;
      for (uint8_t b : f) {
        char s[4];
        std::snprintf(s, sizeof(s), "%02x", b);
        hex += s;
      }
      ADD_FAILURE() << name << " frame " << i << " (seed " << seed << "): verdict " << *v << "\n" << hex;
      return 0;
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uint64_t counted = total_packets(counters_fd) - before;
  if (counted_once) {
    EXPECT_EQ(counted, n) << name << ": every frame counted under exactly one reason";
  }
  double rate = double(n) / secs;
  std::printf("%-16s %zu frames in %.1f s: %.0f inputs/s (seed %llu, %llu counted, %zu refused by the kernel)\n", name,
              n, secs, rate, (unsigned long long)seed, (unsigned long long)counted, refused);
  return rate;
}

TEST(BpfRandomInput, Flowstat) {
  require_root();
  Skeleton<flowstat> s;
  s.load();
  int counters = bpf_map__fd(s->maps.sl_counters);
  // flowstat never changes a verdict: always the neutral one.
  drive("flowstat_in", bpf_program__fd(s->progs.flowstat_in), {kNext}, counters, true, 1);
  drive("flowstat_out", bpf_program__fd(s->progs.flowstat_out), {kNext}, counters, true, 2);
  // The flow table stays within its bounds (the kernel enforces max_entries;
  // the program must count, not fail, once it is full).
  uint32_t max = bpf_map__max_entries(s->maps.sl_fs_flows_v1);
  uint32_t entries = 0;
  sluice_flow_key k{}, next{};
  int fd = bpf_map__fd(s->maps.sl_fs_flows_v1);
  for (void* cur = nullptr; bpf_map_get_next_key(fd, cur, &next) == 0; cur = &k, k = next) ++entries;
  EXPECT_LE(entries, max);
}

TEST(BpfRandomInput, Pac) {
  require_root();
  Skeleton<pac_tc> s;
  s.load();
  int counters = bpf_map__fd(s->maps.sl_counters);
  // No agent has ever beaten the heartbeat: PAC fails open and never holds
  // (SHOT/STOLEN are only the hold path's verdicts), whatever arrives.
  drive("pac_ingress", bpf_program__fd(s->progs.pac_ingress), {kNext}, counters, true, 3);
  drive("pac_egress", bpf_program__fd(s->progs.pac_egress), {kNext}, counters, true, 4);
}

TEST(BpfRandomInput, Ein) {
  require_root();
  Skeleton<ein> s;
  s.load();
  int counters = bpf_map__fd(s->maps.sl_counters);
  drive("ein_ingress", bpf_program__fd(s->progs.ein_ingress), {kNext}, counters, true, 5);
  drive("ein_egress", bpf_program__fd(s->progs.ein_egress), {kNext}, counters, true, 6);
}

}  // namespace
