// TCP/UDP checksums of frames the agent sends again as raw bytes.
//
// A frame copied at tc egress may carry a TCP or UDP checksum the device
// was to complete (CHECKSUM_PARTIAL: the field holds only the pseudo-header
// sum; veth and offloading NICs leave it so). Sent again through AF_PACKET
// nobody completes it, so the receiver would drop it. Both functions compute
// the RFC 1071 sum over the RFC 768 / RFC 9293 pseudo header, header and
// payload; a checksum that already verifies comes out the same.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice {

// The IP packet at f[l3..] (family 4 or 6, its L4 header at f[l4..], proto
// 6 or 17), offsets already parsed (e.g. by a BPF program). Writes the
// complete checksum when the field does not verify; true if it changed the
// frame. Left as they are (false): a checksum that verifies, an IPv4 UDP
// datagram without one (0, RFC 768), an IPv4 fragment, another protocol, and
// offsets that do not fit the frame.
bool complete_l4_checksum(uint8_t* f, size_t len, size_t l3, size_t l4, int family, uint8_t proto);

// The same for a whole Ethernet frame (one 802.1Q/802.1ad tag at most),
// parsed here. IPv6 extension headers are not walked (offloaded segments
// carry none). Returns false (frame unchanged) only for a truncated or
// malformed IP header or TCP/UDP header; frames with nothing to complete
// (not IP, another protocol, a fragment, IPv4 UDP without a checksum) are
// left as they are and return true.
bool complete_frame_checksum(uint8_t* f, size_t len);

}  // namespace sluice
