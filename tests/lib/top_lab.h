// The TOP lab tests' tools: sluice-top's receiver and sender run in lab
// namespaces, the sender's JSON summary read back.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "lib/netns_fixture.h"
#include "mechanisms/top/wire.h"

namespace sluice::test {

// A sender and a receiver namespace joined by one veth, addresses
// `net`.1 (sender) and `net`.2 (receiver), /24. Names differ per call: a
// namespace a previous test deleted may still be going away in the kernel.
struct TopPair {
  std::string snd, rcv;  // namespaces
  std::string sif, rif;  // short interface names (Lab::name gives the full one)
};
TopPair add_top_pair(Lab& lab, const std::string& net);

// sluice-top recv in `ns`, bound to `bind`, a 100 Mbit/s link and a 500 µs
// RTT, then `extra`; the process runs until it exits or is stopped.
Process top_recv(Lab& lab, const std::string& ns, const std::string& bind, const std::vector<std::string>& extra,
                 const std::string& log);

// sluice-top send in `ns` from `bind` to `to` (500 µs RTT, then `extra`), run
// to completion (60 s at most); returns its last JSON summary line (a test
// failure and an empty object when there is none), *exit_code its status.
nlohmann::json top_send(Lab& lab, const std::string& ns, const std::string& bind, const std::string& to,
                        const std::vector<std::string>& extra, const std::string& log, int* exit_code);

// The sum of a JSON array of counters (per-priority counts).
uint64_t json_sum(const nlohmann::json& counts);

// How many tokens a run of `data_pkts` data packets may lose to expiry when
// both ends read one clock and nothing is skewed. A token expires only if it
// really was older than T (2 ms in these tests) when it reached the XDP
// program, and on a loaded machine that happens now and then: the receiver
// descheduled between stamping a token and sending it, or the softirq that
// runs XDP held off (one token in a clean-clone CI run). That is expiry
// doing its job, so a few are allowed; a clock, unit or correction error
// expires them all.
inline uint64_t late_token_allowance(uint64_t data_pkts) { return std::max<uint64_t>(2, data_pkts / 50); }

// Data packets one flow of `bytes` takes at sluice-top's default MSS.
constexpr uint64_t top_data_packets(uint64_t bytes) {
  return (bytes + sluice::top::kDefaultMss - 1) / sluice::top::kDefaultMss;
}

}  // namespace sluice::test
