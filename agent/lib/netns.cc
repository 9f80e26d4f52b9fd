#include "netns.h"

#include <fcntl.h>
#include <sched.h>
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

}  // namespace sluice
