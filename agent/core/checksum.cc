#include "core/checksum.h"

#include <netinet/in.h>

#include <cstring>

namespace sluice {

namespace {

// RFC 1071 sum of p[0..n) in network order, unfolded. Summed as native
// 32-bit words (the one's-complement sum is byte-order independent, RFC 1071
// §2(B)), then folded and swapped: one pass, no per-byte loop.
uint64_t csum_add(uint64_t s, const uint8_t* p, size_t n) {
  uint64_t acc = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    uint32_t w;
    std::memcpy(&w, p + i, 4);
    acc += w;
  }
  if (i + 2 <= n) {
    uint16_t w;
    std::memcpy(&w, p + i, 2);
    acc += w;
    i += 2;
  }
  if (i < n) {
    uint8_t last[2] = {p[i], 0};
    uint16_t w;
    std::memcpy(&w, last, 2);
    acc += w;
  }
  while (acc >> 16) acc = (acc & 0xffff) + (acc >> 16);
  return s + ntohs(uint16_t(acc));
}

uint16_t csum_fold(uint64_t s) {
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return uint16_t(s);
}

uint16_t be16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }

}  // namespace

bool complete_l4_checksum(uint8_t* f, size_t len, size_t l3, size_t l4, int family, uint8_t proto) {
  const size_t field = proto == IPPROTO_TCP ? 16 : proto == IPPROTO_UDP ? 6 : 0;
  if (!field || l3 >= l4 || l4 >= len) return false;
  size_t end;
  uint64_t pseudo = 0;
  if (family == 4) {
    if (l3 + 20 > len || (f[l3] >> 4) != 4) return false;
    if ((be16(f + l3 + 6) & 0x3fff) != 0) return false;  // a fragment
    end = l3 + be16(f + l3 + 2);
    pseudo = csum_add(0, f + l3 + 12, 8);
  } else if (family == 6) {
    if (l3 + 40 > len || (f[l3] >> 4) != 6) return false;
    end = l3 + 40 + be16(f + l3 + 4);
    pseudo = csum_add(0, f + l3 + 8, 32);
  } else {
    return false;
  }
  if (end > len || end < l4 + field + 2) return false;
  const size_t l4len = end - l4;
  uint8_t* c = f + l4 + field;
  if (proto == IPPROTO_UDP && family == 4 && c[0] == 0 && c[1] == 0) return false;
  pseudo += proto + uint32_t(l4len);
  // One pass: the sum with the field as it is verifies (0xffff), or the
  // complete checksum is that sum without the field, complemented.
  const uint16_t old = be16(c);
  const uint64_t all = csum_add(pseudo, f + l4, l4len);
  if (csum_fold(all) == 0xffff) return false;  // verifies
  uint16_t sum = uint16_t(~csum_fold(all + uint16_t(~old)));
  if (proto == IPPROTO_UDP && sum == 0) sum = 0xffff;  // RFC 768: 0 means "none"
  c[0] = uint8_t(sum >> 8);
  c[1] = uint8_t(sum);
  return true;
}

bool complete_frame_checksum(uint8_t* f, size_t len) {
  if (len < 14) return false;
  size_t l3 = 14;
  uint16_t et = be16(f + 12);
  if (et == 0x8100 || et == 0x88a8) {
    if (len < l3 + 4) return false;
    et = be16(f + l3 + 2);
    l3 += 4;
  }
  size_t l4 = 0, l4len = 0;
  uint8_t proto = 0;
  int family = 0;
  if (et == 0x0800) {
    if (len < l3 + 20) return false;
    const size_t ihl = size_t(f[l3] & 0xf) * 4;
    const size_t tot = be16(f + l3 + 2);
    if ((f[l3] >> 4) != 4 || ihl < 20 || tot < ihl || l3 + tot > len) return false;
    // A fragment: the stack checksummed the whole datagram before it cut
    // it (never left to the device), and a later fragment has no L4 header.
    if (be16(f + l3 + 6) & 0x3fff) return true;
    family = 4;
    proto = f[l3 + 9];
    l4 = l3 + ihl;
    l4len = tot - ihl;
  } else if (et == 0x86dd) {
    if (len < l3 + 40) return false;
    const size_t plen = be16(f + l3 + 4);
    if (l3 + 40 + plen > len) return false;
    family = 6;
    proto = f[l3 + 6];
    l4 = l3 + 40;
    l4len = plen;
  } else {
    return true;  // not IP: no checksum the stack leaves to the device
  }
  if (proto == IPPROTO_TCP) {
    if (l4len < 20) return false;
  } else if (proto == IPPROTO_UDP) {
    if (l4len < 8) return false;
  } else {
    return true;  // ICMP and the rest carry a complete checksum
  }
  complete_l4_checksum(f, len, l3, l4, family, proto);
  return true;
}

}  // namespace sluice
