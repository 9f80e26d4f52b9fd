// The lab's instruments against the kernel's own counters, on real veth
// links with real qdiscs:
//  - sluice-tg's flow completion time and retransmission counts agree with
//    the shaping qdisc's `tc -s` bytes/drops; its --window-clamp caps a
//    flow's data in flight;
//  - sluice-qmon's maximum backlog equals the backlog `tc -s` reports for a
//    queue that only grows, and its drop/byte counters equal tc's;
//  - sluice-fault drops/corrupts exactly what it counts, repeatably per seed,
//    and steers delayed packets into the HTB class it names;
//  - sluice-wire adds its delay to every round trip, carries TCP (offloaded
//    checksums, GSO) byte-exact and counts every frame it forwarded; a
//    frame that entered with an 802.1Q/802.1ad tag leaves with the same
//    tag (TPID, PCP, VID), an untagged one untagged;
//  - bench/run writes the incast JSON, and leaves nothing behind after Ctrl-C;
//    a dead run's namespaces are reaped.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "core/netns.h"
#include "lib/netns_fixture.h"
#include "lib/packet.h"
#include "lib/tag_watch.h"

using namespace sluice;
using namespace sluice::test;
using nlohmann::json;

namespace {

std::string tg() { return build_path("bench/lab/tg/sluice-tg"); }
std::string qmon() { return build_path("bench/lab/qmon/sluice-qmon"); }
std::string fault() { return build_path("bench/lab/fault/sluice-fault"); }
std::string wire() { return build_path("bench/lab/wire/sluice-wire"); }

json read_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "missing " << path;
  json j;
  if (f) f >> j;
  return j;
}

class LabInstruments : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "integration tests need root";
    lab_ = std::make_unique<Lab>("l");
    a_ = lab_->add_ns("a");
    b_ = lab_->add_ns("b");
    // No IPv6 chatter (router solicitations, MLD) in the queues we count.
    for (const auto& ns : {a_, b_})
      ASSERT_EQ(lab_->nsh(ns, "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1"), 0);
    lab_->add_veth(a_, "a0", "10.203.0.1/24", b_, "b0", "10.203.0.2/24");
    a0_ = lab_->name("a0");
    b0_ = lab_->name("b0");
  }
  void TearDown() override { lab_.reset(); }

  // Root qdisc counters of `dev` in `ns` from `tc -s -j qdisc`.
  json tc_root(const std::string& ns, const std::string& dev) {
    int st = 0;
    std::string out = lab_->out("tc -n " + ns + " -s -j qdisc show dev " + dev, &st);
    EXPECT_EQ(st, 0);
    for (auto& q : json::parse(out))
      if (q.value("root", false)) return q;
    ADD_FAILURE() << "no root qdisc on " << dev << ": " << out;
    return json::object();
  }

  // Sends `n` UDP datagrams of `payload` bytes from namespace `ns` to
  // dst:port, each carrying its index; `gap_us` between them.
  void send_udp(const std::string& ns, const std::string& dst, int port, int n, int payload, int gap_us) {
    run_in_netns(ns, [&] {
      int fd = socket(AF_INET, SOCK_DGRAM, 0);
      ASSERT_GE(fd, 0);
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_port = htons(uint16_t(port));
      inet_pton(AF_INET, dst.c_str(), &to.sin_addr);
      std::vector<char> buf(size_t(payload), 'x');
      for (int i = 0; i < n; ++i) {
        std::memcpy(buf.data(), &i, sizeof(i));
        ASSERT_EQ(sendto(fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
                  ssize_t(buf.size()));
        if (gap_us) usleep(useconds_t(gap_us));
      }
      close(fd);
    });
  }

  std::unique_ptr<Lab> lab_;
  std::string a_, b_, a0_, b0_;
};

// A 1 MB response through a 50 Mbit/s TBF: the FCT sluice-tg reports is the
// time the TBF needs for the bytes tc says it sent, and no retransmission
// is reported where tc dropped nothing.
TEST_F(LabInstruments, TgFctMatchesShaperCounters) {
  constexpr double kRate = 50e6;
  constexpr uint64_t kBytes = 1000000, kBurst = 3028;
  ASSERT_EQ(lab_->nsh(a_, "ethtool -K " + a0_ + " tso off gso off"), 0);
  ASSERT_EQ(lab_->nsh(a_, "tc qdisc replace dev " + a0_ + " root tbf rate 50mbit burst " + std::to_string(kBurst) +
                              " limit 2000000"),
            0);
  Process srv = lab_->spawn(a_, {tg(), "server", "--cc", "cubic"}, "srv");
  ASSERT_TRUE(eventually([&] { return srv.log().find("listening") != std::string::npos; }, std::chrono::seconds(5)));
  json before = tc_root(a_, a0_);
  std::string out = lab_->tmpdir() + "/fct.json";
  Process cli = lab_->spawn(b_,
                            {tg(), "incast", "--to", "10.203.0.1", "--conns", "1", "--bytes", std::to_string(kBytes),
                             "--rounds", "1", "--warmup", "0", "--cc", "cubic", "--link-mbps", "50", "--json", out},
                            "cli");
  int st = cli.wait(std::chrono::seconds(30));
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << cli.log();
  json after = tc_root(a_, a0_);
  json r = read_json(out);
  uint64_t sent = after["bytes"].get<uint64_t>() - before["bytes"].get<uint64_t>();
  uint64_t drops = after["drops"].get<uint64_t>() - before["drops"].get<uint64_t>();
  double fct_s = r["per_round"][0]["duration_us"].get<double>() / 1e6;
  uint64_t segs = (kBytes + 1447) / 1448;
  // tc counted every payload byte, plus at most a full header per segment
  // and a few KB of control segments (SYN-ACK, trailer, request ACKs).
  EXPECT_GE(sent, kBytes);
  EXPECT_LE(sent, segs * 1514 + 4000);
  EXPECT_EQ(drops, 0u);
  EXPECT_EQ(r["summary"]["retrans_segs"].get<uint64_t>(), 0u);
  // The TBF cannot have sent faster than its rate (beyond one burst) ...
  double t_tbf = double(sent) * 8 / kRate;
  EXPECT_GE(fct_s, (double(sent - kBurst)) * 8 / kRate) << "sent " << sent;
  // ... and a lossless TCP flow keeps it busy: the FCT is the TBF's time.
  EXPECT_LE(fct_s, t_tbf * 1.15 + 0.02) << "sent " << sent << " B, tbf time " << t_tbf;
  // Goodput the tool reports is payload over that same FCT.
  EXPECT_NEAR(r["summary"]["goodput_mbps"].get<double>(), double(kBytes) * 8 / fct_s / 1e6, 0.5);
}

