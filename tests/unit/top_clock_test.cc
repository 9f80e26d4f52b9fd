// TOP clock manager logic: pmc's answers (as ptp4l 3.1 prints them) parsed
// into offset, path delay and port state; the expiry threshold widened by
// the bound while unsynced or off by more than the bound; T derived as §5.1.
#include <gtest/gtest.h>

#include "mechanisms/top/clock.h"

using namespace sluice::top;

namespace {

// Captured from pmc against ptp4l -S --free_running 1 on a lab veth.
const char* kUncalibrated =
    "sending: GET CURRENT_DATA_SET\n"
    "sending: GET PORT_DATA_SET\n"
    "\tbe3309.fffe.6139a7-0 seq 0 RESPONSE MANAGEMENT CURRENT_DATA_SET \n"
    "\t\tstepsRemoved     1\n"
    "\t\toffsetFromMaster 20.0\n"
    "\t\tmeanPathDelay    2263.0\n"
    "\tbe3309.fffe.6139a7-1 seq 1 RESPONSE MANAGEMENT PORT_DATA_SET \n"
    "\t\tportIdentity            be3309.fffe.6139a7-1\n"
    "\t\tportState               UNCALIBRATED\n"
    "\t\tlogMinDelayReqInterval  0\n";

}  // namespace

TEST(TopClock, ParsesPmcAnswers) {
  ClockSample s = sample_from_pmc(kUncalibrated);
  EXPECT_TRUE(s.have_ptp);
  EXPECT_EQ(s.offset_ns, 20);
  EXPECT_EQ(s.path_delay_ns, 2263);
  EXPECT_EQ(s.steps_removed, 1);
  EXPECT_EQ(s.port_state, "UNCALIBRATED");
  EXPECT_FALSE(synced(s));
  std::string slave = kUncalibrated;
  slave.replace(slave.find("UNCALIBRATED"), 12, "SLAVE");
  EXPECT_TRUE(synced(sample_from_pmc(slave)));
}

TEST(TopClock, MalformedOrMissingAnswersMeanNoPtp) {
  EXPECT_FALSE(sample_from_pmc("").have_ptp);
  EXPECT_FALSE(sample_from_pmc("sending: GET CURRENT_DATA_SET\n").have_ptp);
  std::string bad = kUncalibrated;
  bad.replace(bad.find("20.0"), 4, "abc");
  EXPECT_FALSE(sample_from_pmc(bad).have_ptp);
  std::string no_port = std::string(kUncalibrated).substr(0, std::string(kUncalibrated).find("\tbe3309.fffe.6139a7-1"));
  EXPECT_FALSE(sample_from_pmc(no_port).have_ptp);
  EXPECT_FALSE(read_ptp4l("/nonexistent;rm -rf /").have_ptp);  // never reaches a shell
}

TEST(TopClock, WidensWhileUnsyncedOrOffBeyondTheBound) {
  const uint64_t T = 2'000'000, bound = 500'000;
  ClockSample none;
  auto e = expiry_for(none, T, bound);
  EXPECT_EQ(e.threshold_ns, T);
  EXPECT_EQ(e.widen_ns, bound);
  EXPECT_FALSE(e.why.empty());
  ClockSample s = sample_from_pmc(kUncalibrated);
  EXPECT_EQ(expiry_for(s, T, bound).widen_ns, bound);
  s.port_state = "SLAVE";
  e = expiry_for(s, T, bound);
  EXPECT_EQ(e.widen_ns, 0u);
  EXPECT_TRUE(e.why.empty());
  s.offset_ns = -800'000;
  EXPECT_EQ(expiry_for(s, T, bound).widen_ns, 800'000u + bound);
}

// §5.1 with its own numbers: 6 tokens of 84 B at 5% of 10 Gbit/s is 8 us
// per hop; 10 us one way gives T = 26 us.
TEST(TopClock, ThresholdAsSection51) {
  EXPECT_NEAR(static_cast<double>(derive_threshold_ns(10'000, 10e9, 0.05, 6)), 26'128.0, 1.0);
}
