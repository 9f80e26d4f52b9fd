// A small packet builder for BPF tests: Ethernet (+ optional 802.1Q),
// IPv4/IPv6, TCP/UDP, with correct lengths and checksums unless a test asks
// for a broken one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::test {

using Bytes = std::vector<uint8_t>;

struct PacketSpec {
  bool ipv6 = false;
  std::string src = "10.0.0.1";
  std::string dst = "10.0.0.2";
  uint8_t proto = 6;  // 6 tcp, 17 udp, other: raw IP payload
  uint16_t sport = 40000;
  uint16_t dport = 5201;
  uint8_t tos = 0;  // includes the ECN bits
  uint8_t ttl = 64;
  uint16_t ip_id = 1;
  uint16_t frag_off = 0;   // host order, flags+offset as on the wire
  int vlan = -1;           // >= 0 adds an 802.1Q tag
  uint16_t ethertype = 0;  // 0: derived from ipv6
  // TCP
  uint32_t seq = 1000;
  uint32_t ack = 0;
  uint8_t flags = 0x10;  // ACK
  uint8_t tcp_res = 0;   // the 4 reserved bits of byte 12 (low 4 bits here)
  uint16_t window = 512;
  std::vector<uint8_t> tcp_options;  // padded to 4 bytes
  size_t payload = 0;                // payload bytes (filled with a pattern)
};

// Builds the frame. Checksums (IPv4 header, TCP/UDP with pseudo-header) are
// complete, as a NIC would see them.
Bytes build(const PacketSpec& s);

// Recomputes every checksum from scratch and says whether the frame's
// checksums are right (for tests of incremental checksum updates).
bool checksums_ok(const Bytes& frame, std::string* why = nullptr);

// Offsets in a frame built without VLAN: 14 (eth) + IP header.
size_t l3_offset(const Bytes& frame);
size_t l4_offset(const Bytes& frame);

// An IPv6 ICMPv6 frame (fe80::1 -> ff02::1:ff00:2, no VLAN) whose message
// type is `type` (135: a neighbour solicitation); 24 payload bytes, the
// ICMPv6 checksum not filled.
Bytes icmpv6_frame(uint8_t type, const std::string& dst = "ff02::1:ff00:2");

// Truncated copy (for malformed-input cases).
Bytes truncate(Bytes b, size_t len);

// TCP options helpers.
std::vector<uint8_t> tcp_opt_timestamps(uint32_t tsval, uint32_t tsecr);
std::vector<uint8_t> tcp_opt_sack(const std::vector<std::pair<uint32_t, uint32_t>>& blocks);

}  // namespace sluice::test
