// A configuration section ([agent], [pac], [[interface]], ...) is ONE table
// of fields. Each row names a TOML key and the member it fills; the same
// row parses and validates the key, leaves the struct's default when the
// key is absent, writes the key back in to_json, and so takes part in the
// reload fingerprint (built from to_json). A key cannot be parsed but
// forgotten by to_json, or the other way round.
//
// The loader (config.cc) only dispatches: each mechanism owns its section
// (agent/mechanisms/<name>/<name>_config.cc) and lists it in its row of the
// mechanisms table.
#pragma once

#include <toml++/toml.h>

#include <any>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config.h"

namespace sluice {

// Reads one TOML table, remembering which keys were consumed so anything
// left over is reported as unknown (a typo must not be silently ignored).
// Every problem names the dotted key, the value, the reason and the line.
class ConfigReader {
 public:
  ConfigReader(const toml::table& t, std::string path, std::vector<ConfigProblem>& out,
               const MechanismTable* mechanisms = nullptr)
      : t_(t), path_(std::move(path)), out_(out), mechanisms_(mechanisms) {}

  const toml::table& table() const { return t_; }
  const MechanismTable* mechanisms() const { return mechanisms_; }
  std::vector<ConfigProblem>& problems() { return out_; }
  size_t problem_count() const { return out_.size(); }

  std::string key(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }

  // A problem at key `k` (relative to this table); `n` is the offending
  // node (its value and line are reported), nullptr when the key is absent.
  void problem(const std::string& k, const toml::node* n, const std::string& reason);

  // The node of `k`, marking it consumed; nullptr when absent.
  const toml::node* node(const char* k);

  void get(const char* k, bool& v);
  void get(const char* k, std::string& v, bool allow_empty = false);
  void get(const char* k, double& v, double lo, double hi);

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

  // `k` as an array of distinct strings: an element that is not a string,
  // that `check` refuses (it returns why, or "" to accept) or that repeats
  // an earlier one is reported as k[i] and skipped; the rest go to `out`
  // in order. `expected` is the problem when `k` is not an array. Returns
  // false when `k` is absent (out untouched).
  bool get_unique_strings(const char* k, const std::string& expected,
                          const std::function<std::string(const std::string&, const toml::node&)>& check,
                          std::vector<std::string>& out);

  template <typename E>
  void get_enum(const char* k, E& v, const std::vector<std::pair<std::string, E>>& choices) {
    auto n = node(k);
    if (!n) return;
    auto s = n->as_string();
    std::string names;
    for (auto& [name, val] : choices) {
      if (s && s->get() == name) {
        v = val;
        return;
      }
      names += names.empty() ? name : ", " + name;
    }
    problem(k, n, "must be one of " + names);
  }

  // Reports every key of the table nobody asked for.
  void finish();

 private:
  const toml::table& t_;
  std::string path_;
  std::vector<ConfigProblem>& out_;
  const MechanismTable* mechanisms_;
  std::vector<std::string> seen_;
};

// The name of `v` in a names table (the one list an enum's TOML strings
// are parsed from and printed to), or "?".
template <class E>
const char* name_of(const std::vector<std::pair<std::string, E>>& names, E v) {
  for (const auto& [name, x] : names)
    if (x == v) return name.c_str();
  return "?";
}

// How a value is shown in a problem ("\"hots\"", 70000, [array]).
std::string render_toml(const toml::node& n);
// "origin:line" of a node ("" when unknown).
std::string toml_where(const toml::node& n);

// One row of a section's table.
template <class S>
struct Field {
  std::string key;
  std::function<void(ConfigReader&, S&)> parse;
  std::function<nlohmann::json(const S&)> to_json;
  // A valid TOML value other than the default, and TOML lines
  // ("section.key = value", "interface.key = value") that value needs
  // besides; the reload test sets every key of every section to its `alt`.
  std::string alt;
  std::string alt_with;
  // Lines that must hold for the key to matter at all (both before and
  // after the change), e.g. link_far_end only exists with departure marking.
  std::string with;

