#include "netns.h"

#include <fcntl.h>
#include <net/if.h>
#include <netlink/netlink.h>
#include <netlink/route/link.h>
#include <netlink/route/link/veth.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <exception>
#include <thread>

#include "error.h"

namespace sluice {

namespace {
void run_on_thread(const std::function<void()>& enter, const std::function<void()>& fn) {
  std::exception_ptr err;
  std::thread t([&] {
    try {
      enter();
      fn();
    } catch (...) {
      err = std::current_exception();
    }
  });
  t.join();
  if (err) std::rethrow_exception(err);
}
}  // namespace

void run_in_new_netns(const std::function<void()>& fn) {
  run_on_thread(
      [] {
        // unshare(CLONE_NEWNET) moves only this thread (netns is per task).
        if (unshare(CLONE_NEWNET) != 0) throw SysError("unshare(CLONE_NEWNET)", errno);
      },
      fn);
}

void run_in_netns(const std::string& name, const std::function<void()>& fn) {
  run_on_thread(
      [&] {
        std::string path = "/run/netns/" + name;
        int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) throw SysError("open " + path, errno);
        int rc = setns(fd, CLONE_NEWNET);
        int e = errno;
        close(fd);
        if (rc != 0) throw SysError("setns " + path, e);
      },
      fn);
}

void make_veth_pair(const std::string& a, const std::string& b) {
  nl_sock* sk = nl_socket_alloc();
  if (!sk) throw Error("nl_socket_alloc");
  int rc = nl_connect(sk, NETLINK_ROUTE);
  // The peer goes to this thread's namespace: a tid names a task, so a
  // thread inside run_in_new_netns keeps both ends in its private namespace
  // (getpid() would put the peer in the process's own, briefly visible
  // there until the private one is torn down).
  if (rc == 0) rc = rtnl_link_veth_add(sk, a.c_str(), b.c_str(), pid_t(syscall(SYS_gettid)));
  if (rc == 0) {
    for (const std::string& n : {a, b, std::string("lo")}) {
      rtnl_link* link = nullptr;
      if (rtnl_link_get_kernel(sk, 0, n.c_str(), &link) == 0) {
        rtnl_link* change = rtnl_link_alloc();
        rtnl_link_set_flags(change, IFF_UP);
        rtnl_link_change(sk, link, change, 0);
        rtnl_link_put(change);
        rtnl_link_put(link);
      }
    }
  }
  nl_socket_free(sk);
  if (rc < 0) throw Error("create veth pair " + a + "/" + b + ": " + nl_geterror(rc));
}

bool delete_link(const std::string& name) {
  nl_sock* sk = nl_socket_alloc();
  if (!sk) return false;
  int rc = nl_connect(sk, NETLINK_ROUTE);
  if (rc == 0) {
    rtnl_link* link = rtnl_link_alloc();
    rtnl_link_set_name(link, name.c_str());
    rc = rtnl_link_delete(sk, link);
    rtnl_link_put(link);
  }
  nl_socket_free(sk);
  return rc == 0;
}

ScopedVethPair::ScopedVethPair(const std::string& prefix) {
  std::string id;
  for (unsigned long p = static_cast<unsigned long>(getpid()); p; p /= 36)
    id.insert(id.begin(), "0123456789abcdefghijklmnopqrstuvwxyz"[p % 36]);
  a_ = prefix + id + "a";
  b_ = prefix + id + "b";
  if (a_.size() >= IFNAMSIZ) throw Error("veth name " + a_ + " longer than IFNAMSIZ");
  make_veth_pair(a_, b_);
}

ScopedVethPair::~ScopedVethPair() {
  // Deleting one end deletes its peer.
  delete_link(a_);
}

}  // namespace sluice
