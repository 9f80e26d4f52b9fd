#include "lib/netns_fixture.h"

#include <dirent.h>
#include <sched.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace sluice::test {

namespace {

std::string base36(unsigned long v) {
  std::string s;
  do {
    s.insert(s.begin(), "0123456789abcdefghijklmnopqrstuvwxyz"[v % 36]);
    v /= 36;
  } while (v);
  return s;
}

std::string self_dir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string p(buf, n);
  return p.substr(0, p.rfind('/'));
}

}  // namespace

Process& Process::operator=(Process&& o) noexcept {
  if (this != &o) {
    stop();
    pid_ = o.pid_;
    log_ = std::move(o.log_);
    o.pid_ = -1;
  }
  return *this;
}

bool Process::running() {
  if (pid_ <= 0) return false;
  int st;
  pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    status_ = st;
    pid_ = -1;
    return false;
  }
  return r == 0;
}

int Process::wait(std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (pid_ > 0) {
    int st;
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      status_ = st;
      pid_ = -1;
      break;
    }
    if (std::chrono::steady_clock::now() > end) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return status_;
}

int Process::stop(int sig, std::chrono::milliseconds grace) {
  if (pid_ <= 0) return status_;
  ::kill(pid_, sig);
  if (wait(grace) == -1 && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    wait(std::chrono::milliseconds(5000));
  }
  return status_;
}

void Process::kill9() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  wait(std::chrono::milliseconds(5000));
}

std::string Process::log() const {
  std::ifstream f(log_);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Every run records its owner in kOwnerDir/<sl><tag><pid36> (the pid in the
// file). The owner's pid cannot be read back from a namespace name alone:
// "slt" + "p1ab" (tag t) and "sltp" + "1ab" (tag tp) are the same string, and
// a reaper guessing the pid from the name deleted live namespaces of another
// tag. A run is reaped only when its marker names exactly this tag and its
// pid, and that pid is gone; namespaces without a marker are left alone.
namespace {
constexpr const char* kOwnerDir = "/run/sluice-lab";
}

void Lab::reap_stale(const std::string& tag) {
  const std::string pre = "sl" + tag;
  DIR* d = opendir(kOwnerDir);
  if (!d) return;
  std::vector<std::string> dead_runs;
  while (dirent* e = readdir(d)) {
    std::string run = e->d_name;
    if (run.rfind(pre, 0) != 0) continue;
    std::ifstream f(std::string(kOwnerDir) + "/" + run);
    unsigned long pid = 0;
    if (!(f >> pid) || pid == 0 || run != pre + base36(pid)) continue;  // another tag's run
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) dead_runs.push_back(run);
  }
  closedir(d);
  for (const auto& run : dead_runs) {
    std::vector<std::string> stale;
    if (DIR* n = opendir("/run/netns")) {
      while (dirent* e = readdir(n)) {
        std::string name = e->d_name;
        if (name.rfind(run + "-", 0) == 0) stale.push_back(name);
      }
      closedir(n);
    }
    for (const auto& ns : stale) {
      std::string cmd = "ip netns pids " + ns + " 2>/dev/null | xargs -r kill -9; ip netns del " + ns + " 2>/dev/null";
      if (std::system(cmd.c_str()) != 0) {
      }
      std::fprintf(stderr, "[lab] removed stale namespace %s of a dead run\n", ns.c_str());
    }
    ::unlink((std::string(kOwnerDir) + "/" + run).c_str());
  }
}

Lab::Lab(const std::string& tag) : tag_(tag) {
  reap_stale(tag);
  prefix_ = "sl" + tag + base36(static_cast<unsigned long>(getpid())) + "-";
  ::mkdir(kOwnerDir, 0755);
  std::ofstream(std::string(kOwnerDir) + "/" + prefix_.substr(0, prefix_.size() - 1)) << getpid() << "\n";
  char tmpl[] = "/tmp/sluice-lab-XXXXXX";
  if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp");
  tmp_ = tmpl;
}

Lab::~Lab() {
  for (auto it = namespaces_.rbegin(); it != namespaces_.rend(); ++it) {
    // Processes we started are ended by their Process objects; anything
    // still inside (e.g. a daemonized iperf3) was started by this test too.
    std::string cmd = "ip netns pids " + *it + " 2>/dev/null | xargs -r kill -9; ip netns del " + *it;
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "[lab] could not delete namespace %s\n", it->c_str());
  }
  if (!bpffs_.empty()) umount2(bpffs_.c_str(), MNT_DETACH);
  ::unlink((std::string(kOwnerDir) + "/" + prefix_.substr(0, prefix_.size() - 1)).c_str());
  std::string rm = "rm -rf " + tmp_;
  if (std::system(rm.c_str()) != 0) {
  }
}

