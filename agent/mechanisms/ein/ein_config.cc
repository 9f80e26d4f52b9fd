#include "ein_config.h"

#include <cstdlib>

#include "sluice/pulser.h"

namespace sluice {

namespace {

// "tos:0xNN" with one DSCP bit, or "ipv4-reserved". Never an ECN bit.
void resolve_bit(ConfigReader& r, EinConfig& c) {
  const std::string& b = c.bit;
  bool ok = false;
  if (b == "ipv4-reserved") {
    c.field = SLUICE_EIN_FIELD_IPV4_RSV;
    c.mask = SLUICE_EIN_IPV4_RSV_FLAG;
    ok = true;
  } else if (b.rfind("tos:", 0) == 0) {
    char* end = nullptr;
    unsigned long m = std::strtoul(b.c_str() + 4, &end, 0);
    if (end && *end == 0 && b.size() > 4 && m >= 0x04 && m <= 0x80 && (m & (m - 1)) == 0) {
      c.field = SLUICE_EIN_FIELD_TOS;
      c.mask = uint16_t(m);
      ok = true;
    }
  }
  if (!ok) {
    const toml::node* n = r.table().get("bit");
    r.problems().push_back({"ein.bit", "\"" + b + "\"",
                            "must be \"tos:0xNN\" with one DSCP bit (0x04, 0x08, ..., 0x80; 0x01/0x02 are ECN) or "
                            "\"ipv4-reserved\"",
                            n ? toml_where(*n) : ""});
  }
}

}  // namespace

const ConfigSection& ein_section() {
  using S = EinConfig;
  static const ConfigSection s = make_section<S>(S::kSection,
                                                 {
                                                     field::text("bit", &S::bit, "\"tos:0x08\""),
                                                     field::integer("echo_fresh_us", &S::echo_fresh_us, 1, 10'000'000),
                                                 },
                                                 resolve_bit);
  return s;
}

}  // namespace sluice
