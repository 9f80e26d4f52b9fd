#include "lib/prog_test.h"

#include <linux/bpf.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace sluice::test {

namespace {
RunResult run(int prog_fd, const Bytes& pkt, const void* ctx, size_t ctx_size, int repeat) {
  RunResult r;
  r.out.assign(pkt.size() + 512, 0);
  LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = pkt.data(), .data_out = r.out.data(),
              .data_size_in = static_cast<__u32>(pkt.size()), .data_size_out = static_cast<__u32>(r.out.size()),
              .ctx_in = ctx, .ctx_size_in = static_cast<__u32>(ctx_size), .repeat = repeat);
  int rc = bpf_prog_test_run_opts(prog_fd, &o);
  if (rc) {
    ADD_FAILURE() << "BPF_PROG_TEST_RUN failed: " << std::strerror(errno);
    r.retval = -1000;
    return r;
  }
  r.retval = static_cast<int>(o.retval);
  r.out.resize(o.data_size_out);
  r.duration_ns = o.duration;
  return r;
}
}  // namespace

RunResult run_tc(int prog_fd, const Bytes& pkt, const void* skb_ctx, size_t ctx_size, int repeat) {
  return run(prog_fd, pkt, skb_ctx, ctx_size, repeat);
}

RunResult run_xdp(int prog_fd, const Bytes& pkt, int repeat) { return run(prog_fd, pkt, nullptr, 0, repeat); }

void run_table(int prog_fd, const std::vector<BpfCase>& cases, bool xdp) {
  for (const auto& c : cases) {
    SCOPED_TRACE("case: " + c.desc);
    if (c.before) c.before();
    RunResult r = xdp ? run_xdp(prog_fd, c.packet) : run_tc(prog_fd, c.packet);
    EXPECT_EQ(r.retval, c.verdict) << "verdict of case \"" << c.desc << "\"";
    if (c.check) c.check(r);
  }
}

void require_root() { ASSERT_EQ(geteuid(), 0u) << "BPF tests need root (CAP_BPF, CAP_NET_ADMIN); run them as root"; }

PinnedToOneCpu::PinnedToOneCpu() {
  if (sched_getaffinity(0, sizeof(old_), &old_) != 0) {
    ADD_FAILURE() << "sched_getaffinity: " << strerror(errno);
    return;
  }
  restore_ = true;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &old_)) {
      cpu_ = c;
      break;
    }
  if (cpu_ < 0) {
    ADD_FAILURE() << "sched_getaffinity returned an empty CPU set";
    return;
  }
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu_, &one);
  if (sched_setaffinity(0, sizeof(one), &one) != 0)
    ADD_FAILURE() << "could not pin the test to CPU " << cpu_ << ": " << strerror(errno);
}

PinnedToOneCpu::~PinnedToOneCpu() {
  if (restore_) sched_setaffinity(0, sizeof(old_), &old_);
}

bool kernel_at_least(int major, int minor) {
  struct utsname u {};
  if (uname(&u) != 0) return true;  // unknown: run the test
  int ma = 0, mi = 0;
  if (sscanf(u.release, "%d.%d", &ma, &mi) != 2) return true;
  return ma > major || (ma == major && mi >= minor);
}

}  // namespace sluice::test
