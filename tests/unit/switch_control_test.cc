// Control frames in C++ (agent/switch/control.cc): the shared table of
// valid and malformed frames gets the expected reason; encode/decode round
// trip; random bytes never crash the parser and never decode into a frame
// the encoder would not produce.
#include <gtest/gtest.h>

#include <random>

#include "lib/ctrl_cases.h"
#include "switch/control.h"

using namespace sluice;
using namespace sluice::sw;

TEST(SwitchControl, TableOfFrames) {
  for (const auto& c : test::ctrl_cases()) {
    SCOPED_TRACE(c.desc);
    long off = ctrl_payload_offset(c.frame.data(), c.frame.size());
    ASSERT_GE(off, 14);
    ControlFrame f;
    f.type = CtrlType::kResume;
    f.queues = {{42, 42}};
    ControlFrame before = f;
    int r = accept_control(c.role, c.frame.data() + off, c.frame.size() - off, &f);
    EXPECT_EQ(ctrl_reason_name(r), ctrl_reason_name(c.reason));
    if (r != SL_CTRL_R_OK) {
      // A rejected frame leaves the output untouched.
      EXPECT_EQ(f.type, before.type);
      ASSERT_EQ(f.queues.size(), 1u);
      EXPECT_EQ(f.queues[0].queue, 42);
    }
  }
}

TEST(SwitchControl, RoundTripEveryType) {
  const auto d4 = addr_parse("192.168.1.7"), d6 = addr_parse("fd00::1:2");
  std::vector<ControlFrame> frames(7);
  frames[0].type = CtrlType::kCredit;
  frames[0].credits = {{d4, 1514 * 3, 0xfffffff0u, 3}, {d6, 0, 5, 0}};
  frames[1].type = CtrlType::kSwitchSyn;
  frames[1].syns = {{d6, 77}};
  frames[2].type = CtrlType::kPause;
  frames[2].queues = {{0, 0}, {127, 0xffffffffu}};
  frames[3].type = CtrlType::kResume;
  frames[3].queues = {{5, 6}};
  frames[4].type = CtrlType::kPauseBitmap;
  frames[4].bitmaps = {{64, 9, 0x0123456789abcdefull}};
  frames[5].type = CtrlType::kDstPause;
  frames[5].dsts = {{d4, 1}};
  frames[6].type = CtrlType::kDstResume;
  frames[6].dsts = {{d4, 2}};
  for (const auto& in : frames) {
    SCOPED_TRACE(std::string(ctrl_type_name(in.type)));
    int r = -1;
    auto bytes = encode(in, &r);
    ASSERT_EQ(r, SL_CTRL_R_OK);
    ASSERT_EQ(bytes.size(), 8 + in.count() * sl_ctrl_rec_size(uint32_t(in.type)));
    ControlFrame out;
    ASSERT_EQ(decode(bytes.data(), bytes.size(), &out), SL_CTRL_R_OK);
    EXPECT_EQ(out.type, in.type);
    ASSERT_EQ(out.count(), in.count());
    EXPECT_EQ(encode(out), bytes);
  }
  EXPECT_EQ(addr_str(d4), "192.168.1.7");
  EXPECT_EQ(addr_str(d6), "fd00::1:2");
  // Field placement on the wire, big-endian.
  ControlFrame p{CtrlType::kPause};
  p.queues = {{0x0071, 0x0a0b0c0d}};
  auto b = encode(p);
  std::vector<uint8_t> want{1, 3, 0, 16, 0, 8, 0, 0, 0x00, 0x71, 0, 0, 0x0a, 0x0b, 0x0c, 0x0d};
  EXPECT_EQ(b, want);
}

TEST(SwitchControl, EncoderRefusesWhatAReceiverRejects) {
  ControlFrame f{CtrlType::kPause};
  f.queues = {{SLUICE_SW_MAX_QUEUES, 1}};
  int r = 0;
  EXPECT_TRUE(encode(f, &r).empty());
  EXPECT_EQ(r, SL_CTRL_R_QUEUE_RANGE);
  f.queues.assign(33, QueueRec{1, 1});
  EXPECT_TRUE(encode(f, &r).empty());
  EXPECT_EQ(r, SL_CTRL_R_BAD_COUNT);
  f.queues.clear();
  EXPECT_TRUE(encode(f, &r).empty());
  EXPECT_EQ(r, SL_CTRL_R_BAD_COUNT);
  ControlFrame c{CtrlType::kCredit};
  c.credits = {{Addr{}, 1, 1, 1}};
  EXPECT_TRUE(encode(c, &r).empty());
  EXPECT_EQ(r, SL_CTRL_R_BAD_DST);
  EXPECT_THROW(addr_parse("10.0.0"), std::invalid_argument);
}

TEST(SwitchControl, RandomBytesNeverCrashAndValidOnesReencode) {
  std::mt19937 rng(24);
  size_t ok = 0;
  for (int i = 0; i < 200000; ++i) {
    std::vector<uint8_t> b(rng() % 80);
    for (auto& x : b) x = uint8_t(rng());
    if (b.size() >= 8 && (i & 1)) {  // half of them with a plausible header
      b[0] = 1;
      b[1] = uint8_t(1 + rng() % 7);
      uint16_t rs = uint16_t(sl_ctrl_rec_size(b[1]));
      uint16_t n = uint16_t(rng() % 4);
      uint16_t len = uint16_t(8 + n * rs);
      b[2] = uint8_t(len >> 8), b[3] = uint8_t(len);
      b[4] = 0, b[5] = uint8_t(rs);
      b[6] = b[7] = 0;
    }
    ControlFrame f;
    int r = decode(b.data(), b.size(), &f);
    ASSERT_GE(r, 0);
    ASSERT_LT(r, SL_CTRL_R_COUNT);
    if (r == SL_CTRL_R_OK) {
      ++ok;
      auto again = encode(f);
      ASSERT_FALSE(again.empty());
      ASSERT_LE(again.size(), b.size());
      ASSERT_TRUE(std::equal(again.begin(), again.end(), b.begin()));
    }
  }
  EXPECT_GT(ok, 100u);  // the plausible half reaches the record checks
}
