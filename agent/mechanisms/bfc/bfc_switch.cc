#include "mechanisms/bfc/bfc_switch.h"

#include "core/config.h"
#include "mechanisms/bfc/bfc_config.h"
#include "mechanisms/bfc/bfc_view.h"

namespace sluice::bfc {

Config sluiced_config(std::string_view variant, const sluice::Config* config) {
  static const BfcSection kDefaults{};
  return (config ? config->get<BfcSection>() : kDefaults).logic_config(variant);
}

std::unique_ptr<sw::Logic> make_bfc(const sw::LogicContext& ctx) {
  return std::make_unique<BfcLogic>(sluiced_config("bfc", ctx.config));
}
std::unique_ptr<sw::Logic> make_bfc_stochastic(const sw::LogicContext& ctx) {
  return std::make_unique<BfcLogic>(sluiced_config("bfc-stochastic", ctx.config));
}
std::unique_ptr<sw::Logic> make_bfc_single(const sw::LogicContext& ctx) {
  return std::make_unique<BfcLogic>(sluiced_config("bfc-single", ctx.config));
}

nlohmann::json switch_view(const sw::Logic& logic, const sw::Substrate& sw) {
  return view(static_cast<const BfcLogic&>(logic), sw);
}

}  // namespace sluice::bfc
