#include "client.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "cdf.h"
#include "core/error.h"
#include "core/json_file.h"
#include "proto.h"

namespace sluice::tg {

using json = nlohmann::json;

namespace {

// Payload bytes per wire byte at the bottleneck for MTU-sized TCP segments:
// 1448 B of payload in a 1514 B frame (Ethernet 14 + IPv4 20 + TCP with
// timestamps 32). TBF/HTB account skb->len, i.e. these 1514 B.
constexpr double kPayloadPerWire = 1448.0 / 1514.0;

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  // Nearest-rank on the sorted sample.
  size_t idx = size_t(std::ceil(q / 100.0 * double(v.size())));
  if (idx == 0) idx = 1;
  return v[std::min(idx, v.size()) - 1];
}

struct Conn {
  enum State { Connecting, Idle, Data, AwaitTrailer, Stream, Dead };
  int fd = -1;
  size_t server = 0;
  State st = Idle;
  uint64_t want = 0, got = 0;
  uint64_t req_id = 0;
  uint64_t t_req = 0, t_done = 0;
  uint8_t tbuf[kTrailerSize];
  size_t tgot = 0;
  Trailer trailer;
  long flow = -1;  // flows mode: index of the flow this conn carries
  bool pending_send = false;
  uint64_t pending_bytes = 0;
  ReqType pending_type = ReqType::Data;
  ~Conn() {
    if (fd >= 0) close(fd);
  }
};

// A small epoll reactor over client connections. Level-triggered: every
// readable connection is drained until EAGAIN.
class Reactor {
 public:
  std::function<void(Conn*)> on_data_done;  // last payload byte arrived
  std::function<void(Conn*)> on_trailer;    // trailer arrived, conn idle again
  std::function<void(Conn*)> on_connected;  // non-blocking connect finished
  std::function<void(int)> on_fd;           // other fds (timers) readable

  Reactor() {
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    if (ep_ < 0) throw SysError("epoll_create1", errno);
    buf_.resize(1 << 20);
  }
  ~Reactor() { close(ep_); }

  Conn* add_connected(int fd, size_t server) {
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->server = server;
    c->st = Conn::Idle;
    set_nonblocking(fd, true);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = c.get();
    if (epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) != 0) throw SysError("epoll_ctl", errno);
    conns_.push_back(std::move(c));
    return conns_.back().get();
  }

