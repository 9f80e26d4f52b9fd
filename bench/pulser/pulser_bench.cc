// sluice-pulser-bench: per-packet cost of the Pulser/DCTCP tc programs on
// this machine, through BPF_PROG_TEST_RUN, against flowstat's egress program
// on the same packet as the reference "small tc program".
//
// Every case runs `--calls` single-packet runs (repeat = 1, so a marking
// program marks a fresh copy each time instead of finding its own mark) and
// reports the mean of the kernel-measured run durations, which include the
// test runner's timer overhead alike for every case: compare the ratios.
//   aqm_sample        switch egress: qdisc backlog read + Alg. 1 sample, no mark
//   aqm_ce_ein        same, and CE + EIN written (IPv4 checksum fixed twice)
//   aqm_ce            CE only (EIN off)
//   ein_ingress_data  host ingress: data without EIN (the common case)
//   ein_ingress_echo  host ingress: ACK with echo, socket lookup (no socket)
//   ein_egress_ack    host egress: ACK, socket lookup (no socket)
// Prints one JSON object (also written to --json FILE).
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/bpf_util.h"
#include "sluice/pulser.h"
#include "aqm.skel.h"
#include "ein.skel.h"
#include "flowstat.skel.h"

SLUICE_SKELETON(aqm);
SLUICE_SKELETON(ein);
SLUICE_SKELETON(flowstat);

using namespace sluice;

