// Scale drill (docs/operations.md "Drills"): 100,000 distinct 5-tuples, one
// packet each, through flowstat's ingress program by BPF_PROG_TEST_RUN, into
// a flow table of SLUICE_FLOW_TABLE_SIZE (65,536) entries. The LRU table
// evicts the oldest flows instead of refusing new ones: every packet is
// counted and passed, none is "table full", the table stays within its size,
// the newest flows are in it and the oldest are gone; evictions are the
// flows inserted minus the entries left. Printed, not asserted: the
// per-packet run time while the table fills against while every insert
// evicts (same run).
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/bpf_util.h"
#include "flowstat.skel.h"
#include "lib/packet.h"
#include "lib/prog_test.h"
#include "sluice/flow.h"
#include "sluice/reasons.h"

SLUICE_SKELETON(flowstat);

using namespace sluice;
using namespace sluice::test;

namespace {

// SLUICE_BPF_SCALE_FLOWS overrides (the VM suite, under emulation, runs
// fewer; more than the table's size either way, so that it evicts).
int flow_count() {
  const char* e = getenv("SLUICE_BPF_SCALE_FLOWS");
  int n = e ? atoi(e) : 100'000;
  return std::max(n, SLUICE_FLOW_TABLE_SIZE + 2000);
}
constexpr int kNext = -1;  // TC_ACT_UNSPEC

// Flow i: 10.(i / 65536 + 1).x.y:sport -> 10.200.0.1:5201, distinct for every i.
PacketSpec flow_spec(int i) {
  PacketSpec s;
  s.src = "10." + std::to_string(i / 65536 + 1) + "." + std::to_string((i / 256) % 256) + "." + std::to_string(i % 256);
  s.dst = "10.200.0.1";
  s.sport = uint16_t(10000 + i % 50000);
  s.payload = 100;
  return s;
}

sluice_flow_key key_of(const PacketSpec& s) {
  sluice_flow_key k{};
  k.family = 4;
  inet_pton(AF_INET, s.src.c_str(), k.saddr);
  inet_pton(AF_INET, s.dst.c_str(), k.daddr);
  k.sport = htons(s.sport);
  k.dport = htons(s.dport);
  k.proto = s.proto;
  k.dir = 0;  // ingress
  return k;
}

TEST(FlowScale, HundredThousandFlowsEvictTheOldestAndEveryPacketIsCounted) {
  require_root();
  const int kFlows = flow_count();
  Skeleton<flowstat> skel;
  skel.load();
  const int prog = bpf_program__fd(skel->progs.flowstat_in);
  const int flows_fd = bpf_map__fd(skel->maps.sl_fs_flows_v1);
  const int counters_fd = bpf_map__fd(skel->maps.sl_counters);

  std::vector<uint32_t> ns(kFlows);
  int wrong_verdicts = 0;
  for (int i = 0; i < kFlows; ++i) {
    RunResult r = run_tc(prog, build(flow_spec(i)));
    if (r.retval != kNext) ++wrong_verdicts;
    ns[size_t(i)] = r.duration_ns;
  }
  EXPECT_EQ(wrong_verdicts, 0) << "flowstat must pass every packet";

  ReasonCounters c = read_reason_counters(counters_fd);
  EXPECT_EQ(c[SLUICE_R_PASS_COUNTED].packets, uint64_t(kFlows)) << "every packet counted once";
  EXPECT_EQ(c[SLUICE_R_PASS_FLOW_TABLE_FULL].packets, 0u) << "the LRU table refused a new flow";

  size_t entries = 0;
  sluice_flow_key k{}, next{};
  for (void* prev = nullptr; bpf_map_get_next_key(flows_fd, prev, &next) == 0; prev = &k) {
    k = next;
    ++entries;
  }
  EXPECT_LE(entries, size_t(SLUICE_FLOW_TABLE_SIZE));
  EXPECT_GE(entries, size_t(SLUICE_FLOW_TABLE_SIZE) / 2) << "the table emptied instead of evicting";
  const size_t evicted = size_t(kFlows) - entries;

  auto present = [&](int from, int to) {
    int n = 0;
    sluice_flow_stats st{};
    for (int i = from; i < to; ++i) {
      sluice_flow_key key = key_of(flow_spec(i));
      if (bpf_map_lookup_elem(flows_fd, &key, &st) == 0) ++n;
    }
    return n;
  };
  // The oldest: the first half of what had to go (at most 1000).
  const int old_n = std::min(1000, (kFlows - SLUICE_FLOW_TABLE_SIZE) / 2);
  int newest = present(kFlows - 1000, kFlows), oldest = present(0, old_n);
  EXPECT_GE(newest, 990) << "the newest flows were evicted";
  EXPECT_LE(oldest, old_n / 100) << "the oldest flows were kept while newer ones came in";

  // A second packet of each of the newest flows updates its entry.
  for (int i = kFlows - 1000; i < kFlows; ++i) run_tc(prog, build(flow_spec(i)));
  sluice_flow_key last = key_of(flow_spec(kFlows - 1));
  sluice_flow_stats st{};
  ASSERT_EQ(bpf_map_lookup_elem(flows_fd, &last, &st), 0);
  EXPECT_EQ(st.packets, 2u);

  auto mean_us = [&](int from, int to) {
    double s = 0;
    for (int i = from; i < to; ++i) s += ns[size_t(i)];
    return s / (to - from) / 1000.0;
  };
  const int w = std::min(10'000, kFlows - SLUICE_FLOW_TABLE_SIZE);
  double filling = mean_us(0, w), evicting = mean_us(kFlows - w, kFlows);
  uint32_t worst = *std::max_element(ns.begin(), ns.end());
  std::printf(
      "flow scale: %d flows into a %d-entry table: %zu entries left, %zu evicted (%d of the newest 1000 kept, "
      "%d of the oldest %d); per packet %.3f us while filling, %.3f us while evicting (x%.2f), worst %.1f us\n",
      kFlows, SLUICE_FLOW_TABLE_SIZE, entries, evicted, newest, oldest, old_n, filling, evicting, evicting / filling,
      worst / 1000.0);
}

}  // namespace
