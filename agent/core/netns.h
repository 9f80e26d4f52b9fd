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

}  // namespace sluice