// --window-clamp is a per-flow sending window: the receiving socket
// advertises at most that much, so the sender's queue in front of a slow
// link holds about one clamp, where the same transfer without it fills the
// queue with what the autotuned receive window lets through. The maximum
// backlog is sluice-qmon's exact one (BPF, every enqueue).
TEST_F(LabInstruments, TgWindowClampCapsTheDataInFlight) {
  constexpr uint64_t kClamp = 12000;
  ASSERT_EQ(lab_->nsh(a_, "ethtool -K " + a0_ + " tso off gso off"), 0);
  ASSERT_EQ(lab_->nsh(a_, "tc qdisc replace dev " + a0_ + " root tbf rate 10mbit burst 3028 limit 2000000"), 0);
  Process srv = lab_->spawn(a_, {tg(), "server", "--cc", "cubic"}, "srv");
  ASSERT_TRUE(eventually([&] { return srv.log().find("listening") != std::string::npos; }, std::chrono::seconds(5)));
  auto max_backlog = [&](uint64_t clamp) -> uint64_t {
    const std::string tag = "c" + std::to_string(clamp);
    std::string qout = lab_->tmpdir() + "/" + tag + "-qmon.json", out = lab_->tmpdir() + "/" + tag + ".json";
    Process q =
        lab_->spawn("", {qmon(), "--method", "bpf", "--port", "edge=" + a_ + ":" + a0_, "--json", qout}, tag + "-qmon");
    EXPECT_TRUE(eventually([&] { return q.log().find("monitoring") != std::string::npos; }, std::chrono::seconds(10)))
        << q.log();
    Process cli = lab_->spawn(
        b_,
        {tg(),          "incast", "--to",     "10.203.0.1", "--conns", "1",     "--bytes",        "1500000",
         "--rounds",    "1",      "--warmup", "0",          "--cc",    "cubic", "--window-clamp", std::to_string(clamp),
         "--link-mbps", "10",     "--json",   out},
        tag + "-cli");
    int st = cli.wait(std::chrono::seconds(60));
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << cli.log();
    q.stop(SIGINT);
    json r = read_json(qout);
    EXPECT_EQ(read_json(out)["window_clamp"], clamp);
    return r["ports"].empty() ? 0 : r["ports"][0]["max_backlog_bytes"].get<uint64_t>();
  };
  const uint64_t free_run = max_backlog(0), clamped = max_backlog(kClamp);
  std::printf("max backlog: %lu B without a clamp, %lu B with %lu B\n", (unsigned long)free_run, (unsigned long)clamped,
              (unsigned long)kClamp);
  EXPECT_GT(free_run, 4 * kClamp) << "without a clamp the queue should grow well past it";
  // The kernel rounds the advertised window up to whole segments and its
  // scale: measured ~1.15 clamps; 2 leaves room, and is still a cap.
  EXPECT_LE(clamped, 2 * kClamp);
  EXPECT_GT(clamped, 0u);
  // A clamp that is not a number is refused before anything is sent (0 means none).
  EXPECT_NE(lab_->nsh(b_, tg() + " incast --to 10.203.0.1 --window-clamp lots --json /dev/null"), 0);
}

// The same kind of transfer into a 20 KB TBF buffer on a bridge between
// sender and receiver (a drop in the network, not on the sender's own
// interface, which TCP would see as a local failure and resend as new data):
// the sender's retransmissions the tool reports cover every drop.
TEST_F(LabInstruments, TgRetransmissionsCoverShaperDrops) {
  std::string s = lab_->add_ns("s");
  ASSERT_EQ(lab_->nsh(s, "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1"), 0);
  std::string c = lab_->add_ns("c");
  ASSERT_EQ(lab_->nsh(c, "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1"), 0);
  lab_->add_veth(a_, "a1", "10.204.0.1/24", s, "s0", "");
  lab_->add_veth(s, "s1", "", c, "c0", "10.204.0.2/24");
  std::string br = lab_->name("br"), s1 = lab_->name("s1");
  ASSERT_EQ(lab_->nsh(s, "ip link add " + br + " type bridge && ip link set " + br + " up && ip link set " +
                             lab_->name("s0") + " master " + br + " && ip link set " + s1 + " master " + br),
            0);
  ASSERT_EQ(lab_->nsh(s, "tc qdisc replace dev " + s1 + " root tbf rate 50mbit burst 3028 limit 20000"), 0);
  Process srv = lab_->spawn(a_, {tg(), "server", "--cc", "cubic"}, "srv");
  ASSERT_TRUE(eventually([&] { return srv.log().find("listening") != std::string::npos; }, std::chrono::seconds(5)));
  json before = tc_root(s, s1);
  std::string out = lab_->tmpdir() + "/loss.json";
  Process cli = lab_->spawn(c,
                            {tg(), "incast", "--to", "10.204.0.1", "--conns", "4", "--bytes", "500000", "--rounds", "1",
                             "--warmup", "0", "--cc", "cubic", "--json", out},
                            "cli");
  int st = cli.wait(std::chrono::seconds(60));
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << cli.log();
  json after = tc_root(s, s1);
  json r = read_json(out);
  uint64_t drops = after["drops"].get<uint64_t>() - before["drops"].get<uint64_t>();
  uint64_t retrans = r["summary"]["retrans_segs"].get<uint64_t>();
  EXPECT_GT(drops, 0u) << "4 cubic flows into a 20 KB buffer should overflow it";
  EXPECT_GE(retrans, drops) << "every dropped data segment is retransmitted";
}

// A queue that only grows: HTB at 8 kbit/s sends one or two datagrams, the
// rest wait in a 30000-byte bfifo (and the excess is dropped). Its maximum
// backlog is then exactly the backlog tc reports, and sluice-qmon's tc
// counters are tc's.
class QmonTest : public LabInstruments, public ::testing::WithParamInterface<std::string> {};

