// Every key of every configuration section, changed alone, makes a reload
// do something: re-attach the interfaces whose modules read it, rebuild the
// host-wide part that owns it, restart the metrics endpoint, or refuse the
// reload naming the key. The keys come from the sections' field tables
// (core/config_section.h), so a key added to a section is covered here
// without editing this test; a key the fingerprint forgot (as [aqm]
// ein_mark and the interface's link_far_end once were) fails it.
#include <gtest/gtest.h>

#include <map>

#include "core/agent.h"
#include "core/config_section.h"
#include "mechanisms/mechanisms.h"

using namespace sluice;

namespace {

// A configuration as "section.key = value" lines ("interface." is the one
// [[interface]]), rendered to TOML.
struct Doc {
  std::map<std::string, std::map<std::string, std::string>> sections;

  void set(const std::string& section, const std::string& key, const std::string& value) {
    sections[section][key] = value;
  }
  void apply(const std::string& lines) {
    size_t pos = 0;
    while (pos < lines.size()) {
      size_t nl = lines.find('\n', pos);
      std::string l = lines.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
      pos = nl == std::string::npos ? lines.size() : nl + 1;
      if (l.empty()) continue;
      size_t dot = l.find('.'), eq = l.find(" = ");
      ASSERT_TRUE(dot != std::string::npos && eq != std::string::npos && dot < eq) << l;
      set(l.substr(0, dot), l.substr(dot + 1, eq - dot - 1), l.substr(eq + 3));
    }
  }
  std::string toml() const {
    std::string s;
    for (const auto& [sec, kv] : sections) {
      s += sec == "interface" ? "[[interface]]\n" : "[" + sec + "]\n";
      for (const auto& [k, v] : kv) s += k + " = " + v + "\n";
    }
    return s;
  }
};

struct Case {
  std::string section;         // "agent", "pac", ...
  const MechanismInfo* owner;  // the row whose section it is (nullptr: the loader's own)
  const ConfigSection* def;
};

std::vector<Case> all_sections() {
  std::vector<Case> out = {{"agent", nullptr, &agent_section()},
                           {"metrics", nullptr, &metrics_section()},
                           {"interface", nullptr, &interface_section()}};
  for (const auto& mi : mechanisms())
    if (mi.section) out.push_back({mi.section->name, &mi, mi.section});
  return out;
}

// One interface that runs the section's mechanism (flowstat for the
// loader's own sections and host-wide mechanisms).
Doc base_for(const Case& c) {
  Doc d;
  d.set("interface", "name", "\"eth0\"");
  if (c.owner && c.owner->available && (c.owner->on_host || c.owner->on_switch_port)) {
    d.set("interface", "role", c.owner->on_host ? "\"host\"" : "\"switch-port\"");
    d.set("interface", "mechanisms", "[\"" + c.owner->name + "\"]");
    if (c.owner->needs_line_rate) d.set("interface", "line_rate_mbps", "100");
  }
  return d;
}

// The host-wide part that reads `section` besides its own (switch mode
// reads its logics' sections), or nullptr.
const MechanismInfo* reader_service(const std::string& section) {
  for (const auto& mi : mechanisms())
    if (mi.service.make && std::find(mi.reads.begin(), mi.reads.end(), section) != mi.reads.end()) return &mi;
  return nullptr;
}

bool has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

Config parse_or_fail(const std::string& toml, const std::string& what) {
  try {
    return parse_config_string(toml);
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << " does not parse: " << e.what() << "\n" << toml;
    throw;
  }
}

TEST(Reload, EveryKeyOfEverySectionTakesEffect) {
  size_t keys = 0;
  std::vector<const ConfigSection*> defs;
  for (const Case& c : all_sections()) defs.push_back(c.def);
  for (const Case& c : all_sections()) {
    ASSERT_FALSE(c.def->keys.empty()) << c.section;
    for (const auto& k : c.def->keys) {
      SCOPED_TRACE("[" + c.section + "] " + k.key + " = " + k.alt);
      ASSERT_FALSE(k.alt.empty()) << "the field table gives no other value for this key";
      Doc before = base_for(c);
      before.apply(k.with);
      before.apply(config_context(c.section + "." + k.key, defs));
      Doc after = before;
      after.set(c.section, k.key, k.alt);
      after.apply(k.alt_with);
      Config running, next;
      try {
        running = parse_or_fail(before.toml(), "the configuration before");
        next = parse_or_fail(after.toml(), "the configuration after");
      } catch (...) {
        continue;
      }
      ++keys;
      // The running configuration shows the new value.
      auto rj = to_json(running, mechanisms()), nj = to_json(next, mechanisms());
      const auto& was = c.section == "interface" ? rj["interface"][0] : rj[c.section];
      const auto& now = c.section == "interface" ? nj["interface"][0] : nj[c.section];
      ASSERT_TRUE(now.contains(k.key)) << "to_json leaves the key out";
      EXPECT_NE(was[k.key], now[k.key]) << "to_json does not show the change";

      ReloadPlan p = plan_reload(running, next, mechanisms());
      EXPECT_TRUE(p.changes_anything()) << "a reload that changes only this key would be ignored";
      std::string iface = next.interfaces.at(0).name;
      if (c.section == "agent" &&
          (k.key == "pin_root" || k.key == "state_dir" || k.key == "control_socket" || k.key == "attach_mode")) {
        EXPECT_TRUE(has(p.restart_keys, "agent." + k.key)) << p.refused;
        EXPECT_FALSE(p.refused.empty());
      } else if (c.section == "metrics" && k.key != "per_flow") {
        EXPECT_TRUE(p.metrics);
      } else if (c.owner && c.owner->service.make) {
        EXPECT_TRUE(has(p.services, c.owner->name)) << "its host-wide part is not rebuilt";
      } else if (const MechanismInfo* r = reader_service(c.section)) {
        EXPECT_TRUE(has(p.services, r->name)) << "the host-wide part that reads it (" << r->name << ") is not rebuilt";
      } else {
        EXPECT_TRUE(has(p.reattach, iface)) << "the interface that reads it is not re-attached";
      }
    }
  }
  // agent 6, metrics 4, interface 5, and every mechanism's keys.
  EXPECT_GE(keys, 40u);
}

TEST(Reload, AnUnchangedConfigurationChangesNothing) {
  for (const Case& c : all_sections()) {
    Config a = parse_config_string(base_for(c).toml());
    Config b = parse_config_string(base_for(c).toml());
    EXPECT_FALSE(plan_reload(a, b, mechanisms()).changes_anything()) << c.section;
  }
}

// The two keys the fingerprint once left out: a reload that changed only
// them was silently ignored.
TEST(Reload, DepartureMarkingAndTheLinksFarEndReattachThePort) {
  const std::string port =
      "[[interface]]\nname = \"sw0\"\nrole = \"switch-port\"\nmechanisms = [\"aqm\"]\nline_rate_mbps = 100\n";
  Config arrival = parse_config_string(port);
  Config departure = parse_config_string(port + "link_far_end = \"rx:veth1\"\n[aqm]\nein_mark = \"departure\"\n");
  Config moved = parse_config_string(port + "link_far_end = \"rx:veth2\"\n[aqm]\nein_mark = \"departure\"\n");
  EXPECT_TRUE(has(plan_reload(arrival, departure, mechanisms()).reattach, "sw0"));
  EXPECT_TRUE(has(plan_reload(departure, moved, mechanisms()).reattach, "sw0"));
  EXPECT_NE(fingerprint(departure, departure.interfaces[0], mechanisms()),
            fingerprint(moved, moved.interfaces[0], mechanisms()));
}

}  // namespace
