// Frames arriving on one interface, with the 802.1Q/802.1ad tag each
// carried. The receive path moves a tag out of the frame into the skb's
// metadata before any packet socket sees it, so the watch reads it from
// PACKET_AUXDATA (an ETH_P_ALL socket: before tc ingress, before the tag is
// popped by anything on the interface).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {

struct SeenFrame {
  bool tagged = false;
  uint16_t tpid = 0;       // host order; 0 when untagged
  uint16_t tci = 0;        // PCP (3 bits), DEI, VID (12 bits)
  uint16_t ethertype = 0;  // of the (untagged) frame
  uint32_t ipv4_src = 0;   // network order; 0 when not IPv4
  uint32_t ipv4_dst = 0;
  size_t len = 0;  // the frame as read, without the tag
};

class TagWatch {
 public:
  ~TagWatch();
  // Starts reading `ifname` in namespace `ns`; a gtest failure if it cannot.
  void start(const std::string& ns, const std::string& ifname);
  uint64_t frames() const { return frames_; }
  uint64_t tagged() const { return tagged_; }
  // Every frame seen so far (the first 100 000).
  std::vector<SeenFrame> seen() const;

 private:
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> frames_{0}, tagged_{0};
  mutable std::mutex mu_;
  std::vector<SeenFrame> seen_;
  std::thread t_;
};

}  // namespace sluice::test
