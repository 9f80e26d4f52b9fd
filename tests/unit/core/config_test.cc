// Configuration parsing and validation: every bad value is refused with a
// message naming the key, the value and the reason.
#include <gtest/gtest.h>

#include <fstream>

#include "core/config.h"
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
