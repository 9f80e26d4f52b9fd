// Agent logic that needs no kernel: reason table, Prometheus text, control
// protocol, event loop wrappers, reload fingerprints.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "core/agent.h"
#include "mechanisms/flowstat/flowstat_config.h"
#include "mechanisms/mechanisms.h"
#include "core/bpf_util.h"
#include "core/control.h"
#include "core/event_loop.h"
#include "core/metrics.h"
#include "sluice/reasons.h"

using namespace sluice;

namespace {

TEST(Reasons, EveryCodeHasANameAndVerdict) {
  for (uint32_t r = 0; r < SLUICE_R__COUNT; ++r) {
    const ReasonInfo* ri = reason_info(r);
    ASSERT_NE(ri, nullptr) << r;
    EXPECT_GT(std::strlen(ri->name), 0u);
    EXPECT_GT(std::strlen(ri->verdict), 0u);
  }
  EXPECT_EQ(reason_info(SLUICE_R__COUNT), nullptr);
  EXPECT_STREQ(reason_info(SLUICE_R_PASS_COUNTED)->name, "PASS_COUNTED");
}

TEST(Metrics, TextFormatGroupsFamiliesAndEscapesLabels) {
  std::vector<MetricSample> s = {
      {"sluice_x_total", "X things", true, {{"iface", "eth0"}}, 3},
      {"sluice_y", "Y level", false, {}, 1.5},
      {"sluice_x_total", "X things", true, {{"iface", "we\"ird"}}, 4},
  };
  std::string t = render_prometheus_text(s);
  EXPECT_NE(t.find("# TYPE sluice_x_total counter"), std::string::npos) << t;
  EXPECT_NE(t.find("sluice_x_total{iface=\"eth0\"} 3"), std::string::npos) << t;
  EXPECT_NE(t.find("sluice_x_total{iface=\"we\\\"ird\"} 4"), std::string::npos) << t;
  EXPECT_NE(t.find("# TYPE sluice_y gauge"), std::string::npos) << t;
  // One HELP/TYPE per family.
  EXPECT_EQ(t.find("# TYPE sluice_x_total"), t.rfind("# TYPE sluice_x_total"));
}

class ControlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-ctl-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/ctl.sock";
  }
  void TearDown() override {
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  // Serves on a loop thread while fn runs client requests.
  void serve(ControlServer::Handler h, const std::function<void()>& fn) {
    EventLoop loop;
    auto srv = std::make_unique<ControlServer>(loop.io(), path_, h);
    auto keep = loop.every(std::chrono::milliseconds(50), [] {});
    std::thread t([&] { loop.run(); });
    fn();
    loop.post([&] { loop.stop(); });
    t.join();
  }
  std::string raw(const std::string& bytes) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strncpy(sa.sun_path, path_.c_str(), sizeof(sa.sun_path) - 1);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    EXPECT_EQ(write(fd, bytes.data(), bytes.size()), ssize_t(bytes.size()));
    shutdown(fd, SHUT_WR);
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
    close(fd);
    return out;
  }
  std::string dir_, path_;
};

TEST_F(ControlTest, RequestReplyAndRootOnlyMode) {
  serve(
      [](const nlohmann::json& r) {
        return nlohmann::json{{"ok", true}, {"echo", r["cmd"]}};
      },
      [&] {
        struct stat st {};
        ASSERT_EQ(stat(path_.c_str(), &st), 0);
        EXPECT_EQ(st.st_mode & 0777, 0600u);
        auto reply = control_request(path_, {{"cmd", "status"}});
        EXPECT_EQ(reply["echo"], "status");
      });
}

TEST_F(ControlTest, BadRequestsGetErrorsAndTheServerKeepsServing) {
  int calls = 0;
  serve(
      [&](const nlohmann::json&) {
        ++calls;
        return nlohmann::json{{"ok", true}};
      },
      [&] {
        auto a = nlohmann::json::parse(raw("not json\n"));
        EXPECT_FALSE(a["ok"]);
        EXPECT_NE(a["error"].get<std::string>().find("bad JSON"), std::string::npos);
        auto b = nlohmann::json::parse(raw("[1,2]\n"));
        EXPECT_FALSE(b["ok"]);
        auto c = nlohmann::json::parse(raw("{\"cmd\": 5}\n"));
        EXPECT_FALSE(c["ok"]);
        // A parse error quotes the byte it stopped at; one that is not
        // UTF-8 once made the reply unserialisable and the exception left
        // the event loop (found by fuzz_control).
        auto e = nlohmann::json::parse(raw("\xff\n"));
        EXPECT_FALSE(e["ok"]);
        EXPECT_NE(e["error"].get<std::string>().find("bad JSON"), std::string::npos);
        std::string big(ControlServer::kMaxRequest + 10, 'x');
        auto d = nlohmann::json::parse(raw(big));
        EXPECT_FALSE(d["ok"]);
        EXPECT_EQ(calls, 0);
        EXPECT_TRUE(control_request(path_, {{"cmd", "status"}})["ok"]);
        EXPECT_EQ(calls, 1);
      });
}

