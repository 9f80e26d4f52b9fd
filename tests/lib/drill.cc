#include "lib/drill.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <net/if.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <algorithm>
#include <stdexcept>
#include <thread>

#include "core/netns.h"
#include "core/tc.h"
#include "lib/netns_fixture.h"

namespace sluice::test {

namespace {
// bpf_attach_type values of tcx (uapi, 6.6); Debian 12's headers predate them.
constexpr int kBpfTcxIngress = 46;
constexpr int kBpfTcxEgress = 47;

bool clsact_filter_there(int ifindex, bool ingress, uint32_t prio) {
  DECLARE_LIBBPF_OPTS(bpf_tc_hook, h, .ifindex = ifindex, .attach_point = ingress ? BPF_TC_INGRESS : BPF_TC_EGRESS);
  DECLARE_LIBBPF_OPTS(bpf_tc_opts, o, .handle = ForeignHooks::kForeignHandle, .priority = prio);
  return bpf_tc_query(&h, &o) == 0;
}

uint32_t prog_id(int prog_fd) {
  bpf_prog_info info{};
  uint32_t len = sizeof(info);
  return bpf_obj_get_info_by_fd(prog_fd, &info, &len) == 0 ? info.id : 0;
}

std::string hex(uint32_t v) {
  char b[16];
  snprintf(b, sizeof(b), "%#x", v);
  return b;
}
}  // namespace

int bpf_fds_open() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  while (dirent* e = readdir(d)) {
    char target[256];
    std::string p = std::string("/proc/self/fd/") + e->d_name;
    ssize_t len = readlink(p.c_str(), target, sizeof(target) - 1);
    if (len <= 0) continue;
    target[len] = 0;
    if (std::string(target).rfind("anon_inode:bpf", 0) == 0) ++n;
  }
  closedir(d);
  return n;
}

