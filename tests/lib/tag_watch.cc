#include "lib/tag_watch.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lib/netns_fixture.h"

namespace sluice::test {

TagWatch::~TagWatch() {
  stop_ = true;
  if (t_.joinable()) t_.join();
  if (fd_ >= 0) close(fd_);
}

void TagWatch::start(const std::string& ns, const std::string& ifname) {
  {
    InNetns in(ns);
    fd_ = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    ASSERT_GE(fd_, 0) << strerror(errno);
    int one = 1;
    ASSERT_EQ(setsockopt(fd_, SOL_PACKET, PACKET_AUXDATA, &one, sizeof(one)), 0);
    sockaddr_ll a{};
    a.sll_family = AF_PACKET;
    a.sll_protocol = htons(ETH_P_ALL);
    a.sll_ifindex = int(if_nametoindex(ifname.c_str()));
    ASSERT_NE(a.sll_ifindex, 0) << ifname;
    ASSERT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << strerror(errno);
    timeval tv{0, 20'000};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  t_ = std::thread([this] {
    std::vector<uint8_t> buf(70000);
    alignas(cmsghdr) char cbuf[256];
    while (!stop_) {
      iovec iov{buf.data(), buf.size()};
      msghdr m{};
      m.msg_iov = &iov;
      m.msg_iovlen = 1;
      m.msg_control = cbuf;
      m.msg_controllen = sizeof(cbuf);
      sockaddr_ll from{};
      m.msg_name = &from;
      m.msg_namelen = sizeof(from);
      ssize_t n = recvmsg(fd_, &m, 0);
      if (n < ETH_HLEN || from.sll_pkttype == PACKET_OUTGOING) continue;
      SeenFrame f;
      f.len = size_t(n);
      for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level != SOL_PACKET || c->cmsg_type != PACKET_AUXDATA) continue;
        tpacket_auxdata aux;
        std::memcpy(&aux, CMSG_DATA(c), sizeof(aux));
        if (aux.tp_status & TP_STATUS_VLAN_VALID) {
          f.tagged = true;
          f.tci = aux.tp_vlan_tci;
          f.tpid = (aux.tp_status & TP_STATUS_VLAN_TPID_VALID) ? aux.tp_vlan_tpid : uint16_t(ETH_P_8021Q);
        }
      }
      size_t l3 = ETH_HLEN;
      f.ethertype = uint16_t(buf[12] << 8 | buf[13]);
      if (!f.tagged && (f.ethertype == ETH_P_8021Q || f.ethertype == ETH_P_8021AD) && size_t(n) >= ETH_HLEN + 4) {
        // A tag left in the frame.
        f.tagged = true;
        f.tpid = f.ethertype;
        f.tci = uint16_t(buf[14] << 8 | buf[15]);
        f.ethertype = uint16_t(buf[16] << 8 | buf[17]);
        l3 += 4;
      }
      if (f.ethertype == ETH_P_IP && size_t(n) >= l3 + 20) {
        std::memcpy(&f.ipv4_src, &buf[l3 + 12], 4);
        std::memcpy(&f.ipv4_dst, &buf[l3 + 16], 4);
      }
      ++frames_;
      if (f.tagged) ++tagged_;
      std::lock_guard<std::mutex> g(mu_);
      if (seen_.size() < 100000) seen_.push_back(f);
    }
  });
}

std::vector<SeenFrame> TagWatch::seen() const {
  std::lock_guard<std::mutex> g(mu_);
  return seen_;
}

}  // namespace sluice::test