TEST_F(ControlTest, RefusesToStealALiveSocket) {
  EventLoop loop;
  ControlServer a(loop.io(), path_, [](const nlohmann::json&) { return nlohmann::json{{"ok", true}}; });
  EXPECT_THROW(ControlServer(loop.io(), path_, [](const nlohmann::json&) { return nlohmann::json{}; }), Error);
}

TEST_F(ControlTest, ReplacesAStaleSocket) {
  // A socket file nobody listens on (agent killed with -9).
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::strncpy(sa.sun_path, path_.c_str(), sizeof(sa.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  close(fd);
  EventLoop loop;
  EXPECT_NO_THROW(ControlServer(loop.io(), path_, [](const nlohmann::json&) { return nlohmann::json{}; }));
}

TEST(ControlClient, MissingAgentIsAClearError) {
  try {
    control_request("/tmp/sluice-no-such-dir/ctl.sock", {{"cmd", "status"}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is sluiced running?"), std::string::npos) << e.what();
  }
}

TEST(EventLoop, PeriodicTimerFiresAndStopsWhenDestroyed) {
  EventLoop loop;
  int n = 0;
  auto t = loop.every(std::chrono::milliseconds(5), [&] { ++n; });
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (n < 3 && std::chrono::steady_clock::now() < deadline) loop.run_one_for(std::chrono::milliseconds(100));
  EXPECT_GE(n, 3);
  t.reset();
  int before = n;
  loop.run_one_for(std::chrono::milliseconds(30));
  EXPECT_EQ(n, before);
}

TEST(EventLoop, FdWatchCallsOnReadable) {
  EventLoop loop;
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  int reads = 0;
  auto w = loop.watch_readable(p[0], [&] {
    char c;
    if (read(p[0], &c, 1) == 1) ++reads;
  });
  ASSERT_EQ(write(p[1], "ab", 2), 2);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (reads < 2 && std::chrono::steady_clock::now() < deadline) loop.run_one_for(std::chrono::milliseconds(100));
  EXPECT_EQ(reads, 2);
  w.reset();
  close(p[0]);
  close(p[1]);
}

TEST(Reload, FingerprintChangesOnlyWithWhatTheInterfaceDependsOn) {
  Config a = parse_config_string("[[interface]]\nname = \"a\"\n[[interface]]\nname = \"b\"\n");
  Config b = a;
  b.interfaces[1].role = Role::SwitchPort;
  EXPECT_EQ(fingerprint(a, a.interfaces[0], mechanisms()), fingerprint(b, b.interfaces[0], mechanisms()));
  EXPECT_NE(fingerprint(a, a.interfaces[1], mechanisms()), fingerprint(b, b.interfaces[1], mechanisms()));
  Config c = a;
  c.get<FlowstatConfig>().track_flows = false;  // flowstat runs on both
  EXPECT_NE(fingerprint(a, a.interfaces[0], mechanisms()), fingerprint(c, c.interfaces[0], mechanisms()));
  Config d = a;
  d.metrics.port = 1234;  // metrics endpoint is not an interface matter
  EXPECT_EQ(fingerprint(a, a.interfaces[0], mechanisms()), fingerprint(d, d.interfaces[0], mechanisms()));
}

}  // namespace

namespace {

// A request line whose JSON parse error quotes a byte that is not UTF-8 used
// to make the reply unserialisable: dump() threw out of the control socket's
// handler and took the event loop down. Every line gets one JSON reply.
TEST(ControlReply, NonUtf8RequestGetsAnErrorReplyNotAnException) {
  bool called = false;
  sluice::ControlServer::Handler handler = [&](const nlohmann::json&) {
    called = true;
    return nlohmann::json{{"ok", true}};
  };
  std::string reply;
  ASSERT_NO_THROW(reply = sluice::control_reply("\xff\n", handler));
  ASSERT_FALSE(reply.empty());
  EXPECT_EQ(reply.back(), '\n');
  auto j = nlohmann::json::parse(reply);
  EXPECT_EQ(j.value("ok", true), false);
  EXPECT_NE(j.value("error", std::string()).find("bad JSON"), std::string::npos);
  EXPECT_FALSE(called);

  reply = sluice::control_reply("{\"cmd\":\"status\"}\n", handler);
  EXPECT_TRUE(called);
  EXPECT_EQ(nlohmann::json::parse(reply).value("ok", false), true);

  called = false;
  reply = sluice::control_reply("[1,2]\n", handler);
  EXPECT_FALSE(called);
  EXPECT_EQ(nlohmann::json::parse(reply).value("ok", true), false);
}

}  // namespace
