// Running code in another network namespace without touching the caller's:
// a dedicated thread enters (setns) or creates (unshare) the namespace, runs
// the function, and exits; the rest of the process never moves.
#pragma once

#include <functional>
#include <string>

namespace sluice {

// Runs fn in a new, empty network namespace (only `lo`, down). The namespace
// disappears when fn returns. Exceptions from fn are rethrown here.
void run_in_new_netns(const std::function<void()>& fn);

// Runs fn inside the named namespace (/run/netns/<name>, as `ip netns` makes).
void run_in_netns(const std::string& name, const std::function<void()>& fn);

// Creates a veth pair a<->b in the calling thread's namespace and sets both
// ends and `lo` up (netlink, no external tools). Throws Error.
void make_veth_pair(const std::string& a, const std::string& b);

// Deletes interface `name` (and so its veth peer) from the calling thread's
// namespace; false if it was not there or the kernel refused.
bool delete_link(const std::string& name);

// A veth pair that exists exactly as long as this object: named
// <prefix><pid base 36>a / ...b so two processes probing at once never
// clash, created up, deleted (both ends) by the destructor even when the
// code using it throws. Create and destroy it on the same thread (the
// namespace is per thread inside run_in_new_netns).
class ScopedVethPair {
 public:
  explicit ScopedVethPair(const std::string& prefix);
  ~ScopedVethPair();
  ScopedVethPair(const ScopedVethPair&) = delete;
  ScopedVethPair& operator=(const ScopedVethPair&) = delete;
  const std::string& a() const { return a_; }
  const std::string& b() const { return b_; }

 private:
  std::string a_, b_;
};

}  // namespace sluice
