// sluice-tg client modes. The client is the receiver of data: it asks the
// servers (the senders) for bytes and times the answers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sock.h"

namespace sluice::tg {

struct ClientOptions {
  std::vector<Endpoint> servers;
  std::string cc;             // TCP_CONGESTION on every client socket
  uint32_t window_clamp = 0;  // TCP_WINDOW_CLAMP on every client socket (0 = none)
  double link_mbps = 0;       // bottleneck rate: ideal FCT and utilisation
  std::string json_out = "-";
  double timeout_s = 300;  // whole run
};

// Incast rounds (barrier-synchronized): `conns` persistent connections spread
// round-robin over the servers; each round asks every connection for
// `bytes_per_conn` at once and ends when the last byte of the last response
// arrived. The next round starts once every sender reported its trailer.
struct IncastOptions : ClientOptions {
  int conns = 1;
  uint64_t bytes_per_conn = 64 * 1024;
  int rounds = 10;
  int warmup = 1;         // rounds run first and not counted
  double gap_ms = 0;      // idle time between rounds
  bool per_flow = false;  // include every flow of every round in the JSON
  bool fresh = false;     // new connections before every round
  // Each connection's request in a round goes out after a uniform random
  // delay in [0, jitter_us] (synchronous bursts with random jitter, as in
  // Pulser's testbed, pulser-ein §VI); a flow's FCT counts from its own
  // request. 0: all at once.
  double jitter_us = 0;
  uint64_t seed = 1;
};
int run_incast(const IncastOptions& o);

// Poisson flow arrivals at `load` of the link; sizes from a CDF file; each
// flow asks a uniformly chosen server over an idle pooled connection (a new
// one is opened when none is idle, and its handshake counts in the FCT).
struct FlowsOptions : ClientOptions {
  std::string cdf;
  double load = 0.6;
  uint64_t count = 1000;  // flows (0 = until duration)
  double duration_s = 0;  // arrivals stop after this (0 = until count)
  uint64_t seed = 1;
  int pool = 2;                                              // connections opened per server up front
  std::string records;                                       // per-flow CSV
  std::vector<uint64_t> buckets = {10000, 100000, 1000000};  // size bucket upper bounds
  double base_rtt_us = -1;                                   // < 0: measured before the workload
  double scale = 1.0;                                        // multiply every drawn size
};
int run_flows(const FlowsOptions& o);

// Long-lived flows: connection i streams from start_s[i] to stop_s[i];
// throughput per flow per interval, aggregate and Jain's fairness index.
struct LongOptions : ClientOptions {
  int conns = 1;
  double duration_s = 10;
  double interval_ms = 100;
  std::vector<double> start_s, stop_s;  // per connection; missing = 0 / duration
};
int run_long(const LongOptions& o);

}  // namespace sluice::tg
