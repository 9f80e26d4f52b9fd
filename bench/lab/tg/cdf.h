// Flow-size distributions as CDF files (bench/cdf/*.cdf):
//   # comment lines (the first ones name the source)
//   <size in bytes> <cumulative probability>
// Points must be non-decreasing in both columns and end at probability 1.
// Sampling is by inverse transform with linear interpolation between points,
// the convention of the simulators the papers use.
#pragma once

#include <cstdint>
#include <istream>
#include <random>
#include <string>
#include <vector>

namespace sluice::tg {

class Cdf {
 public:
  struct Point {
    double bytes;
    double p;
  };
  static constexpr double kMaxBytes = 1e15;  // largest flow size a point may name
  // Throws sluice::Error naming the file and line of a bad point.
  static Cdf load(const std::string& path);
  // The same from a stream; `path` names it in errors.
  static Cdf parse(std::istream& in, const std::string& path);
  static Cdf from_points(std::vector<Point> pts, const std::string& what = "cdf");

  // Draws a flow size (>= 1 byte) from u in [0,1).
  uint64_t quantile(double u) const;
  template <typename Rng>
  uint64_t sample(Rng& rng) const {
    return quantile(std::uniform_real_distribution<double>(0.0, 1.0)(rng));
  }
  // Mean of the piecewise-linear distribution, in bytes.
  double mean() const;
  const std::vector<Point>& points() const { return pts_; }

 private:
  std::vector<Point> pts_;
};

}  // namespace sluice::tg
