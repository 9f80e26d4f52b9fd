// sluice-qmon: samples the backlog of chosen qdiscs over time and reports
// the time series and the maximum per port and per port class.
//
//   sluice-qmon --port tor-down=ns1:eth1 --port core=ns2:eth3
//               [--interval-us 1000] [--duration S] --json OUT [--series CSV]
//
// Method "bpf" (default): tp_btf qdisc_enqueue/qdisc_dequeue record the exact
// backlog of each watched root qdisc after every packet (maximum, interval
// maxima, exact time-weighted mean). Method "netlink": the root qdisc's
// backlog is polled every interval (misses peaks between polls; for kernels
// without the tracepoints). Either way the root qdisc's tc counters (bytes,
// packets, drops, overlimits, requeues) are read through netlink at start and
// end, so the report matches `tc -s qdisc`.
#include <CLI/CLI.hpp>
#include <net/if.h>
#include <netlink/netlink.h>
#include <netlink/route/qdisc.h>
#include <netlink/route/tc.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/bpf_util.h"
#include "core/error.h"
#include "core/json_file.h"
#include "core/netns.h"
#include "qmon.skel.h"
#include "sluice/qmon.h"

SLUICE_SKELETON(qmon);

using namespace sluice;
using json = nlohmann::json;

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

struct TcStats {
  uint64_t bytes = 0, packets = 0, drops = 0, overlimits = 0, requeues = 0, backlog = 0, qlen = 0;
  std::string kind;
};

struct Port {
  std::string spec, cls, ns, ifname;
  uint32_t slot = 0;
  uint32_t ifindex = 0;
  uint32_t netns_ino = 0;
  nl_sock* nl = nullptr;  // bound to the port's namespace
  TcStats start, end;
  // netlink method / series
  uint64_t max_bytes = 0, max_pkts = 0, samples = 0;
  double sum_bytes = 0;
};

// class=ns:ifname, or class=ifname (current namespace).
Port parse_port(const std::string& s) {
  Port p;
  p.spec = s;
  auto eq = s.find('=');
  if (eq == std::string::npos || eq == 0) throw Error("bad --port '" + s + "': expected CLASS=[NETNS:]IFNAME");
  p.cls = s.substr(0, eq);
  std::string rest = s.substr(eq + 1);
  auto colon = rest.find(':');
  if (colon == std::string::npos) {
    p.ifname = rest;
  } else {
    p.ns = rest.substr(0, colon);
    p.ifname = rest.substr(colon + 1);
  }
  if (p.ifname.empty() || p.ifname.size() >= IFNAMSIZ) throw Error("bad --port '" + s + "': interface name");
  return p;
}

// Opens a netlink socket inside the port's namespace (a socket keeps the
// namespace it was created in) and resolves ifindex and the namespace inode.
void bind_port(Port& p) {
  auto body = [&] {
    p.ifindex = if_nametoindex(p.ifname.c_str());
    if (!p.ifindex) throw SysError("--port " + p.spec + ": interface " + p.ifname, errno);
    struct stat st {};
    if (stat("/proc/thread-self/ns/net", &st) != 0) throw SysError("stat netns", errno);
    p.netns_ino = uint32_t(st.st_ino);
    p.nl = nl_socket_alloc();
    if (!p.nl || nl_connect(p.nl, NETLINK_ROUTE) != 0) throw Error("netlink socket for " + p.spec);
  };
  if (p.ns.empty()) {
    body();
  } else {
    if (access(("/run/netns/" + p.ns).c_str(), F_OK) != 0)
      throw Error("--port " + p.spec + ": no network namespace '" + p.ns + "'");
    run_in_netns(p.ns, body);
  }
}

TcStats root_stats(const Port& p) {
  TcStats s;
  nl_cache* cache = nullptr;
  if (rtnl_qdisc_alloc_cache(p.nl, &cache) != 0) throw Error("netlink qdisc dump for " + p.spec);
  rtnl_qdisc* q = rtnl_qdisc_get_by_parent(cache, int(p.ifindex), TC_H_ROOT);
  if (q) {
    auto* tc = TC_CAST(q);
    s.bytes = rtnl_tc_get_stat(tc, RTNL_TC_BYTES);
    s.packets = rtnl_tc_get_stat(tc, RTNL_TC_PACKETS);
    s.drops = rtnl_tc_get_stat(tc, RTNL_TC_DROPS);
    s.overlimits = rtnl_tc_get_stat(tc, RTNL_TC_OVERLIMITS);
    s.requeues = rtnl_tc_get_stat(tc, RTNL_TC_REQUEUES);
    s.backlog = rtnl_tc_get_stat(tc, RTNL_TC_BACKLOG);
    s.qlen = rtnl_tc_get_stat(tc, RTNL_TC_QLEN);
    if (const char* k = rtnl_tc_get_kind(tc)) s.kind = k;
    rtnl_qdisc_put(q);
  }
  nl_cache_free(cache);
  return s;
}

