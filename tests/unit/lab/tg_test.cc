// sluice-tg pieces that need no network: flow-size CDFs (every shipped file
// loads; sampling follows the distribution; bad files name the line), the
// wire format, endpoint parsing.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>

#include "cdf.h"
#include "core/error.h"
#include "proto.h"
#include "sock.h"

using namespace sluice;
using namespace sluice::tg;

namespace {

std::string write_tmp(const std::string& text) {
  char tmpl[] = "/tmp/sluice-tg-test-XXXXXX";
  int fd = mkstemp(tmpl);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(tmpl) << text;
  return tmpl;
}

TEST(Cdf, EveryShippedWorkloadLoads) {
  for (const char* w : {"websearch", "datamining", "hadoop", "webserver", "memcached", "google"}) {
    std::string path = std::string(SLUICE_SOURCE_DIR) + "/bench/cdf/" + w + ".cdf";
    Cdf c = Cdf::load(path);
    EXPECT_GE(c.points().size(), 5u) << w;
    EXPECT_DOUBLE_EQ(c.points().back().p, 1.0) << w;
    std::ifstream f(path);
    std::string first;
    std::getline(f, first);
    EXPECT_EQ(first.rfind("#", 0), 0u) << w << ": the header must name the source";
  }
}

TEST(Cdf, QuantilesInterpolateLinearly) {
  Cdf c = Cdf::from_points({{100, 0.5}, {300, 1.0}});
  EXPECT_EQ(c.quantile(0.0), 100u);  // mass below the first point sits on it
  EXPECT_EQ(c.quantile(0.5), 100u);
  EXPECT_EQ(c.quantile(0.75), 200u);  // halfway between 100 and 300
  EXPECT_EQ(c.quantile(1.0), 300u);
  // 50% at 100 B, 50% uniform on [100, 300]: mean 150.
  EXPECT_DOUBLE_EQ(c.mean(), 150.0);
}

TEST(Cdf, SamplesFollowTheDistribution) {
  Cdf c = Cdf::load(std::string(SLUICE_SOURCE_DIR) + "/bench/cdf/websearch.cdf");
  std::mt19937_64 rng(42);
  const int n = 200000;
  int below_100k = 0;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    uint64_t v = c.sample(rng);
    below_100k += v <= 100000;
    sum += double(v);
  }
  // CDF(100 KB) by interpolation between (77380, 0.53) and (194180, 0.6).
  double expect = 0.53 + 0.07 * (100000.0 - 77380) / (194180 - 77380);
  EXPECT_NEAR(double(below_100k) / n, expect, 0.01);
  EXPECT_NEAR(sum / n / c.mean(), 1.0, 0.03);
}

TEST(Cdf, BadFilesNameTheProblem) {
  auto msg = [](const std::string& text) {
    std::string p = write_tmp(text);
    try {
      Cdf::load(p);
    } catch (const Error& e) {
      unlink(p.c_str());
      return std::string(e.what());
    }
    unlink(p.c_str());
    return std::string("no error");
  };
  EXPECT_NE(msg("# x\n100 0.5\n50 1\n").find("point 2 decreases"), std::string::npos);
  EXPECT_NE(msg("100 0.5\n200 0.9\n").find("probability 1"), std::string::npos);
  EXPECT_NE(msg("100 0.5\n200 x\n").find(":2:"), std::string::npos);
  EXPECT_NE(msg("100 0.5 7\n200 1\n").find(":1:"), std::string::npos);
  EXPECT_NE(msg("# only comments\n").find("no points"), std::string::npos);
  EXPECT_THROW(Cdf::load("/nonexistent/file.cdf"), Error);
}

TEST(Proto, RoundTripsAndRejectsForeignBytes) {
  Request r{uint32_t(ReqType::Data), 123456789012ull, 42};
  uint8_t b[kRequestSize];
  encode(r, b);
  Request back;
  ASSERT_TRUE(decode(b, &back));
  EXPECT_EQ(back.type, r.type);
  EXPECT_EQ(back.bytes, r.bytes);
  EXPECT_EQ(back.id, r.id);
  EXPECT_EQ(b[0], 'S');  // big-endian magic "SLTG"
  b[0] = 'X';
  EXPECT_FALSE(decode(b, &back));

  Trailer t;
  t.id = 7;
  t.retrans_segs = 3;
  t.rto = kUnknown;
  t.bytes_retrans = 4344;
  t.send_us = 99;
  uint8_t tb[kTrailerSize];
  encode(t, tb);
  Trailer tb2;
  ASSERT_TRUE(decode(tb, &tb2));
  EXPECT_EQ(tb2.id, 7u);
  EXPECT_EQ(tb2.retrans_segs, 3u);
  EXPECT_EQ(tb2.rto, kUnknown);
  EXPECT_EQ(tb2.bytes_retrans, 4344u);
  EXPECT_EQ(tb2.send_us, 99u);
  EXPECT_FALSE(decode(b, &tb2)) << "a request is not a trailer";
}

TEST(Endpoints, ParseAndRejectClearly) {
  auto eps = parse_endpoints("10.0.0.1,10.0.0.2:6000,[fd00::1]:7000", 5001);
  ASSERT_EQ(eps.size(), 3u);
  EXPECT_EQ(eps[0].port, 5001);
  EXPECT_EQ(eps[1].port, 6000);
  EXPECT_EQ(eps[2].host, "fd00::1");
  EXPECT_EQ(eps[2].port, 7000);
  EXPECT_THROW(parse_endpoint("10.0.0.1:99999", 1), Error);
  EXPECT_THROW(parse_endpoint("host.example:80", 1), Error);
  EXPECT_THROW(parse_endpoints(",", 1), Error);
}

}  // namespace
