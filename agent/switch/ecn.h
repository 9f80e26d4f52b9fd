// CE marking of a frame held in the agent (the held data path's
// ecn_threshold_packets, a logic's own queues in sluiced). Pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::sw {

// Sets CE in the IP header at f[l3..] (family 4 or 6) of an ECN-capable
// packet (ECT(0)/ECT(1)), the IPv4 header checksum updated (RFC 1624).
// Returns 1 if marked, 0 if already CE, -1 if Not-ECT (left alone, RFC 3168).
int mark_ce(uint8_t* f, size_t len, size_t l3, int family);
// The same on a whole Ethernet frame (one 802.1Q/802.1ad tag allowed);
// -1 for a frame that is not IPv4/IPv6.
int mark_ce_frame(uint8_t* f, size_t len);

}  // namespace sluice::sw