json stats_json(const TcStats& a) {
  return {{"kind", a.kind},
          {"bytes", a.bytes},
          {"packets", a.packets},
          {"drops", a.drops},
          {"overlimits", a.overlimits},
          {"requeues", a.requeues},
          {"backlog", a.backlog},
          {"qlen", a.qlen}};
}

template <typename V>
std::vector<V> percpu(int fd, uint32_t key, int ncpu) {
  std::vector<V> v(static_cast<size_t>(ncpu));
  if (bpf_map_lookup_elem(fd, &key, v.data()) != 0) v.assign(size_t(ncpu), V{});
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sluice-qmon: backlog of chosen qdiscs over time, maximum per port class"};
  std::vector<std::string> port_specs;
  std::string json_out = "-", series_out, method = "bpf";
  uint32_t interval_us = 1000;
  double duration = 0;
  app.add_option("--port", port_specs, "CLASS=[NETNS:]IFNAME (repeatable); the root qdisc is watched")->required();
  app.add_option("--interval-us", interval_us, "sampling interval")
      ->default_val(1000)
      ->check(CLI::Range(50u, 10000000u));
  app.add_option("--duration", duration, "seconds (0 = until SIGINT/SIGTERM)")->default_val(0);
  app.add_option("--json", json_out, "report ('-' = stdout)");
  app.add_option("--series", series_out,
                 "time series CSV: t_us,class,port,backlog_bytes,backlog_pkts,max_bytes,max_pkts");
  app.add_option("--method", method, "bpf (exact, tracepoints) or netlink (polled)")
      ->check(CLI::IsMember({"bpf", "netlink"}));
  CLI11_PARSE(app, argc, argv);

  try {
    std::vector<Port> ports;
    for (const auto& s : port_specs) ports.push_back(parse_port(s));
    if (ports.size() > SLUICE_QMON_MAX_PORTS) throw Error("too many ports");
    for (size_t i = 0; i < ports.size(); ++i) {
      ports[i].slot = uint32_t(i);
      bind_port(ports[i]);
    }

    std::unique_ptr<Skeleton<qmon>> skel;
    int ncpu = num_possible_cpus();
    if (method == "bpf") {
      skel = std::make_unique<Skeleton<qmon>>();
      skel->load();
      int fd = bpf_map__fd((*skel)->maps.sl_qm_ports_v1);
      for (const auto& p : ports) {
        sluice_qmon_key k{p.netns_ino, p.ifindex};
        if (bpf_map_update_elem(fd, &k, &p.slot, BPF_NOEXIST) != 0)
          throw SysError("--port " + p.spec + " given twice, or map full", errno);
      }
      if (int rc = qmon__attach(skel->get()); rc != 0) throw SysError("attach qdisc tracepoints", rc);
    }
    for (auto& p : ports) p.start = root_stats(p);

    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);

    std::ofstream series;
    if (!series_out.empty()) {
      series.open(series_out);
      if (!series) throw SysError("open " + series_out, errno);
      series << "t_us,class,port,backlog_bytes,backlog_pkts,max_bytes,max_pkts\n";
    }
    std::fprintf(stderr, "sluice-qmon: monitoring %zu ports (%s, every %u us)\n", ports.size(), method.c_str(),
                 interval_us);

    const uint64_t t0 = mono_ns();
    const uint64_t step = uint64_t(interval_us) * 1000;
    uint64_t next = t0 + step;
    int ivfd = skel ? bpf_map__fd((*skel)->maps.sl_qm_ival_v1) : -1;
    int stfd = skel ? bpf_map__fd((*skel)->maps.sl_qm_state_v1) : -1;
    while (!g_stop) {
      timespec ts{time_t(next / 1000000000ull), long(next % 1000000000ull)};
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
      if (g_stop) break;
      uint64_t now = mono_ns();
      double t_us = double(now - t0) / 1e3;
      if (skel) {
        // Close the interval: events from now on go to the other bank.
        uint64_t e = (*skel)->bss->epoch;
        __atomic_store_n(&(*skel)->bss->epoch, e + 1, __ATOMIC_SEQ_CST);
        for (auto& p : ports) {
          uint32_t idx = p.slot + uint32_t(e & 1) * SLUICE_QMON_MAX_PORTS;
          auto iv = percpu<sluice_qmon_interval>(ivfd, idx, ncpu);
          uint64_t mb = 0, mp = 0, ev = 0;
          for (const auto& c : iv)
            if (c.epoch == e) {
              mb = std::max<uint64_t>(mb, c.max_bytes);
              mp = std::max<uint64_t>(mp, c.max_pkts);
              ev += c.events;
            }
          sluice_qmon_state st{};
          bpf_map_lookup_elem(stfd, &p.slot, &st);
          if (series.is_open() && (ev || st.backlog_bytes))
            series << t_us << ',' << p.cls << ',' << p.ifname << ',' << st.backlog_bytes << ',' << st.backlog_pkts
                   << ',' << mb << ',' << mp << '\n';
        }
      } else {
        for (auto& p : ports) {
          TcStats s = root_stats(p);
          p.max_bytes = std::max(p.max_bytes, s.backlog);
          p.max_pkts = std::max(p.max_pkts, s.qlen);
          p.sum_bytes += double(s.backlog);
          ++p.samples;
          if (series.is_open() && s.backlog)
            series << t_us << ',' << p.cls << ',' << p.ifname << ',' << s.backlog << ',' << s.qlen << ',' << s.backlog
                   << ',' << s.qlen << '\n';
        }
      }
      if (duration > 0 && double(now - t0) / 1e9 >= duration) break;
      next += step;
      if (next < now) next = now + step;  // fell behind: skip, don't burst
    }
    const uint64_t t_end = mono_ns();
    for (auto& p : ports) p.end = root_stats(p);

    json jports = json::array();
    std::map<std::string, json> classes;
    for (auto& p : ports) {
      uint64_t mb = p.max_bytes, mp = p.max_pkts, events = p.samples;
      double mean = p.samples ? p.sum_bytes / double(p.samples) : 0;
      if (skel) {
        mb = mp = events = 0;
        for (const auto& c : percpu<sluice_qmon_max>(bpf_map__fd((*skel)->maps.sl_qm_max_v1), p.slot, ncpu)) {
          mb = std::max<uint64_t>(mb, c.max_bytes);
          mp = std::max<uint64_t>(mp, c.max_pkts);
          events += c.events;
        }
        sluice_qmon_state st{};
        bpf_map_lookup_elem(stfd, &p.slot, &st);
        // The backlog stays at its last value until the end of the run.
        uint64_t t_last = std::max<uint64_t>(t_end, st.last_ns);
        double integral = double(st.integral_bytes_ns) + double(st.backlog_bytes) * double(t_last - st.last_ns);
        uint64_t from = st.first_ns ? std::min<uint64_t>(st.first_ns, t0) : t0;
        mean = st.first_ns ? integral / double(t_last - from) : 0;
      }
      json tc = stats_json(p.end);
      for (auto k : {"bytes", "packets", "drops", "overlimits", "requeues"})
        tc[k] = tc[k].get<uint64_t>() - stats_json(p.start)[k].get<uint64_t>();
      jports.push_back({{"spec", p.spec},
                        {"class", p.cls},
                        {"ns", p.ns},
                        {"ifname", p.ifname},
                        {"max_backlog_bytes", mb},
                        {"max_backlog_pkts", mp},
                        {"mean_backlog_bytes", mean},
                        {"events", events},
                        {"tc", tc}});
      auto& c = classes[p.cls];
      if (c.is_null()) c = {{"max_backlog_bytes", 0}, {"max_backlog_pkts", 0}, {"drops", 0}, {"ports", 0}};
      c["max_backlog_bytes"] = std::max(c["max_backlog_bytes"].get<uint64_t>(), mb);
      c["max_backlog_pkts"] = std::max(c["max_backlog_pkts"].get<uint64_t>(), mp);
      c["drops"] = c["drops"].get<uint64_t>() + tc["drops"].get<uint64_t>();
      c["ports"] = c["ports"].get<int>() + 1;
    }
    json out = {{"method", method},
                {"interval_us", interval_us},
                {"duration_s", double(t_end - t0) / 1e9},
                {"ports", jports},
                {"classes", classes}};
    for (auto& p : ports) nl_socket_free(p.nl);
    write_json_file(json_out, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice-qmon: %s\n", e.what());
    return 1;
  }
  return 0;
}
