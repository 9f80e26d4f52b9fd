#include "mechanisms/pac/reinject.h"

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
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
  // One frame through the batch path: one checksum completion and one retry
  // policy for both.
  const Frame f{frame, len};
  return send_many(&f, 1) == 1;
}

size_t Reinjector::send_many(const Frame* frames, size_t n, bool* ok) {
  size_t sent = 0;
  if (ok) std::fill(ok, ok + n, false);
  iovec iov[kBatch];
  mmsghdr msgs[kBatch];
  size_t idx[kBatch];
  size_t i = 0;
  while (i < n) {
    // The next batch: frames whose checksums complete, in order.
    size_t m = 0;
    for (; i < n && m < kBatch; ++i) {
      if (!complete_frame_checksum(frames[i].data, frames[i].len)) {
        last_errno_ = EINVAL;
        continue;
      }
      iov[m] = {frames[i].data, frames[i].len};
      msgs[m] = {};
      msgs[m].msg_hdr.msg_iov = &iov[m];
      msgs[m].msg_hdr.msg_iovlen = 1;
      idx[m++] = i;
    }
    // sendmmsg stops at the first message it cannot send: that one gets
    // send()'s retries, then the batch goes on after it.
    size_t done = 0;
    int tries = 0;
    while (done < m) {
      ++batch_calls_;
      const int r = ::sendmmsg(fd_, msgs + done, static_cast<unsigned>(m - done), 0);
      if (r > 0) {
        for (int j = 0; j < r; ++j) {
          const size_t k = done + size_t(j);
          if (msgs[k].msg_len == frames[idx[k]].len) {
            ++sent;
            if (ok) ok[idx[k]] = true;
          } else {
            last_errno_ = EMSGSIZE;
          }
        }
        done += size_t(r);
        tries = 0;
        continue;
      }
      last_errno_ = r < 0 ? errno : EIO;
      if ((last_errno_ == EAGAIN || last_errno_ == ENOBUFS || last_errno_ == EINTR) && ++tries < 3) continue;
      ++done;  // this frame is given up
      tries = 0;
    }
  }
  return sent;
}

}  // namespace sluice::pac