TEST_P(QmonTest, MaxBacklogEqualsTcBacklog) {
  ASSERT_EQ(lab_->nsh(a_, "tc qdisc replace dev " + a0_ +
                              " root handle 1: htb default 10 && "
                              "tc class add dev " +
                              a0_ +
                              " parent 1: classid 1:10 htb rate 8kbit ceil 8kbit "
                              "burst 1600 cburst 1600 && tc qdisc add dev " +
                              a0_ + " parent 1:10 handle 10: bfifo limit 30000"),
            0);
  // Permanent neighbour entries: no ARP request or reply joins the datagrams
  // in the queue.
  std::string mac_b = json::parse(lab_->out("ip -n " + b_ + " -j link show " + b0_))[0]["address"];
  std::string mac_a = json::parse(lab_->out("ip -n " + a_ + " -j link show " + a0_))[0]["address"];
  ASSERT_EQ(lab_->nsh(a_, "ip neigh replace 10.203.0.2 lladdr " + mac_b + " dev " + a0_ + " nud permanent"), 0);
  ASSERT_EQ(lab_->nsh(b_, "ip neigh replace 10.203.0.1 lladdr " + mac_a + " dev " + b0_ + " nud permanent"), 0);
  json before = tc_root(a_, a0_);
  std::string out = lab_->tmpdir() + "/qmon.json";
  std::string series = lab_->tmpdir() + "/qmon.csv";
  Process q = lab_->spawn("",
                          {qmon(), "--method", GetParam(), "--port", "edge=" + a_ + ":" + a0_, "--interval-us", "1000",
                           "--json", out, "--series", series},
                          "qmon");
  ASSERT_TRUE(eventually([&] { return q.log().find("monitoring") != std::string::npos; }, std::chrono::seconds(10)))
      << q.log();
  send_udp(a_, "10.203.0.2", 9, 40, 1000, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  json now = tc_root(a_, a0_);
  q.stop(SIGINT);
  json r = read_json(out);
  ASSERT_EQ(r["ports"].size(), 1u) << r.dump();
  const json& p = r["ports"][0];
  uint64_t backlog = now["backlog"].get<uint64_t>(), qlen = now["qlen"].get<uint64_t>();
  uint64_t drops = now["drops"].get<uint64_t>() - before["drops"].get<uint64_t>();
  uint64_t sent = now["packets"].get<uint64_t>() - before["packets"].get<uint64_t>();
  ASSERT_GT(backlog, 20000u) << "the burst should be waiting in the bfifo";
  EXPECT_LE(backlog, 30000u);
  EXPECT_GT(drops, 0u);
  EXPECT_EQ(sent + qlen + drops, 40u) << "sent " << sent << " qlen " << qlen << " drops " << drops << " before "
                                      << before.dump() << " now " << now.dump();
  EXPECT_EQ(p["max_backlog_bytes"].get<uint64_t>(), backlog);
  EXPECT_EQ(p["max_backlog_pkts"].get<uint64_t>(), qlen);
  EXPECT_EQ(p["tc"]["drops"].get<uint64_t>(), drops);
  EXPECT_EQ(p["tc"]["packets"].get<uint64_t>(), sent);
  EXPECT_EQ(p["tc"]["backlog"].get<uint64_t>(), backlog);
  EXPECT_EQ(r["classes"]["edge"]["max_backlog_bytes"].get<uint64_t>(), backlog);
  // The time series saw the queue standing at that level.
  std::ifstream f(series);
  std::string line;
  bool seen = false;
  while (std::getline(f, line))
    if (line.find("," + std::to_string(backlog) + ",") != std::string::npos) seen = true;
  EXPECT_TRUE(seen) << "no sample with backlog " << backlog << " in " << series;
  if (GetParam() == "bpf") {
    // Exact time-weighted mean: zero before the burst, `backlog` after it.
    EXPECT_GT(p["mean_backlog_bytes"].get<double>(), 0.0);
    EXPECT_LE(p["mean_backlog_bytes"].get<double>(), double(backlog));
  }
}

INSTANTIATE_TEST_SUITE_P(Methods, QmonTest, ::testing::Values("bpf", "netlink"));

// Fault injection at b's ingress on 500 UDP datagrams: what is dropped or
// corrupted is what the program counts (a corrupted datagram is discarded by
// b's IP layer as a checksum error), the drop fraction is right, and the same
// seed picks the same datagrams again while another seed does not.
TEST_F(LabInstruments, FaultInjectionIsCountedAndSeeded) {
  int runs = 0;
  auto run = [&](uint64_t seed, std::set<int>* missing, json* counters, uint64_t* csum_errors) {
    // Every run its own log and result: with one log name, the wait for
    // "attached" below could read the previous run's log before the new
    // process truncated it, and send before the new program was attached
    // (the first datagrams then were no candidates).
    const std::string tag = "fault-" + std::to_string(++runs);
    std::string out = lab_->tmpdir() + "/" + tag + ".json";
    auto ip_errs = [&] {
      std::string s = lab_->out("ip netns exec " + b_ + " nstat -az IpExtInCsumErrors | awk '/InCsum/ {print $2}'");
      return std::stoull(s.empty() ? "0" : s);
    };
    uint64_t e0 = ip_errs();
    Process f = lab_->spawn(b_,
                            {fault(), "--dev", b0_, "--hook", "ingress", "--drop", "0.2", "--corrupt", "0.1", "--proto",
                             "udp", "--seed", std::to_string(seed), "--json", out},
                            tag);
    ASSERT_TRUE(eventually([&] { return f.log().find("attached") != std::string::npos; }, std::chrono::seconds(10)))
        << f.log();
    std::set<int> got;
    std::thread rx([&] {
      run_in_netns(b_, [&] {
        int fd = socket(AF_INET, SOCK_DGRAM, 0);
        sockaddr_in me{};
        me.sin_family = AF_INET;
        me.sin_port = htons(9999);
        inet_pton(AF_INET, "10.203.0.2", &me.sin_addr);
        ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&me), sizeof(me)), 0);
        timeval tv{1, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        char buf[2048];
        for (;;) {
          ssize_t n = recv(fd, buf, sizeof(buf), 0);
          if (n < 4) break;
          int i;
          std::memcpy(&i, buf, sizeof(i));
          got.insert(i);
        }
        close(fd);
      });
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    send_udp(a_, "10.203.0.2", 9999, 500, 200, 200);
    rx.join();
    f.stop(SIGTERM);
    json j = read_json(out);
    *counters = j["counters"];
    EXPECT_EQ(j["candidates"].get<uint64_t>(), 500u);
    for (int i = 0; i < 500; ++i)
      if (!got.count(i)) missing->insert(i);
    *csum_errors = ip_errs() - e0;
  };
  std::set<int> m1, m2, m3;
  json c1, c2, c3;
  uint64_t e1 = 0, e2 = 0, e3 = 0;
  run(7, &m1, &c1, &e1);
  run(7, &m2, &c2, &e2);
  run(8, &m3, &c3, &e3);
  uint64_t dropped = c1["DROP_FAULT"]["packets"].get<uint64_t>();
  uint64_t corrupted = c1["PASS_FAULT_CORRUPTED"]["packets"].get<uint64_t>();
  EXPECT_EQ(m1.size(), dropped + corrupted);
  EXPECT_EQ(e1, corrupted) << "corrupted datagrams are dropped by IP as checksum errors";
  // 20% of 500: 100 +- 5 sigma (sigma ~ 9).
  EXPECT_GT(dropped, 55u);
  EXPECT_LT(dropped, 145u);
  EXPECT_EQ(m1, m2) << "same seed, same packet order: same victims";
  for (auto k : {"DROP_FAULT", "PASS_FAULT_CORRUPTED", "PASS_FAULT_SPARED"}) EXPECT_EQ(c1[k], c2[k]) << k;
  EXPECT_NE(m1, m3) << "another seed picks other victims";
}

// --jitter-us spreads a round's requests: with 8 connections and 50 ms of
// jitter the round spans at least 20 ms (the latest of 8 uniform delays is
// below 20 ms with probability 0.4^8 < 0.1%), while every flow, timed from
// its own request, takes far less on an idle veth; the same rounds without
// jitter are short.
TEST_F(LabInstruments, TgJitterSpreadsTheRequestsOfARound) {
  Process srv = lab_->spawn(a_, {tg(), "server", "--cc", "cubic"}, "srv");
  ASSERT_TRUE(eventually([&] { return srv.log().find("listening") != std::string::npos; }, std::chrono::seconds(5)));
  auto round = [&](const std::string& name, const std::vector<std::string>& extra) {
    std::string out = lab_->tmpdir() + "/" + name + ".json";
    std::vector<std::string> argv = {tg(),         "incast", "--to",     "10.203.0.1", "--conns",  "8",
                                     "--bytes",    "1000",   "--rounds", "3",          "--warmup", "1",
                                     "--per-flow", "--cc",   "cubic",    "--json",     out};
    argv.insert(argv.end(), extra.begin(), extra.end());
    Process cli = lab_->spawn(b_, argv, name);
    int st = cli.wait(std::chrono::seconds(30));
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << cli.log();
    return read_json(out);
  };
  json plain = round("plain", {});
  json jit = round("jitter", {"--jitter-us", "50000", "--seed", "3"});
  ASSERT_EQ(jit["per_round"].size(), 3u);
  for (auto& r : jit["per_round"]) {
    EXPECT_GE(r["duration_us"].get<double>(), 20000) << r.dump();
    for (auto& f : r["flows"]) EXPECT_LT(f["fct_us"].get<double>(), 20000) << f.dump();
  }
  for (auto& r : plain["per_round"]) EXPECT_LT(r["duration_us"].get<double>(), 20000) << r.dump();
}

// A wire of 3 ms each way between a and a third namespace c: every request-
// response round of an open connection takes at least the 6 ms round trip
// (and, on an idle machine, not much more), a 1 MB transfer arrives
// byte-exact across it with its offloaded checksums and GSO frames, and the
// wire's counters add up to what crossed it. The same rounds over a direct
// veth take a fraction of the delay, so the delay is the wire's.
TEST_F(LabInstruments, WireAddsItsDelayToEveryRoundTrip) {
  constexpr double kDelayUs = 3000;
  std::string w = lab_->add_ns("w"), c = lab_->add_ns("c");
  for (const auto& ns : {w, c})
    ASSERT_EQ(lab_->nsh(ns, "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1"), 0);
  lab_->add_veth(a_, "a1", "10.205.0.1/24", w, "wa", "");
  lab_->add_veth(w, "wb", "", c, "c0", "10.205.0.2/24");
  std::string wout = lab_->tmpdir() + "/wire.json";
  Process wp = lab_->spawn(w,
                           {wire(), "--a", lab_->name("wa"), "--b", lab_->name("wb"), "--delay-us",
                            std::to_string(int(kDelayUs)), "--json", wout},
                           "wire");
  ASSERT_TRUE(eventually([&] { return wp.log().find("<->") != std::string::npos; }, std::chrono::seconds(5)))
      << wp.log();
  Process srv = lab_->spawn(a_, {tg(), "server", "--cc", "cubic"}, "srv");
  ASSERT_TRUE(eventually([&] { return srv.log().find("listening") != std::string::npos; }, std::chrono::seconds(5)));
  auto rounds = [&](const std::string& ns, const std::string& to, const std::string& name, uint64_t bytes, int n) {
    std::string out = lab_->tmpdir() + "/" + name + ".json";
    Process cli = lab_->spawn(ns,
                              {tg(), "incast", "--to", to, "--conns", "1", "--bytes", std::to_string(bytes), "--rounds",
                               std::to_string(n), "--warmup", "1", "--gap-ms", "5", "--cc", "cubic", "--json", out},
                              name);
    int st = cli.wait(std::chrono::seconds(60));
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << cli.log();
    return read_json(out);
  };
  json direct = rounds(b_, "10.203.0.1", "direct", 100, 20);
  json wired = rounds(c, "10.205.0.1", "wired", 100, 20);
  json bulk = rounds(c, "10.205.0.1", "bulk", 1000000, 2);
  std::vector<double> d, x;
  for (auto& r : direct["per_round"]) d.push_back(r["duration_us"].get<double>());
  for (auto& r : wired["per_round"]) x.push_back(r["duration_us"].get<double>());
  ASSERT_EQ(x.size(), 20u);
  ASSERT_EQ(d.size(), 20u);
  std::sort(d.begin(), d.end());
  std::sort(x.begin(), x.end());
  EXPECT_GE(x.front(), 2 * kDelayUs) << "no round can beat the wire's round trip";
  EXPECT_LT(x[x.size() / 2], 2 * kDelayUs + 3000) << "the median round is the round trip plus little";
  EXPECT_LT(d[d.size() / 2], kDelayUs) << "without the wire the same round is far shorter";
  // sluice-tg exits 0 only when every response arrived whole.
  EXPECT_EQ(bulk["per_round"].size(), 2u);
  EXPECT_EQ(bulk["summary"]["retrans_segs"].get<uint64_t>(), 0u);
  wp.stop(SIGTERM);
  json j = read_json(wout);
  for (auto dir : {"a_to_b", "b_to_a"}) {
    EXPECT_GT(j[dir]["frames"].get<uint64_t>(), 40u) << dir;
    EXPECT_EQ(j[dir]["send_errors"].get<uint64_t>(), 0u) << dir;
    EXPECT_EQ(j[dir]["oversize_dropped"].get<uint64_t>(), 0u) << dir;
    EXPECT_EQ(j[dir]["socket_drops"].get<uint64_t>(), 0u) << dir;
  }
  // The responses (2 MB and the small ones) crossed from a to c.
  EXPECT_GE(j["a_to_b"]["bytes"].get<uint64_t>(), 2000000u);
}

// Sends `n` copies of `frame` out of `ifname` in `ns` by a packet socket;
// with `vnet` (a struct virtio_net_hdr), as one offloaded (GSO) frame.
void send_frames(const std::string& ns, const std::string& ifname, const Bytes& frame, int n,
                 const std::vector<uint8_t>& vnet = {}) {
  run_in_netns(ns, [&] {
    int fd = socket(AF_PACKET, SOCK_RAW, 0);
    ASSERT_GE(fd, 0) << strerror(errno);
    int one = 1;
    if (!vnet.empty()) {
      ASSERT_EQ(setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof(one)), 0);
    }
    Bytes b = vnet;
    b.insert(b.end(), frame.begin(), frame.end());
    sockaddr_ll to{};
    to.sll_family = AF_PACKET;
    to.sll_ifindex = int(if_nametoindex(ifname.c_str()));
    to.sll_halen = 6;
    for (int i = 0; i < n; ++i)
      EXPECT_EQ(sendto(fd, b.data(), b.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)), ssize_t(b.size()))
          << strerror(errno);
    close(fd);
  });
}

