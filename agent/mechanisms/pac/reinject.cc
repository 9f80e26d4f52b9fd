#include "mechanisms/pac/reinject.h"

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/checksum.h"
#include "core/error.h"

namespace sluice::pac {

Reinjector::Reinjector(const std::string& ifname, uint32_t mark) {
  ifindex_ = static_cast<int>(if_nametoindex(ifname.c_str()));
  if (!ifindex_) throw SysError("PAC re-injection: interface " + ifname, errno);
  // Protocol 0: this socket transmits only, it never receives a copy.
  fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) throw SysError("PAC re-injection: AF_PACKET socket", errno);
  int m = static_cast<int>(mark);
  if (setsockopt(fd_, SOL_SOCKET, SO_MARK, &m, sizeof(m)) != 0) {
    int e = errno;
    close(fd_);
    throw SysError("PAC re-injection: SO_MARK", e);
  }
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_ifindex = ifindex_;
  sll.sll_protocol = 0;
  if (bind(fd_, reinterpret_cast<sockaddr*>(&sll), sizeof(sll)) != 0) {
    int e = errno;
    close(fd_);
    throw SysError("PAC re-injection: bind to " + ifname, e);
  }
  int sz = 1 << 20;
  setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
}

Reinjector::~Reinjector() {
  if (fd_ >= 0) close(fd_);
}

bool Reinjector::send(uint8_t* frame, size_t len) {
  if (!complete_frame_checksum(frame, len)) {
    last_errno_ = EINVAL;
    return false;
  }
  for (int tries = 0; tries < 3; ++tries) {
    ssize_t n = ::send(fd_, frame, len, 0);
    if (n == static_cast<ssize_t>(len)) return true;
    last_errno_ = n < 0 ? errno : EMSGSIZE;
    if (last_errno_ != EAGAIN && last_errno_ != ENOBUFS && last_errno_ != EINTR) break;
  }
  return false;
}

}  // namespace sluice::pac
