#include "tc.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/pkt_sched.h>
#include <net/if.h>
#include <netlink/netlink.h>
#include <netlink/route/classifier.h>
#include <netlink/route/qdisc.h>
#include <netlink/route/tc.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "bpf_util.h"
#include "error.h"
#include "log.h"

#ifndef TC_H_CLSACT
#define TC_H_CLSACT TC_H_INGRESS
#endif
#ifndef TC_H_MIN_INGRESS
#define TC_H_MIN_INGRESS 0xFFF2U
#define TC_H_MIN_EGRESS 0xFFF3U
#endif

namespace sluice {

namespace {
// Values from the kernel UAPI (6.6+); Debian 12's headers predate tcx.
constexpr int kBpfTcxIngress = 46;
constexpr uint32_t kBpfFBefore = 1U << 3;  // BPF_F_BEFORE (uapi, 6.6)
constexpr int kBpfTcxEgress = 47;

std::string clsact_marker(const std::string& state_dir, int ifindex) {
  return state_dir + "/clsact-" + std::to_string(current_netns_id()) + "-" + std::to_string(ifindex);
}

void write_marker(const std::string& path) {
  make_dirs(path.substr(0, path.rfind('/')));
  std::ofstream(path) << "created by sluiced\n";
}
}  // namespace

const char* to_string(Hook h) { return h == Hook::Ingress ? "ingress" : "egress"; }

uint64_t current_netns_id() {
  struct stat st {};
  if (stat("/proc/self/ns/net", &st) != 0) return 0;
  return st.st_ino;
}

AttachMode resolve_attach_mode(AttachMode requested, bool kernel_has_tcx) {
  if (requested != AttachMode::Auto) return requested;
  return kernel_has_tcx ? AttachMode::Tcx : AttachMode::Clsact;
}

int tcx_link_create(int prog_fd, int ifindex, Hook hook, bool front) {
  // union bpf_attr.link_create: prog_fd, target_ifindex, attach_type, flags,
  // then the tcx {relative_fd, expected_revision} block, all zero = append;
  // BPF_F_BEFORE with no relative program = the front of the chain.
  struct {
    uint32_t prog_fd;
    uint32_t target_ifindex;
    uint32_t attach_type;
    uint32_t flags;
    uint32_t relative_fd;
    uint32_t pad;
    uint64_t expected_revision;
    uint8_t rest[64];
  } attr{};
  attr.prog_fd = prog_fd;
  attr.target_ifindex = ifindex;
  attr.attach_type = hook == Hook::Ingress ? kBpfTcxIngress : kBpfTcxEgress;
  if (front) attr.flags = kBpfFBefore;
  int fd = static_cast<int>(syscall(__NR_bpf, BPF_LINK_CREATE, &attr, sizeof(attr)));
  return fd < 0 ? -errno : fd;
}

bool clsact_exists(int ifindex) {
  nl_sock* sk = nl_socket_alloc();
  if (!sk) return false;
  bool found = false;
  nl_cache* cache = nullptr;
  if (nl_connect(sk, NETLINK_ROUTE) == 0 && rtnl_qdisc_alloc_cache(sk, &cache) == 0) {
    rtnl_qdisc* q = rtnl_qdisc_get_by_parent(cache, ifindex, TC_H_CLSACT);
    if (q) {
      found = true;
      rtnl_qdisc_put(q);
    }
    nl_cache_free(cache);
  }
  nl_socket_free(sk);
  return found;
}

int count_clsact_filters(int ifindex) {
  nl_sock* sk = nl_socket_alloc();
  if (!sk) return -1;
  int total = -1;
  if (nl_connect(sk, NETLINK_ROUTE) == 0) {
    total = 0;
    for (uint32_t minor : {TC_H_MIN_INGRESS, TC_H_MIN_EGRESS}) {
      nl_cache* cache = nullptr;
      if (rtnl_cls_alloc_cache(sk, ifindex, TC_H_MAKE(TC_H_CLSACT, minor), &cache) == 0) {
        total += nl_cache_nitems(cache);
        nl_cache_free(cache);
      }
    }
  }
  nl_socket_free(sk);
  return total;
}

TcAttachment TcAttachment::attach(const std::string& ifname, Hook hook, int prog_fd, const std::string& prog_name,
                                  uint32_t prio, AttachMode mode, const std::string& state_dir) {
  TcAttachment a;
  a.ifname_ = ifname;
  a.prog_name_ = prog_name;
  a.state_dir_ = state_dir;
  a.hook_ = hook;
  a.mode_ = mode;
  a.prio_ = prio;
  const std::string what =
      "attach " + prog_name + " to " + ifname + " " + to_string(hook) + " (" + to_string(mode) + ")";
  int ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
  if (!ifindex) throw SysError(what + ": interface " + ifname, errno);

  if (mode == AttachMode::Tcx) {
    int fd = tcx_link_create(prog_fd, ifindex, hook, prio < kPrioTcxFront);
    if (fd < 0) throw SysError(what, fd);
    a.link_fd_ = fd;
  } else if (mode == AttachMode::Clsact) {
    DECLARE_LIBBPF_OPTS(bpf_tc_hook, h, .ifindex = ifindex,
                        .attach_point = hook == Hook::Ingress ? BPF_TC_INGRESS : BPF_TC_EGRESS);
    // Reuse an existing clsact qdisc (anyone's); create one only if absent.
    int rc = clsact_exists(ifindex) ? -EEXIST : bpf_tc_hook_create(&h);
    if (rc == 0) {
      write_marker(clsact_marker(state_dir, ifindex));
      SLOG_INFO("CLSACT_CREATED", "created clsact qdisc on {} (none existed)", ifname);
    } else if (rc != -EEXIST) {
      throw SysError(what + ": create clsact qdisc", rc);
    }
    DECLARE_LIBBPF_OPTS(bpf_tc_opts, o, .prog_fd = prog_fd, .flags = BPF_TC_F_REPLACE, .handle = kTcHandle,
                        .priority = prio);
    rc = bpf_tc_attach(&h, &o);
    if (rc) throw SysError(what, rc);
  } else {
    throw Error(what + ": attach mode must be resolved before attaching");
  }
  a.ifindex_ = ifindex;
  SLOG_INFO("ATTACH_OK", "{} on {} {} via {} (prio {:#x})", prog_name, ifname, to_string(hook), to_string(mode), prio);
  return a;
}

TcAttachment::TcAttachment(TcAttachment&& o) noexcept { *this = std::move(o); }

TcAttachment& TcAttachment::operator=(TcAttachment&& o) noexcept {
  if (this != &o) {
    detach();
    ifname_ = std::move(o.ifname_);
    prog_name_ = std::move(o.prog_name_);
    state_dir_ = std::move(o.state_dir_);
    ifindex_ = o.ifindex_;
    hook_ = o.hook_;
    mode_ = o.mode_;
    prio_ = o.prio_;
    link_fd_ = o.link_fd_;
    o.ifindex_ = 0;
    o.link_fd_ = -1;
  }
  return *this;
}

void TcAttachment::detach() noexcept {
  if (!ifindex_) return;
  if (mode_ == AttachMode::Tcx) {
    close(link_fd_);
    link_fd_ = -1;
  } else {
    DECLARE_LIBBPF_OPTS(bpf_tc_hook, h, .ifindex = ifindex_,
                        .attach_point = hook_ == Hook::Ingress ? BPF_TC_INGRESS : BPF_TC_EGRESS);
    DECLARE_LIBBPF_OPTS(bpf_tc_opts, o, .handle = kTcHandle, .priority = prio_);
    int rc = bpf_tc_detach(&h, &o);
    if (rc && rc != -ENOENT && rc != -ENODEV && rc != -EINVAL)
      SLOG_WARN("DETACH_FAILED", "{} on {} {}: {}", prog_name_, ifname_, to_string(hook_), strerror(-rc));
    // Delete the clsact qdisc only if we made it and nobody's filter is left.
    std::string marker = clsact_marker(state_dir_, ifindex_);
    if (access(marker.c_str(), F_OK) == 0 && count_clsact_filters(ifindex_) == 0) {
      DECLARE_LIBBPF_OPTS(bpf_tc_hook, all, .ifindex = ifindex_,
                          .attach_point = static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS));
      if (bpf_tc_hook_destroy(&all) == 0)
        SLOG_INFO("CLSACT_REMOVED", "removed the clsact qdisc sluice created on {}", ifname_);
      unlink(marker.c_str());
    }
  }
  SLOG_INFO("DETACH_OK", "{} from {} {}", prog_name_, ifname_, to_string(hook_));
  ifindex_ = 0;
}

std::string TcAttachment::describe() const {
  return prog_name_ + "@" + ifname_ + "/" + to_string(hook_) + "/" + to_string(mode_);
}

}  // namespace sluice
