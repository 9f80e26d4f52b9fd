#include "metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <map>

#include "error.h"

namespace sluice {

namespace {
std::vector<prometheus::MetricFamily> to_families(const std::vector<MetricSample>& samples) {
  std::vector<prometheus::MetricFamily> fams;
  std::map<std::string, size_t> index;
  for (const auto& s : samples) {
    auto it = index.find(s.name);
    if (it == index.end()) {
      prometheus::MetricFamily f;
      f.name = s.name;
      f.help = s.help;
      f.type = s.counter ? prometheus::MetricType::Counter : prometheus::MetricType::Gauge;
      fams.push_back(std::move(f));
      it = index.emplace(s.name, fams.size() - 1).first;
    }
    prometheus::ClientMetric m;
    for (const auto& [k, v] : s.labels) m.label.push_back({k, v});
    if (s.counter) m.counter.value = s.value;
    else m.gauge.value = s.value;
    fams[it->second].metric.push_back(std::move(m));
  }
  return fams;
}
}  // namespace

class MetricsServer::Collector : public prometheus::Collectable {
 public:
  explicit Collector(Source s) : source_(std::move(s)) {}
  std::vector<prometheus::MetricFamily> Collect() const override { return to_families(source_()); }

 private:
  Source source_;
};

MetricsServer::MetricsServer(const std::string& bind, uint16_t port, Source source)
    : collector_(std::make_shared<Collector>(std::move(source))) {
  address_ = (bind.find(':') != std::string::npos ? "[" + bind + "]" : bind) + ":" + std::to_string(port);
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(address_, 1);
  } catch (const std::exception& e) {
    throw Error("metrics endpoint " + address_ + ": cannot listen (" + e.what() + ")");
  }
  exposer_->RegisterCollectable(collector_);
}

MetricsServer::~MetricsServer() {
  if (exposer_) exposer_->RemoveCollectable(collector_);
}

std::string render_prometheus_text(const std::vector<MetricSample>& samples) {
  prometheus::TextSerializer ser;
  return ser.Serialize(to_families(samples));
}

}  // namespace sluice
