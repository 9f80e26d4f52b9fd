// sluice-tg's inputs from the network and the command line: the first byte
// picks the parser.
//   0: the wire protocol (proto.h) - a stream of 24-byte requests as a
//      server reads them and 40-byte trailers as a client reads them; a
//      decoded record encodes back to the same fields;
//   1: endpoint lists ("10.0.0.2:5001,[fd00::2]:5001");
//   2: flow-size CDF files; an accepted CDF draws sizes >= 1 within its
//      range for any u in [0, 1).
// Bad input may only be refused with sluice::Error.
#include <cmath>
#include <sstream>

#include "cdf.h"
#include "fuzz_input.h"
#include "core/error.h"
#include "proto.h"
#include "sock.h"

using namespace sluice::tg;

namespace {

void wire(sluice::fuzz::Input& in) {
  while (in.left() >= kRequestSize) {
    uint8_t rb[kTrailerSize];
    bool trailer = in.take<uint8_t>() & 1;
    size_t n = trailer ? kTrailerSize : kRequestSize;
    if (in.take_bytes(rb, n) < n) return;
    if (trailer) {
      Trailer t;
      if (!decode(rb, &t)) continue;
      uint8_t out[kTrailerSize];
      encode(t, out);
      Trailer u;
      FUZZ_CHECK(decode(out, &u));
      FUZZ_CHECK(u.id == t.id && u.retrans_segs == t.retrans_segs && u.rto == t.rto &&
                 u.bytes_retrans == t.bytes_retrans && u.send_us == t.send_us);
    } else {
      Request r;
      if (!decode(rb, &r)) continue;
      uint8_t out[kRequestSize];
      encode(r, out);
      FUZZ_CHECK(std::memcmp(out, rb, kRequestSize) == 0);
    }
  }
}

void endpoints(sluice::fuzz::Input& in) {
  uint16_t def = in.take<uint16_t>();
  try {
    for (const auto& e : parse_endpoints(in.rest(), def)) {
      FUZZ_CHECK(e.len == sizeof(sockaddr_in) || e.len == sizeof(sockaddr_in6));
      FUZZ_CHECK(e.addr.ss_family == AF_INET || e.addr.ss_family == AF_INET6);
    }
  } catch (const sluice::Error&) {
  }
}

void cdf(sluice::fuzz::Input& in) {
  double us[4];
  for (auto& u : us) u = double(in.take<uint32_t>()) / 4294967296.0;
  std::istringstream is(in.rest());
  try {
    Cdf c = Cdf::parse(is, "fuzz.cdf");
    double lo = c.points().front().bytes, hi = c.points().back().bytes;
    for (double u : us) {
      uint64_t s = c.quantile(u);
      FUZZ_CHECK(s >= 1);
      FUZZ_CHECK(double(s) >= std::floor(lo) && double(s) <= std::ceil(hi));
    }
  } catch (const sluice::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sluice::fuzz::Input in(data, size);
  switch (in.take<uint8_t>() % 3) {
    case 0: wire(in); break;
    case 1: endpoints(in); break;
    case 2: cdf(in); break;
  }
  return 0;
}
