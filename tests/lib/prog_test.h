// Table-driven BPF tests through BPF_PROG_TEST_RUN: each case has a
// description, a packet, the expected verdict and a check of map effects.
#pragma once

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <functional>
#include <string>
#include <vector>

#include "lib/packet.h"
#include "core/features.h"

struct __sk_buff;

namespace sluice::test {

struct RunResult {
  int retval = 0;
  Bytes out;  // the packet after the program (rewrites visible)
  uint32_t duration_ns = 0;
};

// Runs a SCHED_CLS program on `pkt`. `ctx` (optional) sets __sk_buff fields
// the kernel lets a test set (mark, priority, gso_segs, ...). Fails the test
// (ADD_FAILURE) and returns retval -1000 if the run itself fails.
RunResult run_tc(int prog_fd, const Bytes& pkt, const void* skb_ctx = nullptr, size_t ctx_size = 0, int repeat = 1);
RunResult run_xdp(int prog_fd, const Bytes& pkt, int repeat = 1);

// One row of a table. `check` sees the result (and can read maps); it runs
// after the verdict is compared.
struct BpfCase {
  std::string desc;
  Bytes packet;
  int verdict;
  std::function<void(const RunResult&)> check = nullptr;
  std::function<void()> before = nullptr;  // set up maps for this case
};

// Runs every case against prog_fd in order, with the description in every
// failure message.
void run_table(int prog_fd, const std::vector<BpfCase>& cases, bool xdp = false);

// Whether the kernel says we are root with CAP_BPF/CAP_SYS_ADMIN; tests that
// need BPF fail loudly (not skip) without it.
void require_root();

// Whether uname's release is at least major.minor.
bool kernel_at_least(int major, int minor);

// Keeps the calling thread on one CPU (the first it may run on) while in
// scope, then gives back the CPU set it had. BPF_PROG_TEST_RUN runs the
// program on the caller's CPU, and some map types keep per-CPU state that
// changes what a test sees: the kernel's common LRU hash hands each CPU a
// batch of up to 128 free entries, and the new entries of a batch wait on
// that CPU's local list, where eviction does not reach them, until the
// same CPU inserts again (kernel/bpf/bpf_lru_list.c, LOCAL_FREE_TARGET). A
// test thread the scheduler moves to another CPU leaves such a batch
// behind: old flows that an exact eviction order would have dropped.
// Fails the test (ADD_FAILURE) if the affinity cannot be set.
class PinnedToOneCpu {
 public:
  PinnedToOneCpu();
  ~PinnedToOneCpu();
  PinnedToOneCpu(const PinnedToOneCpu&) = delete;
  PinnedToOneCpu& operator=(const PinnedToOneCpu&) = delete;
  int cpu() const { return cpu_; }

 private:
  cpu_set_t old_{};
  bool restore_ = false;
  int cpu_ = -1;
};

// The sum over CPUs of the `packets` field of slot `key` of a per-CPU map
// whose values are Counter ({packets, bytes} counters of every mechanism).
template <class Counter>
uint64_t percpu_packets(int map_fd, uint32_t key) {
  std::vector<Counter> v(static_cast<size_t>(libbpf_num_possible_cpus()));
  EXPECT_EQ(bpf_map_lookup_elem(map_fd, &key, v.data()), 0) << "slot " << key;
  uint64_t n = 0;
  for (const auto& c : v) n += c.packets;
  return n;
}

// A ring_buffer__new callback appending each record, checked to be one T,
// to the std::vector<T> passed as ctx.
template <class T>
int collect_record(void* ctx, void* data, size_t size) {
  EXPECT_EQ(size, sizeof(T));
  if (size == sizeof(T)) static_cast<std::vector<T>*>(ctx)->push_back(*static_cast<const T*>(data));
  return 0;
}

// The records of a BPF ring buffer map, one T each: consume() appends what
// the programs wrote since the last call to `events`. The destructor drains
// the map, so the next test's RingRecords on it starts empty.
template <class T>
class RingRecords {
 public:
  explicit RingRecords(int map_fd) : rb_(ring_buffer__new(map_fd, &collect_record<T>, &events, nullptr)) {}
  ~RingRecords() {
    if (!rb_) return;
    ring_buffer__consume(rb_);
    ring_buffer__free(rb_);
  }
  RingRecords(const RingRecords&) = delete;
  RingRecords& operator=(const RingRecords&) = delete;
  bool ok() const { return rb_ != nullptr; }
  void consume() { ring_buffer__consume(rb_); }
  // The epoll fd an agent's loop waits on (readable when BPF woke it).
  int epoll_fd() const { return ring_buffer__epoll_fd(rb_); }

  std::vector<T> events;

 private:
  ring_buffer* rb_;
};

}  // namespace sluice::test

// Skips the current test, printing why, when the running kernel is older than
// the release that added `what`. On a kernel new enough to have the feature
// the test runs and fails loudly if the feature does not work. Use in a test
// body or SetUp().
#define SLUICE_REQUIRE_KERNEL(major, minor, what)                                                                     \
  do {                                                                                                                \
    if (!::sluice::test::kernel_at_least(major, minor))                                                               \
      GTEST_SKIP() << (what) << " needs Linux " #major "." #minor "+; this kernel is " << ::sluice::kernel_release(); \
  } while (0)

namespace sluice::test {}  // namespace sluice::test
