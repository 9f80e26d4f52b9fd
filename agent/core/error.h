// Errors in sluice: exceptions at the edges, each carrying what was being
// done when it failed ("attach flowstat_ingress to veth0 (tcx): ...").
#pragma once

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace sluice {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A failed system or libbpf call: `what` names the operation, `err` is a
// positive errno (libbpf returns negative ones; pass either).
class SysError : public Error {
 public:
  SysError(const std::string& what, int err)
      : Error(what + ": " + std::strerror(err < 0 ? -err : err)), errno_(err < 0 ? -err : err) {}
  int code() const { return errno_; }

 private:
  int errno_;
};

// Throws SysError when a libbpf/syscall-style return value is negative.
inline int check(int rc, const std::string& what) {
  if (rc < 0) throw SysError(what, rc == -1 && errno ? errno : rc);
  return rc;
}

}  // namespace sluice
