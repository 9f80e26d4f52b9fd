// TOP packets (include/sluice/top.h) as C++ values, and their encoding.
// decode() rejects anything that is not a well-formed TOP packet with a
// reason, so bad input never reaches the protocol state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "sluice/top.h"

namespace sluice::top {

enum class Type : uint8_t {
  kToken = SLUICE_TOP_TOKEN,
  kData = SLUICE_TOP_DATA,
  kSync = SLUICE_TOP_SYNC,
  kFin = SLUICE_TOP_FIN,
  kNack = SLUICE_TOP_NACK,
  kDone = SLUICE_TOP_DONE,
};
const char* type_name(Type t);

constexpr int kPriorities = SLUICE_TOP_PRIORITIES;
constexpr size_t kHeaderBytes = sizeof(sluice_top_hdr);
constexpr size_t kSyncBytes = sizeof(sluice_top_sync);
constexpr uint8_t kPrioByObjective = SLUICE_TOP_PRIO_BY_OBJECTIVE;

struct Packet {
  Type type = Type::kToken;
  uint8_t priority = 0;
  uint8_t flags = 0;
  uint16_t len = 0;  // DATA payload bytes
  uint64_t flow = 0;
  uint32_t seq = 0;
  uint32_t aux = 0;
  uint64_t tstamp_ns = 0;
  // SYNC / FIN
  uint64_t size_bytes = 0;
  uint64_t deadline_ns = 0;
  uint16_t mss = 0;
  bool sized = false;
  uint8_t prio_class = kPrioByObjective;
};

// Bytes of the TOP part of `p` on the wire (header, SYNC record, payload).
size_t wire_bytes(const Packet& p);

// A frame of `udp_payload` TOP bytes on an Ethernet link, as a switch port
// charges it (tc-scripts/top-switch.sh: `overhead 24 mpu 84`): Ethernet +
// IPv4 + UDP headers, then FCS, preamble and inter-frame gap, at least 84.
constexpr size_t kFrameOverheadBytes = 14 + 20 + 8 + 24;
constexpr size_t frame_on_wire(size_t udp_payload) {
  return udp_payload + kFrameOverheadBytes < 84 ? 84 : udp_payload + kFrameOverheadBytes;
}
// A token (98 B: its 32-byte header is above a minimum frame's payload)
// and a full data frame (mss + header), on the wire.
constexpr size_t kTokenFrameBytes = frame_on_wire(kHeaderBytes);
constexpr size_t data_frame_bytes(uint16_t mss) { return frame_on_wire(kHeaderBytes + mss); }
// Data bytes of a full-length packet (a 1500-byte IPv4 frame).
constexpr uint16_t kDefaultMss = 1440;
// The switches' token group as a share of the link, §4.2: token / (token +
// full data frame), both as charged on the wire (top-switch.sh: 98/1636).
constexpr double token_group_share(uint16_t mss = kDefaultMss) {
  return double(kTokenFrameBytes) / double(kTokenFrameBytes + data_frame_bytes(mss));
}
// The receiver's pacing slot (§3.1, §4.4): one token and the full data frame
// it calls for, at the access link's rate. The switches' token group is
// token / (token + data) of the link with the same frames (top-switch.sh),
// so a receiver paced at one token per slot is what that group passes.
uint64_t pacing_slot_ns(double link_mbit, uint16_t mss);

// Writes the header (and the SYNC/FIN record) into buf; returns the bytes
// written, or 0 when cap is too small. A DATA payload is the caller's.
size_t encode(const Packet& p, uint8_t* buf, size_t cap);

// Parses a UDP payload of n bytes. nullopt with *why set for anything
// malformed: wrong magic/version/type, short, token priority out of range,
// DATA len beyond the datagram, SYNC/FIN without a valid record.
std::optional<Packet> decode(const uint8_t* buf, size_t n, std::string* why = nullptr);

}  // namespace sluice::top
