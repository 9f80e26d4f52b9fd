#include "mechanisms/bfc/bfc_switch.h"

#include "core/config.h"
#include "core/error.h"
#include "mechanisms/bfc/bfc_config.h"
#include "mechanisms/bfc/bfc_view.h"

namespace sluice::bfc {

Config sluiced_config(std::string_view variant, const sluice::Config* config, bool per_packet) {
  static const BfcSection kDefaults{};
  return (config ? config->get<BfcSection>() : kDefaults).logic_config(variant, per_packet);
}

namespace {
std::unique_ptr<sw::Logic> make(std::string_view variant, const sw::LogicContext& ctx) {
  return std::make_unique<BfcLogic>(sluiced_config(variant, ctx.config, ctx.per_packet));
}
}  // namespace

std::unique_ptr<sw::Logic> make_bfc(const sw::LogicContext& ctx) { return make("bfc", ctx); }
std::unique_ptr<sw::Logic> make_bfc_stochastic(const sw::LogicContext& ctx) { return make("bfc-stochastic", ctx); }
std::unique_ptr<sw::Logic> make_bfc_single(const sw::LogicContext& ctx) { return make("bfc-single", ctx); }
std::unique_ptr<sw::Logic> make_bfc_nosticky(const sw::LogicContext& ctx) {
  // The sampled mode assigns no queue (flows are hashed), so there is
  // nothing to make sticky or not: the ablation needs the per-packet mode.
  if (!ctx.per_packet)
    throw Error(
        "[switch] logic = \"bfc-nosticky\" needs datapath = \"hold\" (the sampled mode of \"tree\" "
        "hashes flows: no assignment to make sticky)");
  return make("bfc-nosticky", ctx);
}

nlohmann::json switch_view(const sw::Logic& logic, const sw::Substrate& sw) {
  return view(static_cast<const BfcLogic&>(logic), sw);
}

}  // namespace sluice::bfc
