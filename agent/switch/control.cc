#include "switch/control.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "sluice/switch.h"

namespace sluice::sw {

namespace {

void put16(uint8_t* p, uint16_t v) {
  v = htons(v);
  std::memcpy(p, &v, 2);
}
void put32(uint8_t* p, uint32_t v) {
  v = htonl(v);
  std::memcpy(p, &v, 4);
}
uint16_t get16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return ntohs(v);
}
uint32_t get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return ntohl(v);
}

struct ReasonName {
  const char* name;
  const char* text;
};
constexpr ReasonName kReasons[] = {
#define SL_CTRL_REASON_ROW(name, text) {#name, text},
    SLUICE_CTRL_REASONS(SL_CTRL_REASON_ROW)
#undef SL_CTRL_REASON_ROW
};
static_assert(sizeof(kReasons) / sizeof(kReasons[0]) == SL_CTRL_R_COUNT);

// Offsets the encoder writes, checked against the ABI structs so a change in
// wire.h breaks the build here.
static_assert(offsetof(sl_ctrl_hdr, length) == 2 && offsetof(sl_ctrl_hdr, rec_size) == 4);
static_assert(offsetof(sl_ctrl_credit, credit_bytes) == 16 && offsetof(sl_ctrl_credit, psn) == 20 &&
              offsetof(sl_ctrl_credit, credit_pkts) == 24);
static_assert(offsetof(sl_ctrl_switch_syn, next_psn) == 16);
static_assert(offsetof(sl_ctrl_queue, seq) == 4);
static_assert(offsetof(sl_ctrl_bitmap, seq) == 4 && offsetof(sl_ctrl_bitmap, paused) == 8);
static_assert(offsetof(sl_ctrl_dst, seq) == 16);

}  // namespace

Addr addr_v4(uint32_t be_addr) {
  Addr a{};
  a[10] = a[11] = 0xff;
  std::memcpy(&a[12], &be_addr, 4);
  return a;
}

Addr addr_parse(std::string_view text) {
  std::string s(text);
  in_addr v4;
  if (inet_pton(AF_INET, s.c_str(), &v4) == 1) return addr_v4(v4.s_addr);
  Addr a{};
  if (inet_pton(AF_INET6, s.c_str(), a.data()) == 1) return a;
  throw std::invalid_argument("not an IPv4 or IPv6 address: '" + s + "'");
}

uint32_t flow_hash(std::string_view src, std::string_view dst, uint16_t sport, uint16_t dport, uint8_t proto) {
  sl_sw_flow_tuple t{};
  const Addr s = addr_parse(src), d = addr_parse(dst);
  std::copy(s.begin(), s.end(), t.src);
  std::copy(d.begin(), d.end(), t.dst);
  t.sport = htons(sport);
  t.dport = htons(dport);
  t.proto = proto;
  return sl_sw_flow_hash(&t);
}

std::string addr_str(const Addr& a) {
  char buf[INET6_ADDRSTRLEN];
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(a.data(), kMapped, 12) == 0) return inet_ntop(AF_INET, &a[12], buf, sizeof(buf)) ? buf : "?";
  return inet_ntop(AF_INET6, a.data(), buf, sizeof(buf)) ? buf : "?";
}

std::string_view ctrl_type_name(CtrlType t) {
  switch (t) {
    case CtrlType::kCredit: return "credit";
    case CtrlType::kSwitchSyn: return "switch_syn";
    case CtrlType::kPause: return "pause";
    case CtrlType::kResume: return "resume";
    case CtrlType::kPauseBitmap: return "pause_bitmap";
    case CtrlType::kDstPause: return "dst_pause";
    case CtrlType::kDstResume: return "dst_resume";
  }
  return "unknown";
}

std::string_view ctrl_reason_name(int r) { return r >= 0 && r < SL_CTRL_R_COUNT ? kReasons[r].name : "UNKNOWN_REASON"; }
std::string_view ctrl_reason_text(int r) { return r >= 0 && r < SL_CTRL_R_COUNT ? kReasons[r].text : "unknown reason"; }

size_t ControlFrame::count() const {
  switch (type) {
    case CtrlType::kCredit: return credits.size();
    case CtrlType::kSwitchSyn: return syns.size();
    case CtrlType::kPause:
    case CtrlType::kResume: return queues.size();
    case CtrlType::kPauseBitmap: return bitmaps.size();
    case CtrlType::kDstPause:
    case CtrlType::kDstResume: return dsts.size();
  }
  return 0;
}

