#include "aqm_config.h"

#include <algorithm>

#include "sluice/pulser.h"

namespace sluice {

// queue_source's names: parsed and printed from this one list.
static const std::vector<std::pair<std::string, AqmQueueSource>> kQueueSources = {
    {"auto", AqmQueueSource::Auto}, {"kern-ctx", AqmQueueSource::KernCtx}, {"tracepoint", AqmQueueSource::Tracepoint}};

const char* to_string(AqmQueueSource s) { return name_of(kQueueSources, s); }

namespace {

void validate(ConfigReader& r, AqmConfig& c) {
  if (c.ecn_threshold_bytes && c.ecn_threshold_packets)
    r.problem("ecn_threshold_packets", r.table().get("ecn_threshold_packets"),
              "K is in bytes or in packets, not both (ecn_threshold_bytes is set too)");
  if (!c.ecn && !c.ein) r.problem("ein", r.table().get("ein"), "with ecn = false too, aqm would mark nothing");
}

// Departure marking happens at the far end of the port's link, which the
// interface names (link_far_end); nothing else uses link_far_end.
void check_far_ends(const Config& cfg, std::vector<ConfigProblem>& out) {
  const AqmConfig& a = cfg.get<AqmConfig>();
  for (size_t i = 0; i < cfg.interfaces.size(); ++i) {
    const auto& ic = cfg.interfaces[i];
    bool aqm = std::find(ic.mechanisms.begin(), ic.mechanisms.end(), "aqm") != ic.mechanisms.end();
    bool departure = aqm && a.ein && a.ein_at_departure;
    if (departure && ic.link_far_end.empty())
      out.push_back({"interface[" + std::to_string(i) + "].link_far_end", "",
                     "required by [aqm] ein_mark = \"departure\" (where this port's packets arrive after its queue)"});
    if (!departure && !ic.link_far_end.empty())
      out.push_back({"interface[" + std::to_string(i) + "].link_far_end", "\"" + ic.link_far_end + "\"",
                     "only used by mechanism aqm with [aqm] ein = true and ein_mark = \"departure\""});
  }
}

ConfigSection make_aqm_section() {
  using S = AqmConfig;
  ConfigSection s = make_section<S>(
      S::kSection,
      {
          field::flag("ecn", &S::ecn),
          field::optional_integer("ecn_threshold_bytes", &S::ecn_threshold_bytes, 1, int64_t(1) << 40),
          field::optional_integer("ecn_threshold_packets", &S::ecn_threshold_packets, 1, 1'000'000),
          field::flag("ein", &S::ein),
          field::integer("ein_samples", &S::ein_samples, 1, SLUICE_AQM_RING - 1),
          field::number("ein_threshold", &S::ein_threshold, 0.001, 100.0),
          field::optional_integer("ein_high_water", &S::ein_high_water, 0, int64_t(1) << 40),
          field::choice<S, bool>("ein_mark", &S::ein_at_departure, {{"arrival", false}, {"departure", true}})
              .needing("interface.link_far_end = \"veth9\""),
          field::choice("queue_source", &S::queue_source, kQueueSources),
      },
      validate, check_far_ends);
  // An interface's link_far_end only exists with departure marking there.
  s.contexts = {{"interface.link_far_end",
                 "interface.role = \"switch-port\"\ninterface.mechanisms = [\"aqm\"]\n"
                 "interface.line_rate_mbps = 100\ninterface.link_far_end = \"veth1\"\naqm.ein_mark = \"departure\""}};
  return s;
}

}  // namespace

const ConfigSection& aqm_section() {
  static const ConfigSection s = make_aqm_section();
  return s;
}

}  // namespace sluice
