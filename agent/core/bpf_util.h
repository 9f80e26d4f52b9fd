// Small RAII and map helpers over libbpf. One Skeleton<T> per loaded BPF
// object; copy is deleted; every failure says which object and why.
#pragma once

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "error.h"
#include "sluice/reasons.h"

namespace sluice {

// Adapts a bpftool-generated skeleton type to Skeleton<T>. Declare next to
// the `#include "<name>.skel.h"` with SLUICE_SKELETON(name).
template <typename T>
struct SkelOps;

#define SLUICE_SKELETON(name)                                                                       \
  template <>                                                                                       \
  struct sluice::SkelOps<struct name> {                                                             \
    static struct name* open(const struct bpf_object_open_opts* o) { return name##__open_opts(o); } \
    static int load(struct name* s) { return name##__load(s); }                                     \
    static void destroy(struct name* s) { name##__destroy(s); }                                     \
    static constexpr const char* kName = #name;                                                     \
  }

// Creates `dir` and its parents; the leaf must be on a bpf filesystem when it
// holds pins.
void make_dirs(const std::string& dir, mode_t mode = 0700);

// True when `path` (or, if it does not exist yet, its nearest existing parent)
// is on a bpf filesystem.
bool on_bpffs(const std::string& path);

// Ensures pins can be made under `pin_root`: mounts bpffs at /sys/fs/bpf if
// pin_root lies there and nothing is mounted (as systemd would), else throws.
void ensure_bpffs(const std::string& pin_root);

// Sets the pin path of every non-internal map of `obj` to dir/<map name>, so
// load() reuses maps pinned by an earlier run (state survives a restart) and
// pins new ones.
void set_pin_paths(bpf_object* obj, const std::string& dir);

// Removes the pins set by set_pin_paths and the directory if it is empty.
void remove_pins(const std::string& dir);

template <typename T>
class Skeleton {
 public:
  Skeleton() {
    skel_ = SkelOps<T>::open(nullptr);
    if (!skel_) throw SysError(std::string("open BPF object ") + SkelOps<T>::kName, errno);
  }
  ~Skeleton() {
    if (skel_) SkelOps<T>::destroy(skel_);
  }
  Skeleton(const Skeleton&) = delete;
  Skeleton& operator=(const Skeleton&) = delete;

  // Pins live under `dir`; must be called before load().
  void pin_maps(const std::string& dir) {
    make_dirs(dir);
    set_pin_paths(skel_->obj, dir);
    pin_dir_ = dir;
  }

  void load() {
    int rc = SkelOps<T>::load(skel_);
    if (rc) {
      std::string hint;
      if (!pin_dir_.empty())
        hint = " (if a pinned map under " + pin_dir_ +
               " no longer matches this build, `sluiced --purge` removes old pins)";
      throw SysError(std::string("load BPF object ") + SkelOps<T>::kName + hint, rc);
    }
  }

  T* operator->() const { return skel_; }
  T* get() const { return skel_; }
  bpf_object* obj() const { return skel_->obj; }
  const std::string& pin_dir() const { return pin_dir_; }

 private:
  T* skel_ = nullptr;
  std::string pin_dir_;
};

// Sum of a per-CPU sl_counters array, indexed by enum sluice_reason.
using ReasonCounters = std::array<sluice_counter, SLUICE_REASON_SLOTS>;
ReasonCounters read_reason_counters(int map_fd);

struct ReasonInfo {
  const char* name;     // PASS_COUNTED
  const char* verdict;  // pass
  const char* text;     // flow counted
};
// Name of a reason code, or nullptr for an unused slot.
const ReasonInfo* reason_info(uint32_t reason);

// Reads every element of a per-CPU map value slot and sums as T (u64 fields).
int num_possible_cpus();

// Iterates a hash map: fn(key, value) for every entry present.
template <typename K, typename V>
void for_each_entry(int map_fd, const std::function<void(const K&, const V&)>& fn) {
  K key{}, next{};
  V val{};
  bool first = true;
  while (bpf_map_get_next_key(map_fd, first ? nullptr : &key, &next) == 0) {
    first = false;
    if (bpf_map_lookup_elem(map_fd, &next, &val) == 0) fn(next, val);
    key = next;
  }
}

// Current CLOCK_MONOTONIC in ns, the clock bpf_ktime_get_ns() reads.
uint64_t monotonic_ns();

}  // namespace sluice