// Tags cross the wire as they entered. From a, across a wire of 1 ms each
// way, to c, by a packet socket: full-size 802.1Q frames (VID 0xF05, the
// upstreamQ range, PCP 3: 1518 bytes on the wire), 802.1ad frames (TPID
// 0x88a8, VID 7, PCP 1), untagged frames, and one GSO UDP super-frame of
// 4 datagrams with a priority tag (VID 0, PCP 5) and its checksum left to
// offload, to a UDP socket at c. At c's interface every frame arrives with
// the TPID, PCP and VID it was sent with, the untagged ones untagged; the
// 4 datagrams arrive whole (the offload offsets moved with the re-inserted
// tag); no untagged copy of a tagged frame crosses.
TEST_F(LabInstruments, WireCarriesVlanTagsAsTheyEntered) {
  std::string w = lab_->add_ns("w"), c = lab_->add_ns("c");
  for (const auto& ns : {w, c})
    ASSERT_EQ(lab_->nsh(ns, "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1"), 0);
  lab_->add_veth(a_, "a1", "10.206.0.1/24", w, "wa", "");
  lab_->add_veth(w, "wb", "", c, "c0", "10.206.0.2/24");
  const std::string a1 = lab_->name("a1"), c0 = lab_->name("c0");
  std::string wout = lab_->tmpdir() + "/wire.json";
  Process wp = lab_->spawn(
      w, {wire(), "--a", lab_->name("wa"), "--b", lab_->name("wb"), "--delay-us", "1000", "--json", wout}, "wire");
  ASSERT_TRUE(eventually([&] { return wp.log().find("<->") != std::string::npos; }, std::chrono::seconds(5)))
      << wp.log();
  TagWatch at_c;
  at_c.start(c, c0);
  if (HasFatalFailure()) return;
  // c's MAC, for the frame its stack must take.
  json link = json::parse(lab_->out("ip -n " + c + " -j link show " + c0));
  std::string mac = link.at(0).at("address").get<std::string>();
  uint8_t c_mac[6];
  ASSERT_EQ(std::sscanf(mac.c_str(), "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &c_mac[0], &c_mac[1], &c_mac[2], &c_mac[3],
                        &c_mac[4], &c_mac[5]),
            6);

  constexpr int kEach = 20;
  constexpr uint16_t kVid = 0xF05, kVidAd = 7;
  auto spec = [](const char* src, int vlan, size_t payload) {
    PacketSpec ps;
    ps.src = src;
    ps.dst = "10.209.9.9";
    ps.proto = 17;
    ps.vlan = vlan;
    ps.payload = payload;
    return ps;
  };
  Bytes q = build(spec("10.209.1.1", kVid, 1500 - 28));
  ASSERT_EQ(q.size(), 1518u);
  q[14] = uint8_t(q[14] | 3 << 5);
  Bytes ad = build(spec("10.209.2.1", kVidAd, 100));
  ad[12] = 0x88;
  ad[13] = 0xa8;
  ad[14] = uint8_t(ad[14] | 1 << 5);
  Bytes plain = build(spec("10.209.3.1", -1, 100));
  send_frames(a_, a1, q, kEach);
  send_frames(a_, a1, ad, kEach);
  send_frames(a_, a1, plain, kEach);

  // The GSO frame: 4 datagrams of 1000 bytes, each numbered, to c's socket.
  constexpr uint16_t kPort = 7411;
  constexpr size_t kSeg = 1000, kSegs = 4;
  int us = -1;
  run_in_netns(c, [&] { us = socket(AF_INET, SOCK_DGRAM, 0); });
  ASSERT_GE(us, 0);
  sockaddr_in me{};
  me.sin_family = AF_INET;
  me.sin_port = htons(kPort);
  ASSERT_EQ(bind(us, reinterpret_cast<sockaddr*>(&me), sizeof(me)), 0) << strerror(errno);
  timeval tv{5, 0};
  setsockopt(us, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  PacketSpec gs = spec("10.206.0.1", 0, kSeg * kSegs);
  gs.dst = "10.206.0.2";
  gs.dport = kPort;
  Bytes g = build(gs);
  std::memcpy(g.data(), c_mac, 6);
  g[14] = uint8_t(g[14] | 5 << 5);
  constexpr size_t kL4 = 18 + 20;
  for (size_t i = 0; i < kSeg * kSegs; ++i) g[kL4 + 8 + i] = uint8_t(i / kSeg + 1);
  // struct virtio_net_hdr: NEEDS_CSUM, GSO_UDP_L4, hdr_len, gso_size,
  // csum_start (the UDP header, behind the tag), csum_offset.
  std::vector<uint8_t> vnet = {1, 5, uint8_t(kL4 + 8), 0, uint8_t(kSeg & 0xff), uint8_t(kSeg >> 8), uint8_t(kL4), 0,
                               6, 0};
  send_frames(a_, a1, g, 1, vnet);
  std::vector<int> got;
  char buf[2000];
  for (size_t i = 0; i < kSegs; ++i) {
    ssize_t n = recv(us, buf, sizeof(buf), 0);
    if (n <= 0) break;
    bool same = true;
    for (ssize_t k = 0; k < n; ++k) same = same && buf[k] == buf[0];
    EXPECT_TRUE(same && n == ssize_t(kSeg)) << "datagram of " << n << " bytes, not one segment's";
    got.push_back(buf[0]);
  }
  close(us);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<int>{1, 2, 3, 4})) << "the GSO frame's datagrams at c";

  auto from = [](const SeenFrame& f, const char* src) { return f.ipv4_src == inet_addr(src); };
  EXPECT_TRUE(eventually(
      [&] {
        int n = 0;
        for (const auto& f : at_c.seen()) n += from(f, "10.209.3.1");
        return n >= kEach;
      },
      std::chrono::seconds(5)));
  wp.stop(SIGTERM);

  uint64_t nq = 0, nad = 0, nplain = 0, ngso = 0;
  for (const auto& f : at_c.seen()) {
    if (from(f, "10.209.1.1")) {
      ++nq;
      EXPECT_TRUE(f.tagged && f.tpid == ETH_P_8021Q && f.tci == (3 << 13 | kVid) && f.len == 1514)
          << "802.1Q frame: tagged=" << f.tagged << " tpid " << f.tpid << " tci " << f.tci << " len " << f.len;
    } else if (from(f, "10.209.2.1")) {
      ++nad;
      EXPECT_TRUE(f.tagged && f.tpid == ETH_P_8021AD && f.tci == (1 << 13 | kVidAd))
          << "802.1ad frame: tagged=" << f.tagged << " tpid " << f.tpid << " tci " << f.tci;
    } else if (from(f, "10.209.3.1")) {
      ++nplain;
      EXPECT_FALSE(f.tagged) << "an untagged frame arrived with tpid " << f.tpid << " tci " << f.tci;
    } else if (from(f, "10.206.0.1")) {
      ++ngso;
      EXPECT_TRUE(f.tagged && f.tpid == ETH_P_8021Q && f.tci == 5 << 13)
          << "priority-tagged frame: tagged=" << f.tagged << " tpid " << f.tpid << " tci " << f.tci;
    }
  }
  std::printf("at c: %lu 802.1Q, %lu 802.1ad, %lu untagged, %lu priority-tagged GSO frames\n", (unsigned long)nq,
              (unsigned long)nad, (unsigned long)nplain, (unsigned long)ngso);
  EXPECT_EQ(nq, uint64_t(kEach));
  EXPECT_EQ(nad, uint64_t(kEach));
  EXPECT_EQ(nplain, uint64_t(kEach));
  EXPECT_EQ(ngso, 1u);

  json j = read_json(wout);
  const json& ab = j["a_to_b"];
  EXPECT_EQ(ab["tagged"].get<uint64_t>(), uint64_t(2 * kEach + 1));
  // Each tagged frame also reached a per-protocol socket, untagged: that
  // copy was recognised and dropped.
  EXPECT_EQ(ab["tagged_copies_dropped"].get<uint64_t>(), uint64_t(2 * kEach + 1));
  EXPECT_EQ(ab["tagged_copies_missing"].get<uint64_t>(), 0u);
  for (auto k : {"send_errors", "oversize_dropped", "socket_drops"}) EXPECT_EQ(ab[k].get<uint64_t>(), 0u) << k;
}

