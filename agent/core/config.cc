#include "config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <fstream>
#include <net/if.h>
#include <sstream>

#include "config_section.h"
#include "module.h"

namespace sluice {

const char* to_string(Role r) { return r == Role::Host ? "host" : "switch-port"; }

// [agent] attach_mode's names: parsed and printed from this one list.
static const std::vector<std::pair<std::string, AttachMode>> kAttachModes = {
    {"auto", AttachMode::Auto}, {"tcx", AttachMode::Tcx}, {"clsact", AttachMode::Clsact}};

const char* to_string(AttachMode m) { return name_of(kAttachModes, m); }

std::string ConfigProblem::to_string() const {
  std::string s = where.empty() ? key : where + ": " + key;
  if (!value.empty()) s += " = " + value;
  return s + ": " + reason;
}

static std::string join_problems(const std::vector<ConfigProblem>& ps) {
  std::string s = "invalid configuration";
  for (const auto& p : ps) s += "\n  " + p.to_string();
  return s;
}

ConfigError::ConfigError(std::vector<ConfigProblem> problems)
    : Error(join_problems(problems)), problems_(std::move(problems)) {}

const InterfaceConfig* Config::find_interface(const std::string& name) const {
  for (const auto& i : interfaces)
    if (i.name == name) return &i;
  return nullptr;
}

bool Config::uses_mechanism(const std::string& mech) const {
  for (const auto& i : interfaces)
    if (std::find(i.mechanisms.begin(), i.mechanisms.end(), mech) != i.mechanisms.end()) return true;
  return false;
}

std::pair<std::string, std::string> InterfaceConfig::far_end() const {
  auto c = link_far_end.rfind(':');
  if (c == std::string::npos) return {"", link_far_end};
  return {link_far_end.substr(0, c), link_far_end.substr(c + 1)};
}

// ---- ConfigReader ------------------------------------------------------------

std::string render_toml(const toml::node& n) {
  std::ostringstream os;
  if (auto s = n.as_string()) os << '"' << s->get() << '"';
  else if (n.is_table()) os << "{table}";
  else if (n.is_array()) os << "[array]";
  else n.visit([&](auto&& v) { os << v; });
  return os.str();
}

std::string toml_where(const toml::node& n) {
  const auto& src = n.source();
  if (!src.begin.line) return "";
  return (src.path ? *src.path : std::string("<string>")) + ":" + std::to_string(src.begin.line);
}

void ConfigReader::problem(const std::string& k, const toml::node* n, const std::string& reason) {
  out_.push_back({key(k), n ? render_toml(*n) : "", reason, n ? toml_where(*n) : ""});
}

const toml::node* ConfigReader::node(const char* k) {
  seen_.push_back(k);
  return t_.get(k);
}

bool ConfigReader::get_unique_strings(const char* k, const std::string& expected,
                                      const std::function<std::string(const std::string&, const toml::node&)>& check,
                                      std::vector<std::string>& out) {
  auto n = node(k);
  if (!n) return false;
  auto arr = n->as_array();
  if (!arr) {
    problem(k, n, expected);
    return true;
  }
  out.clear();
  for (size_t i = 0; i < arr->size(); ++i) {
    const toml::node& e = *arr->get(i);
    std::string ki = std::string(k) + "[" + std::to_string(i) + "]";
    auto str = e.as_string();
    std::string why = !str ? "expected a string" : check(str->get(), e);
    if (why.empty() && std::find(out.begin(), out.end(), str->get()) != out.end()) why = "listed twice";
    if (!why.empty()) {
      problem(ki, &e, why);
      continue;
    }
    out.push_back(str->get());
  }
  return true;
}

void ConfigReader::get(const char* k, bool& v) {
  if (auto n = node(k)) {
    if (auto b = n->as_boolean()) v = b->get();
    else problem(k, n, "expected true or false");
  }
}

void ConfigReader::get(const char* k, std::string& v, bool allow_empty) {
  if (auto n = node(k)) {
    auto s = n->as_string();
    if (!s) return problem(k, n, "expected a string");
    if (!allow_empty && s->get().empty()) return problem(k, n, "must not be empty");
    v = s->get();
  }
}

void ConfigReader::get(const char* k, double& v, double lo, double hi) {
  if (auto n = node(k)) {
    std::optional<double> x;
    if (auto f = n->as_floating_point()) x = f->get();
    else if (auto i = n->as_integer()) x = double(i->get());
    if (!x) return problem(k, n, "expected a number");
    if (!(*x >= lo && *x <= hi))
      return problem(k, n, "out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    v = *x;
  }
}

void ConfigReader::finish() {
  for (auto&& [k, n] : t_) {
    std::string ks(k.str());
    if (std::find(seen_.begin(), seen_.end(), ks) == seen_.end()) problem(ks, &n, "unknown key");
  }
}

std::string config_context(const std::string& section_key, const std::vector<const ConfigSection*>& sections) {
  std::string lines;
  for (const ConfigSection* s : sections)
    for (const auto& [k, l] : s->contexts)
      if (k == section_key) lines += l + "\n";
  return lines;
}

// ---- The loader's own sections ----------------------------------------------

const ConfigSection& agent_section() {
  using S = AgentConfig;
  static const std::vector<std::pair<std::string, std::string>> kLevels = {
      {"trace", "trace"}, {"debug", "debug"},       {"info", "info"}, {"warn", "warn"},
      {"error", "error"}, {"critical", "critical"}, {"off", "off"}};
  static const ConfigSection s = make_section<S>(
      "agent",
      {
          field::text("pin_root", &S::pin_root, "\"/sys/fs/bpf/sluice2\""),
          field::text("state_dir", &S::state_dir, "\"/run/sluice2\""),
          field::text("control_socket", &S::control_socket, "\"/run/sluice/other.sock\""),
          field::choice("log_level", &S::log_level, kLevels),
          field::choice("attach_mode", &S::attach_mode, kAttachModes),
          field::integer("heartbeat_ms", &S::heartbeat_ms, 1, 1000),
      },
      [](ConfigReader& r, S& a) {
        for (auto [k, v] :
             {std::pair{"pin_root", &a.pin_root}, {"state_dir", &a.state_dir}, {"control_socket", &a.control_socket}})
          if (!v->empty() && (*v)[0] != '/') r.problem(k, r.table().get(k), "must be an absolute path");
      });
  return s;
}

const ConfigSection& metrics_section() {
  using S = MetricsConfig;
  static const ConfigSection s = make_section<S>("metrics", {
                                                                field::flag("enabled", &S::enabled),
                                                                field::text("bind", &S::bind, "\"127.0.0.2\""),
                                                                field::integer("port", &S::port, 1, 65535),
                                                                field::flag("per_flow", &S::per_flow),
                                                            });
  return s;
}

namespace {

using IC = InterfaceConfig;

void parse_name(ConfigReader& r, IC& ic) {
  r.get("name", ic.name);
  if (!r.table().contains("name")) r.problem("name", nullptr, "required");
  else if (ic.name.size() >= IFNAMSIZ) r.problem("name", r.table().get("name"), "longer than IFNAMSIZ-1");
}

void parse_mechanisms(ConfigReader& r, IC& ic) {
  const MechanismTable empty;
  const MechanismTable& table = r.mechanisms() ? *r.mechanisms() : empty;
  auto check = [&](const std::string& name, const toml::node&) -> std::string {
    const MechanismInfo* m = find_mechanism(table, name);
    if (!m) {
      std::string known;
      bool coming = false;
      for (auto& mi : table) {
        if (mi.available && (mi.on_host || mi.on_switch_port)) known += (known.empty() ? "" : ", ") + mi.name;
        coming = coming || (!mi.available && mi.name == name);
      }
      return coming ? "not runnable in sluiced yet: this mechanism is coming (sluiced --help lists what works today: " +
                          known + ")"
                    : "unknown mechanism (known: " + known + ")";
    }
    if ((ic.role == Role::Host && !m->on_host) || (ic.role == Role::SwitchPort && !m->on_switch_port))
      return std::string("cannot run on a ") + to_string(ic.role) + " interface";
    return "";
  };
  if (r.get_unique_strings("mechanisms", "expected an array of strings", check, ic.mechanisms)) return;
  ic.mechanisms.clear();
  for (const auto& mi : table)
    if (mi.on_by_default) ic.mechanisms.push_back(mi.name);
}

void parse_far_end(ConfigReader& r, IC& ic) {
  auto n = r.node("link_far_end");
  if (!n) return;
  auto str = n->as_string();
  ic.link_far_end = str ? str->get() : "";
  auto [ns, dev] = ic.far_end();
  auto bad_char = [](const std::string& x) { return x.find_first_of("/ \t\n:") != std::string::npos; };
  const char* why = nullptr;
  if (!str) why = "expected a string \"NETNS:IFNAME\" or \"IFNAME\"";
  else if (dev.empty() || dev.size() >= IF_NAMESIZE || bad_char(dev))
    why = "the interface name must be 1-15 characters without '/', ':' or spaces";
  else if (ic.link_far_end.find(':') != std::string::npos && (ns.empty() || bad_char(ns) || ns == "." || ns == ".."))
    why = "the namespace must be a name from `ip netns list`";
  if (why) {
    r.problem("link_far_end", n, why);
    ic.link_far_end.clear();
  }
}

}  // namespace

const ConfigSection& interface_section() {
  static const ConfigSection s = make_section<IC>(
      "interface",
      {
          {"name", parse_name, [](const IC& ic) { return nlohmann::json(ic.name); }, "\"eth1\""},
          field::choice<IC, Role>("role", &IC::role, {{"host", Role::Host}, {"switch-port", Role::SwitchPort}}),
          {"mechanisms", parse_mechanisms, [](const IC& ic) { return nlohmann::json(ic.mechanisms); }, "[]"},
          field::optional_integer("line_rate_mbps", &IC::line_rate_mbps, 1, 1'000'000),
          {"link_far_end", parse_far_end, [](const IC& ic) { return nlohmann::json(ic.link_far_end); },
           "\"peer:veth9\""},
      });
  return s;
}

// ---- The loader: dispatches every section to its table ----------------------

namespace {

// Parses [[interface]] number i (its reader needs the path with the index).
InterfaceConfig parse_interface(const toml::table& t, size_t i, const MechanismTable& table,
                                std::vector<ConfigProblem>& out) {
  std::string path = "interface[" + std::to_string(i) + "]";
  // interface_section() reports keys as "interface.x"; re-key them.
  size_t before = out.size();
  std::any a = interface_section().parse(&t, out, &table);
  for (size_t k = before; k < out.size(); ++k)
    if (out[k].key.rfind("interface.", 0) == 0) out[k].key = path + out[k].key.substr(9);
  return std::any_cast<InterfaceConfig>(a);
}

Config parse_table(const toml::table& root, const MechanismTable& table) {
  Config c;
  std::vector<ConfigProblem> out;
  ConfigReader top(root, "", out, &table);

  auto sub = [&](const std::string& name) -> const toml::table* {
    auto n = top.node(name.c_str());
    if (!n) return nullptr;
    if (!n->is_table()) {
      top.problem(name, n, "expected a table ([" + name + "])");
      return nullptr;
    }
    return n->as_table();
  };

  c.agent = std::any_cast<AgentConfig>(agent_section().parse(sub("agent"), out, &table));
  c.metrics = std::any_cast<MetricsConfig>(metrics_section().parse(sub("metrics"), out, &table));
  for (const auto& mi : table)
    if (mi.section) c.sections[mi.section->name] = mi.section->parse(sub(mi.section->name), out, &table);

  if (auto n = top.node("interface")) {
    auto arr = n->as_array();
    if (!arr || !arr->is_array_of_tables()) {
      top.problem("interface", n, "expected [[interface]] tables");
    } else {
      for (size_t i = 0; i < arr->size(); ++i) {
        InterfaceConfig ic = parse_interface(*arr->get(i)->as_table(), i, table, out);
        if (!ic.name.empty() && c.find_interface(ic.name))
          out.push_back({"interface[" + std::to_string(i) + "].name", "\"" + ic.name + "\"", "interface listed twice",
                         toml_where(*arr->get(i))});
        c.interfaces.push_back(std::move(ic));
      }
    }
  }
  // No interface is fine only for a configuration that runs a host-wide part.
  bool host_wide = false;
  for (const auto& mi : table)
    if (mi.service.used_by && !mi.service.used_by(c).empty()) host_wide = true;
  if (c.interfaces.empty() && !root.contains("interface") && !host_wide)
    out.push_back({"interface", "", "at least one [[interface]] is required"});
  for (size_t i = 0; i < c.interfaces.size(); ++i) {
    const auto& ic = c.interfaces[i];
    for (const auto& m : ic.mechanisms) {
      const MechanismInfo* mi = find_mechanism(table, m);
      if (mi && mi->needs_line_rate && !ic.line_rate_mbps)
        out.push_back({"interface[" + std::to_string(i) + "].line_rate_mbps", "",
                       "required by mechanism " + m + " (a port without a line rate does not guess)"});
    }
  }
  for (const auto& mi : table)
    if (mi.section && mi.section->check) mi.section->check(c, out);
  top.finish();
  if (!out.empty()) throw ConfigError(std::move(out));
  return c;
}

}  // namespace

nlohmann::json to_json(const Config& c, const MechanismTable& mechanisms) {
  nlohmann::json j = {
      {"agent", agent_section().to_json(c.agent)},
      {"metrics", metrics_section().to_json(c.metrics)},
  };
  nlohmann::json ifs = nlohmann::json::array();
  for (const auto& i : c.interfaces) ifs.push_back(interface_section().to_json(i));
  j["interface"] = ifs;
  for (const auto& mi : mechanisms) {
    if (!mi.section) continue;
    auto it = c.sections.find(mi.section->name);
    if (it != c.sections.end()) j[mi.section->name] = mi.section->to_json(it->second);
  }
  return j;
}

Config parse_config_string(const std::string& text, const std::string& origin, const MechanismTable& mechanisms) {
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << origin << ":" << e.source().begin.line << ":" << e.source().begin.column << ": " << e.description();
    throw Error("TOML syntax error: " + os.str());
  }
  return parse_table(root, mechanisms);
}

Config parse_config_file(const std::string& path, const MechanismTable& mechanisms) {
  std::ifstream in(path);
  if (!in) throw SysError("read config " + path, errno ? errno : ENOENT);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config_string(ss.str(), path, mechanisms);
}

}  // namespace sluice