  // Starts a non-blocking connect; on_connected fires when it completes.
  Conn* connect_async(const Endpoint& ep, size_t server, const std::string& cc, uint32_t window_clamp) {
    int fd = socket(ep.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) throw SysError("socket", errno);
    try {
      prepare_client(fd, cc, window_clamp);
    } catch (...) {
      close(fd);
      throw;
    }
    int r = connect(fd, reinterpret_cast<const sockaddr*>(&ep.addr), ep.len);
    if (r != 0 && errno != EINPROGRESS) {
      int e = errno;
      close(fd);
      throw SysError("connect to " + ep.str(), e);
    }
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->server = server;
    c->st = Conn::Connecting;
    epoll_event ev{};
    ev.events = EPOLLOUT;
    ev.data.ptr = c.get();
    if (epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) != 0) throw SysError("epoll_ctl", errno);
    conns_.push_back(std::move(c));
    return conns_.back().get();
  }

  void watch_fd(int fd) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;
    ev.data.u64 = (uint64_t(1) << 63) | uint64_t(fd);
    if (epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) != 0) throw SysError("epoll_ctl", errno);
  }

  void request(Conn* c, ReqType type, uint64_t bytes, uint64_t id) {
    if (c->st == Conn::Connecting) {
      c->pending_send = true;
      c->pending_type = type;
      c->pending_bytes = bytes;
      c->req_id = id;
      return;
    }
    uint8_t b[kRequestSize];
    Request r;
    r.type = uint32_t(type);
    r.bytes = bytes;
    r.id = id;
    encode(r, b);
    c->want = bytes;
    c->got = 0;
    c->tgot = 0;
    c->req_id = id;
    c->t_req = now_ns();
    c->st = type == ReqType::Stream ? Conn::Stream : (bytes ? Conn::Data : Conn::AwaitTrailer);
    // A fresh or idle socket has an empty send buffer: 24 bytes never block.
    ssize_t w = ::send(c->fd, b, sizeof(b), MSG_NOSIGNAL);
    if (w != ssize_t(sizeof(b))) throw SysError("send request to server " + std::to_string(c->server), errno);
    if (!bytes && type == ReqType::Data) {
      c->t_done = c->t_req;
      if (on_data_done) on_data_done(c);
    }
  }

  void close_conn(Conn* c) {
    if (c->fd >= 0) {
      epoll_ctl(ep_, EPOLL_CTL_DEL, c->fd, nullptr);
      close(c->fd);
      c->fd = -1;
    }
    c->st = Conn::Dead;
  }

  // Waits up to timeout_ms for events and handles them.
  void poll(int timeout_ms) {
    epoll_event evs[256];
    int n = epoll_wait(ep_, evs, 256, timeout_ms);
    if (n < 0) {
      if (errno == EINTR) return;
      throw SysError("epoll_wait", errno);
    }
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.u64 >> 63) {
        if (on_fd) on_fd(int(evs[i].data.u64 & 0xffffffff));
        continue;
      }
      auto* c = static_cast<Conn*>(evs[i].data.ptr);
      // Closed by an earlier event of this same batch (e.g. a timer that
      // ended the flow): its remaining events are stale.
      if (c->st == Conn::Dead || c->fd < 0) continue;
      if (c->st == Conn::Connecting) {
        finish_connect(c);
      } else {
        pump(c, evs[i].events);
      }
    }
  }

  const std::vector<std::unique_ptr<Conn>>& conns() const { return conns_; }

 private:
  void finish_connect(Conn* c) {
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) throw SysError("connect to server " + std::to_string(c->server), err);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = c;
    epoll_ctl(ep_, EPOLL_CTL_MOD, c->fd, &ev);
    c->st = Conn::Idle;
    if (on_connected) on_connected(c);
    if (c->pending_send) {
      c->pending_send = false;
      request(c, c->pending_type, c->pending_bytes, c->req_id);
    }
  }

  void pump(Conn* c, uint32_t events) {
    for (;;) {
      size_t want;
      uint8_t* dst;
      if (c->st == Conn::Data) {
        want = size_t(std::min<uint64_t>(c->want - c->got, buf_.size()));
        dst = buf_.data();
      } else if (c->st == Conn::AwaitTrailer) {
        want = kTrailerSize - c->tgot;
        dst = c->tbuf + c->tgot;
      } else if (c->st == Conn::Stream) {
        want = buf_.size();
        dst = buf_.data();
      } else {
        // Nothing expected: data here is a protocol error, EOF a closed peer.
        ssize_t r = ::recv(c->fd, buf_.data(), buf_.size(), MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR) || r > 0)
          throw Error("server " + std::to_string(c->server) + " connection: unexpected " + (r > 0 ? "data" : "close"));
        return;
      }
      ssize_t r = ::recv(c->fd, dst, want, MSG_DONTWAIT);
      if (r < 0) {
        if (errno == EAGAIN || errno == EINTR) return;
        throw SysError("recv from server " + std::to_string(c->server), errno);
      }
      if (r == 0) {
        if (c->st == Conn::Stream) {
          close_conn(c);
          return;
        }
        throw Error("server " + std::to_string(c->server) + " closed the connection mid-response");
      }
      if (c->st == Conn::Data) {
        c->got += uint64_t(r);
        if (c->got == c->want) {
          c->t_done = now_ns();
          c->st = Conn::AwaitTrailer;
          if (on_data_done) on_data_done(c);
        }
      } else if (c->st == Conn::AwaitTrailer) {
        c->tgot += size_t(r);
        if (c->tgot == kTrailerSize) {
          if (!decode(c->tbuf, &c->trailer) || c->trailer.id != c->req_id)
            throw Error("server " + std::to_string(c->server) + ": bad trailer");
          c->st = Conn::Idle;
          if (on_trailer) on_trailer(c);
          return;
        }
      } else {
        c->got += uint64_t(r);
      }
      (void)events;
    }
  }

  int ep_;
  std::vector<uint8_t> buf_;
  std::vector<std::unique_ptr<Conn>> conns_;
};

json rto_json(uint32_t v) { return v == kUnknown ? json(nullptr) : json(v); }

void check_deadline(uint64_t deadline, const char* what) {
  if (now_ns() > deadline) throw Error(std::string("timed out ") + what);
}

}  // namespace

