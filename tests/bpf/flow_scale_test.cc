// Scale drill (docs/operations.md "Drills"): 100,000 distinct 5-tuples, one
// packet each, through flowstat's ingress program by BPF_PROG_TEST_RUN, into
// a flow table of SLUICE_FLOW_TABLE_SIZE (65,536) entries. The LRU table
// evicts the oldest flows instead of refusing new ones: every packet is
// counted and passed, none is "table full", the table stays within its size,
// the newest flows are in it and the oldest are gone; evictions are the
// flows inserted minus the entries left. Printed, not asserted: the
// per-packet run time while the table fills against while every insert
// evicts (same run). The test runs on one CPU (PinnedToOneCpu): a thread
// the scheduler moved early on left the kernel's per-CPU batch of new
// entries behind, up to 128 of the oldest flows kept (seen in CI with a
// build running beside the tests: 126 of the oldest 1,000).
//
// The same for PAC's flow table (sl_pac_flows_v2, SLUICE_PAC_FLOW_TABLE_SIZE
// entries, LRU): each of 100,000 flows sends one data segment (pac_ingress
// creates its entry) and answers with one pure ACK (pac_egress admits it).
// Its inserts are counted by the programs (pac.flow_inserts), so the
// evictions are too.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "core/bpf_util.h"
#include "core/heartbeat.h"
#include "flowstat.skel.h"
#include "lib/packet.h"
#include "lib/prog_test.h"
#include "sluice/flow.h"
#include "sluice/pac.h"  // before the skeleton: it names these structs
#include "pac_tc.skel.h"
#include "pac_tc_compat.skel.h"
#include "sluice/reasons.h"

SLUICE_SKELETON(flowstat);
SLUICE_SKELETON_TWIN(pac_tc, pac_tc_compat, sluice::liveness_object);

using namespace sluice;
using namespace sluice::test;

