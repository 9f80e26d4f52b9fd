// Configuration parsing and validation: every bad value is refused with a
// message naming the key, the value and the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <numeric>
#include <sstream>

#include "core/config.h"
#include "core/config_section.h"
#include "mechanisms/flowstat/flowstat_config.h"
#include "mechanisms/mechanisms.h"
#include "lib/config_check.h"

using namespace sluice;

namespace {

// tests/lib/config_check.h
constexpr auto& problems = test::config_problems;
constexpr auto& rejects = test::config_rejects;

const char* kMinimal = "[[interface]]\nname = \"eth0\"\n";

TEST(Config, MinimalConfigHasDocumentedDefaults) {
  Config c = parse_config_string(kMinimal);
  ASSERT_EQ(c.interfaces.size(), 1u);
  EXPECT_EQ(c.interfaces[0].name, "eth0");
  EXPECT_EQ(c.interfaces[0].role, Role::Host);
  EXPECT_EQ(c.interfaces[0].mechanisms, std::vector<std::string>{"flowstat"});
  EXPECT_EQ(c.agent.pin_root, "/sys/fs/bpf/sluice");
  EXPECT_EQ(c.agent.attach_mode, AttachMode::Auto);
  EXPECT_EQ(c.metrics.bind, "127.0.0.1");
  EXPECT_EQ(c.metrics.port, 9477);
  EXPECT_TRUE(c.get<FlowstatConfig>().track_flows);
}

TEST(Config, ExampleConfigIsValid) {
  // The shipped example documents every key; it must parse.
  Config c = parse_config_file(SLUICE_SOURCE_DIR "/agent/sluiced.example.toml");
  EXPECT_FALSE(c.interfaces.empty());
}

// The man page sluiced.toml(5) and the shipped example name every section
// and every key of the field tables (core/config_section.h), so a key added
// to a section without its documentation fails here. In the man page a key
// must appear between its section's heading and the next one; in the
// example at the start of a line of its section, commented out or not.
bool has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(Config, ManPageAndExampleNameEveryKey) {
  const std::string man = read_text(SLUICE_SOURCE_DIR "/docs/man/sluiced.toml.5");
  const std::string example = read_text(SLUICE_SOURCE_DIR "/agent/sluiced.example.toml");
  ASSERT_FALSE(man.empty());
  ASSERT_FALSE(example.empty());
  std::vector<const ConfigSection*> defs = {&agent_section(), &metrics_section(), &interface_section()};
  for (const auto& mi : mechanisms())
    if (mi.section) defs.push_back(mi.section);
  size_t keys = 0;
  for (const ConfigSection* d : defs) {
    const bool table_array = d == &interface_section();
    const std::string header = table_array ? "[[" + d->name + "]]" : "[" + d->name + "]";
    // The header on a line of its own; the section runs to the next line
    // that opens a table (commented-out lines stay inside it).
    const size_t ex = example.find("\n" + header + "\n");
    EXPECT_NE(ex, std::string::npos) << "sluiced.example.toml has no " << header << " line";
    if (ex != std::string::npos) {
      const size_t ex_end = example.find("\n[", ex + 1);
      const std::string section = example.substr(ex, ex_end == std::string::npos ? std::string::npos : ex_end - ex);
      for (const auto& k : d->keys) {
        // A key starts its line, set or commented out; a key that is an
        // array of tables may be shown by its header ([[switch.ports]]).
        const bool shown = section.find("\n" + k.key + " ") != std::string::npos ||
                           section.find("\n# " + k.key + " ") != std::string::npos ||
                           section.find("[[" + d->name + "." + k.key + "]]") != std::string::npos;
        EXPECT_TRUE(shown) << "sluiced.example.toml does not show " << header << " " << k.key;
      }
    }
    const size_t at = man.find("\n.SH " + header + "\n");
    if (at == std::string::npos) {
      ADD_FAILURE() << "sluiced.toml.5 has no .SH " << header << " section (keys:"
                    << std::accumulate(d->keys.begin(), d->keys.end(), std::string(),
                                       [](std::string a, const ConfigSection::Key& k) { return a + " " + k.key; })
                    << ")";
      continue;
    }
    const size_t end = man.find("\n.SH ", at + 1);
    const std::string body = man.substr(at, end == std::string::npos ? std::string::npos : end - at);
    // Keys are the unquoted words of the tagged paragraphs' tag lines:
    // .BR key " (type, default)" ", " other_key " (...)"
    std::vector<std::string> tags;
    std::istringstream lines(body);
    for (std::string l; std::getline(lines, l);) {
      if (l.rfind(".B", 0) != 0) continue;
      bool quoted = false;
      std::string word;
      for (char c : l.substr(l.find(' ') == std::string::npos ? l.size() : l.find(' '))) {
        if (c == '"') quoted = !quoted;
        if (!quoted && c != '"' && c != ' ' && c != ',') {
          word += c;
          continue;
        }
        if (!word.empty()) tags.push_back(word);
        word.clear();
      }
      if (!word.empty()) tags.push_back(word);
    }
    for (const auto& k : d->keys) {
      ++keys;
      EXPECT_TRUE(has(tags, k.key)) << "sluiced.toml.5 " << header << " does not describe " << k.key;
    }
  }
  EXPECT_GT(keys, 50u);
}

TEST(Config, BadValuesNameTheKey) {
  EXPECT_TRUE(rejects("[[interface]]\nname = \"eth0\"\nrole = \"hots\"\n", "interface[0].role",
                      "must be one of host, switch-port"));
  EXPECT_TRUE(rejects(std::string(kMinimal) + "[metrics]\nport = 70000\n", "metrics.port", "out of range"));
  EXPECT_TRUE(rejects(std::string(kMinimal) + "[metrics]\nport = \"80\"\n", "metrics.port", "expected an integer"));
  EXPECT_TRUE(
      rejects(std::string(kMinimal) + "[agent]\nattach_mode = \"xdp\"\n", "agent.attach_mode", "must be one of"));
  EXPECT_TRUE(
      rejects(std::string(kMinimal) + "[agent]\npin_root = \"relative/dir\"\n", "agent.pin_root", "absolute path"));
  EXPECT_TRUE(rejects(std::string(kMinimal) + "[agent]\nlog_level = \"loud\"\n", "agent.log_level", "must be one of"));
  EXPECT_TRUE(rejects(std::string(kMinimal) + "[agent]\nheartbeat_ms = 0\n", "agent.heartbeat_ms", "out of range"));
  EXPECT_TRUE(
      rejects(std::string(kMinimal) + "[flowstat]\ntrack_flows = 1\n", "flowstat.track_flows", "true or false"));
}

TEST(Config, UnknownKeysAndSectionsAreErrors) {
  EXPECT_TRUE(rejects(std::string(kMinimal) + "[metrics]\nprot = 1\n", "metrics.prot", "unknown key"));
  EXPECT_TRUE(rejects(std::string(kMinimal) + "[bogus]\nx = 1\n", "bogus", "unknown key"));
  EXPECT_TRUE(rejects("[[interface]]\nname = \"eth0\"\nmtu = 1500\n", "interface[0].mtu", "unknown key"));
}

TEST(Config, InterfaceRules) {
  EXPECT_TRUE(rejects("[agent]\n", "interface", "at least one"));
  EXPECT_TRUE(rejects("[[interface]]\nrole = \"host\"\n", "interface[0].name", "required"));
  EXPECT_TRUE(rejects("[[interface]]\nname = \"averyveryverylongname\"\n", "interface[0].name", "IFNAMSIZ"));
  EXPECT_TRUE(
      rejects("[[interface]]\nname = \"a\"\n[[interface]]\nname = \"a\"\n", "interface[1].name", "listed twice"));
  EXPECT_TRUE(rejects("[[interface]]\nname = \"a\"\nmechanisms = [\"warp-drive\"]\n", "interface[0].mechanisms[0]",
                      "unknown mechanism"));
  EXPECT_TRUE(rejects("[[interface]]\nname = \"a\"\nmechanisms = [\"flowstat\", \"flowstat\"]\n",
                      "interface[0].mechanisms[1]", "listed twice"));
  EXPECT_TRUE(rejects("[[interface]]\nname = \"a\"\nmechanisms = \"flowstat\"\n", "interface[0].mechanisms",
                      "array of strings"));
  EXPECT_TRUE(rejects("interface = 3\n", "interface", "[[interface]]"));
}

TEST(Config, AllProblemsAreReportedAtOnce) {
  auto ps = problems("[metrics]\nport = 0\n[agent]\nattach_mode = \"x\"\n[[interface]]\nname = \"a\"\nrole = \"r\"\n");
  EXPECT_EQ(ps.size(), 3u);
}

TEST(Config, SyntaxErrorsGiveLineAndColumn) {
  try {
    parse_config_string("[agent\n", "test.toml");
    FAIL() << "syntax error accepted";
  } catch (const ConfigError&) {
    FAIL() << "a syntax error is not a validation error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("test.toml:1:"), std::string::npos) << e.what();
  }
}

TEST(Config, MissingFileIsAClearError) {
  try {
    parse_config_file("/nonexistent/sluiced.toml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/sluiced.toml"), std::string::npos);
  }
}

