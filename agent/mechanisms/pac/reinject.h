// Re-injection of held ACKs: the frame copied at tc egress is sent again
// through an AF_PACKET socket on the same interface, with SO_MARK set so the
// PAC egress program admits it (and accounts its trigger) instead of holding
// it a second time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace sluice::pac {

// At tc egress a locally generated TCP segment or UDP datagram is
// CHECKSUM_PARTIAL: its checksum field holds only the pseudo-header sum, the
// NIC (or the stack, on veth) completes it. A copy sent back through
// AF_PACKET is not completed by anyone, so the TCP or UDP checksum is
// recomputed here over pseudo-header, header and payload (a complete one
// comes out the same). Handles Ethernet (+ one 802.1Q/802.1ad tag), IPv4 and
// IPv6. Other frames (not IP, another protocol, an IPv4 fragment, an IPv4
// UDP datagram sent without a checksum: nothing left to the device) are
// left as they are. sw::complete_l4_checksum (switch/hold_path.h) does the
// same for frames already parsed in BPF; this one parses the frame itself. Returns false (frame unchanged) only for a
// truncated or malformed IP frame or TCP/UDP header.
bool complete_l4_checksum(uint8_t* frame, size_t len);

class Reinjector {
 public:
  // Opens the socket bound to `ifname` (transmit only) with SO_MARK `mark`.
  Reinjector(const std::string& ifname, uint32_t mark);
  ~Reinjector();
  Reinjector(const Reinjector&) = delete;
  Reinjector& operator=(const Reinjector&) = delete;

  // Completes the checksum and sends; false when the kernel refused it.
  bool send(uint8_t* frame, size_t len);
  int last_errno() const { return last_errno_; }

 private:
  int fd_ = -1;
  int ifindex_ = 0;
  int last_errno_ = 0;
};

}  // namespace sluice::pac
