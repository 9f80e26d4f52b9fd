// Prometheus text endpoint (prometheus-cpp pull exposer). Metric families
// are built at scrape time from the BPF maps and agent state, through a
// callback the agent provides, so a scrape always sees current counters.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "module.h"

namespace prometheus {
class Exposer;
}

namespace sluice {

class MetricsServer {
 public:
  using Source = std::function<std::vector<MetricSample>()>;
  // Binds bind:port; throws Error naming the address if it cannot.
  MetricsServer(const std::string& bind, uint16_t port, Source source);
  ~MetricsServer();
  std::string address() const { return address_; }

 private:
  class Collector;
  std::string address_;
  std::shared_ptr<Collector> collector_;
  std::unique_ptr<prometheus::Exposer> exposer_;
};

// Groups samples into families (same name) in first-seen order; exposed for
// tests of the text format.
std::string render_prometheus_text(const std::vector<MetricSample>& samples);

}  // namespace sluice
