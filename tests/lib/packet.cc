#include "lib/packet.h"

#include <arpa/inet.h>

#include <cstring>
#include <stdexcept>

namespace sluice::test {

namespace {

void put16(Bytes& b, size_t off, uint16_t v) {
  b[off] = v >> 8;
  b[off + 1] = v & 0xff;
}
void put32(Bytes& b, size_t off, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[off + i] = (v >> (24 - 8 * i)) & 0xff;
}
uint16_t get16(const Bytes& b, size_t off) { return uint16_t(b[off] << 8 | b[off + 1]); }

uint32_t sum16(const uint8_t* p, size_t n, uint32_t acc = 0) {
  for (size_t i = 0; i + 1 < n; i += 2) acc += uint32_t(p[i] << 8 | p[i + 1]);
  if (n & 1) acc += uint32_t(p[n - 1] << 8);
  return acc;
}
uint16_t fold(uint32_t acc) {
  while (acc >> 16) acc = (acc & 0xffff) + (acc >> 16);
  return uint16_t(~acc & 0xffff);
}

// Pseudo-header sum for TCP/UDP over IPv4 or IPv6.
uint32_t pseudo(const Bytes& f, size_t l3, bool v6, uint8_t proto, size_t l4len) {
  uint32_t acc = 0;
  if (v6) {
    acc = sum16(&f[l3 + 8], 32);
    acc += uint32_t(l4len >> 16) + uint32_t(l4len & 0xffff);
  } else {
    acc = sum16(&f[l3 + 12], 8);
    acc += uint32_t(l4len);
  }
  return acc + proto;
}

size_t eth_len(const Bytes& f) {
  uint16_t et = get16(f, 12);
  return (et == 0x8100 || et == 0x88a8) ? 18 : 14;
}

}  // namespace

Bytes build(const PacketSpec& s) {
  // Ethernet: fixed MACs (destination, source); tests do not care. (Built
  // as one list: GCC 12 -O3 warns -Wstringop-overflow on an insert into the
  // empty vector, a known false positive.)
  Bytes f = {0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1};
  uint16_t et = s.ethertype ? s.ethertype : (s.ipv6 ? 0x86DD : 0x0800);
  if (s.vlan >= 0) {
    f.push_back(0x81);
    f.push_back(0x00);
    f.push_back((s.vlan >> 8) & 0x0f);
    f.push_back(s.vlan & 0xff);
  }
  f.push_back(et >> 8);
  f.push_back(et & 0xff);
  size_t l3 = f.size();

  Bytes l4;
  size_t opt_len = (s.tcp_options.size() + 3) & ~size_t(3);
  if (s.proto == 6) {
    l4.assign(20 + opt_len + s.payload, 0);
    put16(l4, 0, s.sport);
    put16(l4, 2, s.dport);
    put32(l4, 4, s.seq);
    put32(l4, 8, s.ack);
    l4[12] = uint8_t(((20 + opt_len) / 4) << 4 | (s.tcp_res & 0x0f));
    l4[13] = s.flags;
    put16(l4, 14, s.window);
    for (size_t i = 0; i < s.tcp_options.size(); ++i) l4[20 + i] = s.tcp_options[i];
    for (size_t i = s.tcp_options.size(); i < opt_len; ++i) l4[20 + i] = 1;  // NOP
    for (size_t i = 0; i < s.payload; ++i) l4[20 + opt_len + i] = uint8_t(i * 7 + 3);
  } else if (s.proto == 17) {
    l4.assign(8 + s.payload, 0);
    put16(l4, 0, s.sport);
    put16(l4, 2, s.dport);
    put16(l4, 4, uint16_t(8 + s.payload));
    for (size_t i = 0; i < s.payload; ++i) l4[8 + i] = uint8_t(i * 7 + 3);
  } else {
    l4.assign(s.payload, 0xab);
  }

  if (!s.ipv6) {
    Bytes ip(20, 0);
    ip[0] = 0x45;
    ip[1] = s.tos;
    put16(ip, 2, uint16_t(20 + l4.size()));
    put16(ip, 4, s.ip_id);
    put16(ip, 6, s.frag_off);
    ip[8] = s.ttl;
    ip[9] = s.proto;
    if (inet_pton(AF_INET, s.src.c_str(), &ip[12]) != 1 || inet_pton(AF_INET, s.dst.c_str(), &ip[16]) != 1)
      throw std::invalid_argument("bad IPv4 address in PacketSpec");
    put16(ip, 10, fold(sum16(ip.data(), 20)));
    f.insert(f.end(), ip.begin(), ip.end());
  } else {
    Bytes ip(40, 0);
    ip[0] = uint8_t(0x60 | (s.tos >> 4));
    ip[1] = uint8_t((s.tos & 0x0f) << 4);
    put16(ip, 4, uint16_t(l4.size()));
    ip[6] = s.proto;
    ip[7] = s.ttl;
    if (inet_pton(AF_INET6, s.src.c_str(), &ip[8]) != 1 || inet_pton(AF_INET6, s.dst.c_str(), &ip[24]) != 1)
      throw std::invalid_argument("bad IPv6 address in PacketSpec");
    f.insert(f.end(), ip.begin(), ip.end());
  }
  size_t l4off = f.size();
  f.insert(f.end(), l4.begin(), l4.end());
  if (s.proto == 6 || s.proto == 17) {
    size_t csum_at = l4off + (s.proto == 6 ? 16 : 6);
    uint32_t acc = pseudo(f, l3, s.ipv6, s.proto, l4.size());
    acc = sum16(&f[l4off], l4.size(), acc);
    uint16_t c = fold(acc);
    if (s.proto == 17 && c == 0) c = 0xffff;
    put16(f, csum_at, c);
  }
  return f;
}

Bytes icmpv6_frame(uint8_t type, const std::string& dst) {
  PacketSpec s;
  s.ipv6 = true;
  s.src = "fe80::1";
  s.dst = dst;
  s.proto = 58;
  s.payload = 24;
  Bytes b = build(s);
  b.at(14 + 40) = type;
  return b;
}

size_t l3_offset(const Bytes& frame) { return eth_len(frame); }

size_t l4_offset(const Bytes& frame) {
  size_t l3 = eth_len(frame);
  if ((frame[l3] >> 4) == 6) return l3 + 40;
  return l3 + size_t(frame[l3] & 0x0f) * 4;
}

bool checksums_ok(const Bytes& f, std::string* why) {
  auto fail = [&](const char* w) {
    if (why) *why = w;
    return false;
  };
  size_t l3 = eth_len(f);
  if (f.size() < l3 + 20) return fail("short frame");
  bool v6 = (f[l3] >> 4) == 6;
  uint8_t proto;
  size_t l4, l4len;
  if (!v6) {
    size_t ihl = size_t(f[l3] & 0x0f) * 4;
    if (fold(sum16(&f[l3], ihl)) != 0) return fail("IPv4 header checksum");
    proto = f[l3 + 9];
    l4 = l3 + ihl;
    l4len = get16(f, l3 + 2) - ihl;
  } else {
    proto = f[l3 + 6];
    l4 = l3 + 40;
    l4len = get16(f, l3 + 4);
  }
  if (proto != 6 && proto != 17) return true;
  if (l4 + l4len > f.size()) return fail("L4 length beyond frame");
  uint32_t acc = pseudo(f, l3, v6, proto, l4len);
  acc = sum16(&f[l4], l4len, acc);
  if (fold(acc) != 0) return fail(proto == 6 ? "TCP checksum" : "UDP checksum");
  return true;
}

Bytes truncate(Bytes b, size_t len) {
  if (len < b.size()) b.resize(len);
  return b;
}

std::vector<uint8_t> tcp_opt_timestamps(uint32_t tsval, uint32_t tsecr) {
  std::vector<uint8_t> o = {1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < 4; ++i) {
    o[4 + i] = (tsval >> (24 - 8 * i)) & 0xff;
    o[8 + i] = (tsecr >> (24 - 8 * i)) & 0xff;
  }
  return o;
}

std::vector<uint8_t> tcp_opt_sack(const std::vector<std::pair<uint32_t, uint32_t>>& blocks) {
  std::vector<uint8_t> o = {1, 1, 5, uint8_t(2 + 8 * blocks.size())};
  for (auto [l, r] : blocks)
    for (uint32_t v : {l, r})
      for (int i = 0; i < 4; ++i) o.push_back((v >> (24 - 8 * i)) & 0xff);
  return o;
}

}  // namespace sluice::test