std::vector<uint8_t> encode(const ControlFrame& f, int* reason) {
  int dummy;
  int& r = reason ? *reason : dummy;
  const uint32_t type = static_cast<uint32_t>(f.type);
  const uint32_t rs = sl_ctrl_rec_size(type);
  if (!rs) {
    r = SL_CTRL_R_BAD_TYPE;
    return {};
  }
  const size_t n = f.count();
  if (n > SLUICE_CTRL_MAX_RECORDS) {
    r = SL_CTRL_R_BAD_COUNT;
    return {};
  }
  std::vector<uint8_t> out(SLUICE_CTRL_HDR_LEN + n * rs, 0);
  out[0] = SLUICE_CTRL_VERSION;
  out[1] = static_cast<uint8_t>(type);
  put16(&out[2], static_cast<uint16_t>(out.size()));
  put16(&out[4], static_cast<uint16_t>(rs));
  for (size_t i = 0; i < n; ++i) {
    uint8_t* p = &out[SLUICE_CTRL_HDR_LEN + i * rs];
    switch (f.type) {
      case CtrlType::kCredit: {
        const auto& c = f.credits[i];
        std::memcpy(p, c.dst.data(), 16);
        put32(p + 16, c.credit_bytes);
        put32(p + 20, c.psn);
        put16(p + 24, c.credit_pkts);
        break;
      }
      case CtrlType::kSwitchSyn:
        std::memcpy(p, f.syns[i].dst.data(), 16);
        put32(p + 16, f.syns[i].next_psn);
        break;
      case CtrlType::kPause:
      case CtrlType::kResume:
        put16(p, f.queues[i].queue);
        put32(p + 4, f.queues[i].seq);
        break;
      case CtrlType::kPauseBitmap:
        put16(p, f.bitmaps[i].first_queue);
        put32(p + 4, f.bitmaps[i].seq);
        for (int b = 0; b < 8; ++b) p[8 + b] = static_cast<uint8_t>(f.bitmaps[i].paused >> (8 * b));
        break;
      case CtrlType::kDstPause:
      case CtrlType::kDstResume:
        std::memcpy(p, f.dsts[i].dst.data(), 16);
        put32(p + 16, f.dsts[i].seq);
        break;
    }
  }
  // The encoder runs the receiver's checks: we never send what a peer rejects.
  ControlFrame check;
  r = decode(out.data(), out.size(), &check);
  if (r != SL_CTRL_R_OK) return {};
  return out;
}

int decode(const uint8_t* data, size_t len, ControlFrame* out) {
  sl_ctrl_hdr h{};
  if (len < sizeof(h)) return SL_CTRL_R_TRUNCATED;
  std::memcpy(&h, data, sizeof(h));
  uint32_t n = 0;
  const uint32_t avail = len > 0xffffffffu ? 0xffffffffu : static_cast<uint32_t>(len);
  int r = sl_ctrl_check_hdr(&h, avail, &n);
  if (r != SL_CTRL_R_OK) return r;
  const uint32_t rs = sl_ctrl_rec_size(h.type);
  ControlFrame f;
  f.type = static_cast<CtrlType>(h.type);
  for (uint32_t i = 0; i < n; ++i) {
    const uint8_t* p = data + SLUICE_CTRL_HDR_LEN + i * rs;
    alignas(8) uint8_t rec[32];
    std::memcpy(rec, p, rs);
    r = sl_ctrl_check_rec(h.type, rec);
    if (r != SL_CTRL_R_OK) return r;
    switch (f.type) {
      case CtrlType::kCredit: {
        CreditRec c;
        std::memcpy(c.dst.data(), p, 16);
        c.credit_bytes = get32(p + 16);
        c.psn = get32(p + 20);
        c.credit_pkts = get16(p + 24);
        f.credits.push_back(c);
        break;
      }
      case CtrlType::kSwitchSyn: {
        SwitchSynRec s;
        std::memcpy(s.dst.data(), p, 16);
        s.next_psn = get32(p + 16);
        f.syns.push_back(s);
        break;
      }
      case CtrlType::kPause:
      case CtrlType::kResume: f.queues.push_back({get16(p), get32(p + 4)}); break;
      case CtrlType::kPauseBitmap: {
        BitmapRec b;
        b.first_queue = get16(p);
        b.seq = get32(p + 4);
        for (int k = 0; k < 8; ++k) b.paused |= uint64_t(p[8 + k]) << (8 * k);
        f.bitmaps.push_back(b);
        break;
      }
      case CtrlType::kDstPause:
      case CtrlType::kDstResume: {
        DstRec d;
        std::memcpy(d.dst.data(), p, 16);
        d.seq = get32(p + 16);
        f.dsts.push_back(d);
        break;
      }
    }
  }
  if (out) *out = std::move(f);
  return SL_CTRL_R_OK;
}

std::vector<uint8_t> ethernet_frame(const std::array<uint8_t, 6>& src_mac, const std::vector<uint8_t>& payload,
                                    const std::array<uint8_t, 6>& dst_mac) {
  std::vector<uint8_t> f(14 + payload.size());
  std::memcpy(&f[0], dst_mac.data(), 6);
  std::memcpy(&f[6], src_mac.data(), 6);
  put16(&f[12], SLUICE_CTRL_ETHERTYPE);
  std::memcpy(&f[14], payload.data(), payload.size());
  if (f.size() < 60) f.resize(60, 0);
  return f;
}

long ctrl_payload_offset(const uint8_t* frame, size_t len) {
  if (len < 14) return -1;
  size_t off = 12;
  uint16_t et = get16(frame + off);
  if (et == 0x8100 || et == 0x88A8) {
    if (len < 18) return -1;
    off += 4;
    et = get16(frame + off);
  }
  if (et != SLUICE_CTRL_ETHERTYPE) return -1;
  return static_cast<long>(off + 2);
}

}  // namespace sluice::sw

namespace sluice::sw {

int accept_control(uint8_t role, const uint8_t* payload, size_t len, ControlFrame* out) {
  if (role == SL_PORT_NONE) return SL_CTRL_R_UNKNOWN_PORT;
  ControlFrame f;
  int r = decode(payload, len, &f);
  if (r != SL_CTRL_R_OK) return r;
  if (!sl_ctrl_port_allows(role, static_cast<uint32_t>(f.type))) return SL_CTRL_R_WRONG_PORT;
  if (out) *out = std::move(f);
  return SL_CTRL_R_OK;
}

}  // namespace sluice::sw
