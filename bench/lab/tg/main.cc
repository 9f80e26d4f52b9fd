// sluice-tg: the sluice traffic generator. A server runs on every sender
// host; the client runs on the receiver and drives incast rounds, Poisson
// flow workloads from flow-size CDFs, or long-lived flows. Results are JSON.
#include <CLI/CLI.hpp>
#include <signal.h>

#include <cstdio>

#include "client.h"
#include "core/error.h"
#include "server.h"

using namespace sluice::tg;

namespace {

void common(CLI::App* app, ClientOptions& o, std::string& to) {
  app->add_option("--to", to, "servers: ADDR[:PORT][,ADDR[:PORT]...] (default port 5001)")->required();
  app->add_option("--cc", o.cc, "TCP_CONGESTION for client sockets (default: the namespace's)");
  app->add_option("--window-clamp", o.window_clamp,
                  "TCP_WINDOW_CLAMP in bytes on client sockets: a per-flow cap on the data in flight (0 = none)")
      ->check(CLI::Range(0u, 1u << 30));
  app->add_option("--link-mbps", o.link_mbps, "bottleneck link rate (ideal FCT, utilisation)");
  app->add_option("--json", o.json_out, "write the result JSON here ('-' = stdout)");
  app->add_option("--timeout", o.timeout_s, "give up after this many seconds")->default_val(300);
}

std::vector<double> parse_list(const std::string& s) {
  std::vector<double> v;
  size_t start = 0;
  while (start < s.size()) {
    size_t c = s.find(',', start);
    std::string item = s.substr(start, c == std::string::npos ? std::string::npos : c - start);
    try {
      v.push_back(std::stod(item));
    } catch (...) {
      throw sluice::Error("bad number '" + item + "' in list '" + s + "'");
    }
    if (c == std::string::npos) break;
    start = c + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  CLI::App app{"sluice-tg: traffic generator (incast rounds, Poisson flows, long flows)"};
  app.require_subcommand(1);

  ServerOptions so;
  auto* srv = app.add_subcommand("server", "answer requests (run on every sender host)");
  srv->add_option("--bind", so.bind, "listen address")->default_val("::");
  srv->add_option("--port", so.port, "listen port")->default_val(5001);
  srv->add_option("--cc", so.cc, "TCP_CONGESTION for the data sockets (default: the namespace's)");
  srv->add_flag("-v,--verbose", so.verbose, "log every request");

  IncastOptions io;
  std::string io_to;
  uint64_t total_bytes = 0;
  auto* inc = app.add_subcommand("incast", "barrier-synchronized incast rounds");
  common(inc, io, io_to);
  inc->add_option("--conns", io.conns, "connections, spread round-robin over the servers")->default_val(1);
  auto* bopt = inc->add_option("--bytes", io.bytes_per_conn, "bytes per connection per round")->default_val(65536);
  inc->add_option("--total-bytes", total_bytes, "bytes per round in all (split over connections)")->excludes(bopt);
  inc->add_option("--rounds", io.rounds, "measured rounds")->default_val(10);
  inc->add_option("--warmup", io.warmup, "rounds run first and not counted")->default_val(1);
  inc->add_option("--gap-ms", io.gap_ms, "idle time between rounds")->default_val(0);
  inc->add_flag("--per-flow", io.per_flow, "include every flow of every round");
  inc->add_flag("--fresh", io.fresh, "new connections before every round (set up outside the timing)");
  inc->add_option("--jitter-us", io.jitter_us,
                  "each request of a round waits a uniform random delay in [0, this] (FCT from its own request)")
      ->check(CLI::Range(0.0, 10e6));
  inc->add_option("--seed", io.seed, "seed of the jitter")->default_val(1);

  FlowsOptions fo;
  std::string fo_to, buckets;
  auto* fl = app.add_subcommand("flows", "Poisson flow arrivals with sizes from a CDF");
  common(fl, fo, fo_to);
  fl->add_option("--cdf", fo.cdf, "flow-size CDF file (bench/cdf/*.cdf)")->required()->check(CLI::ExistingFile);
  fl->add_option("--load", fo.load, "offered load as a fraction of --link-mbps")->default_val(0.6);
  fl->add_option("--count", fo.count, "number of flows (0 = until --duration)")->default_val(1000);
  fl->add_option("--duration", fo.duration_s, "stop arrivals after this many seconds")->default_val(0);
  fl->add_option("--seed", fo.seed, "random seed (arrivals, sizes, servers)")->default_val(1);
  fl->add_option("--pool", fo.pool, "connections opened per server up front")->default_val(2);
  fl->add_option("--records", fo.records, "per-flow CSV output");
  fl->add_option("--buckets", buckets, "size bucket upper bounds in bytes, e.g. 10000,100000,1000000");
  fl->add_option("--base-rtt-us", fo.base_rtt_us, "base RTT for the ideal FCT (default: measured)")->default_val(-1);
  fl->add_option("--scale", fo.scale, "multiply every drawn flow size")->default_val(1.0);

  LongOptions lo;
  std::string lo_to, starts, stops;
  auto* lg = app.add_subcommand("long", "long-lived flows: throughput and fairness");
  common(lg, lo, lo_to);
  lg->add_option("--conns", lo.conns, "flows, spread round-robin over the servers")->default_val(1);
  lg->add_option("--duration", lo.duration_s, "seconds")->default_val(10);
  lg->add_option("--interval-ms", lo.interval_ms, "sampling interval")->default_val(100);
  lg->add_option("--starts", starts, "start time (s) of each flow, comma-separated");
  lg->add_option("--stops", stops, "stop time (s) of each flow, comma-separated");

  CLI11_PARSE(app, argc, argv);
  try {
    if (srv->parsed()) return run_server(so);
    if (inc->parsed()) {
      io.servers = parse_endpoints(io_to, 5001);
      if (total_bytes) io.bytes_per_conn = std::max<uint64_t>(1, total_bytes / uint64_t(std::max(1, io.conns)));
      return run_incast(io);
    }
    if (fl->parsed()) {
      fo.servers = parse_endpoints(fo_to, 5001);
      if (!buckets.empty()) {
        fo.buckets.clear();
        for (double b : parse_list(buckets)) fo.buckets.push_back(uint64_t(b));
      }
      return run_flows(fo);
    }
    if (lg->parsed()) {
      lo.servers = parse_endpoints(lo_to, 5001);
      lo.start_s = parse_list(starts);
      lo.stop_s = parse_list(stops);
      return run_long(lo);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice-tg: %s\n", e.what());
    return 1;
  }
  return 0;
}