std::string Lab::add_ns(const std::string& n) {
  std::string full = prefix_ + n;
  if (sh("ip netns add " + full) != 0) throw std::runtime_error("ip netns add " + full);
  namespaces_.push_back(full);
  nsh(full, "ip link set lo up");
  return full;
}

void Lab::add_veth(const std::string& ns_a, const std::string& if_a, const std::string& addr_a, const std::string& ns_b,
                   const std::string& if_b, const std::string& addr_b) {
  std::string a = prefix_ + if_a, b = prefix_ + if_b;
  if (a.size() > 15 || b.size() > 15) throw std::runtime_error("interface name too long: " + a + "/" + b);
  std::string cmd = "ip link add " + a + " netns " + ns_a + " type veth peer name " + b + " netns " + ns_b;
  if (sh(cmd) != 0) throw std::runtime_error(cmd);
  if (!addr_a.empty()) nsh(ns_a, "ip addr add " + addr_a + " dev " + a);
  if (!addr_b.empty()) nsh(ns_b, "ip addr add " + addr_b + " dev " + b);
  nsh(ns_a, "ip link set " + a + " up");
  nsh(ns_b, "ip link set " + b + " up");
}

int Lab::sh(const std::string& cmd) {
  int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

int Lab::nsh(const std::string& ns, const std::string& cmd) {
  return sh("ip netns exec " + ns + " sh -c '" + cmd + "'");
}

std::string Lab::out(const std::string& cmd, int* status) { return run_capture(cmd, status); }

std::string run_capture(const std::string& cmd, int* status) {
  std::string result;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return result;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) result.append(buf, n);
  int st = pclose(p);
  if (status) *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return result;
}

Process Lab::spawn(const std::string& ns, const std::vector<std::string>& argv, const std::string& logname) {
  std::string log = tmp_ + "/" + logname + ".log";
  std::vector<std::string> full;
  if (!ns.empty()) full = {"ip", "netns", "exec", ns};
  full.insert(full.end(), argv.begin(), argv.end());
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork");
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    std::vector<char*> av;
    for (auto& s : full) av.push_back(const_cast<char*>(s.c_str()));
    av.push_back(nullptr);
    execvp(av[0], av.data());
    _exit(127);
  }
  return Process(pid, log);
}

std::string Lab::bpffs() {
  if (bpffs_.empty()) {
    std::string d = tmp_ + "/bpffs";
    if (mkdir(d.c_str(), 0700) != 0 || mount("bpf", d.c_str(), "bpf", 0, "mode=0700") != 0)
      throw std::runtime_error("mount bpffs at " + d);
    bpffs_ = d;
  }
  return bpffs_;
}

std::string build_path(const std::string& rel) {
  if (const char* b = std::getenv("SLUICE_BUILD_DIR")) return std::string(b) + "/" + rel;
  // Test binaries live in <build>/tests/<kind>/.
  return self_dir() + "/../../" + rel;
}

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() > end) return pred();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

uint64_t until_done_or_stalled(const std::function<uint64_t()>& count, uint64_t goal, std::chrono::milliseconds quiet) {
  uint64_t last = count();
  auto moved = std::chrono::steady_clock::now();
  while (last < goal && std::chrono::steady_clock::now() - moved < quiet) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const uint64_t n = count();
    if (n != last) moved = std::chrono::steady_clock::now();
    last = n;
  }
  return last;
}

InNetns::InNetns(const std::string& ns) {
  old_ = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  int fd = open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
  if (old_ < 0 || fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
    if (fd >= 0) close(fd);
    if (old_ >= 0) close(old_);
    throw std::runtime_error("setns " + ns);
  }
  close(fd);
}

InNetns::~InNetns() {
  setns(old_, CLONE_NEWNET);
  close(old_);
}

}  // namespace sluice::test
