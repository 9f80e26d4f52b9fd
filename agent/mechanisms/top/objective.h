// Token priorities by objective (top-tpds20 §3.2 "Flow Priority") and the
// ExpressPass-style token rate control TOP inherits (§3.1 "Transport
// Protocol": target token loss 10% per flow).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sluice::top {

enum class Objective {
  kFct,       // priority from flow size: floor(K log_p(a*size + b))
  kLas,       // non-clairvoyant: from packets received so far (least attained service)
  kDeadline,  // EDF-like: from time left to the deadline
  kFair,      // one token class, round robin (ExpressPass-like "tokens" baseline)
};
const char* objective_name(Objective o);
std::optional<Objective> parse_objective(const std::string& s);

struct PriorityParams {
  int classes = 6;   // K, token priority classes (§5.2: 6 queues)
  double p = 20000;  // largest flow, packets (log base)
  double a = 1.0;
  double b = 1.0;                    // b >= 1 keeps LAS defined at 0 packets
  double deadline_span_us = 100000;  // largest slack the deadline classes tell apart
  // Explicit class bounds for the FCT and LAS objectives, packets, K - 1
  // increasing values: class c holds [bounds[c-1], bounds[c]). §3.2 derives
  // its log thresholds from a heavy-tailed approximation of the workload so
  // that the queues carry balanced shares; bounds taken from the workload's
  // own CDF do the same without the approximation. Empty: the formula.
  std::vector<double> bounds;
  // Returns an error for parameters the formula cannot use.
  std::optional<std::string> validate() const;
};

// §3.2: floor(K * log_p(a*x + b)), clamped to [0, K-1]; 0 is the highest.
int log_class(double x, double base, const PriorityParams& pp);
int fct_priority(uint64_t size_pkts, const PriorityParams& pp);
int las_priority(uint64_t received_pkts, const PriorityParams& pp);
// Slack = deadline - now; no deadline or already missed: the lowest class.
int deadline_priority(std::optional<int64_t> slack_ns, const PriorityParams& pp);

// ExpressPass credit feedback control on one flow's token rate, as a
// fraction of the receiver's full token rate (one token per pacing slot).
struct RateParams {
  double target_loss = 0.1;
  double w_init = 1.0 / 16;
  double w_min = 1.0 / 128;
  double w_max = 0.5;
  // A new flow's first period runs at the receiver's full token rate: its
  // own slot scheduler already shares the access link, and a token beyond a
  // shared token bottleneck is dropped there (R1), never its data, so
  // starting lower only costs a flow that is alone (a short flow at 0.5 got
  // a token every other slot: about 2x its ideal FCT, docs/top.md "floor").
  double initial_rate = 1.0;
  double min_rate = 1.0 / 64;
  std::optional<std::string> validate() const;
};

class RateControl {
 public:
  explicit RateControl(const RateParams& rp) : rp_(rp), rate_(rp.initial_rate), w_(rp.w_init) {}
  // One update period's measured token loss (0..1).
  void update(double loss);
  double rate() const { return rate_; }
  // Back to the full token rate: a probe found the path free (receiver.h
  // Spare::kProbe); the next lossy period cuts it as before.
  void restore() {
    rate_ = 1.0;
    increasing_ = true;
  }
  double w() const { return w_; }

 private:
  RateParams rp_;
  double rate_;
  double w_;
  bool increasing_ = false;
};

}  // namespace sluice::top
