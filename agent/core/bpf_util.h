// Small RAII and map helpers over libbpf. One Skeleton<T> per loaded BPF
// object; copy is deleted; every failure says which object and why.
#pragma once

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
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

// The ELF of an object to open through another object's skeleton type.
struct SkelElf {
  const void* data = nullptr;  // nullptr: the skeleton's own
  size_t size = 0;
  const char* name = nullptr;
};

#define SLUICE_SKELETON_OPS(name, choose_expr)                                                      \
  template <>                                                                                       \
  struct sluice::SkelOps<struct name> {                                                             \
    static struct name* open(const struct bpf_object_open_opts* o) { return name##__open_opts(o); } \
    static int load(struct name* s) { return name##__load(s); }                                     \
    static void destroy(struct name* s) { name##__destroy(s); }                                     \
    static int create(struct name* s) { return name##__create_skeleton(s); }                        \
    static sluice::SkelElf choose() { return choose_expr; }                                         \
    static constexpr const char* kName = #name;                                                     \
  }

#define SLUICE_SKELETON(name) SLUICE_SKELETON_OPS(name, sluice::SkelElf{})

// `twin` is built from `name`'s source with other DEFINES (e.g. pac_tc_compat
// of pac_tc): the same maps, programs and globals, other code. A
// Skeleton<name> opens name's own ELF or twin's, as
// `chooser(SkelElf own, SkelElf twin)` says. The globals' sizes are checked
// here, their layout by twin's own skeleton.
#define SLUICE_SKEL_ELF(obj)            \
  [] {                                  \
    sluice::SkelElf e;                  \
    e.data = obj##__elf_bytes(&e.size); \
    e.name = #obj;                      \
    return e;                           \
  }()
#define SLUICE_SKELETON_TWIN(obj, twin, chooser)                                                                     \
  static_assert(sizeof(*static_cast<struct obj*>(nullptr)->bss) == sizeof(*static_cast<struct twin*>(nullptr)->bss), \
                #twin " .bss");                                                                                      \
  static_assert(                                                                                                     \
      sizeof(*static_cast<struct obj*>(nullptr)->rodata) == sizeof(*static_cast<struct twin*>(nullptr)->rodata),     \
      #twin " .rodata");                                                                                             \
  SLUICE_SKELETON_OPS(obj, chooser(SLUICE_SKEL_ELF(obj), SLUICE_SKEL_ELF(twin)))

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
    SkelElf elf = SkelOps<T>::choose();
    if (!elf.data || !std::strcmp(elf.name, SkelOps<T>::kName)) {
      skel_ = SkelOps<T>::open(nullptr);
      if (!skel_) throw SysError(std::string("open BPF object ") + SkelOps<T>::kName, errno);
      return;
    }
    // The twin's ELF through T's skeleton.
    skel_ = static_cast<T*>(calloc(1, sizeof(T)));
    if (!skel_) throw SysError(std::string("open BPF object ") + elf.name, ENOMEM);
    int rc = SkelOps<T>::create(skel_);
    if (!rc) {
      skel_->skeleton->data = elf.data;
      skel_->skeleton->data_sz = elf.size;
      rc = bpf_object__open_skeleton(skel_->skeleton, nullptr);
    }
    if (rc) {
      SkelOps<T>::destroy(skel_);
      skel_ = nullptr;
      throw SysError(std::string("open BPF object ") + elf.name, -rc);
    }
    name_ = elf.name;
  }
  ~Skeleton() {
    if (skel_) SkelOps<T>::destroy(skel_);
  }
  // The object opened: T's own or its twin's.
  const char* name() const { return name_; }
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
      throw SysError(std::string("load BPF object ") + name_ + hint, rc);
    }
  }

  T* operator->() const { return skel_; }
  T* get() const { return skel_; }
  bpf_object* obj() const { return skel_->obj; }
  const std::string& pin_dir() const { return pin_dir_; }

 private:
  T* skel_ = nullptr;
  const char* name_ = SkelOps<T>::kName;
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

// Iterates a hash map: fn(key, value) for every entry present. Batched
// (kBatch entries a syscall): one entry at a time, a full 65,536-entry table
// cost two syscalls an entry (docs/operations.md "100,000 flows"). A kernel
// or map without batched lookups is read one entry at a time.
template <typename K, typename V>
void for_each_entry(int map_fd, const std::function<void(const K&, const V&)>& fn) {
  constexpr __u32 kBatch = 256;
  std::vector<K> keys(kBatch);
  std::vector<V> vals(kBatch);
  uint64_t token = 0;  // the hash map's bucket to go on from (u32 in the kernel)
  for (bool first = true;; first = false) {
    __u32 n = kBatch;
    int rc = bpf_map_lookup_batch(map_fd, first ? nullptr : &token, &token, keys.data(), vals.data(), &n, nullptr);
    int err = rc ? errno : 0;
    if (rc && err != ENOENT && first) break;  // no batched lookups: below
    for (__u32 i = 0; i < n; ++i) fn(keys[i], vals[i]);
    if (rc || n == 0) return;
  }
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
