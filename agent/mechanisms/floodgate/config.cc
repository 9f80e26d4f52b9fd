#include "mechanisms/floodgate/config.h"

#include "core/config_section.h"

#include <algorithm>
#include <sstream>

namespace sluice::floodgate {

namespace {

std::string join(const std::vector<SectionProblem>& ps) {
  std::string s = "invalid [floodgate] section";
  for (const auto& p : ps) s += "\n  " + p.key + (p.value.empty() ? "" : " = " + p.value) + ": " + p.reason;
  return s;
}

class Reader {
 public:
  Reader(const toml::table& t, std::vector<SectionProblem>& out) : t_(t), out_(out) {}
  void bad(const std::string& k, const toml::node* n, const std::string& why) {
    out_.push_back({"floodgate." + k, n ? render_toml(*n) : "", why, n ? toml_where(*n) : ""});
  }
  const toml::node* node(const char* k) {
    seen_.push_back(k);
    return t_.get(k);
  }
  template <typename T>
  bool integer(const char* k, T& v, int64_t lo, int64_t hi, int64_t scale = 1) {
    auto n = node(k);
    if (!n) return false;
    auto i = n->as_integer();
    if (!i) return bad(k, n, "expected an integer"), false;
    if (i->get() < lo || i->get() > hi)
      return bad(k, n, "out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]"), false;
    v = T(i->get() * scale);
    return true;
  }
  void boolean(const char* k, bool& v) {
    if (auto n = node(k)) {
      if (auto b = n->as_boolean()) v = b->get();
      else bad(k, n, "expected true or false");
    }
  }
  void finish() {
    for (auto&& [k, n] : t_) {
      std::string ks(k.str());
      if (std::find(seen_.begin(), seen_.end(), ks) == seen_.end()) bad(ks, &n, "unknown key");
    }
  }