// Bad input: the wire refuses what it cannot be, with the reason.
TEST_F(LabInstruments, WireRefusesBadArguments) {
  for (auto& args : std::vector<std::string>{"--a lo --b lo --delay-us 10", "--a lo --b nosuchif0 --delay-us 10",
                                             "--a lo --b " + b0_ + " --delay-us -5"}) {
    int st = 0;
    std::string out = lab_->out("ip netns exec " + a_ + " " + wire() + " " + args + " 2>&1", &st);
    EXPECT_NE(st, 0) << args << ": " << out;
    EXPECT_NE(out.find("sluice-wire"), std::string::npos) << args << ": " << out;
  }
}

// Delay by marking: delayed packets land in the HTB class the program names.
TEST_F(LabInstruments, FaultDelayMarksIntoHtbClass) {
  ASSERT_EQ(lab_->nsh(a_, "tc qdisc replace dev " + a0_ +
                              " root handle 1: htb default 10 && "
                              "tc class add dev " +
                              a0_ +
                              " parent 1: classid 1:10 htb rate 1gbit && "
                              "tc class add dev " +
                              a0_ + " parent 1: classid 1:20 htb rate 10mbit"),
            0);
  std::string out = lab_->tmpdir() + "/delay.json";
  Process f = lab_->spawn(a_,
                          {fault(), "--dev", a0_, "--hook", "egress", "--delay", "0.5", "--delay-class", "1:20",
                           "--proto", "udp", "--seed", "3", "--json", out},
                          "fault");
  ASSERT_TRUE(eventually([&] { return f.log().find("attached") != std::string::npos; }, std::chrono::seconds(10)))
      << f.log();
  send_udp(a_, "10.203.0.2", 9, 200, 100, 100);
  f.stop(SIGTERM);
  json j = read_json(out);
  uint64_t delayed = j["counters"]["PASS_FAULT_DELAYED"]["packets"].get<uint64_t>();
  EXPECT_GT(delayed, 60u);
  EXPECT_LT(delayed, 140u);
  // iproute2 6.1 has no JSON for classes: "class htb 1:20 ...\n Sent B bytes P pkt".
  std::string cls = lab_->out("tc -n " + a_ + " -s class show dev " + a0_);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(cls, m, std::regex("class htb 1:20 [^\\n]*\\n Sent \\d+ bytes (\\d+) pkt"))) << cls;
  EXPECT_EQ(std::stoull(m[1]), delayed);
}

