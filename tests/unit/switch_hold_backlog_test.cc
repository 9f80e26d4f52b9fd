// Design B's view of the kernel backlog and its watchdog
// (agent/switch/hold_backlog.h): the backlog read from the qdisc's record
// plus what the agent sent since, and a watchdog that asks for a re-read
// only while the agent waits and no qdisc event comes. Times are plain
// numbers handed in, so nothing here depends on the clock.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <random>
#include <vector>

#include "switch/hold_backlog.h"

using namespace sluice::sw;

namespace {

HoldRecord rec(uint32_t qlen, uint64_t sent_at_ev, uint64_t events) {
  HoldRecord r;
  r.qlen = qlen;
  r.sent_at_ev = sent_at_ev;
  r.events = events;
  return r;
}

TEST(HoldBacklog, QlenAtTheEventPlusWhatWasSentSince) {
  EXPECT_EQ(hold_backlog(rec(0, 0, 0), 0), 0u);
  EXPECT_EQ(hold_backlog(rec(1, 10, 5), 10), 1u);  // nothing sent since the event
  EXPECT_EQ(hold_backlog(rec(1, 10, 5), 12), 3u);  // two sent since
  EXPECT_EQ(hold_backlog(rec(0, 10, 5), 11), 1u);
}

TEST(HoldBacklog, ASendTakenBackAfterAnEventCountedItIsNotNegative) {
  // The event saw agent_sent = 11 (counted before the send); the send
  // failed and the agent set it back to 10.
  EXPECT_EQ(hold_backlog(rec(2, 11, 5), 10), 2u);
}

TEST(HoldBacklog, AFrameTheQdiscDroppedLeavesTheBacklogAtTheNextEvent) {
  // Two frames sent after an event with qlen 0; the qdisc dropped one (its
  // qlen at the next event says 1): the backlog is 1, not 2.
  uint64_t sent = 2;
  EXPECT_EQ(hold_backlog(rec(0, 0, 1), sent), 2u);
  EXPECT_EQ(hold_backlog(rec(1, 2, 2), sent), 1u);
}

constexpr uint64_t kPeriod = 484'000;  // 4 packet times at 100 Mbit/s

TEST(HoldWatchdog, NotDueWhileEventsKeepComing) {
  HoldWatchdog wd(kPeriod);
  uint64_t t = 1'000'000, ev = 7;
  EXPECT_FALSE(wd.due(t, ev, true));
  for (int i = 0; i < 100; ++i) {
    t += kPeriod / 2;
    EXPECT_FALSE(wd.due(t, ++ev, true)) << i;
  }
  EXPECT_EQ(wd.fired(), 0u);
}

TEST(HoldWatchdog, NotDueWhenTheAgentIsNotWaiting) {
  HoldWatchdog wd(kPeriod);
  EXPECT_FALSE(wd.due(0, 7, false));
  EXPECT_FALSE(wd.due(10 * kPeriod, 7, false));
  EXPECT_EQ(wd.deadline_ns(), 0u);
}

TEST(HoldWatchdog, DueAfterAPeriodOfWaitingWithoutAnEvent) {
  HoldWatchdog wd(kPeriod);
  EXPECT_FALSE(wd.due(1000, 7, true));  // starts waiting: armed
  EXPECT_EQ(wd.deadline_ns(), 1000 + kPeriod);
  EXPECT_FALSE(wd.due(1000 + kPeriod - 1, 7, true));
  EXPECT_TRUE(wd.due(1000 + kPeriod, 7, true));
}

TEST(HoldWatchdog, TheWaitStartsWhenTheAgentStartsWaitingNotAtTheLastEvent) {
  HoldWatchdog wd(kPeriod);
  EXPECT_FALSE(wd.due(0, 7, false));
  EXPECT_FALSE(wd.due(5 * kPeriod, 7, true));  // no event for long, but it only now waits
  EXPECT_FALSE(wd.due(5 * kPeriod + 1, 7, true));
  EXPECT_TRUE(wd.due(6 * kPeriod, 7, true));
}

TEST(HoldWatchdog, AnEventRestartsThePeriod) {
  HoldWatchdog wd(kPeriod);
  EXPECT_FALSE(wd.due(0, 7, true));
  EXPECT_FALSE(wd.due(kPeriod - 1, 8, true));
  EXPECT_FALSE(wd.due(kPeriod + 1, 8, true));
  EXPECT_TRUE(wd.due(2 * kPeriod - 1, 8, true));
}

TEST(HoldWatchdog, CountsReReadsAndTheOnesThatFoundAMissedEvent) {
  HoldWatchdog wd(kPeriod);
  EXPECT_FALSE(wd.due(0, 7, true));
  ASSERT_TRUE(wd.due(kPeriod, 7, true));
  // The re-read found the qdisc empty: the record had said 2.
  wd.synced(kPeriod, 8, 2, 0);
  EXPECT_EQ(wd.fired(), 1u);
  EXPECT_EQ(wd.fixed(), 1u);
  EXPECT_EQ(wd.fixed_frames(), 2u);
  // Re-armed for another period, not due at once.
  EXPECT_FALSE(wd.due(kPeriod + 1, 8, true));
  ASSERT_TRUE(wd.due(2 * kPeriod, 8, true));
  // The qdisc really holds them (a shaper waiting for tokens): fired, not fixed.
  wd.synced(2 * kPeriod, 9, 2, 2);
  EXPECT_EQ(wd.fired(), 2u);
  EXPECT_EQ(wd.fixed(), 1u);
  EXPECT_EQ(wd.fixed_frames(), 2u);
}

}  // namespace