namespace {

uint16_t csum(const uint8_t* p, size_t n, uint32_t acc = 0) {
  for (size_t i = 0; i + 1 < n; i += 2) acc += uint32_t(p[i] << 8 | p[i + 1]);
  if (n & 1) acc += uint32_t(p[n - 1] << 8);
  while (acc >> 16) acc = (acc & 0xffff) + (acc >> 16);
  return uint16_t(~acc);
}

// Ethernet + IPv4 + TCP (no options), checksums complete.
std::vector<uint8_t> frame(uint8_t tos, uint8_t tcp_res, uint16_t payload, bool ack_only) {
  std::vector<uint8_t> f(14 + 20 + 20 + payload, 0);
  f[12] = 0x08;
  uint8_t* ip = f.data() + 14;
  ip[0] = 0x45;
  ip[1] = tos;
  uint16_t tot = uint16_t(40 + payload);
  ip[2] = uint8_t(tot >> 8);
  ip[3] = uint8_t(tot);
  ip[8] = 64;
  ip[9] = 6;
  uint32_t a = htonl(0x0a000001), b = htonl(0x0a000002);
  std::memcpy(ip + 12, &a, 4);
  std::memcpy(ip + 16, &b, 4);
  uint16_t c = csum(ip, 20);
  ip[10] = uint8_t(c >> 8);
  ip[11] = uint8_t(c);
  uint8_t* th = ip + 20;
  th[0] = 0x9c, th[1] = 0x40, th[2] = 0x14, th[3] = 0x51;
  th[4] = 0, th[7] = 1;
  th[12] = uint8_t(5 << 4 | (tcp_res & 0x0f));
  th[13] = ack_only ? 0x10 : 0x18;
  th[14] = 0x02;
  // TCP checksum over the pseudo-header and segment.
  uint32_t acc = 0;
  for (int i = 0; i < 8; i += 2) acc += uint32_t(ip[12 + i] << 8 | ip[13 + i]);
  acc += 6 + 20 + payload;
  c = csum(th, 20 + payload, acc);
  th[16] = uint8_t(c >> 8);
  th[17] = uint8_t(c);
  return f;
}

// Mean kernel-measured duration of `calls` single runs, in ns.
double cost(int prog_fd, const std::vector<uint8_t>& pkt, int calls) {
  std::vector<uint8_t> out(pkt.size() + 256);
  uint64_t sum = 0;
  int n = 0;
  for (int i = 0; i < calls; ++i) {
    LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = pkt.data(), .data_out = out.data(),
                .data_size_in = uint32_t(pkt.size()), .data_size_out = uint32_t(out.size()), .repeat = 1);
    if (bpf_prog_test_run_opts(prog_fd, &o) != 0) throw SysError("BPF_PROG_TEST_RUN", errno);
    sum += o.duration;
    ++n;
  }
  return double(sum) / n;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sluice-pulser-bench: per-packet cost of aqm and ein against flowstat"};
  int calls = 50000, rounds = 5;
  std::string json_out;
  app.add_option("--calls", calls, "single-packet runs per case and round")->default_val(50000);
  app.add_option("--rounds", rounds, "rounds (cases interleaved; the median round is reported)")->default_val(5);
  app.add_option("--json", json_out, "also write the JSON here");
  CLI11_PARSE(app, argc, argv);
  libbpf_set_print(nullptr);
  try {
    Skeleton<flowstat> fs;
    fs.load();
    auto load_aqm = [](bool ecn, bool ein, uint64_t k, uint64_t thr) {
      auto s = std::make_unique<Skeleton<aqm>>();
      auto* ro = (*s)->rodata;
      ro->ecn_enabled = ecn;
      ro->ein_enabled = ein;
      ro->qlen_unit = SLUICE_AQM_UNIT_PACKETS;
      ro->ecn_k = k;
      ro->ein_high_water = k;
      ro->ein_samples = 50;
      ro->ein_threshold_per_s = thr;
      ro->sample_source = SLUICE_AQM_SRC_QDISC;  // the real (loopback) qdisc read
      s->load();
      return s;
    };
    // The real qdisc read (loopback's) with K and EIN_threshold out of
    // reach: the cost of sampling alone.
    auto quiet = load_aqm(true, true, 1'000'000'000, ~0ull >> 4);
    Skeleton<ein> e;
    e->rodata->echo_fresh_ns = 2'000'000;
    e.load();

    auto data_ect = frame(0x02, 0, 1448, false);
    auto data_plain = frame(0x00, 0, 1448, false);
    auto ack_echo = frame(0x00, SLUICE_EIN_ECHO_BIT, 0, true);
    auto ack = frame(0x00, 0, 0, true);

    struct Case {
      const char* name;
      int fd;
      const std::vector<uint8_t>* pkt;
    };
    // Marking cases read a scripted queue of 100 packets (above K = 10)
    // with EIN set by a rising sample and held by HighWaterMark, so every
    // run marks a fresh copy of the packet.
    auto marking = [&](bool ein) {
      auto s = std::make_unique<Skeleton<aqm>>();
      auto* ro = (*s)->rodata;
      ro->ecn_enabled = 1;
      ro->ein_enabled = ein;
      ro->qlen_unit = SLUICE_AQM_UNIT_PACKETS;
      ro->ecn_k = 10;
      ro->ein_high_water = 10;
      ro->ein_samples = 50;
      ro->ein_threshold_per_s = 1;
      ro->sample_source = SLUICE_AQM_SRC_SCRIPTED;
      s->load();
      sluice_aqm_script sc{1'000'000'000, 100};
      uint32_t k0 = 0;
      bpf_map_update_elem(bpf_map__fd((*s)->maps.sl_aqm_scr_v1), &k0, &sc, 0);
      return s;
    };
    auto ce_ein = marking(true);
    auto ce_only = marking(false);
    // Prime Alg. 1 (first sample has no gradient; a second, higher one sets EIN).
    {
      uint32_t k0 = 0;
      sluice_aqm_script sc{1'000'000'000, 50};
      bpf_map_update_elem(bpf_map__fd((*ce_ein)->maps.sl_aqm_scr_v1), &k0, &sc, 0);
      cost(bpf_program__fd((*ce_ein)->progs.aqm_egress), data_ect, 1);
      sc = {1'001'000'000, 100};
      bpf_map_update_elem(bpf_map__fd((*ce_ein)->maps.sl_aqm_scr_v1), &k0, &sc, 0);
    }
    std::vector<Case> cases = {
        {"flowstat_egress", bpf_program__fd(fs->progs.flowstat_out), &data_ect},
        {"aqm_sample", bpf_program__fd((*quiet)->progs.aqm_egress), &data_ect},
        {"aqm_ce_ein", bpf_program__fd((*ce_ein)->progs.aqm_egress), &data_ect},
        {"aqm_ce", bpf_program__fd((*ce_only)->progs.aqm_egress), &data_ect},
        {"ein_ingress_data", bpf_program__fd(e->progs.ein_ingress), &data_plain},
        {"ein_ingress_echo", bpf_program__fd(e->progs.ein_ingress), &ack_echo},
        {"ein_egress_ack", bpf_program__fd(e->progs.ein_egress), &ack},
    };
    std::vector<std::vector<double>> res(cases.size());
    for (int r = 0; r < rounds; ++r)
      for (size_t i = 0; i < cases.size(); ++i) res[i].push_back(cost(cases[i].fd, *cases[i].pkt, calls));
    // The marking cases must really have marked.
    auto reasons = read_reason_counters(bpf_map__fd((*ce_ein)->maps.sl_counters));
    uint64_t marked = reasons[SLUICE_R_AQM_CE_EIN].packets;
    auto reasons_ce = read_reason_counters(bpf_map__fd((*ce_only)->maps.sl_counters));
    uint64_t want = uint64_t(calls) * uint64_t(rounds);
    if (marked != want || reasons_ce[SLUICE_R_AQM_CE].packets != want)
      throw Error("the marking cases did not mark every run (CE+EIN " + std::to_string(marked) + ", CE " +
                  std::to_string(reasons_ce[SLUICE_R_AQM_CE].packets) + " of " + std::to_string(want) + ")");
    nlohmann::json j;
    j["calls_per_round"] = calls;
    j["rounds"] = rounds;
    j["ce_ein_marked_runs"] = marked;
    j["ce_marked_runs"] = reasons_ce[SLUICE_R_AQM_CE].packets;
    double ref = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      auto v = res[i];
      std::sort(v.begin(), v.end());
      double med = v[v.size() / 2];
      if (i == 0) ref = med;
      j["cases"][cases[i].name] = {{"ns_per_packet_median", std::round(med * 10) / 10},
                                   {"ns_min", std::round(v.front() * 10) / 10},
                                   {"ns_max", std::round(v.back() * 10) / 10},
                                   {"ratio_to_flowstat", std::round(med / ref * 100) / 100}};
    }
    std::string s = j.dump(2);
    std::printf("%s\n", s.c_str());
    if (!json_out.empty()) std::ofstream(json_out) << s << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice-pulser-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