int run_incast(const IncastOptions& o) {
  if (o.conns < 1) throw Error("--conns must be >= 1");
  if (o.rounds < 1) throw Error("--rounds must be >= 1");
  if (o.bytes_per_conn < 1) throw Error("--bytes must be >= 1");
  const uint64_t deadline = now_ns() + uint64_t(o.timeout_s * 1e9);
  Reactor rx;
  std::vector<Conn*> conns;
  for (int i = 0; i < o.conns; ++i) {
    size_t s = size_t(i) % o.servers.size();
    conns.push_back(rx.add_connected(connect_tcp(o.servers[s], o.cc, o.window_clamp), s));
  }
  size_t data_left = 0, trailers_left = 0;
  rx.on_data_done = [&](Conn*) { --data_left; };
  rx.on_trailer = [&](Conn*) { --trailers_left; };

  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> jitter(0, o.jitter_us > 0 ? o.jitter_us : 1);
  json rounds = json::array();
  uint64_t total_bytes = 0, total_ns = 0, rto_rounds = 0, retrans = 0, rto_total = 0;
  bool rto_known = true;
  std::vector<double> goodputs, durations;
  uint64_t id = 0;
  for (int r = 0; r < o.warmup + o.rounds; ++r) {
    if (o.gap_ms > 0 && r) usleep(useconds_t(o.gap_ms * 1000));
    if (o.fresh && r) {
      // New connections for every round, set up outside the timed part:
      // every round starts from the same TCP state (initial window, no
      // ssthresh), like a new query.
      for (size_t i = 0; i < conns.size(); ++i) {
        size_t s = conns[i]->server;
        rx.close_conn(conns[i]);
        conns[i] = rx.add_connected(connect_tcp(o.servers[s], o.cc, o.window_clamp), s);
      }
      usleep(5000);  // the servers' threads pick the new sockets up
    }
    data_left = trailers_left = conns.size();
    uint64_t t0 = now_ns();
    if (o.jitter_us > 0) {
      std::vector<std::pair<uint64_t, Conn*>> at;
      for (Conn* c : conns) at.push_back({t0 + uint64_t(jitter(rng) * 1e3), c});
      std::sort(at.begin(), at.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (auto& [t, c] : at) {
        // Serve the earlier responses while waiting for this request's time.
        for (uint64_t n = now_ns(); n < t; n = now_ns()) {
          if (t - n >= 1000000) rx.poll(int((t - n) / 1000000));
          else usleep(useconds_t((t - n) / 1000));
        }
        rx.request(c, ReqType::Data, o.bytes_per_conn, ++id);
      }
    } else {
      for (Conn* c : conns) rx.request(c, ReqType::Data, o.bytes_per_conn, ++id);
    }
    while (trailers_left) {
      rx.poll(5);
      check_deadline(deadline, "waiting for incast responses");
    }
    uint64_t t_end = 0;
    uint32_t r_retrans = 0, r_rto = 0, rto_flows = 0;
    bool r_rto_known = true;
    std::vector<double> fcts;
    json flows = json::array();
    for (Conn* c : conns) {
      t_end = std::max(t_end, c->t_done);
      fcts.push_back(double(c->t_done - c->t_req) / 1e3);
      r_retrans += c->trailer.retrans_segs;
      if (c->trailer.rto == kUnknown) {
        r_rto_known = false;
      } else {
        r_rto += c->trailer.rto;
        rto_flows += c->trailer.rto ? 1 : 0;
      }
      if (o.per_flow)
        flows.push_back({{"server", c->server},
                         {"fct_us", double(c->t_done - c->t_req) / 1e3},
                         {"retrans_segs", c->trailer.retrans_segs},
                         {"rto", rto_json(c->trailer.rto)}});
    }
    if (r < o.warmup) continue;
    uint64_t dur = t_end - t0;
    uint64_t bytes = o.bytes_per_conn * conns.size();
    double gp = double(bytes) * 8 / (double(dur) / 1e3);  // bits per us = Mbit/s
    json jr = {{"round", r - o.warmup},
               {"duration_us", double(dur) / 1e3},
               {"bytes", bytes},
               {"goodput_mbps", gp},
               {"retrans_segs", r_retrans},
               {"rto", r_rto_known ? json(r_rto) : json(nullptr)},
               {"rto_flows", r_rto_known ? json(rto_flows) : json(nullptr)},
               {"fct_us_p50", percentile(fcts, 50)},
               {"fct_us_max", percentile(fcts, 100)}};
    if (o.per_flow) jr["flows"] = flows;
    rounds.push_back(jr);
    total_bytes += bytes;
    total_ns += dur;
    retrans += r_retrans;
    rto_total += r_rto;
    rto_known = rto_known && r_rto_known;
    if (r_rto_known && rto_flows) ++rto_rounds;
    goodputs.push_back(gp);
    durations.push_back(double(dur) / 1e3);
  }
  double goodput = double(total_bytes) * 8 / (double(total_ns) / 1e3);
  json out = {{"mode", "incast"},
              {"conns", o.conns},
              {"servers", o.servers.size()},
              {"bytes_per_conn", o.bytes_per_conn},
              {"cc", o.cc.empty() ? get_congestion(conns[0]->fd) : o.cc},
              {"window_clamp", o.window_clamp},
              {"link_mbps", o.link_mbps},
              {"rounds", o.rounds},
              {"warmup", o.warmup},
              {"summary",
               {{"goodput_mbps", goodput},
                {"goodput_mbps_p50", percentile(goodputs, 50)},
                {"goodput_mbps_min", percentile(goodputs, 0)},
                {"goodput_mbps_max", percentile(goodputs, 100)},
                {"round_us_p50", percentile(durations, 50)},
                {"round_us_max", percentile(durations, 100)},
                {"utilisation", o.link_mbps > 0 ? json(goodput / o.link_mbps) : json(nullptr)},
                {"rto_rounds", rto_known ? json(rto_rounds) : json(nullptr)},
                {"rto", rto_known ? json(rto_total) : json(nullptr)},
                {"retrans_segs", retrans}}},
              {"per_round", rounds}};
  write_json_file(o.json_out, out);
  return 0;
}

// ---------------------------------------------------------------------------

namespace {

struct Flow {
  uint64_t size = 0;
  size_t server = 0;
  double arrival_s = 0;  // planned, from workload start
  uint64_t t_start = 0;  // request sent (or connect started)
  uint64_t t_done = 0;
  bool new_conn = false;
  uint32_t retrans = 0;
  uint32_t rto = kUnknown;
  bool finished = false;
};

// Minimum request -> last byte time of small requests, over one connection
// per server: the base RTT that an ideal FCT adds to the transfer time.
double measure_base_rtt_us(const std::vector<Endpoint>& servers, const std::string& cc) {
  double best = 1e18;
  for (const auto& ep : servers) {
    int fd = connect_tcp(ep, cc);
    for (int i = 0; i < 5; ++i) {
      uint8_t b[kRequestSize];
      Request r;
      r.type = uint32_t(ReqType::Data);
      r.bytes = 1;
      r.id = uint64_t(i);
      encode(r, b);
      uint64_t t0 = now_ns();
      uint8_t one, tb[kTrailerSize];
      if (!write_full(fd, b, sizeof(b)) || !read_full(fd, &one, 1)) {
        close(fd);
        throw Error("base RTT probe to " + ep.str() + " failed");
      }
      best = std::min(best, double(now_ns() - t0) / 1e3);
      if (!read_full(fd, tb, sizeof(tb))) {
        close(fd);
        throw Error("base RTT probe to " + ep.str() + " failed");
      }
    }
    close(fd);
  }
  return best;
}

}  // namespace

int run_flows(const FlowsOptions& o) {
  if (o.link_mbps <= 0) throw Error("--link-mbps is required for flows (arrival rate and ideal FCT)");
  if (!(o.load > 0 && o.load <= 1.5)) throw Error("--load must be in (0, 1.5]");
  if (!o.count && o.duration_s <= 0) throw Error("give --count or --duration");
  Cdf cdf = Cdf::load(o.cdf);
  const double mean_bytes = cdf.mean() * o.scale;
  // Offered load counts payload against the payload capacity of the link.
  const double link_payload_Bps = o.link_mbps * 1e6 / 8 * kPayloadPerWire;
  const double rate = o.load * link_payload_Bps / mean_bytes;  // flows per second

  std::mt19937_64 rng(o.seed);
  std::exponential_distribution<double> gap(rate);
  std::uniform_int_distribution<size_t> pick(0, o.servers.size() - 1);
  std::vector<Flow> flows;
  double t = 0;
  for (;;) {
    t += gap(rng);
    if (o.duration_s > 0 && t > o.duration_s) break;
    if (o.count && flows.size() >= o.count) break;
    Flow f;
    f.arrival_s = t;
    f.size = std::max<uint64_t>(1, uint64_t(std::llround(double(cdf.sample(rng)) * o.scale)));
    f.server = pick(rng);
    flows.push_back(f);
  }
  if (flows.empty()) throw Error("no flow arrives within --duration");

  double base_rtt = o.base_rtt_us >= 0 ? o.base_rtt_us : measure_base_rtt_us(o.servers, o.cc);

  Reactor rx;
  std::vector<std::deque<Conn*>> idle(o.servers.size());
  std::vector<size_t> conns_per_server(o.servers.size(), 0);
  for (size_t s = 0; s < o.servers.size(); ++s)
    for (int i = 0; i < o.pool; ++i) {
      idle[s].push_back(rx.add_connected(connect_tcp(o.servers[s], o.cc, o.window_clamp), s));
      ++conns_per_server[s];
    }
  size_t finished = 0;
  rx.on_data_done = [&](Conn* c) {
    Flow& f = flows[size_t(c->flow)];
    f.t_done = c->t_done;
  };
  rx.on_trailer = [&](Conn* c) {
    Flow& f = flows[size_t(c->flow)];
    f.retrans = c->trailer.retrans_segs;
    f.rto = c->trailer.rto;
    f.finished = true;
    ++finished;
    c->flow = -1;
    idle[c->server].push_back(c);
  };

  int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  if (tfd < 0) throw SysError("timerfd_create", errno);
  rx.watch_fd(tfd);
  const uint64_t t0 = now_ns() + 10'000'000;  // start 10 ms from now
  size_t next = 0;
  auto arm = [&] {
    if (next >= flows.size()) return;
    uint64_t at = t0 + uint64_t(flows[next].arrival_s * 1e9);
    itimerspec its{};
    its.it_value.tv_sec = time_t(at / 1000000000ull);
    its.it_value.tv_nsec = long(at % 1000000000ull);
    timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, nullptr);
  };
  uint64_t late_max = 0;
  auto start_due = [&] {
    uint64_t now = now_ns();
    while (next < flows.size() && t0 + uint64_t(flows[next].arrival_s * 1e9) <= now) {
      Flow& f = flows[next];
      late_max = std::max(late_max, now - (t0 + uint64_t(f.arrival_s * 1e9)));
      Conn* c;
      if (!idle[f.server].empty()) {
        c = idle[f.server].front();
        idle[f.server].pop_front();
      } else {
        c = rx.connect_async(o.servers[f.server], f.server, o.cc, o.window_clamp);
        ++conns_per_server[f.server];
        f.new_conn = true;
      }
      c->flow = long(next);
      f.t_start = now_ns();
      rx.request(c, ReqType::Data, f.size, next + 1);
      ++next;
    }
    arm();
  };
  rx.on_fd = [&](int fd) {
    uint64_t exp;
    if (read(fd, &exp, sizeof(exp)) < 0) {
    }
    start_due();
  };
  arm();
  const uint64_t deadline = now_ns() + uint64_t(o.timeout_s * 1e9);
  while (finished < flows.size()) {
    rx.poll(50);
    check_deadline(deadline, "waiting for flows to finish");
  }
  close(tfd);
  const uint64_t t_last = [&] {
    uint64_t m = 0;
    for (auto& f : flows) m = std::max(m, f.t_done);
    return m;
  }();

  // Per-flow records and per-bucket statistics.
  std::vector<uint64_t> bounds = o.buckets;
  std::sort(bounds.begin(), bounds.end());
  struct Bucket {
    std::vector<double> fct, slow;
  };
  std::vector<Bucket> buckets(bounds.size() + 1);
  Bucket all;
  uint64_t total_bytes = 0, retrans = 0, rto_flows = 0, new_conns = 0;
  bool rto_known = true;
  std::ofstream csv;
  if (!o.records.empty()) {
    csv.open(o.records);
    if (!csv) throw SysError("open " + o.records, errno);
    csv << "id,server,size,start_us,fct_us,ideal_us,slowdown,retrans_segs,rto,new_conn\n";
  }
  for (size_t i = 0; i < flows.size(); ++i) {
    const Flow& f = flows[i];
    double fct = double(f.t_done - f.t_start) / 1e3;
    double ideal = base_rtt + double(f.size) * 8 / (o.link_mbps * kPayloadPerWire);
    double slow = std::max(1.0, fct / ideal);
    size_t b = size_t(std::lower_bound(bounds.begin(), bounds.end(), f.size) - bounds.begin());
    buckets[b].fct.push_back(fct);
    buckets[b].slow.push_back(slow);
    all.fct.push_back(fct);
    all.slow.push_back(slow);
    total_bytes += f.size;
    retrans += f.retrans;
    new_conns += f.new_conn;
    if (f.rto == kUnknown) rto_known = false;
    else rto_flows += f.rto ? 1 : 0;
    if (csv.is_open())
      csv << i << ',' << f.server << ',' << f.size << ',' << double(f.t_start - t0) / 1e3 << ',' << fct << ',' << ideal
          << ',' << slow << ',' << f.retrans << ',' << (f.rto == kUnknown ? std::string("") : std::to_string(f.rto))
          << ',' << int(f.new_conn) << "\n";
  }
  auto stats = [](const Bucket& b) {
    return json{{"count", b.fct.size()},
                {"fct_us_p50", percentile(b.fct, 50)},
                {"fct_us_p99", percentile(b.fct, 99)},
                {"fct_us_mean", b.fct.empty() ? 0.0 : [&] {
                   double s = 0;
                   for (double v : b.fct) s += v;
                   return s / double(b.fct.size());
                 }()},
                {"slowdown_p50", percentile(b.slow, 50)},
                {"slowdown_p99", percentile(b.slow, 99)}};
  };
  json jb = json::array();
  for (size_t i = 0; i < buckets.size(); ++i) {
    json s = stats(buckets[i]);
    s["min_bytes"] = i ? bounds[i - 1] + 1 : 1;
    s["max_bytes"] = i < bounds.size() ? json(bounds[i]) : json(nullptr);
    jb.push_back(s);
  }
  double span_s = double(t_last - t0) / 1e9;
  json out = {{"mode", "flows"},
              {"cdf", o.cdf},
              {"cdf_mean_bytes", mean_bytes},
              {"load", o.load},
              {"link_mbps", o.link_mbps},
              {"seed", o.seed},
              {"window_clamp", o.window_clamp},
              {"flows", flows.size()},
              {"base_rtt_us", base_rtt},
              {"arrival_rate_per_s", rate},
              {"max_start_lateness_us", double(late_max) / 1e3},
              {"new_conns", new_conns},
              {"summary",
               {{"bytes", total_bytes},
                {"duration_s", span_s},
                {"achieved_load", double(total_bytes) / span_s / link_payload_Bps},
                {"retrans_segs", retrans},
                {"rto_flows", rto_known ? json(rto_flows) : json(nullptr)},
                {"all", stats(all)}}},
              {"buckets", jb}};
  write_json_file(o.json_out, out);
  return 0;
}

