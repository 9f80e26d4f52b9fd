#include "cdf.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace sluice::tg {

Cdf Cdf::load(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error("cannot open CDF file " + path);
  return parse(f, path);
}

Cdf Cdf::parse(std::istream& f, const std::string& path) {
  std::vector<Point> pts;
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    ++n;
    auto hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream is(line);
    double b, p;
    if (!(is >> b)) continue;  // blank line
    std::string rest;
    if (!(is >> p) || (is >> rest)) throw Error(path + ":" + std::to_string(n) + ": expected '<bytes> <probability>'");
    pts.push_back({b, p});
  }
  return from_points(std::move(pts), path);
}

Cdf Cdf::from_points(std::vector<Point> pts, const std::string& what) {
  if (pts.empty()) throw Error(what + ": no points");
  for (size_t i = 0; i < pts.size(); ++i) {
    const auto& q = pts[i];
    // A size beyond kMaxBytes (or inf/NaN) would not convert to a byte count.
    if (!(q.bytes >= 1 && q.bytes <= kMaxBytes) || !(q.p >= 0 && q.p <= 1))
      throw Error(what + ": point " + std::to_string(i + 1) + " out of range (1 <= bytes <= 1e15, 0 <= p <= 1)");
    if (i && (q.bytes < pts[i - 1].bytes || q.p < pts[i - 1].p))
      throw Error(what + ": point " + std::to_string(i + 1) + " decreases");
  }
  if (std::fabs(pts.back().p - 1.0) > 1e-9) throw Error(what + ": last point must have probability 1");
  Cdf c;
  c.pts_ = std::move(pts);
  return c;
}

uint64_t Cdf::quantile(double u) const {
  const auto& v = pts_;
  if (u <= v.front().p) return uint64_t(std::llround(v.front().bytes));
  for (size_t i = 1; i < v.size(); ++i) {
    if (u <= v[i].p) {
      double span = v[i].p - v[i - 1].p;
      double x = span > 0 ? v[i - 1].bytes + (v[i].bytes - v[i - 1].bytes) * (u - v[i - 1].p) / span : v[i].bytes;
      return std::max<uint64_t>(1, uint64_t(std::llround(x)));
    }
  }
  return uint64_t(std::llround(v.back().bytes));
}

double Cdf::mean() const {
  // Mass below the first point sits at the first size; between points the
  // size is uniform on the segment.
  const auto& v = pts_;
  double m = v.front().bytes * v.front().p;
  for (size_t i = 1; i < v.size(); ++i) m += (v[i].p - v[i - 1].p) * (v[i].bytes + v[i - 1].bytes) / 2;
  return m;
}

}  // namespace sluice::tg
