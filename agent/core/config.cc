#include "config.h"

#include <toml++/toml.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <net/if.h>
#include <sstream>

#include "module.h"
#include "sluice/pac.h"
#include "sluice/pulser.h"

namespace sluice {

const char* to_string(Role r) { return r == Role::Host ? "host" : "switch-port"; }

const char* to_string(AqmQueueSource s) {
  switch (s) {
    case AqmQueueSource::Auto: return "auto";
    case AqmQueueSource::KernCtx: return "kern-ctx";
    case AqmQueueSource::Tracepoint: return "tracepoint";
  }
  return "?";
}

const char* to_string(AttachMode m) {
  switch (m) {
    case AttachMode::Auto: return "auto";
    case AttachMode::Tcx: return "tcx";
    case AttachMode::Clsact: return "clsact";
  }
  return "?";
}

std::string ConfigProblem::to_string() const {
  std::string s = key;
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

std::string check_cc_name(const std::string& name) {
  constexpr size_t kCaNameMax = 16;  // TCP_CA_NAME_MAX, with the NUL
  if (name.empty()) return "must not be empty";
  if (name.size() >= kCaNameMax) return "longer than 15 characters (TCP_CA_NAME_MAX)";
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
      return "only a-z, 0-9 and _ are allowed";
  return "";
}

const InterfaceConfig* Config::find_interface(const std::string& name) const {
  for (const auto& i : interfaces)
    if (i.name == name) return &i;
  return nullptr;
}

bool Config::uses_mechanism(const std::string& mech) const {
  for (const auto& i : interfaces)
    if (std::find(i.mechanisms.begin(), i.mechanisms.end(), mech) != i.mechanisms.end())
      return true;
  return false;
}

namespace {

std::string render(const toml::node& n) {
  std::ostringstream os;
  if (auto s = n.as_string())
    os << '"' << s->get() << '"';
  else if (n.is_table())
    os << "{table}";
  else if (n.is_array())
    os << "[array]";
  else
    n.visit([&](auto&& v) { os << v; });
  return os.str();
}

// Reads one TOML table, remembering which keys were consumed so anything
// left over is reported as unknown (a typo must not be silently ignored).
class Section {
 public:
  Section(const toml::table& t, std::string path, std::vector<ConfigProblem>& out)
      : t_(t), path_(std::move(path)), out_(out) {}

  std::string key(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }

  void problem(const std::string& k, const toml::node* n, const std::string& reason) {
    out_.push_back({key(k), n ? render(*n) : "", reason});
  }

  const toml::node* node(const char* k) {
    seen_.push_back(k);
    return t_.get(k);
  }

  void get(const char* k, bool& v) {
    if (auto n = node(k)) {
      if (auto b = n->as_boolean()) v = b->get();
      else problem(k, n, "expected true or false");
    }
  }

  template <typename Int>
  void get_int(const char* k, Int& v, int64_t lo, int64_t hi) {
    if (auto n = node(k)) {
      auto i = n->as_integer();
      if (!i) return problem(k, n, "expected an integer");
      int64_t x = i->get();
      if (x < lo || x > hi)
        return problem(k, n, "out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
      v = static_cast<Int>(x);
    }
  }

  void get(const char* k, std::string& v, bool allow_empty = false) {
    if (auto n = node(k)) {
      auto s = n->as_string();
      if (!s) return problem(k, n, "expected a string");
      if (!allow_empty && s->get().empty()) return problem(k, n, "must not be empty");
      v = s->get();
    }
  }

  void get(const char* k, double& v, double lo, double hi) {
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

  template <typename Int>
  void get_opt_int(const char* k, std::optional<Int>& v, int64_t lo, int64_t hi) {
    if (!t_.contains(k)) {
      node(k);
      return;
    }
    Int x{};
    size_t before = out_.size();
    get_int(k, x, lo, hi);
    if (out_.size() == before) v = x;
  }

  template <typename E>
  void get_enum(const char* k, E& v, std::initializer_list<std::pair<const char*, E>> choices) {
    auto n = node(k);
    if (!n) return;
    auto s = n->as_string();
    std::string names;
    for (auto& [name, val] : choices) {
      if (s && s->get() == name) {
        v = val;
        return;
      }
      names += names.empty() ? name : std::string(", ") + name;
    }
    problem(k, n, "must be one of " + names);
  }

  void finish() {
    for (auto&& [k, n] : t_) {
      std::string ks(k.str());
      if (std::find(seen_.begin(), seen_.end(), ks) == seen_.end())
        problem(ks, &n, "unknown key");
    }
  }

 private:
  const toml::table& t_;
  std::string path_;
  std::vector<ConfigProblem>& out_;
  std::vector<std::string> seen_;
};

// [pac]: arrays and floats need more than Section's scalar readers.
void parse_pac(const toml::table& t, PacConfig& pc, std::vector<ConfigProblem>& out) {
  Section s(t, "pac", out);
  s.get_int("buffer_bytes", pc.buffer_bytes, 3000, int64_t(1) << 32);
  s.get("ecn", pc.ecn);
  s.get_int("max_held", pc.max_held, 1, 1 << 20);
  s.get_int("max_hold_ms", pc.max_hold_ms, 1, 10000);
  s.get_int("max_hold_request_ms", pc.max_hold_request_ms, 1, 10000);
  s.get_int("fail_open_ms", pc.fail_open_ms, 10, 100);
  s.get_int("reinject_mark", pc.reinject_mark, 1, 0xffffffffll);
  s.get_int("idle_timeout_s", pc.idle_timeout_s, 1, 86400);
  s.get_int("control_interval_min_us", pc.control_interval_min_us, 100, 1000000);
  s.get("account_requests", pc.account_requests);
  s.get("cap_to_response", pc.cap_to_response);
  s.get("hold_requests", pc.hold_requests);
  s.get_int("request_max_bytes", pc.request_max_bytes, 1, 65535);
  s.get_int("trigger_age_min_us", pc.trigger_age_min_us, 0, 1000000);
  s.get_int("busy_poll_us", pc.busy_poll_us, 0, 10000);
  bool cap_auto = true;
  if (auto n = s.node("rwnd_cap_bytes")) {
    auto v = n->value<int64_t>();
    auto str = n->as_string();
    if (str && str->get() == "auto") {
      // the default, resolved below
    } else if (!v || str || (*v != 0 && (*v < 4096 || *v > (int64_t(1) << 30)))) {
      s.problem("rwnd_cap_bytes", n, "expected \"auto\", 0 (off) or a byte count from 4096 to 1073741824");
    } else {
      pc.rwnd_cap_bytes = uint32_t(*v);
      cap_auto = false;
    }
  }
  // "auto": no flow may have more in flight than the threshold lets all of
  // them have together (the buffer's payload, eq. 2's largest threshold),
  // so clamping its window there takes nothing PAC would allow, and makes a
  // long flow's in-flight bytes exact (README "PAC": iperf3 0.99 of the
  // baseline with the clamp, 0.94 without). With hold_requests the cap
  // decides how many responses are under way at once (a third of the
  // threshold, README): there "auto" leaves it off.
  if (cap_auto)
    pc.rwnd_cap_bytes = pc.hold_requests
                            ? 0
                            : uint32_t(std::clamp<uint64_t>(sluice_pac_payload_capacity(pc.buffer_bytes), 4096,
                                                            uint64_t(1) << 30));
  if (auto n = s.node("lambda")) {
    auto v = n->value<double>();
    if (!v) s.problem("lambda", n, "expected a number");
    else if (*v <= 0 || *v >= 1) s.problem("lambda", n, "must be in (0, 1)");
    else pc.lambda = *v;
  }
  if (auto n = s.node("mlfq_level_bytes")) {
    auto arr = n->as_array();
    std::vector<uint64_t> v;
    bool ok = arr != nullptr;
    if (arr)
      for (size_t i = 0; i < arr->size(); ++i) {
        auto x = arr->get(i)->value<int64_t>();
        if (!x || *x <= 0 || (!v.empty() && uint64_t(*x) <= v.back())) ok = false;
        else v.push_back(uint64_t(*x));
      }
    if (!ok || v.size() > 7)
      s.problem("mlfq_level_bytes", n, "expected up to 7 increasing positive byte counts (levels = count + 1)");
    else pc.mlfq_level_bytes = v;
  }
  auto ports = [&](const char* k, std::vector<PacPortRange>& dst) {
    auto n = s.node(k);
    if (!n) return;
    auto arr = n->as_array();
    if (!arr) return s.problem(k, n, "expected an array of ports or \"lo-hi\" ranges");
    std::vector<PacPortRange> v;
    for (size_t i = 0; i < arr->size(); ++i) {
      const toml::node& e = *arr->get(i);
      std::string key = std::string(k) + "[" + std::to_string(i) + "]";
      long lo = -1, hi = -1;
      if (auto x = e.value<int64_t>()) {
        lo = hi = long(*x);
      } else if (auto str = e.as_string()) {
        const std::string& q = str->get();
        char* end = nullptr;
        lo = std::strtol(q.c_str(), &end, 10);
        if (end && *end == '-') hi = std::strtol(end + 1, &end, 10);
        else hi = lo;
        if (!end || *end) lo = -1;
      }
      if (lo < 1 || hi < lo || hi > 65535) {
        out.push_back({"pac." + key, render(e), "expected a port 1-65535 or a range \"lo-hi\""});
        continue;
      }
      v.push_back({uint16_t(lo), uint16_t(hi)});
    }
    if (v.size() > 8) return s.problem(k, n, "at most 8 entries");
    dst = v;
  };
  ports("local_ports", pc.local_ports);
  ports("remote_ports", pc.remote_ports);
  if (auto n = s.node("remote_prefixes")) {
    auto arr = n->as_array();
    if (!arr) {
      s.problem("remote_prefixes", n, "expected an array of CIDR strings");
    } else {
      std::vector<PacPrefix> v;
      for (size_t i = 0; i < arr->size(); ++i) {
        const toml::node& e = *arr->get(i);
        std::string key = "pac.remote_prefixes[" + std::to_string(i) + "]";
        auto str = e.as_string();
        PacPrefix p;
        bool ok = false;
        if (str) {
          std::string q = str->get();
          auto slash = q.find('/');
          std::string a = q.substr(0, slash);
          p.family = a.find(':') == std::string::npos ? 4 : 6;
          int maxlen = p.family == 4 ? 32 : 128;
          long len = maxlen;
          if (slash != std::string::npos) {
            char* end = nullptr;
            len = std::strtol(q.c_str() + slash + 1, &end, 10);
            if (!end || *end || slash + 1 == q.size()) len = -1;
          }
          ok = len >= 0 && len <= maxlen && inet_pton(p.family == 4 ? AF_INET : AF_INET6, a.c_str(), p.addr) == 1;
          p.len = uint8_t(len);
        }
        if (!ok) out.push_back({key, render(e), "expected an IPv4/IPv6 CIDR such as \"10.0.0.0/8\""});
        else v.push_back(p);
      }
      if (v.size() > 8) s.problem("remote_prefixes", n, "at most 8 entries");
      else pc.remote_prefixes = v;
    }
  }
  if (pc.max_hold_ms * 1000 < pc.control_interval_min_us)
    s.problem("max_hold_ms", t.get("max_hold_ms"), "shorter than control_interval_min_us");
  s.finish();
}

void parse_interface(const toml::table& t, const std::string& path, InterfaceConfig& ic,
                     const MechanismTable& table, std::vector<ConfigProblem>& out) {
  Section s(t, path, out);
  s.get("name", ic.name);
  if (!t.contains("name")) s.problem("name", nullptr, "required");
  else if (ic.name.size() >= IFNAMSIZ) s.problem("name", t.get("name"), "longer than IFNAMSIZ-1");
  s.get_enum("role", ic.role, {{"host", Role::Host}, {"switch-port", Role::SwitchPort}});
  if (auto n = s.node("mechanisms")) {
    auto arr = n->as_array();
    if (!arr) {
      s.problem("mechanisms", n, "expected an array of strings");
    } else {
      ic.mechanisms.clear();
      for (size_t i = 0; i < arr->size(); ++i) {
        const toml::node& e = *arr->get(i);
        std::string k = "mechanisms[" + std::to_string(i) + "]";
        auto str = e.as_string();
        if (!str) {
          s.problem(k, &e, "expected a string");
          continue;
        }
        const MechanismInfo* m = find_mechanism(table, str->get());
        if (!m) {
          std::string known;
          for (auto& mi : table)
            if (mi.on_host || mi.on_switch_port) known += (known.empty() ? "" : ", ") + mi.name;
          s.problem(k, &e, "unknown mechanism (known: " + known + ")");
          continue;
        }
        if ((ic.role == Role::Host && !m->on_host) ||
            (ic.role == Role::SwitchPort && !m->on_switch_port)) {
          s.problem(k, &e, std::string("cannot run on a ") + to_string(ic.role) + " interface");
          continue;
        }
        if (std::find(ic.mechanisms.begin(), ic.mechanisms.end(), str->get()) != ic.mechanisms.end()) {
          s.problem(k, &e, "listed twice");
          continue;
        }
        ic.mechanisms.push_back(str->get());
      }
    }
  }
  uint64_t rate = 0;
  if (t.contains("line_rate_mbps")) {
    s.get_int("line_rate_mbps", rate, 1, 1'000'000);
    if (rate) ic.line_rate_mbps = rate;
  }
  if (auto n = s.node("link_far_end")) {
    auto str = n->as_string();
    ic.link_far_end = str ? str->get() : "";
    auto [ns, dev] = ic.far_end();
    auto bad_char = [](const std::string& x) { return x.find_first_of("/ \t\n:") != std::string::npos; };
    const char* why = nullptr;
    if (!str)
      why = "expected a string \"NETNS:IFNAME\" or \"IFNAME\"";
    else if (dev.empty() || dev.size() >= IF_NAMESIZE || bad_char(dev))
      why = "the interface name must be 1-15 characters without '/', ':' or spaces";
    else if (ic.link_far_end.find(':') != std::string::npos && (ns.empty() || bad_char(ns) || ns == "." || ns == ".."))
      why = "the namespace must be a name from `ip netns list`";
    if (why) {
      s.problem("link_far_end", n, why);
      ic.link_far_end.clear();
    }
  }
  s.finish();
}

}  // namespace

std::pair<std::string, std::string> InterfaceConfig::far_end() const {
  auto c = link_far_end.rfind(':');
  if (c == std::string::npos) return {"", link_far_end};
  return {link_far_end.substr(0, c), link_far_end.substr(c + 1)};
}

namespace {

Config parse_table(const toml::table& root, const MechanismTable& table) {
  Config c;
  std::vector<ConfigProblem> out;
  Section top(root, "", out);

  auto sub = [&](const char* name) -> const toml::table* {
    auto n = top.node(name);
    if (!n) return nullptr;
    if (!n->is_table()) {
      top.problem(name, n, "expected a table ([" + std::string(name) + "])");
      return nullptr;
    }
    return n->as_table();
  };

  if (auto t = sub("agent")) {
    Section s(*t, "agent", out);
    s.get("pin_root", c.agent.pin_root);
    s.get("state_dir", c.agent.state_dir);
    s.get("control_socket", c.agent.control_socket);
    s.get("log_level", c.agent.log_level);
    static const char* levels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
    if (std::find(std::begin(levels), std::end(levels), c.agent.log_level) == std::end(levels))
      s.problem("log_level", t->get("log_level"), "must be one of trace, debug, info, warn, error, critical, off");
    s.get_enum("attach_mode", c.agent.attach_mode,
               {{"auto", AttachMode::Auto}, {"tcx", AttachMode::Tcx}, {"clsact", AttachMode::Clsact}});
    s.get_int("heartbeat_ms", c.agent.heartbeat_ms, 1, 1000);
    for (auto [k, v] : {std::pair{"pin_root", &c.agent.pin_root}, {"state_dir", &c.agent.state_dir},
                        {"control_socket", &c.agent.control_socket}})
      if (!v->empty() && (*v)[0] != '/') s.problem(k, t->get(k), "must be an absolute path");
    s.finish();
  }
  if (auto t = sub("metrics")) {
    Section s(*t, "metrics", out);
    s.get("enabled", c.metrics.enabled);
    s.get("bind", c.metrics.bind);
    s.get_int("port", c.metrics.port, 1, 65535);
    s.get("per_flow", c.metrics.per_flow);
    s.finish();
  }
  if (auto t = sub("flowstat")) {
    Section s(*t, "flowstat", out);
    s.get("track_flows", c.flowstat.track_flows);
    s.get_int("idle_timeout_s", c.flowstat.idle_timeout_s, 1, 86400 * 7);
    s.finish();
  }
  if (auto t = sub("pac")) parse_pac(*t, c.pac, out);
  if (auto t = sub("cc")) {
    Section s(*t, "cc", out);
    if (auto n = s.node("register")) {
      auto arr = n->as_array();
      if (!arr) {
        s.problem("register", n, "expected an array of strings (\"dctcp\", \"pulser\")");
      } else {
        for (size_t i = 0; i < arr->size(); ++i) {
          const toml::node& e = *arr->get(i);
          auto str = e.as_string();
          std::string k = "register[" + std::to_string(i) + "]";
          if (!str || (str->get() != "dctcp" && str->get() != "pulser")) {
            s.problem(k, &e, "must be \"dctcp\" or \"pulser\"");
            continue;
          }
          if (std::find(c.cc.register_cc.begin(), c.cc.register_cc.end(), str->get()) != c.cc.register_cc.end()) {
            s.problem(k, &e, "listed twice");
            continue;
          }
          c.cc.register_cc.push_back(str->get());
        }
      }
    }
    s.get("dctcp_name", c.cc.dctcp_name);
    s.get("pulser_name", c.cc.pulser_name);
    for (auto [k, v] : {std::pair{"dctcp_name", &c.cc.dctcp_name}, {"pulser_name", &c.cc.pulser_name}})
      if (auto why = check_cc_name(*v); !why.empty()) s.problem(k, t->get(k), why);
    if (c.cc.dctcp_name == c.cc.pulser_name) s.problem("pulser_name", t->get("pulser_name"), "same as dctcp_name");
    s.get_int("dctcp_shift_g", c.cc.dctcp_shift_g, 0, 10);
    s.get_int("dctcp_alpha_on_init", c.cc.dctcp_alpha_on_init, 0, 1024);
    s.get_int("pulser_cwnd_safe", c.cc.pulser_cwnd_safe, 1, 1000);
    s.finish();
  }
  if (auto t = sub("ein")) {
    Section s(*t, "ein", out);
    s.get("bit", c.ein.bit);
    s.get_int("echo_fresh_us", c.ein.echo_fresh_us, 1, 10'000'000);
    s.finish();
  }
  {
    // "tos:0xNN" with one DSCP bit, or "ipv4-reserved". Never an ECN bit.
    const std::string& b = c.ein.bit;
    bool ok = false;
    if (b == "ipv4-reserved") {
      c.ein.field = SLUICE_EIN_FIELD_IPV4_RSV;
      c.ein.mask = SLUICE_EIN_IPV4_RSV_FLAG;
      ok = true;
    } else if (b.rfind("tos:", 0) == 0) {
      char* end = nullptr;
      unsigned long m = std::strtoul(b.c_str() + 4, &end, 0);
      if (end && *end == 0 && b.size() > 4 && m >= 0x04 && m <= 0x80 && (m & (m - 1)) == 0) {
        c.ein.field = SLUICE_EIN_FIELD_TOS;
        c.ein.mask = uint16_t(m);
        ok = true;
      }
    }
    if (!ok)
      out.push_back({"ein.bit", "\"" + b + "\"",
                     "must be \"tos:0xNN\" with one DSCP bit (0x04, 0x08, ..., 0x80; 0x01/0x02 are ECN) or "
                     "\"ipv4-reserved\""});
  }
  if (auto t = sub("aqm")) {
    Section s(*t, "aqm", out);
    s.get("ecn", c.aqm.ecn);
    s.get_opt_int("ecn_threshold_bytes", c.aqm.ecn_threshold_bytes, 1, int64_t(1) << 40);
    s.get_opt_int("ecn_threshold_packets", c.aqm.ecn_threshold_packets, 1, 1'000'000);
    if (c.aqm.ecn_threshold_bytes && c.aqm.ecn_threshold_packets)
      s.problem("ecn_threshold_packets", t->get("ecn_threshold_packets"),
                "K is in bytes or in packets, not both (ecn_threshold_bytes is set too)");
    s.get("ein", c.aqm.ein);
    s.get_int("ein_samples", c.aqm.ein_samples, 1, SLUICE_AQM_RING - 1);
    s.get("ein_threshold", c.aqm.ein_threshold, 0.001, 100.0);
    s.get_opt_int("ein_high_water", c.aqm.ein_high_water, 0, int64_t(1) << 40);
    s.get_enum("ein_mark", c.aqm.ein_at_departure, {{"arrival", false}, {"departure", true}});
    s.get_enum("queue_source", c.aqm.queue_source,
               {{"auto", AqmQueueSource::Auto}, {"kern-ctx", AqmQueueSource::KernCtx},
                {"tracepoint", AqmQueueSource::Tracepoint}});
    if (!c.aqm.ecn && !c.aqm.ein) s.problem("ein", t->get("ein"), "with ecn = false too, aqm would mark nothing");
    s.finish();
  }
  if (auto n = top.node("interface")) {
    auto arr = n->as_array();
    if (!arr || !arr->is_array_of_tables()) {
      top.problem("interface", n, "expected [[interface]] tables");
    } else {
      for (size_t i = 0; i < arr->size(); ++i) {
        InterfaceConfig ic;
        std::string path = "interface[" + std::to_string(i) + "]";
        parse_interface(*arr->get(i)->as_table(), path, ic, table, out);
        if (!ic.name.empty() && c.find_interface(ic.name))
          out.push_back({path + ".name", "\"" + ic.name + "\"", "interface listed twice"});
        c.interfaces.push_back(std::move(ic));
      }
    }
  }
  if (c.interfaces.empty() && !root.contains("interface") && c.cc.register_cc.empty())
    out.push_back({"interface", "", "at least one [[interface]] is required"});
  for (size_t i = 0; i < c.interfaces.size(); ++i) {
    const auto& ic = c.interfaces[i];
    for (const auto& m : ic.mechanisms) {
      const MechanismInfo* mi = find_mechanism(table, m);
      if (mi && mi->needs_line_rate && !ic.line_rate_mbps)
        out.push_back({"interface[" + std::to_string(i) + "].line_rate_mbps", "",
                       "required by mechanism " + m + " (a port without a line rate does not guess)"});
    }
    bool aqm = std::find(ic.mechanisms.begin(), ic.mechanisms.end(), "aqm") != ic.mechanisms.end();
    bool departure = aqm && c.aqm.ein && c.aqm.ein_at_departure;
    if (departure && ic.link_far_end.empty())
      out.push_back({"interface[" + std::to_string(i) + "].link_far_end", "",
                     "required by [aqm] ein_mark = \"departure\" (where this port's packets arrive after its queue)"});
    if (!departure && !ic.link_far_end.empty())
      out.push_back({"interface[" + std::to_string(i) + "].link_far_end", "\"" + ic.link_far_end + "\"",
                     "only used by mechanism aqm with [aqm] ein = true and ein_mark = \"departure\""});
  }
  top.finish();
  if (!out.empty()) throw ConfigError(std::move(out));
  return c;
}

}  // namespace

Config parse_config_string(const std::string& text, const std::string& origin, const MechanismTable& mechanisms) {
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << origin << ":" << e.source().begin.line << ":" << e.source().begin.column << ": "
       << e.description();
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
