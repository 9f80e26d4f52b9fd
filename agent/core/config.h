// sluiced configuration (TOML). Parsing validates everything up front: a bad
// value produces a ConfigError naming the key, the value, the reason and
// the file line, and nothing is attached. See agent/sluiced.example.toml
// for every key.
//
// The core owns [agent], [metrics] and [[interface]]; every other section
// belongs to a mechanism (agent/mechanisms/<name>/<name>_config.h), which
// parses it with its own field table (core/config_section.h). Config keeps
// those sections by name: cfg.get<S>() for a section struct S.
#pragma once

#include <any>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "error.h"

namespace sluice {

enum class Role { Host, SwitchPort };
enum class AttachMode { Auto, Tcx, Clsact };

const char* to_string(Role r);
const char* to_string(AttachMode m);

struct AgentConfig {
  std::string pin_root = "/sys/fs/bpf/sluice";
  std::string state_dir = "/run/sluice";
  std::string control_socket = "/run/sluice/sluiced.sock";
  std::string log_level = "info";
  AttachMode attach_mode = AttachMode::Auto;
  // How often the agent proves it is alive to the BPF side (fail-open).
  uint32_t heartbeat_ms = 20;
};

struct MetricsConfig {
  bool enabled = true;
  std::string bind = "127.0.0.1";
  uint16_t port = 9477;
  // Per-flow series can be many; off by default.
  bool per_flow = false;
};

struct InterfaceConfig {
  std::string name;
  Role role = Role::Host;
  // Absent from the file: the table's rows marked on_by_default.
  std::vector<std::string> mechanisms;
  std::optional<uint64_t> line_rate_mbps;
  // Switch port: the interface where this port's packets arrive after its
  // queue, "NETNS:IFNAME" (a name of `ip netns list`) or "IFNAME" in the
  // agent's namespace. Empty: not configured.
  std::string link_far_end;

  // link_far_end split into {netns ("" = ours), ifname}.
  std::pair<std::string, std::string> far_end() const;
};

struct Config {
  AgentConfig agent;
  MetricsConfig metrics;
  std::vector<InterfaceConfig> interfaces;
  // The mechanisms' sections by name ("pac" -> PacConfig), every section of
  // the table present after parsing (defaults when absent from the file).
  std::map<std::string, std::any> sections;

  // The section of type S (S::kSection names it); S's defaults if this
  // Config was not parsed with it.
  template <class S>
  const S& get() const {
    auto it = sections.find(S::kSection);
    if (it == sections.end()) {
      static const S kDefault{};
      return kDefault;
    }
    return std::any_cast<const S&>(it->second);
  }
  template <class S>
  S& get() {
    auto [it, _] = sections.try_emplace(S::kSection, S{});
    return std::any_cast<S&>(it->second);
  }

  const InterfaceConfig* find_interface(const std::string& name) const;
  bool uses_mechanism(const std::string& mech) const;
};

// One rejected key. `key` is the dotted path ("interface[1].role"), `where`
// the file and line ("sluiced.toml:12"; empty for a key that is missing).
struct ConfigProblem {
  std::string key;
  std::string value;
  std::string reason;
  std::string where;
  std::string to_string() const;
};

class ConfigError : public Error {
 public:
  explicit ConfigError(std::vector<ConfigProblem> problems);
  const std::vector<ConfigProblem>& problems() const { return problems_; }

 private:
  std::vector<ConfigProblem> problems_;
};

// The mechanisms table (core/module.h) that names the mechanisms an
// interface may list.
struct MechanismInfo;
using MechanismTable = std::vector<MechanismInfo>;

// Throws ConfigError (bad content) or Error (unreadable file / TOML syntax).
// agent/mechanisms/mechanisms.h has the same two with sluice's own table.
Config parse_config_file(const std::string& path, const MechanismTable& mechanisms);
Config parse_config_string(const std::string& text, const std::string& origin, const MechanismTable& mechanisms);

// The whole configuration as JSON (`sluicectl config`): every key of every
// section, from the sections' field tables.
nlohmann::json to_json(const Config& c, const MechanismTable& mechanisms);

}  // namespace sluice
