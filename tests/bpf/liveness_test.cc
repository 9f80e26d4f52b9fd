// The fail-open decision every diverting program makes (bpf/lib/liveness.h),
// run in the kernel through probe_liveness (BPF_PROG_TEST_RUN): a stale
// heartbeat fails open when the thread it names is gone (exited, reaped or
// not, or its id recycled: another start time), stopped (SIGSTOP) or when
// the agent withdrew, and not while that thread exists and may run, up to
// stall_ns. The thread here is a child process's (single-threaded: its pid is
// its thread id). PAC's and the switch classifier's programs call the same
// function (pac_test, swport_test: wired in).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "core/bpf_util.h"
#include "core/features.h"
#include "core/heartbeat.h"
#include "lib/packet.h"
#include "lib/prog_test.h"
#include "sluice/liveness.h"
#include "probe_liveness.skel.h"

SLUICE_SKELETON(probe_liveness);

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr uint64_t kLimitNs = 60'000'000;
constexpr uint64_t kStallNs = 5'000'000'000;

// A child that sleeps until killed; stopped, continued, killed and reaped on
// request.
class Child {
 public:
  Child() {
    pid_ = fork();
    if (pid_ == 0) {
      for (;;) pause();
    }
    if (pid_ > 0) start_ = start_ticks_of("/proc/" + std::to_string(pid_) + "/stat");
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  uint64_t start() const { return start_; }
  void stop() {
    kill(pid_, SIGSTOP);
    int st = 0;
    ASSERT_EQ(waitpid(pid_, &st, WUNTRACED), pid_);
    ASSERT_TRUE(WIFSTOPPED(st));
  }
  void cont() {
    kill(pid_, SIGCONT);
    int st = 0;
    ASSERT_EQ(waitpid(pid_, &st, WCONTINUED), pid_);
  }
  // Killed; a zombie until reap().
  void kill9() {
    kill(pid_, SIGKILL);
    siginfo_t si{};
    ASSERT_EQ(waitid(P_PID, id_t(pid_), &si, WEXITED | WNOWAIT), 0);
  }
  void reap() {
    ASSERT_EQ(waitpid(pid_, nullptr, 0), pid_);
    reaped_ = true;
  }

 private:
  pid_t pid_ = -1;
  uint64_t start_ = 0;
  bool reaped_ = false;
};

class LivenessBpfTest : public ::testing::Test {
 protected:
  void SetUp() override {
    require_root();
    const FeatureResult& f = task_from_pid_feature();
    if (!f.ok) GTEST_SKIP() << "bpf-task-from-pid missing on this kernel (the *_compat objects run): " << f.detail;
    skel_ = std::make_unique<Skeleton<probe_liveness>>();
    (*skel_)->rodata->fail_open_ns = kLimitNs;
    skel_->load();
    live_ = &(*skel_)->bss->live;
  }
  void name(pid_t tid, uint64_t start) {
    live_->task_tid = tid;
    live_->task_start = start;
    live_->tick_ns = 1'000'000'000ull / uint64_t(sysconf(_SC_CLK_TCK));
    live_->stall_ns = kStallNs;
    live_->withdrawn = 0;
  }
  void beat_ago(uint64_t ns) { live_->heartbeat_ns = monotonic_ns() - ns; }
  int verdict() {
    Bytes pkt(64, 0);
    return run_tc(bpf_program__fd((*skel_)->progs.probe_liveness), pkt).retval;
  }

  std::unique_ptr<Skeleton<probe_liveness>> skel_;
  sluice_liveness* live_ = nullptr;
};

TEST_F(LivenessBpfTest, AStaleHeartbeatFailsOpenOnlyWhenTheThreadIsGoneOrStopped) {
  Child c;
  ASSERT_GT(c.pid(), 0);
  ASSERT_NE(c.start(), 0u);
  name(c.pid(), c.start());
  live_->heartbeat_ns = 0;
  EXPECT_EQ(verdict(), SLUICE_DEAD_NO_HEARTBEAT);
  beat_ago(0);
  EXPECT_EQ(verdict(), SLUICE_LIVE_FRESH);
  live_->heartbeat_ns = monotonic_ns() + 1'000'000;
  EXPECT_EQ(verdict(), SLUICE_LIVE_FRESH) << "a heartbeat newer than the program's clock read is fresh";

  beat_ago(2 * kLimitNs);
  EXPECT_EQ(verdict(), SLUICE_LIVE_TASK) << "stale, but the thread exists and may run: a busy machine";
  beat_ago(kStallNs + kLimitNs);
  EXPECT_EQ(verdict(), SLUICE_DEAD_STALL) << "a live thread gets stall_ns, no more";

  beat_ago(2 * kLimitNs);
  live_->withdrawn = 1;
  EXPECT_EQ(verdict(), SLUICE_DEAD_WITHDRAWN) << "the agent withdrew (loop stalled): the limit applies";
  live_->withdrawn = 0;

  c.stop();
  EXPECT_EQ(verdict(), SLUICE_DEAD_TASK_STOPPED) << "SIGSTOP: fails open at the limit";
  beat_ago(kLimitNs / 2);
  EXPECT_EQ(verdict(), SLUICE_LIVE_FRESH) << "a stopped thread with a fresh heartbeat (the stop just began)";
  c.cont();
  beat_ago(2 * kLimitNs);
  EXPECT_EQ(verdict(), SLUICE_LIVE_TASK) << "continued: alive again";

  name(c.pid(), c.start() + 1);
  EXPECT_EQ(verdict(), SLUICE_DEAD_TASK_GONE) << "the id now belongs to a thread started at another time";
  name(c.pid(), c.start());

  c.kill9();
  EXPECT_EQ(verdict(), SLUICE_DEAD_TASK_GONE) << "killed, not yet reaped (zombie)";
  c.reap();
  EXPECT_EQ(verdict(), SLUICE_DEAD_TASK_GONE) << "killed and reaped";
}

TEST_F(LivenessBpfTest, WithoutAThreadNamedTheHeartbeatAloneDecides) {
  beat_ago(2 * kLimitNs);
  EXPECT_EQ(verdict(), SLUICE_DEAD_STALE) << "no thread recorded";
  name(pid_t(syscall(SYS_gettid)), start_ticks_of("/proc/thread-self/stat"));
  EXPECT_EQ(verdict(), SLUICE_LIVE_TASK) << "this very thread, running";
  live_->stall_ns = 0;
  EXPECT_EQ(verdict(), SLUICE_DEAD_STALE) << "stall_ns 0: the thread is not looked at";
}

}  // namespace
