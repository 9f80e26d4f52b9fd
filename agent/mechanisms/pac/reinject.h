// Re-injection of held ACKs: the frame copied at tc egress is sent again
// through an AF_PACKET socket on the same interface, with SO_MARK set so the
// PAC egress program admits it (and accounts its trigger) instead of holding
// it a second time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace sluice::pac {

class Reinjector {
 public:
  // Opens the socket bound to `ifname` (transmit only) with SO_MARK `mark`.
  Reinjector(const std::string& ifname, uint32_t mark);
  ~Reinjector();
  Reinjector(const Reinjector&) = delete;
  Reinjector& operator=(const Reinjector&) = delete;

  // Completes the TCP/UDP checksum (complete_frame_checksum,
  // core/checksum.h: tc egress copies CHECKSUM_PARTIAL segments) and sends;
  // false for a malformed frame or when the kernel refused it.
  bool send(uint8_t* frame, size_t len);
  int last_errno() const { return last_errno_; }

 private:
  int fd_ = -1;
  int ifindex_ = 0;
  int last_errno_ = 0;
};

}  // namespace sluice::pac
