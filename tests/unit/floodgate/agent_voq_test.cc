// [floodgate] voq = "agent": the VOQs sluiced keeps per (egress port,
// destination) (agent/mechanisms/floodgate/agent_voq.h): FIFO release by
// window, the bytes held per port, and a VOQ erased once it is empty (the
// map is bounded by the destinations waiting now).
#include <gtest/gtest.h>

#include <vector>

#include "mechanisms/floodgate/agent_voq.h"

using namespace sluice::sw;
using namespace sluice::floodgate;

namespace {

const SwKey kD{0, addr_parse("10.0.9.1")};
const SwKey kE{0, addr_parse("10.0.9.2")};
const SwKey kD1{1, addr_parse("10.0.9.1")};

std::vector<uint8_t> frame(size_t len, uint8_t tag) { return std::vector<uint8_t>(len, tag); }
void push(AgentVoqs& v, const SwKey& k, size_t len, uint8_t tag, uint64_t ns = 0) {
  const auto f = frame(len, tag);
  v.push(k, f.data(), f.size(), ns);
}

}  // namespace

TEST(FloodgateAgentVoq, ReleasesInOrderWhileTheWindowIsOpen) {
  AgentVoqs v(2);
  push(v, kD, 1000, 1, 10);
  push(v, kD, 1000, 2, 20);
  push(v, kD, 1000, 3, 30);
  push(v, kE, 500, 9);
  push(v, kD1, 700, 7);
  EXPECT_EQ(v.frames(kD), 3u);
  EXPECT_EQ(v.held(0), 3500u);
  EXPECT_EQ(v.held(1), 700u);
  EXPECT_EQ(v.held_total(), 4200u);
  std::vector<uint8_t> sent;
  // 1500 B of window: the first frame leaves it at 500 > 0, so a second
  // goes (the last may take it below zero), the third waits.
  EXPECT_EQ(v.release(kD, 1500,
                      [&](const AgentVoqs::Frame& f) {
                        sent.push_back(f.bytes.at(0));
                        EXPECT_EQ(f.stolen_ns, 10u * sent.size());
                      }),
            2u);
  EXPECT_EQ(sent, (std::vector<uint8_t>{1, 2}));
  EXPECT_EQ(v.frames(kD), 1u);
  EXPECT_EQ(v.held(0), 1500u);
  EXPECT_EQ(v.held_max(0), 3500u);
  // No window: nothing.
  EXPECT_EQ(v.release(kD, 0, [&](const AgentVoqs::Frame&) { ADD_FAILURE(); }), 0u);
  EXPECT_EQ(v.release(kD, -10, [&](const AgentVoqs::Frame&) { ADD_FAILURE(); }), 0u);
  // Another port's VOQ for the same destination is its own.
  EXPECT_EQ(v.frames(kD1), 1u);
  // A destination without a VOQ: nothing, and none is made.
  const SwKey none{0, addr_parse("10.0.9.3")};
  EXPECT_EQ(v.release(none, 1 << 20, [&](const AgentVoqs::Frame&) { ADD_FAILURE(); }), 0u);
  EXPECT_FALSE(v.has(none));
}

// Bounded memory: a VOQ that release() empties is erased, not kept empty;
// the destination's next frame makes a new one.
TEST(FloodgateAgentVoq, AnEmptiedVoqIsErased) {
  AgentVoqs v(2);
  push(v, kD, 1000, 1);
  push(v, kD, 1000, 2);
  push(v, kE, 500, 3);
  EXPECT_EQ(v.size(), 2u);
  size_t n = 0;
  EXPECT_EQ(v.release(kD, 1000, [&](const AgentVoqs::Frame&) { ++n; }), 1u);
  EXPECT_TRUE(v.has(kD)) << "one frame still waits";
  EXPECT_EQ(v.release(kD, 1000, [&](const AgentVoqs::Frame&) { ++n; }), 1u);
  EXPECT_FALSE(v.has(kD));
  EXPECT_EQ(v.size(), 1u);
  EXPECT_EQ(v.frames(kD), 0u);
  EXPECT_EQ(v.release(kE, 1, [&](const AgentVoqs::Frame&) { ++n; }), 1u);
  EXPECT_EQ(v.size(), 0u);
  EXPECT_EQ(v.held_total(), 0u);
  EXPECT_EQ(n, 3u);
  // Many destinations passing through, each drained: nothing kept.
  for (uint32_t i = 0; i < 1000; ++i) {
    SwKey k{i % 2, addr_parse("10.1." + std::to_string(i / 250) + "." + std::to_string(i % 250))};
    push(v, k, 100, 0);
    v.release(k, 100, [](const AgentVoqs::Frame&) {});
  }
  EXPECT_EQ(v.size(), 0u);
  // A new frame for a drained destination makes a new VOQ.
  push(v, kD, 800, 4);
  EXPECT_TRUE(v.has(kD));
  EXPECT_EQ(v.frames(kD), 1u);
  EXPECT_EQ(v.held(0), 800u);
}

TEST(FloodgateAgentVoq, DrainSendsEveryFrameWindowOrNot) {
  AgentVoqs v(2);
  push(v, kD, 1000, 1);
  push(v, kD, 1000, 2);
  push(v, kD1, 600, 3);
  std::vector<std::pair<uint32_t, uint8_t>> out;
  v.drain([&](const SwKey& k, const AgentVoqs::Frame& f) { out.push_back({k.first, f.bytes.at(0)}); });
  EXPECT_EQ(out, (std::vector<std::pair<uint32_t, uint8_t>>{{0, 1}, {0, 2}, {1, 3}}));
  EXPECT_EQ(v.size(), 0u);
  EXPECT_EQ(v.held_total(), 0u);
}
