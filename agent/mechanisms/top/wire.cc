#include "mechanisms/top/wire.h"

#include <endian.h>

#include <cstring>

namespace sluice::top {

static_assert(offsetof(sluice_top_hdr, flow_id) == 8);
static_assert(offsetof(sluice_top_hdr, seq) == 16);
static_assert(offsetof(sluice_top_hdr, tstamp_ns) == 24);
static_assert(offsetof(sluice_top_sync, mss) == 16);

const char* type_name(Type t) {
  switch (t) {
    case Type::kToken: return "token";
    case Type::kData: return "data";
    case Type::kSync: return "sync";
    case Type::kFin: return "fin";
    case Type::kNack: return "nack";
    case Type::kDone: return "done";
  }
  return "?";
}

static bool has_record(Type t) { return t == Type::kSync || t == Type::kFin; }

size_t wire_bytes(const Packet& p) {
  return kHeaderBytes + (has_record(p.type) ? kSyncBytes : 0) + (p.type == Type::kData ? p.len : 0);
}

uint64_t pacing_slot_ns(double link_mbit, uint16_t mss) {
  double bytes = static_cast<double>(kTokenFrameBytes + data_frame_bytes(mss));
  return static_cast<uint64_t>(bytes * 8.0 * 1000.0 / link_mbit);
}

size_t encode(const Packet& p, uint8_t* buf, size_t cap) {
  size_t need = kHeaderBytes + (has_record(p.type) ? kSyncBytes : 0);
  if (cap < need) return 0;
  sluice_top_hdr h{};
  h.magic = htobe16(SLUICE_TOP_MAGIC);
  h.version = SLUICE_TOP_VERSION;
  h.type = static_cast<uint8_t>(p.type);
  h.priority = p.priority;
  h.flags = p.flags;
  h.len = htobe16(p.len);
  h.flow_id = htobe64(p.flow);
  h.seq = htobe32(p.seq);
  h.aux = htobe32(p.aux);
  h.tstamp_ns = htobe64(p.tstamp_ns);
  std::memcpy(buf, &h, sizeof(h));
  if (has_record(p.type)) {
    sluice_top_sync s{};
    s.size_bytes = htobe64(p.size_bytes);
    s.deadline_ns = htobe64(p.deadline_ns);
    s.mss = htobe16(p.mss);
    s.sync_flags = p.sized ? SLUICE_TOP_SYNC_SIZED : 0;
    s.prio_class = p.prio_class;
    std::memcpy(buf + kHeaderBytes, &s, sizeof(s));
  }
  return need;
}

std::optional<Packet> decode(const uint8_t* buf, size_t n, std::string* why) {
  auto fail = [&](const char* w) -> std::optional<Packet> {
    if (why) *why = w;
    return std::nullopt;
  };
  if (n < kHeaderBytes) return fail("shorter than the TOP header");
  sluice_top_hdr h;
  std::memcpy(&h, buf, sizeof(h));
  if (be16toh(h.magic) != SLUICE_TOP_MAGIC) return fail("bad magic");
  if (h.version != SLUICE_TOP_VERSION) return fail("unknown version");
  if (h.type < SLUICE_TOP_TOKEN || h.type > SLUICE_TOP_DONE) return fail("unknown type");
  Packet p;
  p.type = static_cast<Type>(h.type);
  p.priority = h.priority;
  p.flags = h.flags;
  p.len = be16toh(h.len);
  p.flow = be64toh(h.flow_id);
  p.seq = be32toh(h.seq);
  p.aux = be32toh(h.aux);
  p.tstamp_ns = be64toh(h.tstamp_ns);
  if (p.type == Type::kToken && p.priority >= kPriorities) return fail("token priority out of range");
  if (p.type == Type::kData && kHeaderBytes + p.len > n) return fail("data length beyond the datagram");
  if (p.type == Type::kNack && p.aux == 0) return fail("NACK of zero packets");
  if (has_record(p.type)) {
    if (n < kHeaderBytes + kSyncBytes) return fail("SYNC/FIN without its record");
    sluice_top_sync s;
    std::memcpy(&s, buf + kHeaderBytes, sizeof(s));
    p.size_bytes = be64toh(s.size_bytes);
    p.deadline_ns = be64toh(s.deadline_ns);
    p.mss = be16toh(s.mss);
    p.sized = (s.sync_flags & SLUICE_TOP_SYNC_SIZED) != 0;
    p.prio_class = s.prio_class;
    if (p.mss == 0) return fail("SYNC/FIN with mss 0");
    if (p.prio_class != kPrioByObjective && p.prio_class >= kPriorities) return fail("priority class out of range");
    if ((p.sized || p.type == Type::kFin) && p.size_bytes == 0) return fail("flow size 0");
    // Packet IDs are 32-bit.
    if ((p.size_bytes + p.mss - 1) / p.mss > 0xffffffffull) return fail("flow larger than 2^32 packets");
  }
  return p;
}

}  // namespace sluice::top