 private:
  const toml::table& t_;
  std::vector<SectionProblem>& out_;
  std::vector<std::string> seen_;
};

}  // namespace

SectionError::SectionError(std::vector<SectionProblem> problems)
    : std::invalid_argument(join(problems)), problems_(std::move(problems)) {}

namespace {

// The keys into a Section (up_ports as names); problems to `out`.
Section read_section(const toml::table& t, std::vector<SectionProblem>& out) {
  Section sec;
  Config& c = sec.config;
  Reader r(t, out);
  r.integer("credit_interval_us", c.credit_interval_ns, 50, 1'000'000, 1000);
  r.integer("hop_rtt_us", c.hop_rtt_ns, 0, 1'000'000, 1000);
  r.integer("max_voqs", c.max_voqs, 1, SLUICE_SW_MAX_QUEUES - 1);
  r.integer("thre_credit_bdp", c.thre_credit_bdp, 1, 1000);
  r.integer("thre_credit_bytes", c.thre_credit_bytes, 1, int64_t(1) << 40);
  r.boolean("voq_grouping", c.voq_grouping);
  r.integer("down_voqs", c.down_voqs, 0, SLUICE_SW_MAX_QUEUES - 2);
  r.integer("syn_timeout_ms", c.syn_timeout_ns, 1, 60'000, 1'000'000);
  r.boolean("dst_pause", c.dst_pause);
  r.integer("thre_off_bytes", c.thre_off_bytes, 1, int64_t(1) << 40);
  r.integer("thre_on_bytes", c.thre_on_bytes, 1, int64_t(1) << 40);
  if (auto n = r.node("voq")) {
    auto v = n->as_string();
    if (v && v->get() == "agent") c.voq_agent = true;
    else if (v && v->get() == "tbf") c.voq_agent = false;
    else r.bad("voq", n, "expected \"tbf\" or \"agent\"");
  }
  r.integer("voq_limit_bytes", c.voq_limit_bytes, 1536, int64_t(1) << 34);
  r.integer("voq_ecn_packets", c.voq_ecn_packets, 0, 1'000'000);
  r.integer("host_pause_timeout_ms", sec.host.pause_timeout_ns, 1, 60'000, 1'000'000);
  // Each held frame is at most SLUICE_DP_FRAME_MAX (1536) bytes: 384 MiB at
  // the top of the range.
  r.integer("host_max_held_frames", sec.host.max_frames, 1, 262'144);
  r.integer("host_fail_open_ms", sec.host_fail_open_ns, 1, 60'000, 1'000'000);
  if (auto n = r.node("up_ports")) {
    auto a = n->as_array();
    if (!a) {
      r.bad("up_ports", n, "expected an array of port names");
    } else {
      for (auto&& e : *a) {
        if (auto s = e.as_string()) sec.up_port_names.push_back(s->get());
        else r.bad("up_ports", &e, "expected a port name");
      }
    }
  }
  r.finish();
  if (out.empty()) {
    try {
      c.validate();
    } catch (const std::invalid_argument& e) {
      out.push_back({"floodgate", "", e.what(), ""});
    }
  }
  return sec;
}

}  // namespace

Config Section::resolve(const std::vector<std::string>& port_names) const {
  Config c = config;
  c.up_ports.clear();
  for (const auto& n : up_port_names) {
    auto it = std::find(port_names.begin(), port_names.end(), n);
    if (it == port_names.end())
      throw std::invalid_argument("floodgate.up_ports: \"" + n + "\" is not a port of this switch");
    c.up_ports.push_back(PortId(it - port_names.begin()));
  }
  c.validate();
  return c;
}

Config parse_section(const toml::table& t, const std::vector<std::string>& port_names) {
  std::vector<SectionProblem> out;
  Section sec = read_section(t, out);
  if (out.empty()) {
    // Name by name, so every unknown port is reported.
    for (const auto& n : sec.up_port_names)
      if (std::find(port_names.begin(), port_names.end(), n) == port_names.end())
        out.push_back({"floodgate.up_ports", "\"" + n + "\"", "not a port of this switch", ""});
  }
  if (!out.empty()) throw SectionError(std::move(out));
  return sec.resolve(port_names);
}

const ConfigSection& floodgate_section() {
  static const ConfigSection s = [] {
    ConfigSection sec;
    sec.name = Section::kSection;
    // Every key with another valid value (the reload test sets each).
    sec.keys = {{"credit_interval_us", "1000", "", ""},
                {"hop_rtt_us", "400", "", ""},
                {"max_voqs", "50", "", ""},
                {"thre_credit_bdp", "20", "", ""},
                {"thre_credit_bytes", "100000", "", ""},
                {"voq_grouping", "false", "", ""},
                {"down_voqs", "2", "", ""},
                {"up_ports", "[\"swp1\"]", "", ""},
                {"syn_timeout_ms", "20", "", ""},
                {"dst_pause", "true", "", ""},
                {"thre_off_bytes", "5000", "", ""},
                {"thre_on_bytes", "2000", "", ""},
                {"voq", "\"agent\"", "", ""},
                {"voq_limit_bytes", "262144", "", ""},
                {"voq_ecn_packets", "20", "", ""},
                {"host_pause_timeout_ms", "200", "", ""},
                {"host_max_held_frames", "8192", "", ""},
                {"host_fail_open_ms", "200", "", ""}};
    sec.parse = [](const toml::table* t, std::vector<ConfigProblem>& out, const MechanismTable*) -> std::any {
      static const toml::table kEmpty;
      std::vector<SectionProblem> ps;
      Section r = read_section(t ? *t : kEmpty, ps);
      for (auto& p : ps) out.push_back({p.key, p.value, p.reason, p.where});
      return ps.empty() ? r : Section{};
    };
    sec.to_json = [](const std::any& a) {
      const Section& x = std::any_cast<const Section&>(a);
      const Config& c = x.config;
      return nlohmann::json{{"credit_interval_us", c.credit_interval_ns / 1000},
                            {"hop_rtt_us", c.hop_rtt_ns / 1000},
                            {"max_voqs", c.max_voqs},
                            {"thre_credit_bdp", c.thre_credit_bdp},
                            {"thre_credit_bytes", c.thre_credit_bytes},
                            {"voq_grouping", c.voq_grouping},
                            {"down_voqs", c.down_voqs},
                            {"up_ports", x.up_port_names},
                            {"syn_timeout_ms", c.syn_timeout_ns / 1'000'000},
                            {"dst_pause", c.dst_pause},
                            {"thre_off_bytes", c.thre_off_bytes},
                            {"thre_on_bytes", c.thre_on_bytes},
                            {"voq", c.voq_agent ? "agent" : "tbf"},
                            {"voq_limit_bytes", c.voq_limit_bytes},
                            {"voq_ecn_packets", c.voq_ecn_packets},
                            {"host_pause_timeout_ms", x.host.pause_timeout_ns / 1'000'000},
                            {"host_max_held_frames", x.host.max_frames},
                            {"host_fail_open_ms", x.host_fail_open_ns / 1'000'000}};
    };
    return sec;
  }();
  return s;
}

nlohmann::json view(const FloodgateLogic& fg, const std::vector<std::string>& port_names) {
  auto pname = [&](PortId p) { return p < port_names.size() ? port_names[p] : std::to_string(p); };
  const Stats& s = fg.stats();
  nlohmann::json v;
  v["windows"] = nlohmann::json::array();
  for (const auto& w : fg.windows())
    v["windows"].push_back({{"port", pname(w.port)},
                            {"dst", sw::addr_str(w.dst)},
                            {"window_bytes", w.window},
                            {"initial_bytes", fg.initial_window(w.port)},
                            {"inflight_bytes", w.inflight},
                            {"voq", fg.voq_of(w.dst)},
                            {"voq_bytes", fg.voq_bytes(fg.voq_of(w.dst))}});
  v["voqs"] = nlohmann::json::array();
  for (const auto& q : fg.voqs()) {
    nlohmann::json d = nlohmann::json::array();
    for (const auto& a : q.dsts) d.push_back(sw::addr_str(a));
    v["voqs"].push_back({{"voq", q.voq},
                         {"group", !q.grouped   ? "all"
                                   : q.up_group ? "up"
                                                : "down"},
                         {"bytes", q.bytes},
                         {"packets", q.pkts},
                         {"dsts", d},
                         {"head_dst", sw::addr_str(q.head)},
                         {"head_port", pname(q.head_port)},
                         {"head_blocked", q.head_blocked}});
  }
  v["dst_pause"] = nlohmann::json::array();
  for (const auto& p : fg.paused()) {
    nlohmann::json ports = nlohmann::json::array();
    for (PortId i = 0; i < 64; ++i)
      if (p.ports & (uint64_t{1} << i)) ports.push_back(pname(i));
    v["dst_pause"].push_back({{"dst", sw::addr_str(p.dst)}, {"paused_ports", ports}});
  }
  v["voqs_in_use"] = s.voqs_in_use;
  v["voqs_in_use_max"] = s.voqs_in_use_max;
  v["voqs_total"] = fg.num_voqs();
  v["counters"] = {{"forwarded", s.forwarded},
                   {"voq_enqueued", s.voq_enqueued},
                   {"voq_released", s.voq_released},
                   {"voq_hashed", s.voq_hashed},
                   {"voq_desync", s.voq_desync},
                   {"dropped", s.dropped},
                   {"no_window", s.no_window},
                   {"credit_frames_out", s.credit_frames_out},
                   {"credit_records_out", s.credit_records_out},
                   {"credit_bytes_out", s.credit_bytes_out},
                   {"credit_frames_in", s.credit_frames_in},
                   {"credit_records_in", s.credit_records_in},
                   {"credit_bytes_in", s.credit_bytes_in},
                   {"credit_unknown", s.credit_unknown},
                   {"credit_ahead", s.credit_ahead},
                   {"credits_delayed", s.credits_delayed},
                   {"switch_syn_out", s.syn_out},
                   {"switch_syn_in", s.syn_in},
                   {"syn_lost_bytes", s.syn_lost_bytes},
                   {"dst_pause_out", s.dst_pause_out},
                   {"dst_resume_out", s.dst_resume_out}};
  return v;
}

std::string render(const nlohmann::json& v) {
  std::ostringstream os;
  os << "VOQs in use " << v.at("voqs_in_use") << " of " << v.at("voqs_total") << " (max " << v.at("voqs_in_use_max")
     << ")\n";
  os << "windows:\n";
  if (v.at("windows").empty()) os << "  (none)\n";
  for (const auto& w : v.at("windows"))
    os << "  " << w.at("port").get<std::string>() << " -> " << w.at("dst").get<std::string>() << ": "
       << w.at("window_bytes") << " of " << w.at("initial_bytes") << " B, in flight " << w.at("inflight_bytes")
       << " B\n";
  os << "VOQs:\n";
  if (v.at("voqs").empty()) os << "  (none)\n";
  for (const auto& q : v.at("voqs")) {
    os << "  voq " << q.at("voq") << " (" << q.at("group").get<std::string>() << "): " << q.at("packets") << " pkts "
       << q.at("bytes") << " B, head " << q.at("head_dst").get<std::string>() << " via "
       << q.at("head_port").get<std::string>() << (q.at("head_blocked").get<bool>() ? " (waiting for credit)" : "")
       << ", dsts";
    for (const auto& d : q.at("dsts")) os << " " << d.get<std::string>();
    os << "\n";
  }
  os << "dstPause:\n";
  if (v.at("dst_pause").empty()) os << "  (none)\n";
  for (const auto& p : v.at("dst_pause")) {
    os << "  " << p.at("dst").get<std::string>() << " paused on";
    for (const auto& n : p.at("paused_ports")) os << " " << n.get<std::string>();
    os << "\n";
  }
  os << "counters:\n";
  for (const auto& [k, n] : v.at("counters").items()) os << "  " << k << " " << n << "\n";
  return os.str();
}

}  // namespace sluice::floodgate