double longest_stall_ms(const std::function<uint64_t()>& count, std::chrono::milliseconds d) {
  using clock = std::chrono::steady_clock;
  auto start = clock::now(), end = start + d, last_growth = start;
  uint64_t last = count();
  double longest = 0;
  for (auto now = clock::now(); now < end; now = clock::now()) {
    uint64_t c = count();
    if (c != last) {
      longest = std::max(longest, std::chrono::duration<double, std::milli>(now - last_growth).count());
      last_growth = now;
      last = c;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  return std::max(longest, std::chrono::duration<double, std::milli>(end - last_growth).count());
}

std::vector<uint32_t> tcx_prog_ids(int ifindex, bool ingress) {
  uint32_t ids[64];
  uint32_t cnt = 64, flags = 0;
  if (bpf_prog_query(ifindex, static_cast<bpf_attach_type>(ingress ? kBpfTcxIngress : kBpfTcxEgress), 0, &flags, ids,
                     &cnt) != 0)
    return {};
  return std::vector<uint32_t>(ids, ids + cnt);
}

std::string hook_snapshot(const std::string& ns, const std::string& ifname) {
  std::string tc = "ip netns exec " + ns + " ";
  std::string s = run_capture(tc + "tc qdisc show dev " + ifname + " 2>&1; " + tc + "tc filter show dev " + ifname +
                              " ingress 2>&1; " + tc + "tc filter show dev " + ifname + " egress 2>&1; " + tc +
                              "ip -d link show dev " + ifname + " 2>&1 | grep -o 'xdp.*'");
  run_in_netns(ns, [&] {
    int ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
    for (bool in : {true, false}) {
      s += std::string("tcx ") + (in ? "ingress:" : "egress:");
      for (uint32_t id : tcx_prog_ids(ifindex, in)) s += " " + std::to_string(id);
      s += "\n";
    }
  });
  return s;
}

ForeignHooks::ForeignHooks(const std::string& ns, const std::string& ifname, Progs progs, uint32_t prio)
    : ns_(ns), ifname_(ifname), progs_(progs), prio_(prio) {
  run_in_netns(ns_, [&] {
    int ifindex = static_cast<int>(if_nametoindex(ifname_.c_str()));
    if (!ifindex) throw std::runtime_error("ForeignHooks: no interface " + ifname_ + " in " + ns_);
    for (bool in : {true, false}) {
      int fd = in ? progs_.clsact_in : progs_.clsact_out;
      if (fd < 0) continue;
      DECLARE_LIBBPF_OPTS(bpf_tc_hook, h, .ifindex = ifindex, .attach_point = in ? BPF_TC_INGRESS : BPF_TC_EGRESS);
      int rc = clsact_exists(ifindex) ? 0 : bpf_tc_hook_create(&h);
      if (rc && rc != -EEXIST) throw std::runtime_error("ForeignHooks: clsact on " + ifname_ + ": " + strerror(-rc));
      DECLARE_LIBBPF_OPTS(bpf_tc_opts, o, .prog_fd = fd, .handle = kForeignHandle, .priority = prio_);
      rc = bpf_tc_attach(&h, &o);
      if (rc) throw std::runtime_error("ForeignHooks: cls_bpf filter on " + ifname_ + ": " + strerror(-rc));
    }
    if (progs_.tcx_in >= 0) {
      tcx_in_link_ = tcx_link_create(progs_.tcx_in, ifindex, Hook::Ingress);
      if (tcx_in_link_ < 0)
        throw std::runtime_error("ForeignHooks: tcx ingress: " + std::string(strerror(-tcx_in_link_)));
    }
    if (progs_.tcx_out >= 0) {
      tcx_out_link_ = tcx_link_create(progs_.tcx_out, ifindex, Hook::Egress);
      if (tcx_out_link_ < 0)
        throw std::runtime_error("ForeignHooks: tcx egress: " + std::string(strerror(-tcx_out_link_)));
    }
  });
}

ForeignHooks::~ForeignHooks() {
  for (int fd : {tcx_in_link_, tcx_out_link_})
    if (fd >= 0) close(fd);
  try {
    run_in_netns(ns_, [&] {
      int ifindex = static_cast<int>(if_nametoindex(ifname_.c_str()));
      if (!ifindex) return;
      for (bool in : {true, false}) {
        if ((in ? progs_.clsact_in : progs_.clsact_out) < 0) continue;
        DECLARE_LIBBPF_OPTS(bpf_tc_hook, h, .ifindex = ifindex, .attach_point = in ? BPF_TC_INGRESS : BPF_TC_EGRESS);
        DECLARE_LIBBPF_OPTS(bpf_tc_opts, o, .handle = kForeignHandle, .priority = prio_);
        bpf_tc_detach(&h, &o);
      }
    });
  } catch (...) {
    // The namespace is already gone: so is everything attached in it.
  }
}

std::string ForeignHooks::missing() const {
  std::string out;
  run_in_netns(ns_, [&] {
    int ifindex = static_cast<int>(if_nametoindex(ifname_.c_str()));
    auto add = [&](const std::string& what) { out += (out.empty() ? "" : ", ") + what; };
    for (bool in : {true, false})
      if ((in ? progs_.clsact_in : progs_.clsact_out) >= 0 && !clsact_filter_there(ifindex, in, prio_))
        add(std::string("clsact ") + (in ? "ingress" : "egress") + " filter handle " + hex(kForeignHandle) + " prio " +
            hex(prio_));
    for (bool in : {true, false}) {
      int prog = in ? progs_.tcx_in : progs_.tcx_out;
      if (prog < 0) continue;
      uint32_t id = prog_id(prog);
      bool found = false;
      for (uint32_t x : tcx_prog_ids(ifindex, in)) found |= x == id;
      if (!found) add(std::string("tcx ") + (in ? "ingress" : "egress") + " program id " + std::to_string(id));
    }
  });
  return out;
}

}  // namespace sluice::test
