// sluice-tg wire format. The receiver of data (the client, e.g. an incast
// aggregator) asks; the sender of data (the server) answers. All integers are
// big-endian so a client and a server on different hosts agree.
//
//   client -> server  Request  (24 bytes)
//   server -> client  `bytes` bytes of payload, then, once every payload byte
//                     is acknowledged by the client's TCP, a Trailer (40 bytes)
//                     that reports what the sender's TCP did for this
//                     request (retransmissions, retransmission timeouts).
//
// A Stream request has no trailer: the server sends until the client closes.
#pragma once

#include <endian.h>

#include <cstdint>
#include <cstring>

namespace sluice::tg {

constexpr uint32_t kMagic = 0x534c5447;         // "SLTG"
constexpr uint32_t kTrailerMagic = 0x534c5454;  // "SLTT"

enum class ReqType : uint32_t { Data = 1, Stream = 2 };

struct Request {
  uint32_t type = 0;
  uint64_t bytes = 0;
  uint64_t id = 0;
};
constexpr size_t kRequestSize = 24;

// Sentinel for "the sender's kernel does not report this" (tcpi_total_rto is
// Linux 6.7+).
constexpr uint32_t kUnknown = 0xffffffffu;

struct Trailer {
  uint64_t id = 0;
  uint32_t retrans_segs = 0;   // tcpi_total_retrans delta over the request
  uint32_t rto = kUnknown;     // tcpi_total_rto delta, or kUnknown
  uint64_t bytes_retrans = 0;  // tcpi_bytes_retrans delta
  uint64_t send_us = 0;        // request received -> last byte acknowledged
};
constexpr size_t kTrailerSize = 40;

inline void put32(uint8_t* p, uint32_t v) {
  v = htobe32(v);
  std::memcpy(p, &v, 4);
}
inline void put64(uint8_t* p, uint64_t v) {
  v = htobe64(v);
  std::memcpy(p, &v, 8);
}
inline uint32_t get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return be32toh(v);
}
inline uint64_t get64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return be64toh(v);
}

inline void encode(const Request& r, uint8_t* out) {
  put32(out, kMagic);
  put32(out + 4, r.type);
  put64(out + 8, r.bytes);
  put64(out + 16, r.id);
}
// False when the magic is wrong (not a sluice-tg peer).
inline bool decode(const uint8_t* in, Request* r) {
  if (get32(in) != kMagic) return false;
  r->type = get32(in + 4);
  r->bytes = get64(in + 8);
  r->id = get64(in + 16);
  return true;
}

inline void encode(const Trailer& t, uint8_t* out) {
  put32(out, kTrailerMagic);
  put32(out + 4, 0);
  put64(out + 8, t.id);
  put32(out + 16, t.retrans_segs);
  put32(out + 20, t.rto);
  put64(out + 24, t.bytes_retrans);
  put64(out + 32, t.send_us);
}
inline bool decode(const uint8_t* in, Trailer* t) {
  if (get32(in) != kTrailerMagic) return false;
  t->id = get64(in + 8);
  t->retrans_segs = get32(in + 16);
  t->rto = get32(in + 20);
  t->bytes_retrans = get64(in + 24);
  t->send_us = get64(in + 32);
  return true;
}

}  // namespace sluice::tg
