// Control frames (include/sluice/wire.h) in C++: a decoded, host-order
// ControlFrame, and encode/decode that run the same checks as the BPF
// classifier (sl_ctrl_check_hdr / sl_ctrl_check_rec are the one parser).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/wire.h"

namespace sluice::sw {

// An IPv6 address or an IPv4-mapped one (::ffff:a.b.c.d), network order.
using Addr = std::array<uint8_t, 16>;
Addr addr_v4(uint32_t be_addr);
Addr addr_parse(std::string_view text);  // "10.0.0.1" or an IPv6 literal; throws on bad text
std::string addr_str(const Addr& a);
// The switch's flow hash (sl_sw_flow_hash, what the classifier computes) of a
// 5-tuple given as address text and host-order ports; throws on bad text.
uint32_t flow_hash(std::string_view src, std::string_view dst, uint16_t sport, uint16_t dport, uint8_t proto);

enum class CtrlType : uint8_t {
  kCredit = SL_CTRL_CREDIT,
  kSwitchSyn = SL_CTRL_SWITCH_SYN,
  kPause = SL_CTRL_PAUSE,
  kResume = SL_CTRL_RESUME,
  kPauseBitmap = SL_CTRL_PAUSE_BITMAP,
  kDstPause = SL_CTRL_DST_PAUSE,
  kDstResume = SL_CTRL_DST_RESUME,
};
std::string_view ctrl_type_name(CtrlType t);
std::string_view ctrl_reason_name(int reason);  // sl_ctrl_reason: "OK", "TRUNCATED", ...
std::string_view ctrl_reason_text(int reason);

struct CreditRec {
  Addr dst{};
  uint32_t credit_bytes = 0;
  uint32_t psn = 0;
  uint16_t credit_pkts = 0;
};
struct SwitchSynRec {
  Addr dst{};
  uint32_t next_psn = 0;
};
struct QueueRec {
  uint16_t queue = 0;
  uint32_t seq = 0;
};
struct BitmapRec {
  uint16_t first_queue = 0;
  uint32_t seq = 0;
  uint64_t paused = 0;  // bit i = queue first_queue + i
};
struct DstRec {
  Addr dst{};
  uint32_t seq = 0;
};

// One frame: `type` says which vector holds its records (the others are
// empty).
struct ControlFrame {
  CtrlType type = CtrlType::kPause;
  std::vector<CreditRec> credits;  // kCredit
  std::vector<SwitchSynRec> syns;  // kSwitchSyn
  std::vector<QueueRec> queues;    // kPause, kResume
  std::vector<BitmapRec> bitmaps;  // kPauseBitmap
  std::vector<DstRec> dsts;        // kDstPause, kDstResume
  size_t count() const;
};

// The control payload (from sl_ctrl_hdr on, no Ethernet header). Returns
// the bytes, or an empty vector and *reason != OK when the frame would be
// invalid (too many records, queue out of range, zero address...).
std::vector<uint8_t> encode(const ControlFrame& f, int* reason = nullptr);

// Decodes a control payload (`len` bytes from sl_ctrl_hdr to the end of the
// frame, padding included). Returns sl_ctrl_reason; `out` is written only
// on SL_CTRL_R_OK.
int decode(const uint8_t* data, size_t len, ControlFrame* out);

// A whole Ethernet frame: 14-byte header (+ optional 802.1Q tag) with
// EtherType 0x88B5, then the payload, padded to 60 bytes.
constexpr std::array<uint8_t, 6> kCtrlGroupMac{0x01, 0x80, 0xC2, 0x00, 0x00, 0x0E};
std::vector<uint8_t> ethernet_frame(const std::array<uint8_t, 6>& src_mac, const std::vector<uint8_t>& payload,
                                    const std::array<uint8_t, 6>& dst_mac = kCtrlGroupMac);
// Finds the control payload in an Ethernet frame; returns its offset or -1
// when the frame is not a control frame (other EtherType, or truncated L2).
long ctrl_payload_offset(const uint8_t* frame, size_t len);

}  // namespace sluice::sw

namespace sluice::sw {

// The receive gate every substrate runs before a logic sees a frame:
// decodes `payload` (control payload, see decode()) and checks that its type
// may arrive on a port of `role` (sl_ctrl_port_allows). Returns
// sl_ctrl_reason; `out` is written only on SL_CTRL_R_OK.
int accept_control(uint8_t role, const uint8_t* payload, size_t len, ControlFrame* out);

}  // namespace sluice::sw