  Field needing(std::string lines) const {  // sets alt_with
    Field f = *this;
    f.alt_with = std::move(lines);
    return f;
  }
  Field within(std::string lines) const {  // sets with
    Field f = *this;
    f.with = std::move(lines);
    return f;
  }
  Field alternative(std::string value) const {  // sets alt
    Field f = *this;
    f.alt = std::move(value);
    return f;
  }
};

// The type-erased section the loader dispatches to.
struct ConfigSection {
  std::string name;  // [name]
  struct Key {
    std::string key, alt, alt_with, with;
  };
  std::vector<Key> keys;  // the field table's keys, in order
  // For keys of other sections that only matter together with this one
  // ("interface.link_far_end"): the lines that make them matter (as
  // Field::with; the reload test reads them).
  std::vector<std::pair<std::string, std::string>> contexts;
  // Parses the table (nullptr: the section is absent: defaults, then the
  // same whole-section checks). Problems go to reader-style `out`.
  std::function<std::any(const toml::table* t, std::vector<ConfigProblem>& out, const MechanismTable* mechanisms)>
      parse;
  std::function<nlohmann::json(const std::any&)> to_json;
  // Checks that need the whole configuration (other sections, interfaces);
  // runs once every section is parsed. May be empty.
  std::function<void(const Config&, std::vector<ConfigProblem>&)> check;
};

// Builds a section from its table. `validate` runs after the fields (with
// the section's reader, for checks across its own keys and derived values).
template <class S>
ConfigSection make_section(std::string name, std::vector<Field<S>> fields,
                           std::function<void(ConfigReader&, S&)> validate = nullptr,
                           std::function<void(const Config&, std::vector<ConfigProblem>&)> check = nullptr) {
  ConfigSection sec;
  sec.name = name;
  for (const auto& f : fields) sec.keys.push_back({f.key, f.alt, f.alt_with, f.with});
  sec.parse = [name, fields, validate](const toml::table* t, std::vector<ConfigProblem>& out,
                                       const MechanismTable* mechanisms) -> std::any {
    S s{};
    static const toml::table kEmpty;
    ConfigReader r(t ? *t : kEmpty, name, out, mechanisms);
    for (const auto& f : fields) f.parse(r, s);
    if (validate) validate(r, s);
    r.finish();
    return s;
  };
  sec.to_json = [fields](const std::any& a) {
    const S& s = std::any_cast<const S&>(a);
    nlohmann::json j = nlohmann::json::object();
    for (const auto& f : fields) j[f.key] = f.to_json(s);
    return j;
  };
  sec.check = std::move(check);
  return sec;
}

// The usual kinds of rows. Their `alt` is derived from the default.
namespace field {

template <class S>
Field<S> flag(const char* k, bool S::*m) {
  return {k, [=](ConfigReader& r, S& s) { r.get(k, s.*m); }, [=](const S& s) { return nlohmann::json(s.*m); },
          (S{}.*m) ? "false" : "true"};
}

template <class S, class Int>
Field<S> integer(const char* k, Int S::*m, int64_t lo, int64_t hi) {
  int64_t d = int64_t(S{}.*m);
  return {k, [=](ConfigReader& r, S& s) { r.get_int(k, s.*m, lo, hi); },
          [=](const S& s) { return nlohmann::json(s.*m); }, std::to_string(d < hi ? d + 1 : d - 1)};
}

// Absent: std::nullopt (to_json: null).
template <class S, class Int>
Field<S> optional_integer(const char* k, std::optional<Int> S::*m, int64_t lo, int64_t hi) {
  return {k, [=](ConfigReader& r, S& s) { r.get_opt_int(k, s.*m, lo, hi); },
          [=](const S& s) { return (s.*m) ? nlohmann::json(*(s.*m)) : nlohmann::json(); },
          std::to_string(lo + 1 <= hi ? lo + 1 : lo)};
}

template <class S>
Field<S> number(const char* k, double S::*m, double lo, double hi) {
  double d = S{}.*m;
  double alt = d * 2 <= hi && d * 2 != d ? d * 2 : (lo + d) / 2;
  return {k, [=](ConfigReader& r, S& s) { r.get(k, s.*m, lo, hi); }, [=](const S& s) { return nlohmann::json(s.*m); },
          nlohmann::json(alt).dump()};
}

// A non-empty string; `alt` is a valid other value (TOML, quoted).
template <class S>
Field<S> text(const char* k, std::string S::*m, std::string alt) {
  return {k, [=](ConfigReader& r, S& s) { r.get(k, s.*m); }, [=](const S& s) { return nlohmann::json(s.*m); },
          std::move(alt)};
}

// One of `choices` (TOML string -> value).
template <class S, class E>
Field<S> choice(const char* k, E S::*m, std::vector<std::pair<std::string, E>> choices) {
  std::string alt;
  for (const auto& [name, v] : choices)
    if (!(v == S{}.*m)) {
      alt = "\"" + name + "\"";
      break;
    }
  return {k, [=](ConfigReader& r, S& s) { r.get_enum(k, s.*m, choices); },
          [=](const S& s) {
            for (const auto& [name, v] : choices)
              if (v == s.*m) return nlohmann::json(name);
            return nlohmann::json();
          },
          alt};
}

}  // namespace field

// Lines that make "section.key" matter, from any section's `contexts`.
std::string config_context(const std::string& section_key, const std::vector<const ConfigSection*>& sections);

// The loader's own sections.
const ConfigSection& agent_section();
const ConfigSection& metrics_section();
const ConfigSection& interface_section();  // one [[interface]] table

}  // namespace sluice