// ---------------------------------------------------------------------------
// bench/run as a user runs it.

std::string bench_run() { return std::string(SLUICE_SOURCE_DIR) + "/bench/run"; }

std::vector<std::string> lab_namespaces(const std::string& prefix) {
  std::vector<std::string> out;
  if (DIR* d = opendir("/run/netns")) {
    while (dirent* e = readdir(d))
      if (std::string(e->d_name).rfind(prefix, 0) == 0) out.push_back(e->d_name);
    closedir(d);
  }
  return out;
}

std::string base36(unsigned long v) {
  std::string s;
  do {
    s.insert(s.begin(), "0123456789abcdefghijklmnopqrstuvwxyz"[v % 36]);
    v /= 36;
  } while (v);
  return s;
}

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      pid_t pid = pid_t(std::atoi(e->d_name));
      if (pid <= 0) continue;
      std::ifstream f(std::string("/proc/") + e->d_name + "/stat");
      std::string s;
      std::getline(f, s);
      auto rp = s.rfind(')');
      if (rp == std::string::npos) continue;
      char state;
      int ppid;
      if (std::sscanf(s.c_str() + rp + 2, "%c %d", &state, &ppid) == 2 && ppid == parent) out.push_back(pid);
    }
    closedir(d);
  }
  return out;
}

