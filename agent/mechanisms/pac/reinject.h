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
  // The same for frames[0..n) in order, with one sendmmsg per up to
  // kBatch frames instead of a send each (floodgate's VOQ release,
  // docs/floodgate.md): each frame's checksum is completed first, a
  // malformed one is left out, and a frame the kernel refuses is tried up
  // to 3 times (on EAGAIN, ENOBUFS, EINTR) and then given up, the rest
  // still sent (send() is this for one frame). ok[i] (if given, n entries) says whether
  // frame i went out. Returns the frames sent.
  struct Frame {
    uint8_t* data;
    size_t len;
  };
  static constexpr size_t kBatch = 64;
  size_t send_many(const Frame* frames, size_t n, bool* ok = nullptr);
  int last_errno() const { return last_errno_; }
  // sendmmsg calls made (send() makes one per frame; send_many one per
  // batch: to see the batching work).
  uint64_t batch_calls() const { return batch_calls_; }

 private:
  int fd_ = -1;
  int ifindex_ = 0;
  int last_errno_ = 0;
  uint64_t batch_calls_ = 0;
};

}  // namespace sluice::pac
