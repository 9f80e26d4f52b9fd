// Reinjector::send_many (agent/mechanisms/pac/reinject.h), the batch send
// floodgate's VOQ release uses: frames sent through one AF_PACKET socket on
// a veth, with sendmmsg, must arrive at the peer all, in order, with their
// UDP checksums completed; a malformed frame is left out and reported, the
// rest still go; batches of at most kBatch frames.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "core/checksum.h"
#include "lib/netns_fixture.h"
#include "mechanisms/pac/reinject.h"

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr uint16_t kExpEtherType = 0x88b6;  // IEEE local experimental
constexpr uint16_t kUdpPort = 47001;

void put16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}
uint16_t get16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }

// Frame i: even i a non-IP frame, odd i an IPv4/UDP datagram whose checksum
// field holds a value that does not verify (as a CHECKSUM_PARTIAL copy
// would); the payload carries i. `bad`: an IPv4 header that claims more
// bytes than the frame has (complete_frame_checksum refuses it).
std::vector<uint8_t> frame(uint32_t i, bool bad) {
  std::vector<uint8_t> f(14 + 20 + 8 + 64, 0);
  std::memset(f.data(), 0xff, 6);  // broadcast
  const uint8_t src[6] = {0x02, 0, 0, 0, 0, 1};
  std::memcpy(f.data() + 6, src, 6);
  if (i % 2 == 0 && !bad) {
    put16(f.data() + 12, kExpEtherType);
    std::memcpy(f.data() + 14, &i, 4);
    return f;
  }
  put16(f.data() + 12, 0x0800);
  uint8_t* ip = f.data() + 14;
  ip[0] = 0x45;
  put16(ip + 2, uint16_t(bad ? 1400 : 20 + 8 + 64));
  ip[8] = 64;
  ip[9] = IPPROTO_UDP;
  const uint8_t s[4] = {10, 99, 0, 1}, d[4] = {10, 99, 0, 2};
  std::memcpy(ip + 12, s, 4);
  std::memcpy(ip + 16, d, 4);
  uint32_t sum = 0;
  for (int k = 0; k < 20; k += 2) sum += get16(ip + k);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  put16(ip + 10, uint16_t(~sum));
  uint8_t* udp = ip + 20;
  put16(udp, 40000);
  put16(udp + 2, kUdpPort);
  put16(udp + 4, 8 + 64);
  put16(udp + 6, 0x1234);  // does not verify
  std::memcpy(udp + 8, &i, 4);
  return f;
}

// The sequence number of a test frame, or -1 for anything else on the wire.
int64_t seq_of(const uint8_t* f, size_t len) {
  if (len < 14 + 4) return -1;
  uint32_t i = 0;
  if (get16(f + 12) == kExpEtherType) {
    std::memcpy(&i, f + 14, 4);
    return i;
  }
  if (get16(f + 12) == 0x0800 && len >= 14 + 28 + 4 && f[14 + 9] == IPPROTO_UDP && get16(f + 14 + 22) == kUdpPort) {
    std::memcpy(&i, f + 14 + 28, 4);
    return i;
  }
  return -1;
}

}  // namespace

TEST(ReinjectBatch, FramesArriveAllInOrderWithChecksumsMalformedLeftOut) {
  Lab lab("fr");
  const std::string a = lab.add_ns("a"), b = lab.add_ns("b");
  lab.add_veth(a, "va", "10.99.0.1/24", b, "vb", "10.99.0.2/24");

  // The receiver: every frame arriving on vb.
  int rx = -1;
  {
    InNetns in(b);
    rx = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
    ASSERT_GE(rx, 0) << strerror(errno);
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = int(if_nametoindex(lab.name("vb").c_str()));
    ASSERT_GT(sll.sll_ifindex, 0);
    ASSERT_EQ(bind(rx, reinterpret_cast<sockaddr*>(&sll), sizeof(sll)), 0) << strerror(errno);
    int sz = 8 << 20;
    setsockopt(rx, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz));
    timeval tv{1, 0};
    setsockopt(rx, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }

  // 150 frames: more than two batches; every 50th from the 7th malformed.
  constexpr uint32_t kN = 150;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<pac::Reinjector::Frame> frames;
  std::vector<uint32_t> want;
  for (uint32_t i = 0; i < kN; ++i) {
    const bool bad = i % 50 == 7;
    bytes.push_back(frame(i, bad));
    if (!bad) want.push_back(i);
  }
  for (auto& f : bytes) frames.push_back({f.data(), f.size()});

  size_t sent = 0;
  bool ok[kN];
  uint64_t calls = 0;
  {
    InNetns in(a);
    pac::Reinjector r(lab.name("va"), 0x5e1f);
    sent = r.send_many(frames.data(), frames.size(), ok);
    calls = r.batch_calls();
    EXPECT_EQ(r.last_errno(), EINVAL) << "the malformed frames were not reported";
  }
  EXPECT_EQ(sent, want.size());
  for (uint32_t i = 0; i < kN; ++i) EXPECT_EQ(ok[i], i % 50 != 7) << "frame " << i;
  // 147 good frames in batches of 64: 3 sendmmsg calls, not one per frame.
  EXPECT_EQ(calls, 3u);

  std::vector<uint32_t> got;
  uint8_t buf[2048];
  while (got.size() < want.size()) {
    const ssize_t n = recv(rx, buf, sizeof(buf), 0);
    if (n < 0) break;  // 1 s without a frame
    const int64_t s = seq_of(buf, size_t(n));
    if (s < 0) continue;
    got.push_back(uint32_t(s));
    if (get16(buf + 12) == 0x0800) {
      // The checksum now verifies: completing it again changes nothing.
      std::vector<uint8_t> c(buf, buf + n);
      EXPECT_FALSE(complete_l4_checksum(c.data(), c.size(), 14, 34, 4, IPPROTO_UDP)) << "frame " << s;
      EXPECT_NE(get16(buf + 14 + 26), 0x1234);
    }
  }
  close(rx);
  EXPECT_EQ(got, want) << "frames lost or out of order";
}