TEST(BenchRun, IncastWritesJsonRowsAndPlot) {
  ASSERT_EQ(geteuid(), 0u);
  Lab lab("l");  // for its temp dir
  std::string out = lab.tmpdir() + "/incast.json";
  setenv("SLUICE_BUILD_DIR", build_path("").c_str(), 1);
  Process p = lab.spawn("",
                        {bench_run(), "incast", "--senders", "1,4", "--rounds", "3", "--rate", "100", "--mode", "mtu",
                         "--buffer", "32K", "--no-build", "--json", out},
                        "bench");
  int st = p.wait(std::chrono::seconds(120));
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << p.log();
  json r = read_json(out);
  EXPECT_EQ(r["experiment"], "incast");
  EXPECT_EQ(r["params"]["buffer"], 32768);
  ASSERT_EQ(r["variants"]["baseline"].size(), 2u);
  int i = 0;
  for (int n : {1, 4}) {
    const json& row = r["variants"]["baseline"][i++];
    for (auto k :
         {"senders", "goodput_mbps", "link_mbps", "rto_rounds", "rounds", "drops", "retrans_segs", "max_queue_bytes"})
      EXPECT_TRUE(row.contains(k)) << k << " missing in " << row.dump();
    EXPECT_EQ(row["senders"], n);
    EXPECT_EQ(row["rounds"], 3);
    EXPECT_GT(row["goodput_mbps"].get<double>(), 0);
    EXPECT_LE(row["goodput_mbps"].get<double>(), 100.0);
    EXPECT_LE(row["max_queue_bytes"].get<uint64_t>(), 32768u);
    EXPECT_GT(row["max_queue_bytes"].get<uint64_t>(), 0u);
  }
  EXPECT_EQ(access((lab.tmpdir() + "/incast.png").c_str(), F_OK), 0) << "no plot";
  EXPECT_NE(p.log().find("senders variant"), std::string::npos) << "no table printed";
}

// The 1g-gso profile's token bucket (64 KB, docs/lab.md "Token bucket")
// is what the bottleneck TBF gets; another --rate gets the lab default.
TEST(BenchRun, ProfileBurstReachesTheBottleneck) {
  ASSERT_EQ(geteuid(), 0u);
  Lab lab("l");
  setenv("SLUICE_BUILD_DIR", build_path("").c_str(), 1);
  struct Case {
    std::vector<std::string> args;
    uint64_t burst;
  };
  for (const Case& c : {Case{{}, 65536}, Case{{"--rate", "100"}, 3028}}) {
    std::string out = lab.tmpdir() + "/burst.json";
    std::vector<std::string> argv = {bench_run(), "incast",     "--senders", "1",      "--rounds", "1", "--repeat",
                                     "1",         "--no-build", "--no-plot", "--keep", "--json",   out};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    Process p = lab.spawn("", argv, "bench");
    int st = p.wait(std::chrono::seconds(120));
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << p.log();
    json r = read_json(out);
    EXPECT_EQ(r["params"]["burst"], c.burst);
    // "sw-down=<ns>:<ifname>": the kept lab's bottleneck port.
    std::string spec = r["topology"]["bottleneck"];
    std::string ns = spec.substr(spec.find('=') + 1, spec.find(':') - spec.find('=') - 1);
    std::string dev = spec.substr(spec.find(':') + 1);
    std::string prefix = ns.substr(0, ns.find('-') + 1);
    std::string tc = lab.out("tc -n " + ns + " -j qdisc show dev " + dev);
    std::system((std::string(SLUICE_SOURCE_DIR) + "/tc-scripts/lab/topo down " + prefix + " >/dev/null 2>&1").c_str());
    EXPECT_TRUE(lab_namespaces(prefix).empty()) << "kept lab not removed";
    json q = json::parse(tc);
    ASSERT_FALSE(q.empty()) << tc;
    EXPECT_EQ(q[0]["kind"], "tbf") << tc;
    // tc reports the bucket after its own time conversion (65536 -> 65500).
    uint64_t burst = q[0]["options"]["burst"].get<uint64_t>();
    EXPECT_NEAR(double(burst), double(c.burst), 0.01 * double(c.burst)) << tc;
  }
}

TEST(BenchRun, CtrlCLeavesNothingBehind) {
  ASSERT_EQ(geteuid(), 0u);
  Lab lab("l");
  setenv("SLUICE_BUILD_DIR", build_path("").c_str(), 1);
  Process p = lab.spawn("",
                        {bench_run(), "incast", "--senders", "4", "--rounds", "100000", "--rate", "100", "--no-build",
                         "--no-plot", "--json", lab.tmpdir() + "/never.json"},
                        "bench");
  const std::string prefix = "sll" + base36(static_cast<unsigned long>(p.pid())) + "-";
  // Wait until the traffic runs: the receiver namespace exists and the
  // runner has started its sluice-tg client there.
  ASSERT_TRUE(
      eventually([&] { return p.log().find("tg-incast") != std::string::npos || children_of(p.pid()).size() >= 6; },
                 std::chrono::seconds(60)))
      << p.log();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_FALSE(lab_namespaces(prefix).empty()) << "the run did not build its lab";
  std::vector<pid_t> kids = children_of(p.pid());
  EXPECT_GE(kids.size(), 5u) << "4 servers and a client should be running";
  ::kill(p.pid(), SIGINT);
  int st = p.wait(std::chrono::seconds(30));
  ASSERT_TRUE(WIFEXITED(st)) << p.log();
  EXPECT_EQ(WEXITSTATUS(st), 130) << p.log();
  EXPECT_TRUE(lab_namespaces(prefix).empty()) << "namespaces left behind";
  for (pid_t k : kids) EXPECT_NE(::kill(k, 0), 0) << "process " << k << " survived";
  EXPECT_NE(access((lab.tmpdir() + "/never.json").c_str(), F_OK), 0);
}

TEST(BenchRun, DeadRunsAreReaped) {
  ASSERT_EQ(geteuid(), 0u);
  // A pid that is certainly dead: a child we started and waited for.
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  // A dead run of tag "l" (its owner marker names its pid), a live one, and
  // a namespace that only looks like tag "l": "sll" + "z<pid36>" is also tag
  // "lz" + "<pid36>", whose owner the name cannot tell; without a marker of
  // its own it is never reaped.
  const std::string dead_run = "sll" + base36(static_cast<unsigned long>(dead));
  const std::string stale = dead_run + "-x";
  const std::string live = "sll" + base36(static_cast<unsigned long>(getpid())) + "-keep";
  const std::string other = "sllz" + base36(static_cast<unsigned long>(dead)) + "-other";
  ASSERT_EQ(std::system(("mkdir -p /run/sluice-lab && echo " + std::to_string(dead) + " > /run/sluice-lab/" + dead_run +
                         " && ip netns add " + stale + " && ip netns add " + live + " && ip netns add " + other)
                            .c_str()),
            0);
  int rc = std::system((std::string(SLUICE_SOURCE_DIR) + "/tc-scripts/lab/topo reap").c_str());
  bool stale_gone = lab_namespaces(stale).empty(), live_kept = !lab_namespaces(live).empty(),
       other_kept = !lab_namespaces(other).empty();
  bool marker_gone = access(("/run/sluice-lab/" + dead_run).c_str(), F_OK) != 0;
  std::system(("ip netns del " + live + " 2>/dev/null; ip netns del " + stale + " 2>/dev/null; ip netns del " + other +
               " 2>/dev/null; rm -f /run/sluice-lab/" + dead_run)
                  .c_str());
  EXPECT_EQ(rc, 0);
  EXPECT_TRUE(stale_gone) << "namespace of a dead run left";
  EXPECT_TRUE(marker_gone) << "owner marker of a reaped run left";
  EXPECT_TRUE(live_kept) << "namespace of a live process removed";
  EXPECT_TRUE(other_kept) << "namespace of another tag (no marker of this tag) removed";
}

}  // namespace

