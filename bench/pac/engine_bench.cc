// sluice-pac-engine-bench: the cost of PAC's agent engine (pac::Engine) per
// call, without the kernel: no BPF, no root, one core. It uses only the
// engine's public interface, so the same source builds against an older
// engine for an A/B on the same machine in the same run.
//
// Cases, each at 1, 256 and 4096 flows:
//  - release_acks: every flow holds 4 ACKs, none fits and none is due:
//    one Engine::release() call, the agent's work per ring-buffer wake-up
//    while an incast's ACKs wait;
//  - release_requests: every flow holds one request, requests_yield on
//    (the pac-req setting): release() also looks for a held ACK to put
//    before the requests, and finds none;
//  - release_requests_ack_last: as above, plus one flow holding an ACK that
//    joined last (the one release() must find behind the requests);
//  - cycle: every flow holds 4 ACKs; each step one ACK arrives (on_event)
//    and release() sends one (the head, round robin): the engine's cost per
//    held ACK.
// Rounds of all cases are interleaved; each figure is the median of the
// rounds in ns per call, with the minimum and maximum.
// Prints one JSON object (also written to --json FILE).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "mechanisms/pac/pac_core.h"
#include "sluice/pac.h"

using namespace sluice;

namespace {

uint64_t now_ns() {
  return uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// fits: how many more sends fit (the datapath says "full" once it is 0).
struct Datapath : pac::Datapath {
  uint64_t fits = 0, sent = 0;
  int64_t in_flight() override { return fits ? 0 : int64_t(1) << 40; }
  uint64_t threshold() override { return fits ? uint64_t(1) << 40 : 0; }
  bool send(const sluice_pac_flow_key&, const pac::HeldAck&) override {
    if (fits) --fits;
    ++sent;
    return true;
  }
  void write_ctl(const sluice_pac_flow_key&, const sluice_pac_flow_ctl&) override {}
  void set_wake(uint64_t, uint64_t, uint64_t) override {}
};

sluice_pac_event held(int flow, uint32_t i, uint32_t req_bytes = 0) {
  sluice_pac_event ev{};
  ev.type = SLUICE_PAC_EV_HELD;
  ev.key.family = 4;
  ev.key.raddr[0] = 0x0100000a + uint32_t(flow >> 16);
  ev.key.laddr[0] = 0x0200000a;
  ev.key.rport = uint16_t(flow);
  ev.key.lport = 5201;
  ev.ack = i * 1448;
  ev.bytes_rcvd = i * 1448;
  ev.last_ack = (i - 1) * 1448;
  ev.ack_valid = 1;
  ev.mss = 1448;
  ev.frame_len = 66;
  ev.req_bytes = req_bytes;
  return ev;
}

// Calls per round: about the same time per round whatever the flow count
// (an engine that walks every flow costs ~N times more per call).
int calls_for(int flows) { return std::max(2000, 400000 / flows); }

enum class Case { ReleaseAcks, ReleaseRequests, ReleaseRequestsAckLast, Cycle };

double measure(Case c, int flows) {
  Datapath dp;
  pac::Params prm;
  prm.requests_yield = c == Case::ReleaseRequests || c == Case::ReleaseRequestsAckLast;
  prm.max_held = size_t(1) << 20;
  pac::Engine e(prm, dp);
  const uint64_t t = 1'000'000;
  bool requests = prm.requests_yield;
  std::vector<uint32_t> next(size_t(flows), 1);
  for (int f = 0; f < flows; ++f)
    for (uint32_t i = 1; i <= (requests ? 1u : 4u); ++i)
      e.on_event(held(f, next[size_t(f)]++, requests ? 65536 : 0), t);
  if (c == Case::ReleaseRequestsAckLast) e.on_event(held(flows, 1), t);
  size_t held0 = e.held();
  const int calls = calls_for(flows);
  size_t sent = 0;
  uint64_t t0 = now_ns();
  if (c == Case::Cycle) {
    for (int i = 0; i < calls; ++i) {
      int f = i % flows;
      e.on_event(held(f, next[size_t(f)]++), t + 1000 + uint64_t(i));
      dp.fits = 1;
      sent += e.release(t + 1000 + uint64_t(i));
    }
  } else {
    for (int i = 0; i < calls; ++i) sent += e.release(t + 1000 + uint64_t(i));
  }
  uint64_t dt = now_ns() - t0;
  if (c == Case::Cycle ? (sent != size_t(calls) || e.held() != held0) : (sent || e.held() != held0))
    throw std::runtime_error("engine bench: the engine did not do what the case expects");
  return double(dt) / calls;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_out;
  int rounds = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) json_out = argv[++i];
    else if (a == "--rounds" && i + 1 < argc) rounds = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: sluice-pac-engine-bench [--rounds N] [--json FILE]\n");
      return 2;
    }
  }
  const std::vector<std::pair<const char*, Case>> cases{{"release_acks", Case::ReleaseAcks},
                                                        {"release_requests", Case::ReleaseRequests},
                                                        {"release_requests_ack_last", Case::ReleaseRequestsAckLast},
                                                        {"cycle", Case::Cycle}};
  const std::vector<int> sizes{1, 256, 4096};
  std::map<std::string, std::vector<double>> ns;
  try {
    for (int r = 0; r < rounds; ++r)
      for (const auto& [name, c] : cases)
        for (int n : sizes) ns[std::string(name) + "_" + std::to_string(n)].push_back(measure(c, n));
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "sluice-pac-engine-bench: %s\n", ex.what());
    return 1;
  }
  nlohmann::json out;
  out["rounds"] = rounds;
  for (auto& [k, v] : ns) {
    std::sort(v.begin(), v.end());
    out[k] = {{"median_ns", v[v.size() / 2]}, {"min_ns", v.front()}, {"max_ns", v.back()}};
  }
  std::printf("%s\n", out.dump(2).c_str());
  if (!json_out.empty()) std::ofstream(json_out) << out.dump(2) << "\n";
  return 0;
}
