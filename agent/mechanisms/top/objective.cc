#include "mechanisms/top/objective.h"

#include <algorithm>
#include <cmath>

namespace sluice::top {

const char* objective_name(Objective o) {
  switch (o) {
    case Objective::kFct: return "fct";
    case Objective::kLas: return "las";
    case Objective::kDeadline: return "deadline";
    case Objective::kFair: return "fair";
  }
  return "?";
}

std::optional<Objective> parse_objective(const std::string& s) {
  if (s == "fct") return Objective::kFct;
  if (s == "las") return Objective::kLas;
  if (s == "deadline") return Objective::kDeadline;
  if (s == "fair") return Objective::kFair;
  return std::nullopt;
}

std::optional<std::string> PriorityParams::validate() const {
  if (classes < 1 || classes > 6) return "classes must be 1..6";
  if (!(p > 1.0) || !std::isfinite(p)) return "p (largest flow, packets) must be > 1";
  if (!(a > 0.0) || !std::isfinite(a)) return "a must be > 0";
  if (!(b >= 1.0) || !std::isfinite(b)) return "b must be >= 1";
  if (!(deadline_span_us > 1.0) || !std::isfinite(deadline_span_us)) return "deadline_span_us must be > 1";
  if (!bounds.empty()) {
    if (bounds.size() != static_cast<size_t>(classes - 1)) return "bounds: need classes - 1 values";
    for (size_t i = 0; i < bounds.size(); i++) {
      if (!(bounds[i] > 0.0) || !std::isfinite(bounds[i])) return "bounds must be > 0 packets";
      if (i && !(bounds[i] > bounds[i - 1])) return "bounds must increase";
    }
  }
  return std::nullopt;
}

int log_class(double x, double base, const PriorityParams& pp) {
  double v = pp.a * x + pp.b;
  if (!(v > 1.0)) return 0;
  double c = std::floor(pp.classes * std::log(v) / std::log(base));
  if (!(c >= 0.0)) return 0;
  return static_cast<int>(std::min<double>(c, pp.classes - 1));
}

namespace {
int bound_class(double x, const PriorityParams& pp) {
  return static_cast<int>(std::upper_bound(pp.bounds.begin(), pp.bounds.end(), x) - pp.bounds.begin());
}
}  // namespace

int fct_priority(uint64_t size_pkts, const PriorityParams& pp) {
  double x = static_cast<double>(size_pkts);
  return pp.bounds.empty() ? log_class(x, pp.p, pp) : bound_class(x, pp);
}

int las_priority(uint64_t received_pkts, const PriorityParams& pp) {
  double x = static_cast<double>(received_pkts);
  return pp.bounds.empty() ? log_class(x, pp.p, pp) : bound_class(x, pp);
}

int deadline_priority(std::optional<int64_t> slack_ns, const PriorityParams& pp) {
  if (!slack_ns || *slack_ns <= 0) return pp.classes - 1;
  return log_class(static_cast<double>(*slack_ns) / 1000.0, pp.deadline_span_us, pp);
}

std::optional<std::string> RateParams::validate() const {
  if (!(target_loss >= 0.0 && target_loss < 1.0)) return "target_loss must be in [0, 1)";
  if (!(w_min > 0.0 && w_min <= w_init && w_init <= w_max && w_max <= 1.0))
    return "need 0 < w_min <= w_init <= w_max <= 1";
  if (!(min_rate > 0.0 && min_rate <= initial_rate && initial_rate <= 1.0))
    return "need 0 < min_rate <= initial_rate <= 1";
  return std::nullopt;
}

// ExpressPass (SIGCOMM'17) Algorithm 1, as TOP §3.1 reuses it.
void RateControl::update(double loss) {
  loss = std::clamp(loss, 0.0, 1.0);
  if (loss <= rp_.target_loss) {
    if (increasing_) w_ = (w_ + rp_.w_max) / 2;
    rate_ = (1 - w_) * rate_ + w_ * (1 + rp_.target_loss);
    increasing_ = true;
  } else {
    rate_ = rate_ * (1 - loss) * (1 + rp_.target_loss);
    w_ = std::max(w_ / 2, rp_.w_min);
    increasing_ = false;
  }
  rate_ = std::clamp(rate_, rp_.min_rate, 1.0);
}

}  // namespace sluice::top
