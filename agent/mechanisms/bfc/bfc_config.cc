#include "mechanisms/bfc/bfc_config.h"

namespace sluice {

bfc::Config BfcSection::logic_config(std::string_view variant, bool per_packet) const {
  bfc::Config c = bfc::Config::variant_named(variant);
  c.hrtt_ns = uint64_t(hrtt_us ? hrtt_us : per_packet ? kHoldHrttUs : kSampledHrttUs) * 1000;
  c.sample_ns = per_packet ? 0 : uint64_t(sample_us) * 1000;
  // Per packet, the Fig. 7 trace at the sampled mode's period.
  c.trace_ns = per_packet ? uint64_t(sample_us) * 1000 : 0;
  c.bitmap_interval_ns = uint64_t(bitmap_interval_us) * 1000;
  c.pause_expiry_ns = uint64_t(pause_expiry_us) * 1000;
  c.th_min_bytes = th_min_bytes;
  c.th_fixed_bytes = th_fixed_bytes;
  c.flow_table_factor = flow_table_factor;
  return c;
}

namespace {

using S = BfcSection;

void validate(ConfigReader& r, S& s) {
  std::string err = s.logic_config("bfc").check();
  if (!err.empty()) r.problem("pause_expiry_us", r.table().get("pause_expiry_us"), err);
}

}  // namespace

const ConfigSection& bfc_section() {
  static const ConfigSection s =
      make_section<S>(S::kSection,
                      {
                          field::integer("hrtt_us", &S::hrtt_us, 1, 1'000'000),
                          field::integer("sample_us", &S::sample_us, 100, 1'000'000),
                          field::integer("bitmap_interval_us", &S::bitmap_interval_us, 100, 10'000'000),
                          field::integer("pause_expiry_us", &S::pause_expiry_us, 0, 100'000'000),
                          field::integer("th_min_bytes", &S::th_min_bytes, 0, 1 << 30),
                          field::integer("th_fixed_bytes", &S::th_fixed_bytes, 0, 1 << 30),
                          field::integer("flow_table_factor", &S::flow_table_factor, 1, 10'000),
                      },
                      validate);
  return s;
}

}  // namespace sluice
