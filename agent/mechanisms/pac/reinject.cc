#include "mechanisms/pac/reinject.h"

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace sluice::pac {

namespace {
uint32_t sum16(const uint8_t* p, size_t n, uint32_t acc) {
  for (size_t i = 0; i + 1 < n; i += 2) acc += (uint32_t(p[i]) << 8) | p[i + 1];
  if (n & 1) acc += uint32_t(p[n - 1]) << 8;
  return acc;
}
uint16_t fold(uint32_t acc) {
  while (acc >> 16) acc = (acc & 0xffff) + (acc >> 16);
  return static_cast<uint16_t>(~acc & 0xffff);
}
}  // namespace

bool complete_l4_checksum(uint8_t* f, size_t len) {
  if (len < 14) return false;
  size_t off = 12;
  uint16_t et = uint16_t(f[off] << 8 | f[off + 1]);
  off += 2;
  if (et == 0x8100 || et == 0x88a8) {
    if (len < off + 4) return false;
    et = uint16_t(f[off + 2] << 8 | f[off + 3]);
    off += 4;
  }
  uint32_t acc = 0;
  size_t l4 = 0, l4len = 0;
  uint8_t proto = 0;
  if (et == 0x0800) {
    if (len < off + 20) return false;
    size_t ihl = size_t(f[off] & 0xf) * 4;
    size_t tot = size_t(f[off + 2] << 8 | f[off + 3]);
    if ((f[off] >> 4) != 4 || ihl < 20 || tot < ihl || off + tot > len) return false;
    // A fragment: the stack checksummed the whole datagram before it cut
    // it (never left to the device), and a later fragment has no L4 header.
    if ((uint32_t(f[off + 6]) << 8 | f[off + 7]) & 0x3fff) return true;
    proto = f[off + 9];
    l4 = off + ihl;
    l4len = tot - ihl;
    acc = sum16(f + off + 12, 8, 0);  // saddr, daddr
  } else if (et == 0x86dd) {
    if (len < off + 40) return false;
    size_t plen = size_t(f[off + 4] << 8 | f[off + 5]);
    if (off + 40 + plen > len) return false;
    proto = f[off + 6];  // no extension headers: offloaded segments have none here
    l4 = off + 40;
    l4len = plen;
    acc = sum16(f + off + 8, 32, 0);
  } else {
    return true;  // not IP: no checksum the stack leaves to the device
  }
  size_t field = 0;
  if (proto == 6) {
    if (l4len < 20) return false;
    field = 16;
  } else if (proto == 17) {
    if (l4len < 8) return false;
    // IPv4 UDP without a checksum (0) stays without one (RFC 768).
    if (et == 0x0800 && f[l4 + 6] == 0 && f[l4 + 7] == 0) return true;
    field = 6;
  } else {
    return true;  // ICMP and the rest carry a complete checksum
  }
  acc += proto + uint32_t(l4len);
  f[l4 + field] = 0;
  f[l4 + field + 1] = 0;
  acc = sum16(f + l4, l4len, acc);
  uint16_t c = fold(acc);
  if (proto == 17 && c == 0) c = 0xffff;  // RFC 768: 0 means "no checksum"
  f[l4 + field] = uint8_t(c >> 8);
  f[l4 + field + 1] = uint8_t(c & 0xff);
  return true;
}

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
  if (!complete_l4_checksum(frame, len)) {
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
