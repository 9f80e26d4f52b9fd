#include "bpf_util.h"

#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <filesystem>
#include <vector>

#include "log.h"

namespace sluice {

namespace fs = std::filesystem;

void make_dirs(const std::string& dir, mode_t mode) {
  std::string cur;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || (dir[i] == '/' && i > 0)) {
      cur = dir.substr(0, i);
      if (mkdir(cur.c_str(), mode) != 0 && errno != EEXIST) throw SysError("mkdir " + cur, errno);
    }
  }
}

bool on_bpffs(const std::string& path) {
  fs::path p(path);
  std::error_code ec;
  while (!p.empty() && !fs::exists(p, ec)) p = p.parent_path();
  if (p.empty()) return false;
  struct statfs st {};
  if (statfs(p.c_str(), &st) != 0) return false;
  return static_cast<unsigned long>(st.f_type) == BPF_FS_MAGIC;
}

void ensure_bpffs(const std::string& pin_root) {
  if (on_bpffs(pin_root)) return;
  const std::string std_mount = "/sys/fs/bpf";
  if (pin_root.rfind(std_mount + "/", 0) == 0) {
    struct statfs st {};
    if (statfs(std_mount.c_str(), &st) == 0 && static_cast<unsigned long>(st.f_type) != BPF_FS_MAGIC) {
      if (mount("bpf", std_mount.c_str(), "bpf", 0, "mode=0700") != 0)
        throw SysError("mount bpffs on " + std_mount, errno);
      SLOG_INFO("BPFFS_MOUNTED", "mounted a bpf filesystem on {} (nothing was mounted there)", std_mount);
      return;
    }
  }
  throw Error("pin_root " + pin_root + " is not on a bpf filesystem (mount -t bpf bpf <dir>)");
}

void set_pin_paths(bpf_object* obj, const std::string& dir) {
  bpf_map* map;
  bpf_object__for_each_map(map, obj) {
    if (bpf_map__is_internal(map)) continue;
    std::string path = dir + "/" + bpf_map__name(map);
    int rc = bpf_map__set_pin_path(map, path.c_str());
    if (rc) throw SysError("set pin path " + path, rc);
  }
}

void remove_pins(const std::string& dir) {
  std::error_code ec;
  for (auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_directory(ec)) unlink(e.path().c_str());
  }
  rmdir(dir.c_str());
}

int num_possible_cpus() {
  static int n = libbpf_num_possible_cpus();
  return n > 0 ? n : 1;
}

ReasonCounters read_reason_counters(int map_fd) {
  ReasonCounters out{};
  std::vector<sluice_counter> per_cpu(num_possible_cpus());
  for (uint32_t r = 0; r < SLUICE_REASON_SLOTS; ++r) {
    if (bpf_map_lookup_elem(map_fd, &r, per_cpu.data()) != 0) continue;
    for (const auto& c : per_cpu) {
      out[r].packets += c.packets;
      out[r].bytes += c.bytes;
    }
  }
  return out;
}

const ReasonInfo* reason_info(uint32_t reason) {
  static const ReasonInfo table[] = {
#define SLUICE_REASON_INFO(name, verdict, text) {#name, verdict, text},
      SLUICE_REASONS(SLUICE_REASON_INFO)
#undef SLUICE_REASON_INFO
  };
  if (reason >= sizeof(table) / sizeof(table[0])) return nullptr;
  return &table[reason];
}

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + ts.tv_nsec;
}

}  // namespace sluice
