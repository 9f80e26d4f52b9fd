// sluicectl's input: the JSON reply read from the control socket, which
// comes from whatever listens on that path. The first input byte picks the
// view (status, stats, flows), the rest is the reply line. Invariant: the
// view prints or throws a std::exception (sluicectl's "unexpected reply");
// no crash, no sanitizer report, no other exception.
#include <cstdio>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "ctl/print.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::FILE* sink = std::fopen("/dev/null", "w");
  FUZZ_CHECK(sink != nullptr);
  sluice::fuzz::Input in(data, size);
  const uint8_t view = in.take<uint8_t>() % 3;
  const std::string line = in.rest();
  nlohmann::json reply = nlohmann::json::parse(line, nullptr, false);
  if (reply.is_discarded()) return 0;
  try {
    if (view == 0) sluice::ctl::print_status(sink, reply);
    if (view == 1) sluice::ctl::print_stats(sink, reply);
    if (view == 2) sluice::ctl::print_flows(sink, reply);
  } catch (const std::exception&) {
  }
  return 0;
}
