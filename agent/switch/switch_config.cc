#include "switch/switch_config.h"

#include <net/if.h>

#include <set>

#include "switch/registry.h"

namespace sluice {

const char* port_role_name(sw::PortRole r) {
  switch (r) {
    case sw::PortRole::kSwitchFacing: return "switch-facing";
    case sw::PortRole::kHostFacing: return "host-facing";
    case sw::PortRole::kHostUplink: return "host-uplink";
    default: return "none";
  }
}

namespace {

using S = SwitchConfig;

// Reads one [[switch.ports]] table; problems name "switch.ports[i].key".
void parse_port(const toml::table& t, size_t i, std::vector<ConfigProblem>& out, SwitchPortEntry& p) {
  ConfigReader r(t, "switch.ports[" + std::to_string(i) + "]", out);
  r.get("name", p.name);
  if (!t.contains("name")) r.problem("name", nullptr, "required");
  else if (p.name.size() >= IFNAMSIZ) r.problem("name", t.get("name"), "longer than IFNAMSIZ-1");
  if (!t.contains("role")) r.problem("role", nullptr, "required (\"switch-facing\" or \"host-facing\")");
  r.get_enum("role", p.role,
             {{"switch-facing", sw::PortRole::kSwitchFacing}, {"host-facing", sw::PortRole::kHostFacing}});
  r.get_opt_int("rate_mbit", p.rate_mbit, 1, 100000);
  r.get_opt_int("queues", p.queues, 1, SLUICE_SW_MAX_QUEUES);
  r.get_opt_int("buffer_bytes", p.buffer_bytes, 1514, 1 << 30);
  r.finish();
}

Field<S> ports_field() {
  Field<S> f;
  f.key = "ports";
  f.parse = [](ConfigReader& r, S& s) {
    const toml::node* n = r.node("ports");
    if (!n) return;
    const toml::array* arr = n->as_array();
    if (!arr) return r.problem("ports", n, "expected an array of tables ([[switch.ports]])");
    if (arr->size() > SLUICE_SW_MAX_PORTS)
      return r.problem("ports", n, "more than " + std::to_string(SLUICE_SW_MAX_PORTS) + " ports");
    std::set<std::string> names;
    for (size_t i = 0; i < arr->size(); ++i) {
      const toml::node& e = *arr->get(i);
      const toml::table* t = e.as_table();
      std::string k = "ports[" + std::to_string(i) + "]";
      if (!t) {
        r.problem(k, &e, "expected a table with name and role");
        continue;
      }
      SwitchPortEntry p;
      p.where = toml_where(e);
      parse_port(*t, i, r.problems(), p);
      if (!p.name.empty() && !names.insert(p.name).second) r.problem(k + ".name", t->get("name"), "port listed twice");
      s.ports.push_back(std::move(p));
    }
  };
  f.to_json = [](const S& s) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& p : s.ports) {
      nlohmann::json j = {{"name", p.name}, {"role", port_role_name(p.role)}};
      j["rate_mbit"] = p.rate_mbit ? nlohmann::json(*p.rate_mbit) : nlohmann::json();
      j["queues"] = p.queues ? nlohmann::json(*p.queues) : nlohmann::json();
      j["buffer_bytes"] = p.buffer_bytes ? nlohmann::json(*p.buffer_bytes) : nlohmann::json();
      a.push_back(j);
    }
    return a;
  };
  f.alt = "[{ name = \"swp1\", role = \"host-facing\" }]";
  return f;
}

Field<S> logic_field() {
  Field<S> f;
  f.key = "logic";
  f.parse = [](ConfigReader& r, S& s) {
    const toml::node* n = r.table().get("logic");
    std::string v = s.logic;
    r.get("logic", v);
    if (!n || !n->is_string()) return;
    if (!sw::find_logic(v)) return r.problem("logic", n, "unknown switch logic; one of " + sw::logic_names());
    s.logic = v;
  };
  f.to_json = [](const S& s) { return nlohmann::json(s.logic); };
  f.alt = "\"pfc\"";
  return f;
}

// The held queues are marked by the switch itself; the tree's ports by the
// aqm mechanism: K in [switch] only means something on the held data path.
void validate(ConfigReader& r, S& c) {
  if (c.ecn_threshold_packets && c.datapath != SwitchDatapath::kHold)
    r.problem("ecn_threshold_packets", r.table().get("ecn_threshold_packets"),
              "marks the held queues: it needs datapath = \"hold\" (the tree's ports are marked by the aqm "
              "mechanism, [aqm] ecn_threshold_packets)");
}

}  // namespace

const ConfigSection& switch_section() {
  static const ConfigSection s = make_section<S>(
      S::kSection,
      {
          logic_field(),
          field::integer("queues", &S::queues, 1, SLUICE_SW_MAX_QUEUES),
          field::integer("rate_mbit", &S::rate_mbit, 1, 100000),
          field::integer("buffer_bytes", &S::buffer_bytes, 1514, 1 << 30),
          field::integer("burst_bytes", &S::burst_bytes, 0, 1 << 24),
          field::integer("fail_open_ms", &S::fail_open_ms, 10, 60000),
          field::choice("datapath", &S::datapath, {{"tree", SwitchDatapath::kTree}, {"hold", SwitchDatapath::kHold}}),
          field::integer("hold_backlog_us", &S::hold_backlog_us, 1, 100000),
          field::integer("ecn_threshold_packets", &S::ecn_threshold_packets, 0, 1000000)
              .within("switch.datapath = \"hold\""),
          field::integer("control_defer_us", &S::control_defer_us, 0, 1000000),
          ports_field(),
      },
      validate);
  return s;
}

}  // namespace sluice