// PerMsMax: each closed millisecond keeps the largest value it saw; a
// millisecond without a change keeps the value then; only the last `cap`
// are kept, so an old peak ages out; a long idle gap costs at most `cap`.
TEST(PerMsMax, EachMillisecondKeepsItsLargestValue) {
  PerMsMax m;
  EXPECT_EQ(m.summary().intervals, 0u);
  m.set(100, 1'000'000);
  m.set(300, 1'500'000);  // ms 1: 300
  m.set(50, 2'200'000);   // ms 2: started at 300
  m.set(50, 5'000'000);   // ms 3, 4: 50
  const PerMsMax::Summary s = m.summary();
  EXPECT_EQ(s.intervals, 4u);
  EXPECT_EQ(s.max, 300u);
  EXPECT_EQ(s.p99, 300u);
}

TEST(PerMsMax, KeepsTheLastCapMillisecondsOnly) {
  PerMsMax m(10);
  for (uint64_t ms = 1; ms <= 26; ++ms) m.set(1000 - ms, ms * 1'000'000);  // closes ms 1..25
  PerMsMax::Summary s = m.summary();
  EXPECT_EQ(s.intervals, 10u);
  // ms k started at the value set at ms k - 1: its maximum is 1001 - k.
  EXPECT_EQ(s.max, 1000u - 15) << "ms 16..25 are kept; the peak of ms 1 aged out";
  // An idle hour: bounded work, every kept millisecond at the idle value.
  m.set(7, 27'000'000);
  m.set(7, 3'600'000'000'000ull);
  s = m.summary();
  EXPECT_EQ(s.intervals, 10u);
  EXPECT_EQ(s.max, 7u);
}

// Every value falls in a bucket whose top is at least the value and at
// most 1/512 above it; below 1024 the bucket is the value itself.
TEST(PerMsMax, BucketsAreExactBelow1024AndWithinAFifthOfAPercentAbove) {
  std::mt19937 rng(7);
  std::vector<uint32_t> xs = {0, 1, 1023, 1024, 1025, 2047, 2048, 131072, 131071, UINT32_MAX, UINT32_MAX - 1};
  for (int i = 0; i < 100'000; ++i) xs.push_back(rng() >> (rng() % 32));
  size_t last = 0;
  std::sort(xs.begin(), xs.end());
  for (uint32_t x : xs) {
    const size_t b = PerMsMax::bucket(x);
    const uint64_t top = PerMsMax::bucket_top(b);
    ASSERT_GE(top, x);
    if (x < 1024) {
      ASSERT_EQ(top, x);
    }
    ASSERT_LE(double(top - x), double(x) / 512) << x;
    ASSERT_GE(b, last) << "buckets grow with the value";
    last = b;
  }
}

// The summary read from the histogram agrees with sorting the kept
// milliseconds (what it replaced) within the buckets' precision, never
// below, as the ring turns over and after an idle gap longer than it.
TEST(PerMsMax, SummaryAgreesWithSortingTheKeptMilliseconds) {
  constexpr size_t kCap = 5'000;
  PerMsMax m(kCap);
  std::deque<uint32_t> kept;  // the reference: each closed millisecond's maximum
  std::mt19937 rng(3);
  uint64_t now = 1'000'000, value = 0, ms_max = 0;
  auto check = [&] {
    const PerMsMax::Summary s = m.summary();
    ASSERT_EQ(s.intervals, kept.size());
    std::vector<uint32_t> v(kept.begin(), kept.end());
    const uint32_t max = *std::max_element(v.begin(), v.end());
    auto k = v.begin() + long(std::min(v.size() - 1, size_t(0.99 * double(v.size() - 1) + 0.5)));
    std::nth_element(v.begin(), k, v.end());
    EXPECT_GE(s.p99, *k);
    EXPECT_LE(double(s.p99 - *k), double(*k) / 512);
    EXPECT_GE(s.max, max);
    EXPECT_LE(double(s.max - max), double(max) / 512);
  };
  auto close = [&](uint32_t x) {
    kept.push_back(x);
    if (kept.size() > kCap) kept.pop_front();
  };
  m.set(0, now);
  for (int i = 0; i < 30'000; ++i) {
    // A change every 0-2 ms: some milliseconds see several, some none.
    const uint64_t next = now + rng() % 2'000'000;
    const uint64_t v = rng() % 4 == 0 ? rng() % 2'000'000 : rng() % 3'000;
    if (next / 1'000'000 > now / 1'000'000) {
      close(uint32_t(ms_max));
      for (uint64_t ms = now / 1'000'000 + 1; ms < next / 1'000'000; ++ms) close(uint32_t(value));
      ms_max = value;
    }
    now = next;
    value = v;
    ms_max = std::max(ms_max, v);
    m.set(v, now);
    if (i % 3'000 == 0 && !kept.empty()) check();
  }
  check();
  // Idle for longer than the ring: every kept millisecond at the value then.
  const uint64_t later = now + 3 * kCap * 1'000'000;
  close(uint32_t(ms_max));
  for (uint64_t ms = now / 1'000'000 + 1; ms < later / 1'000'000; ++ms) close(uint32_t(value));
  m.set(5, later);
  check();
  EXPECT_EQ(m.summary().max, PerMsMax::bucket_top(PerMsMax::bucket(uint32_t(value))));
}