// ---------------------------------------------------------------------------

int run_long(const LongOptions& o) {
  if (o.conns < 1) throw Error("--conns must be >= 1");
  if (o.interval_ms <= 0) throw Error("--interval-ms must be > 0");
  Reactor rx;
  std::vector<Conn*> conns;
  for (int i = 0; i < o.conns; ++i) {
    size_t s = size_t(i) % o.servers.size();
    conns.push_back(rx.add_connected(connect_tcp(o.servers[s], o.cc, o.window_clamp), s));
  }
  auto start_of = [&](int i) { return size_t(i) < o.start_s.size() ? o.start_s[size_t(i)] : 0.0; };
  auto stop_of = [&](int i) { return size_t(i) < o.stop_s.size() ? o.stop_s[size_t(i)] : o.duration_s; };
  std::vector<bool> started(size_t(o.conns), false), stopped(size_t(o.conns), false);
  std::vector<uint64_t> last(size_t(o.conns), 0);

  int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  if (tfd < 0) throw SysError("timerfd_create", errno);
  itimerspec its{};
  long iv_ns = long(o.interval_ms * 1e6);
  its.it_interval.tv_sec = iv_ns / 1000000000L;
  its.it_interval.tv_nsec = iv_ns % 1000000000L;
  its.it_value = its.it_interval;
  const uint64_t t0 = now_ns();
  auto tick = [&](double now_s) {
    for (int i = 0; i < o.conns; ++i) {
      if (!started[size_t(i)] && now_s >= start_of(i)) {
        rx.request(conns[size_t(i)], ReqType::Stream, 0, uint64_t(i) + 1);
        started[size_t(i)] = true;
      }
      if (started[size_t(i)] && !stopped[size_t(i)] && now_s >= stop_of(i)) {
        rx.close_conn(conns[size_t(i)]);
        stopped[size_t(i)] = true;
      }
    }
  };
  tick(0);
  timerfd_settime(tfd, 0, &its, nullptr);
  rx.watch_fd(tfd);
  json series = json::array();
  std::vector<double> jains, aggs;
  std::vector<double> flow_bytes(size_t(o.conns), 0), flow_secs(size_t(o.conns), 0);
  bool done = false;
  uint64_t t_last_sample = t0;
  rx.on_fd = [&](int fd) {
    uint64_t exp = 0;
    if (read(fd, &exp, sizeof(exp)) < 0) return;
    // Rates over the time that really passed since the last sample: a late
    // wakeup must not turn into a rate spike.
    uint64_t t_now = now_ns();
    double now_s = double(t_now - t0) / 1e9;
    double dt = double(t_now - t_last_sample) / 1e9;
    t_last_sample = t_now;
    if (dt <= 0) return;
    json row = {{"t_s", now_s}};
    json rates = json::array();
    double sum = 0, sumsq = 0;
    int active = 0;
    for (int i = 0; i < o.conns; ++i) {
      Conn* c = conns[size_t(i)];
      uint64_t got = c->got;
      double mbps = double(got - last[size_t(i)]) * 8 / dt / 1e6;
      last[size_t(i)] = got;
      bool on = started[size_t(i)] && !stopped[size_t(i)];
      rates.push_back(on ? json(mbps) : json(nullptr));
      if (on) {
        sum += mbps;
        sumsq += mbps * mbps;
        ++active;
        flow_bytes[size_t(i)] += mbps * dt * 1e6 / 8;
        flow_secs[size_t(i)] += dt;
      }
    }
    row["mbps"] = rates;
    row["aggregate_mbps"] = sum;
    if (active) {
      double j = sumsq > 0 ? sum * sum / (active * sumsq) : 1.0;
      row["jain"] = j;
      jains.push_back(j);
      aggs.push_back(sum);
    }
    series.push_back(row);
    tick(now_s);
    if (now_s >= o.duration_s) done = true;
  };
  // SIGINT/SIGTERM end the run early (e.g. background flows stopped by the
  // runner); the JSON still covers what was measured.
  static volatile sig_atomic_t stop_requested = 0;
  struct sigaction sa {};
  sa.sa_handler = [](int) { stop_requested = 1; };
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  while (!done && !stop_requested) rx.poll(50);
  close(tfd);
  json per_flow = json::array();
  for (int i = 0; i < o.conns; ++i)
    per_flow.push_back(
        {{"server", conns[size_t(i)]->server},
         {"start_s", start_of(i)},
         {"stop_s", stop_of(i)},
         {"mean_mbps", flow_secs[size_t(i)] > 0 ? flow_bytes[size_t(i)] * 8 / flow_secs[size_t(i)] / 1e6 : 0.0}});
  double mj = 0, ma = 0;
  for (double v : jains) mj += v;
  for (double v : aggs) ma += v;
  json out = {{"mode", "long"},
              {"conns", o.conns},
              {"link_mbps", o.link_mbps},
              {"interval_ms", o.interval_ms},
              {"summary",
               {{"aggregate_mbps_mean", aggs.empty() ? 0.0 : ma / double(aggs.size())},
                {"jain_mean", jains.empty() ? 0.0 : mj / double(jains.size())},
                {"jain_min", percentile(jains, 0)},
                {"utilisation",
                 o.link_mbps > 0 && !aggs.empty() ? json(ma / double(aggs.size()) / o.link_mbps) : json(nullptr)}}},
              {"flows", per_flow},
              {"series", series}};
  write_json_file(o.json_out, out);
  return 0;
}

}  // namespace sluice::tg
