// Network-namespace lab for integration tests. Every namespace, interface
// and mount a Lab makes carries its unique prefix (sl<tag><pid in base 36>)
// and is removed when the Lab is destroyed, also when an assertion fails.
// Leftovers of a crashed run (prefix of a dead pid) are removed by the next
// Lab that starts.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace sluice::test {

// A child process, started with `ip netns exec` (or directly), ended by PID
// when destroyed: SIGTERM, then SIGKILL after a grace period.
class Process {
 public:
  Process() = default;
  Process(pid_t pid, std::string log) : pid_(pid), log_(std::move(log)) {}
  Process(Process&& o) noexcept : pid_(o.pid_), log_(std::move(o.log_)) { o.pid_ = -1; }
  Process& operator=(Process&& o) noexcept;
  ~Process() { stop(); }

  pid_t pid() const { return pid_; }
  bool running();
  // Sends `sig` (default SIGTERM), waits up to `grace`, then SIGKILL.
  // Returns the exit status as from waitpid (or -1).
  int stop(int sig = 15, std::chrono::milliseconds grace = std::chrono::milliseconds(3000));
  void kill9();
  // Waits for exit up to `timeout`; returns the raw wait status or -1.
  int wait(std::chrono::milliseconds timeout);
  const std::string& log_path() const { return log_; }
  std::string log() const;

 private:
  pid_t pid_ = -1;
  std::string log_;
  int status_ = -1;
};

class Lab {
 public:
  // tag: 1-2 lowercase letters naming the test binary (keeps names short).
  explicit Lab(const std::string& tag);
  ~Lab();
  Lab(const Lab&) = delete;
  Lab& operator=(const Lab&) = delete;

  const std::string& prefix() const { return prefix_; }
  // Full name of a namespace/interface: prefix + short name.
  std::string name(const std::string& shortname) const { return prefix_ + shortname; }

  // Creates namespace prefix+n with `lo` up; returns its full name.
  std::string add_ns(const std::string& n);
  // veth pair between two namespaces (full names), interfaces named
  // prefix+if_a / prefix+if_b, with addresses (CIDR) and up.
  void add_veth(const std::string& ns_a, const std::string& if_a, const std::string& addr_a, const std::string& ns_b,
                const std::string& if_b, const std::string& addr_b);

  // Runs a shell command; returns its exit status. Output goes to the test log.
  int sh(const std::string& cmd);
  // Runs a shell command inside a namespace.
  int nsh(const std::string& ns, const std::string& cmd);
  // Same, returning stdout (stderr to the test log); *status gets the status.
  std::string out(const std::string& cmd, int* status = nullptr);

  // Starts argv inside namespace `ns` ("" = current), stdout+stderr to a log
  // file in the lab's temp dir.
  Process spawn(const std::string& ns, const std::vector<std::string>& argv, const std::string& logname);

  // A private bpf filesystem mount (created on first call).
  std::string bpffs();
  const std::string& tmpdir() const { return tmp_; }

  // Removes leftovers of dead runs with this tag (called by the constructor).
  static void reap_stale(const std::string& tag);

 private:
  std::string tag_;
  std::string prefix_;
  std::string tmp_;
  std::string bpffs_;
  std::vector<std::string> namespaces_;
};

// Runs a shell command; returns its stdout, *status (if given) its exit
// status (-1 if it did not exit).
std::string run_capture(const std::string& cmd, int* status = nullptr);

// Path of a built binary (sluiced, sluicectl, ...), from SLUICE_BUILD_DIR or
// relative to the test binary.
std::string build_path(const std::string& rel);

// Polls `pred` every 20 ms until true or `timeout`; returns the last value.
bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

// Polls `count` every 20 ms until it reaches `goal` or has not grown for
// `quiet` (a stall); returns the last value. Progress, not a deadline: a
// slow run goes on for as long as it keeps moving.
uint64_t until_done_or_stalled(const std::function<uint64_t()>& count, uint64_t goal, std::chrono::milliseconds quiet);

// Enters the named network namespace (/run/netns/NAME) for the calling
// thread while in scope; throws if it cannot. Sockets keep the namespace
// they were created in.
class InNetns {
 public:
  explicit InNetns(const std::string& ns);
  ~InNetns();
  InNetns(const InNetns&) = delete;
  InNetns& operator=(const InNetns&) = delete;

 private:
  int old_ = -1;
};

}  // namespace sluice::test