TEST(Config, ErrorMessageListsEveryProblem) {
  try {
    parse_config_string("[[interface]]\nname = \"eth0\"\nrole = \"hots\"\n");
    FAIL();
  } catch (const ConfigError& e) {
    std::string w = e.what();
    EXPECT_NE(w.find("interface[0].role = \"hots\": must be one of host, switch-port"), std::string::npos) << w;
  }
}

// BFC is in the table as coming, and refused as such.
TEST(Config, ComingMechanismsAreRefusedAsNotRunnableYet) {
  for (const char* m : {"bfc"})
    EXPECT_TRUE(rejects(std::string("[[interface]]\nname = \"a\"\nmechanisms = [\"") + m + "\"]\n",
                        "interface[0].mechanisms[0]", "not runnable in sluiced yet"))
        << m;
}

// `sluiced --help` lists what works today, then what is coming.
TEST(Mechanisms, HelpSaysWhatWorksTodayAndWhatIsComing) {
  std::string h = mechanisms_help();
  size_t coming = h.find("Coming, not runnable in sluiced yet");
  ASSERT_NE(coming, std::string::npos) << h;
  for (const auto& m : mechanisms()) {
    size_t at = h.find("\n  " + m.name + " ");
    ASSERT_NE(at, std::string::npos) << m.name << " missing from\n" << h;
    EXPECT_EQ(at < coming, m.available) << m.name << "\n" << h;
  }
  for (const char* works : {"flowstat", "pac", "ein", "aqm", "cc", "top", "floodgate"}) {
    size_t at = h.find(std::string("\n  ") + works + " ");
    EXPECT_LT(at, coming) << works;
  }
  for (const char* later : {"bfc"}) {
    size_t at = h.find(std::string("\n  ") + later + " ");
    EXPECT_TRUE(at != std::string::npos && at > coming) << later;
  }
}

}  // namespace