namespace {

// SLUICE_BPF_SCALE_FLOWS overrides (the VM suite, under emulation, runs
// fewer; more than the table's size either way, so that it evicts).
int flow_count(int table_size = SLUICE_FLOW_TABLE_SIZE) {
  const char* e = getenv("SLUICE_BPF_SCALE_FLOWS");
  int n = e ? atoi(e) : 100'000;
  return std::max(n, table_size + 2000);
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

// Per-packet run time (ns[i]: flow i's) while a table of `size` entries
// fills (the first 10,000 flows) against while every insert evicts (the
// last 10,000), and the worst, as printed.
std::string insert_cost(const std::vector<uint32_t>& ns, int size) {
  const int flows = int(ns.size()), w = std::min(10'000, flows - size);
  auto mean_us = [&](int from, int to) {
    double s = 0;
    for (int i = from; i < to; ++i) s += ns[size_t(i)];
    return s / (to - from) / 1000.0;
  };
  double filling = mean_us(0, w), evicting = mean_us(flows - w, flows);
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%.3f us while filling, %.3f us while evicting (x%.2f), worst %.1f us", filling,
                evicting, evicting / filling, *std::max_element(ns.begin(), ns.end()) / 1000.0);
  return buf;
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

// What an LRU table of `size` entries holds after `flows` distinct flows
// went in, oldest first (flow i's key: key(i)): its entries, within its size
// and not emptied (checked), and of the newest 1,000 flows and of the
// oldest (at most 1,000: the first half of what had to go) how many are
// in it (printed by the caller, checked here).
struct LruCheck {
  size_t entries = 0;
  int newest = 0, oldest = 0, old_n = 0;
};
template <class K, class V>
LruCheck check_lru(int fd, int flows, int size, const std::function<K(int)>& key) {
  LruCheck r;
  K k{}, next{};
  for (void* prev = nullptr; bpf_map_get_next_key(fd, prev, &next) == 0; prev = &k) {
    k = next;
    ++r.entries;
  }
  EXPECT_LE(r.entries, size_t(size));
  EXPECT_GE(r.entries, size_t(size) / 2) << "the table emptied instead of evicting";
  auto present = [&](int from, int to) {
    int n = 0;
    V v{};
    for (int i = from; i < to; ++i) {
      K kk = key(i);
      if (bpf_map_lookup_elem(fd, &kk, &v) == 0) ++n;
    }
    return n;
  };
  r.old_n = std::min(1000, (flows - size) / 2);
  r.newest = present(flows - 1000, flows);
  r.oldest = present(0, r.old_n);
  EXPECT_GE(r.newest, 990) << "the newest flows were evicted";
  EXPECT_LE(r.oldest, r.old_n / 100) << "the oldest flows were kept while newer ones came in";
  return r;
}

TEST(FlowScale, HundredThousandFlowsEvictTheOldestAndEveryPacketIsCounted) {
  require_root();
  PinnedToOneCpu pin;  // one CPU's LRU batches: the eviction order is the table's, not the scheduler's
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

  LruCheck t = check_lru<sluice_flow_key, sluice_flow_stats>(flows_fd, kFlows, SLUICE_FLOW_TABLE_SIZE,
                                                             [](int i) { return key_of(flow_spec(i)); });
  const size_t entries = t.entries, evicted = size_t(kFlows) - entries;
  const int newest = t.newest, oldest = t.oldest, old_n = t.old_n;

  // A second packet of each of the newest flows updates its entry.
  for (int i = kFlows - 1000; i < kFlows; ++i) run_tc(prog, build(flow_spec(i)));
  sluice_flow_key last = key_of(flow_spec(kFlows - 1));
  sluice_flow_stats st{};
  ASSERT_EQ(bpf_map_lookup_elem(flows_fd, &last, &st), 0);
  EXPECT_EQ(st.packets, 2u);

  std::printf(
      "flow scale: %d flows into a %d-entry table: %zu entries left, %zu evicted (%d of the newest 1000 kept, "
      "%d of the oldest %d); per packet %s\n",
      kFlows, SLUICE_FLOW_TABLE_SIZE, entries, evicted, newest, oldest, old_n,
      insert_cost(ns, SLUICE_FLOW_TABLE_SIZE).c_str());
}

// PAC flow i: sender 10.(i / 65536 + 1).x.y:5201 -> receiver 10.200.0.1,
// the receiver's port distinct per i within each sender address.
PacketSpec pac_data(int i) {
  PacketSpec s = flow_spec(i);
  std::swap(s.sport, s.dport);  // from the sender's 5201 to the receiver's port
  s.seq = 1000;
  s.ack = 1;
  s.flags = 0x18;
  s.payload = 1448;
  return s;
}
PacketSpec pac_ack(int i) {
  PacketSpec d = pac_data(i), s;
  s.src = d.dst;
  s.dst = d.src;
  s.sport = d.dport;
  s.dport = d.sport;
  s.seq = 1;
  s.ack = d.seq + uint32_t(d.payload);
  s.flags = 0x10;
  return s;
}
sluice_pac_flow_key pac_key(int i) {
  PacketSpec d = pac_data(i);
  sluice_pac_flow_key k{};
  k.family = 4;
  inet_pton(AF_INET, d.src.c_str(), k.raddr);
  inet_pton(AF_INET, d.dst.c_str(), k.laddr);
  k.rport = htons(d.sport);
  k.lport = htons(d.dport);
  return k;
}

TEST(FlowScale, PacHundredThousandFlowsEvictTheOldestCountedAndEveryAckPasses) {
  require_root();
  PinnedToOneCpu pin;  // as above
  const int kFlows = flow_count(SLUICE_PAC_FLOW_TABLE_SIZE);
  Skeleton<pac_tc> skel;
  // No trigger write-off between two packets of the drill however slow the
  // machine; the heartbeat is refreshed as the drill goes (below), and an
  // ACK that still met a stale one fails open, counted (asserted).
  skel->rodata->trigger_age_min_ns = 10'000'000'000ull;
  skel->rodata->fail_open_ns = 2'000'000'000ull;
  skel.load();
  sluice_pac_state* st = &skel->bss->pac;
  st->threshold = 1ull << 40;  // every ACK fits: the drill is the table, not admission
  const int in = bpf_program__fd(skel->progs.pac_ingress), out = bpf_program__fd(skel->progs.pac_egress);
  const int flows_fd = bpf_map__fd(skel->maps.sl_pac_flows_v2);

  std::vector<uint32_t> ns(static_cast<size_t>(kFlows));
  int data_not_passed = 0, acks_not_passed = 0;
  for (int i = 0; i < kFlows; ++i) {
    if (i % 256 == 0) st->live.heartbeat_ns = monotonic_ns();
    RunResult d = run_tc(in, build(pac_data(i)));
    RunResult a = run_tc(out, build(pac_ack(i)));
    if (d.retval != kNext) ++data_not_passed;
    if (a.retval != kNext) ++acks_not_passed;
    ns[size_t(i)] = d.duration_ns;
  }
  EXPECT_EQ(data_not_passed, 0) << "pac_ingress never drops";
  EXPECT_EQ(acks_not_passed, 0) << "an ACK was held or dropped although every ACK fits";

  ReasonCounters c = read_reason_counters(bpf_map__fd(skel->maps.sl_counters));
  const uint64_t full = c[SLUICE_R_PAC_FLOW_TABLE_FULL].packets, inserts = st->flow_inserts;
  EXPECT_EQ(c[SLUICE_R_PAC_DATA].packets + full, uint64_t(kFlows)) << "every data segment counted once";
  EXPECT_EQ(c[SLUICE_R_PAC_ADMIT].packets + c[SLUICE_R_PAC_FAIL_OPEN].packets, uint64_t(kFlows))
      << "every ACK admitted (or failed open) and counted once";
  EXPECT_EQ(c[SLUICE_R_PAC_DIVERT].packets, 0u);
  EXPECT_EQ(full, 0u) << "the LRU table refused a new flow";
  EXPECT_EQ(inserts + full, uint64_t(kFlows)) << "every new flow either inserted (counted) or refused (counted)";

  LruCheck t = check_lru<sluice_pac_flow_key, sluice_pac_flow>(flows_fd, kFlows, SLUICE_PAC_FLOW_TABLE_SIZE, pac_key);
  const size_t entries = t.entries;
  const int newest = t.newest, oldest = t.oldest, old_n = t.old_n;
  ASSERT_GE(inserts, entries);
  const uint64_t evicted = inserts - entries;
  EXPECT_GE(evicted, uint64_t(kFlows - SLUICE_PAC_FLOW_TABLE_SIZE));

  // The newest flow's entry is the one its two packets made, and it goes on.
  sluice_pac_flow_key last = pac_key(kFlows - 1);
  sluice_pac_flow f{};
  ASSERT_EQ(bpf_map_lookup_elem(flows_fd, &last, &f), 0);
  EXPECT_EQ(f.bytes_rcvd, 1448u);
  EXPECT_EQ(f.admitted, 1u);
  EXPECT_GT(f.id, 0u);

  std::printf(
      "pac flow scale: %d flows into a %d-entry table: %zu entries left, %llu inserted, %llu evicted, %llu refused "
      "(%d of the newest 1000 kept, %d of the oldest %d); ACKs admitted %llu, failed open %llu; pac_ingress per new "
      "flow %s\n",
      kFlows, SLUICE_PAC_FLOW_TABLE_SIZE, entries, (unsigned long long)inserts, (unsigned long long)evicted,
      (unsigned long long)full, newest, oldest, old_n, (unsigned long long)c[SLUICE_R_PAC_ADMIT].packets,
      (unsigned long long)c[SLUICE_R_PAC_FAIL_OPEN].packets, insert_cost(ns, SLUICE_PAC_FLOW_TABLE_SIZE).c_str());
}

}  // namespace
