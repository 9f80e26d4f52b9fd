#include "mechanisms/bfc/bfc_switch.h"

#include "mechanisms/bfc/bfc_view.h"

namespace sluice::bfc {

Config sluiced_config(std::string_view variant) {
  Config c = Config::variant_named(variant);
  c.sample_ns = 1'000'000;
  c.hrtt_ns = 1'000'000;
  c.bitmap_interval_ns = 2'000'000;
  c.pause_expiry_ns = 20'000'000;
  return c;
}

std::unique_ptr<sw::Logic> make_bfc(const sw::LogicContext&) {
  return std::make_unique<BfcLogic>(sluiced_config("bfc"));
}
std::unique_ptr<sw::Logic> make_bfc_stochastic(const sw::LogicContext&) {
  return std::make_unique<BfcLogic>(sluiced_config("bfc-stochastic"));
}
std::unique_ptr<sw::Logic> make_bfc_single(const sw::LogicContext&) {
  return std::make_unique<BfcLogic>(sluiced_config("bfc-single"));
}

nlohmann::json switch_view(const sw::Logic& logic, const sw::Substrate& sw) {
  return view(static_cast<const BfcLogic&>(logic), sw);
}

}  // namespace sluice::bfc
