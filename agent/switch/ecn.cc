#include "switch/ecn.h"

namespace sluice::sw {

int mark_ce(uint8_t* f, size_t len, size_t l3, int family) {
  if (family == 4) {
    if (l3 + 20 > len) return -1;
    const uint8_t tos = f[l3 + 1];
    if ((tos & 3) == 3) return 0;
    if ((tos & 3) == 0) return -1;
    // RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), on the 16-bit word holding
    // version/IHL and TOS.
    const uint16_t old = uint16_t(f[l3] << 8 | tos), neu = uint16_t(old | 3);
    uint32_t sum = uint16_t(~(f[l3 + 10] << 8 | f[l3 + 11])) + uint16_t(~old) + neu;
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    const uint16_t hc = uint16_t(~sum);
    f[l3 + 1] = uint8_t(tos | 3);
    f[l3 + 10] = uint8_t(hc >> 8);
    f[l3 + 11] = uint8_t(hc);
    return 1;
  }
  if (family == 6) {
    if (l3 + 40 > len) return -1;
    // Traffic class: the low nibble of byte 0 and the high one of byte 1;
    // ECN is its low 2 bits, bits 4-5 of byte 1. No header checksum.
    const uint8_t ecn = (f[l3 + 1] >> 4) & 3;
    if (ecn == 3) return 0;
    if (ecn == 0) return -1;
    f[l3 + 1] |= 0x30;
    return 1;
  }
  return -1;
}

int mark_ce_frame(uint8_t* f, size_t len) {
  size_t off = 12;
  if (len < off + 2) return -1;
  uint16_t type = uint16_t(f[off] << 8 | f[off + 1]);
  if (type == 0x8100 || type == 0x88a8) {
    off += 4;
    if (len < off + 2) return -1;
    type = uint16_t(f[off] << 8 | f[off + 1]);
  }
  if (type == 0x0800) return mark_ce(f, len, off + 2, 4);
  if (type == 0x86dd) return mark_ce(f, len, off + 2, 6);
  return -1;
}

}  // namespace sluice::sw