namespace {

// Builds a topology with tc-scripts/lab/topo, runs one sluice-tg transfer
// from `server` to `client` inside it and, when `tc_ports` are named (ns
// suffix:ifname suffix), saves their root qdisc stats. Returns the tg JSON.
json transfer_in_topology(Lab& lab, const std::string& topo_args, const std::string& server,
                          const std::string& server_ip, const std::string& client, int conns,
                          const std::vector<std::pair<std::string, std::string>>& tc_ports, std::vector<json>* tc_out) {
  std::string out = lab.tmpdir() + "/topo-" + server + ".json";
  std::string script = lab.tmpdir() + "/topo-" + server + ".sh";
  {
    std::ofstream f(script);
    f << "set -e\nP=$LAB_PREFIX\n"
      << "ip netns exec ${P}" << server << " " << tg() << " server >/dev/null 2>&1 &\n"
      << "sleep 0.5\n"
      << "ip netns exec ${P}" << client << " " << tg() << " incast --to " << server_ip << " --conns " << conns
      << " --bytes 200000 --rounds 2 --warmup 0 --json " << out << "\n";
    int i = 0;
    for (const auto& [ns, dev] : tc_ports)
      f << "tc -n ${P}" << ns << " -s -j qdisc show dev ${P}" << dev << " > " << out << ".tc" << i++ << "\n";
  }
  int rc = std::system((std::string(SLUICE_SOURCE_DIR) + "/tc-scripts/lab/topo up " + topo_args + " --run 'sh " +
                        script + "' > " + out + ".log 2>&1")
                           .c_str());
  std::ifstream lf(out + ".log");
  std::stringstream log;
  log << lf.rdbuf();
  EXPECT_EQ(rc, 0) << log.str();
  for (size_t k = 0; k < tc_ports.size(); ++k) {
    std::ifstream t(out + ".tc" + std::to_string(k));
    json j;
    t >> j;
    for (auto& q : j)
      if (q.value("root", false)) tc_out->push_back(q);
  }
  return read_json(out);
}

}  // namespace

// Every builder carries TCP end to end: star with a router, dumbbell with
// bridges and with routers, three-switch, and leaf-spine, where ECMP spreads 16
// connections over both spines (the chance that all 16 hash to one spine
// is 2 * 2^-16).
TEST(Topologies, CarryTrafficEndToEnd) {
  ASSERT_EQ(geteuid(), 0u);
  Lab lab("l");
  std::vector<json> none;
  struct Case {
    std::string args, server, ip, client;
  };
  for (const Case& c : std::vector<Case>{
           {"star --senders 2 --switch router --mode mtu --rate 100", "h1", "10.1.0.2", "r1"},
           {"dumbbell --left 2 --right 1 --rate 100", "l2", "10.0.0.2", "r1"},
           {"dumbbell --left 1 --right 2 --switch router --rate 100", "l1", "10.1.1.2", "r2"},
           // BFC §6.1: group 3 (g3h1, behind switch 3) to receiver 2 through
           // switch 2, over a delayed switch link (sluice-wire).
           {"three-switch --groups 1,1,1 --rate 100 --mode mtu --delay-us 200", "g3h1", "10.0.0.3", "r2"},
       }) {
    json r = transfer_in_topology(lab, c.args, c.server, c.ip, c.client, 2, {}, &none);
    EXPECT_GT(r["summary"]["goodput_mbps"].get<double>(), 10.0) << c.args;
    EXPECT_LE(r["summary"]["goodput_mbps"].get<double>(), 100.0) << c.args;
  }
  std::vector<json> uplinks;
  json r = transfer_in_topology(lab, "leaf-spine --tors 2 --spines 2 --hosts-per-tor 2 --rate 200", "t1h1", "10.1.1.2",
                                "t2h2", 16, {{"t1", "t1u1"}, {"t1", "t1u2"}}, &uplinks);
  EXPECT_GT(r["summary"]["goodput_mbps"].get<double>(), 10.0);
  ASSERT_EQ(uplinks.size(), 2u);
  // 16 x 200 KB x 2 rounds = 6.4 MB leave rack 1 over the two spines.
  uint64_t u1 = uplinks[0]["bytes"].get<uint64_t>(), u2 = uplinks[1]["bytes"].get<uint64_t>();
  EXPECT_GE(u1 + u2, 6400000u);
  EXPECT_GT(u1, 200000u) << "spine 1 carried nothing: no ECMP";
  EXPECT_GT(u2, 200000u) << "spine 2 carried nothing: no ECMP";
}

// A run killed with SIGKILL cannot clean up: its processes end with it
// (parent-death signal) and the next run removes its namespaces.
TEST(BenchRun, KilledRunIsCleanedByTheNext) {
  ASSERT_EQ(geteuid(), 0u);
  Lab lab("l");
  setenv("SLUICE_BUILD_DIR", build_path("").c_str(), 1);
  Process p = lab.spawn("",
                        {bench_run(), "incast", "--senders", "4", "--rounds", "100000", "--rate", "100", "--no-build",
                         "--no-plot", "--json", lab.tmpdir() + "/never.json"},
                        "bench");
  const std::string prefix = "sll" + base36(static_cast<unsigned long>(p.pid())) + "-";
  ASSERT_TRUE(eventually([&] { return children_of(p.pid()).size() >= 6; }, std::chrono::seconds(60))) << p.log();
  std::vector<pid_t> kids = children_of(p.pid());
  p.kill9();
  // Its children (servers, client, queue monitor) follow it.
  EXPECT_TRUE(eventually(
      [&] {
        for (pid_t k : kids)
          if (::kill(k, 0) == 0) return false;
        return true;
      },
      std::chrono::seconds(10)));
  EXPECT_FALSE(lab_namespaces(prefix).empty()) << "SIGKILL leaves the namespaces (nothing can run)";
  // The next run (here: the reaper every run calls first) removes them.
  ASSERT_EQ(std::system((std::string(SLUICE_SOURCE_DIR) + "/tc-scripts/lab/topo reap").c_str()), 0);
  EXPECT_TRUE(lab_namespaces(prefix).empty()) << "namespaces of the killed run are still there";
}
