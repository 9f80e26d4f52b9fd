#include "cc_config.h"

#include <algorithm>

namespace sluice {

std::string check_cc_name(const std::string& name) {
  if (name.empty()) return "must not be empty";
  if (name.size() >= kCcNameMax) return "longer than 15 characters (TCP_CA_NAME_MAX)";
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return "only a-z, 0-9 and _ are allowed";
  return "";
}

namespace {

void parse_register(ConfigReader& r, CcConfig& c) {
  r.get_unique_strings(
      "register", "expected an array of strings (\"dctcp\", \"pulser\")",
      [](const std::string& s, const toml::node&) -> std::string {
        return s == "dctcp" || s == "pulser" ? "" : "must be \"dctcp\" or \"pulser\"";
      },
      c.register_cc);
}

void check_names(ConfigReader& r, CcConfig& c) {
  for (auto [k, v] : {std::pair{"dctcp_name", &c.dctcp_name}, {"pulser_name", &c.pulser_name}})
    if (auto why = check_cc_name(*v); !why.empty()) r.problem(k, r.table().get(k), why);
  if (c.dctcp_name == c.pulser_name) r.problem("pulser_name", r.table().get("pulser_name"), "same as dctcp_name");
}

}  // namespace

const ConfigSection& cc_section() {
  using S = CcConfig;
  static const ConfigSection s = make_section<S>(
      S::kSection,
      {
          {"register", parse_register, [](const S& c) { return nlohmann::json(c.register_cc); }, "[\"dctcp\"]"},
          field::text("dctcp_name", &S::dctcp_name, "\"sl_dctcp2\""),
          field::text("pulser_name", &S::pulser_name, "\"sl_pulser2\""),
          field::integer("dctcp_shift_g", &S::dctcp_shift_g, 0, 10),
          field::integer("dctcp_alpha_on_init", &S::dctcp_alpha_on_init, 0, 1024),
          field::integer("pulser_cwnd_safe", &S::pulser_cwnd_safe, 1, 1000),
      },
      check_names);
  return s;
}

}  // namespace sluice
