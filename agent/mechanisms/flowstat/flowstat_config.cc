#include "flowstat_config.h"

namespace sluice {

const ConfigSection& flowstat_section() {
  using S = FlowstatConfig;
  static const ConfigSection s =
      make_section<S>(S::kSection, {
                                       field::flag("track_flows", &S::track_flows),
                                       field::integer("idle_timeout_s", &S::idle_timeout_s, 1, 86400 * 7),
                                   });
  return s;
}

}  // namespace sluice
