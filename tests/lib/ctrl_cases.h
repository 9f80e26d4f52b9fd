// The control-frame table shared by the C++ parser test (unit) and the BPF
// classifier test (bpf): the same frames must get the same reason from
// agent/switch/control.cc and from bpf/switch/swport.bpf.c.
#pragma once

#include <arpa/inet.h>

#include <cstring>
#include <string>
#include <algorithm>
#include <vector>

#include "switch/control.h"

namespace sluice::test {

struct CtrlCase {
  std::string desc;
  std::vector<uint8_t> frame;  // whole Ethernet frame
  uint8_t role;                // sl_port_role of the receiving port
  int reason;                  // expected sl_ctrl_reason
};

namespace ctrl_detail {
inline void put16(std::vector<uint8_t>& b, size_t off, uint16_t v) {
  v = htons(v);
  std::memcpy(&b[off], &v, 2);
}
inline std::vector<uint8_t> raw(uint8_t version, uint8_t type, uint16_t length, uint16_t rec_size,
                                std::vector<uint8_t> records, uint16_t reserved = 0) {
  // Sized once, records copied in place: GCC 12 -O3 warns -Warray-bounds
  // (a false positive) on an insert at the end of the 8-byte header.
  std::vector<uint8_t> p(8 + records.size());
  p[0] = version;
  p[1] = type;
  put16(p, 2, length);
  put16(p, 4, rec_size);
  put16(p, 6, reserved);
  std::copy(records.begin(), records.end(), p.begin() + 8);
  return p;
}
inline std::vector<uint8_t> qrec(uint16_t queue, uint32_t seq, uint16_t reserved = 0) {
  std::vector<uint8_t> r(8);
  put16(r, 0, queue);
  put16(r, 2, reserved);
  uint32_t s = htonl(seq);
  std::memcpy(&r[4], &s, 4);
  return r;
}
inline std::vector<uint8_t> frame(const std::vector<uint8_t>& payload) {
  return sw::ethernet_frame({0x02, 0, 0, 0, 0, 1}, payload);
}
inline std::vector<uint8_t> enc(const sw::ControlFrame& f) {
  int r = 0;
  auto p = sw::encode(f, &r);
  if (r != SL_CTRL_R_OK) throw std::logic_error("test frame does not encode");
  return p;
}
}  // namespace ctrl_detail

inline std::vector<CtrlCase> ctrl_cases() {
  using namespace ctrl_detail;
  using sw::ControlFrame;
  using sw::CtrlType;
  const uint8_t SW = SL_PORT_SWITCH_FACING, HF = SL_PORT_HOST_FACING, UP = SL_PORT_HOST_UPLINK, NONE = SL_PORT_NONE;
  const auto dst = sw::addr_parse("10.0.0.2");
  std::vector<CtrlCase> c;

  ControlFrame pause{CtrlType::kPause};
  pause.queues = {{3, 17}};
  ControlFrame resume{CtrlType::kResume};
  resume.queues = {{127, 18}, {0, 19}};
  ControlFrame credit{CtrlType::kCredit};
  credit.credits = {{dst, 3000, 123456, 2}};
  ControlFrame credit32{CtrlType::kCredit};
  for (int i = 0; i < 32; ++i)
    credit32.credits.push_back({sw::addr_parse("10.0.1." + std::to_string(i + 1)), 1500u * i, 7u * i, uint16_t(i)});
  ControlFrame syn_all{CtrlType::kSwitchSyn};
  ControlFrame syn{CtrlType::kSwitchSyn};
  syn.syns = {{sw::addr_parse("fd00::2"), 99}};
  ControlFrame bitmap{CtrlType::kPauseBitmap};
  bitmap.bitmaps = {{0, 5, 0x8000000000000001ull}, {64, 5, 0xffffffffffffffffull}};
  ControlFrame dpause{CtrlType::kDstPause};
  dpause.dsts = {{dst, 1}};
  ControlFrame dresume{CtrlType::kDstResume};
  dresume.dsts = {{dst, 2}};

  c.push_back({"pause, one record, switch-facing", frame(enc(pause)), SW, SL_CTRL_R_OK});
  c.push_back({"resume, queues 127 and 0", frame(enc(resume)), SW, SL_CTRL_R_OK});
  c.push_back({"credit, one record", frame(enc(credit)), SW, SL_CTRL_R_OK});
  c.push_back({"credit, 32 records (the maximum)", frame(enc(credit32)), SW, SL_CTRL_R_OK});
  c.push_back({"switchSYN with no records (all destinations)", frame(enc(syn_all)), SW, SL_CTRL_R_OK});
  c.push_back({"switchSYN, IPv6 destination", frame(enc(syn)), SW, SL_CTRL_R_OK});
  c.push_back({"pause bitmap, queues 0..127", frame(enc(bitmap)), SW, SL_CTRL_R_OK});
  c.push_back({"dstPause on a host uplink", frame(enc(dpause)), UP, SL_CTRL_R_OK});
  c.push_back({"dstResume on a host uplink", frame(enc(dresume)), UP, SL_CTRL_R_OK});
  {
    auto p = enc(pause);
    p.resize(p.size() + 4, 0xAA);  // trailing bytes past length: padding
    c.push_back({"pause with trailing bytes past length", frame(p), SW, SL_CTRL_R_OK});
  }

  // Port roles.
  c.push_back({"pause on a host-facing port (spoofed by a host)", frame(enc(pause)), HF, SL_CTRL_R_WRONG_PORT});
  c.push_back({"credit on a host-facing port", frame(enc(credit)), HF, SL_CTRL_R_WRONG_PORT});
  c.push_back({"dstPause on a switch-facing port", frame(enc(dpause)), SW, SL_CTRL_R_WRONG_PORT});
  c.push_back({"dstPause on a switch's host-facing port", frame(enc(dpause)), HF, SL_CTRL_R_WRONG_PORT});
  c.push_back({"pause on a host uplink", frame(enc(pause)), UP, SL_CTRL_R_WRONG_PORT});
  c.push_back({"pause on an interface that is not a switch port", frame(enc(pause)), NONE, SL_CTRL_R_UNKNOWN_PORT});

  // Header.
  {
    std::vector<uint8_t> f(14 + 4, 0);
    f[12] = 0x88;
    f[13] = 0xB5;
    f[14] = 1;
    f[15] = 3;
    // Not padded: a 4-byte payload (only reachable through the BPF test
    // runner or a raw socket; the wire pads to 60).
    c.push_back({"4 bytes after the EtherType", f, SW, SL_CTRL_R_TRUNCATED});
  }
  c.push_back({"length beyond the frame (32 pause records claimed, 1 sent)",
               frame(raw(1, SL_CTRL_PAUSE, 8 + 32 * 8, 8, qrec(1, 1))), SW, SL_CTRL_R_TRUNCATED});
  c.push_back({"version 2", frame(raw(2, SL_CTRL_PAUSE, 16, 8, qrec(1, 1))), SW, SL_CTRL_R_BAD_VERSION});
  c.push_back({"version 0", frame(raw(0, SL_CTRL_PAUSE, 16, 8, qrec(1, 1))), SW, SL_CTRL_R_BAD_VERSION});
  c.push_back({"type 0", frame(raw(1, 0, 16, 8, qrec(1, 1))), SW, SL_CTRL_R_BAD_TYPE});
  c.push_back({"type 8 (unassigned)", frame(raw(1, 8, 16, 8, qrec(1, 1))), SW, SL_CTRL_R_BAD_TYPE});
  c.push_back({"type 255", frame(raw(1, 255, 16, 8, qrec(1, 1))), SW, SL_CTRL_R_BAD_TYPE});
  c.push_back(
      {"record size 16 for pause", frame(raw(1, SL_CTRL_PAUSE, 24, 16, qrec(1, 1))), SW, SL_CTRL_R_BAD_REC_SIZE});
  c.push_back(
      {"length not header + whole records", frame(raw(1, SL_CTRL_PAUSE, 15, 8, qrec(1, 1))), SW, SL_CTRL_R_BAD_LENGTH});
  c.push_back(
      {"length shorter than the header", frame(raw(1, SL_CTRL_PAUSE, 4, 8, qrec(1, 1))), SW, SL_CTRL_R_BAD_LENGTH});
  c.push_back({"pause with zero records", frame(raw(1, SL_CTRL_PAUSE, 8, 8, {})), SW, SL_CTRL_R_BAD_COUNT});
  {
    std::vector<uint8_t> recs;
    for (int i = 0; i < 33; ++i) {
      auto r = qrec(uint16_t(i), uint32_t(i));
      recs.insert(recs.end(), r.begin(), r.end());
    }
    c.push_back({"33 pause records", frame(raw(1, SL_CTRL_PAUSE, 8 + 33 * 8, 8, recs)), SW, SL_CTRL_R_BAD_COUNT});
  }
  c.push_back(
      {"header reserved not zero", frame(raw(1, SL_CTRL_PAUSE, 16, 8, qrec(1, 1), 1)), SW, SL_CTRL_R_BAD_RESERVED});

  // Records.
  c.push_back({"pause of queue 128 (one past the last)", frame(raw(1, SL_CTRL_PAUSE, 16, 8, qrec(128, 1))), SW,
               SL_CTRL_R_QUEUE_RANGE});
  c.push_back(
      {"resume of queue 0xffff", frame(raw(1, SL_CTRL_RESUME, 16, 8, qrec(0xffff, 1))), SW, SL_CTRL_R_QUEUE_RANGE});
  {
    auto recs = qrec(1, 1);
    auto bad = qrec(200, 2);
    recs.insert(recs.end(), bad.begin(), bad.end());
    c.push_back({"second record out of range (no record applied)", frame(raw(1, SL_CTRL_PAUSE, 24, 8, recs)), SW,
                 SL_CTRL_R_QUEUE_RANGE});
  }
  c.push_back({"pause record reserved not zero", frame(raw(1, SL_CTRL_PAUSE, 16, 8, qrec(1, 1, 7))), SW,
               SL_CTRL_R_BAD_RESERVED});
  {
    std::vector<uint8_t> b(16, 0);
    put16(b, 0, 32);
    c.push_back({"bitmap base 32 (not a multiple of 64)", frame(raw(1, SL_CTRL_PAUSE_BITMAP, 24, 16, b)), SW,
                 SL_CTRL_R_BITMAP_RANGE});
    put16(b, 0, 128);
    c.push_back({"bitmap base 128 (past the last queue)", frame(raw(1, SL_CTRL_PAUSE_BITMAP, 24, 16, b)), SW,
                 SL_CTRL_R_BITMAP_RANGE});
  }
  {
    std::vector<uint8_t> r(28, 0);  // credit to ::
    c.push_back({"credit to the unspecified address", frame(raw(1, SL_CTRL_CREDIT, 36, 28, r)), SW, SL_CTRL_R_BAD_DST});
    r[15] = 1;
    r[26] = 1;  // reserved
    c.push_back(
        {"credit record reserved not zero", frame(raw(1, SL_CTRL_CREDIT, 36, 28, r)), SW, SL_CTRL_R_BAD_RESERVED});
  }
  {
    std::vector<uint8_t> r(24, 0);
    c.push_back(
        {"dstPause to the unspecified address", frame(raw(1, SL_CTRL_DST_PAUSE, 32, 24, r)), UP, SL_CTRL_R_BAD_DST});
  }
  return c;
}

}  // namespace sluice::test
