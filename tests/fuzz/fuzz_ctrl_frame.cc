// Hop-by-hop control frames (include/sluice/wire.h, agent/switch/control.cc)
// as a switch or host port receives them from the wire: the first input byte
// picks the receiving port's role, the rest is the Ethernet frame.
//
// Invariants: the parser returns a known sl_ctrl_reason; a frame is accepted
// only if decode() accepts it and the role allows its type; an accepted
// frame has 1..SLUICE_CTRL_MAX_RECORDS records (switchSYN: 0..) and
// re-encodes to exactly the bytes its length field covers (the format has
// one encoding: every reserved field is checked zero); every address in it
// prints and parses back to itself.
#include <cstring>

#include "fuzz_input.h"
#include "switch/control.h"

using namespace sluice::sw;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sluice::fuzz::Input in(data, size);
  const uint8_t role = in.take<uint8_t>() % 4;
  const std::string frame = in.rest();
  const auto* f = reinterpret_cast<const uint8_t*>(frame.data());

  const long off = ctrl_payload_offset(f, frame.size());
  if (off < 0) return 0;
  FUZZ_CHECK(off == 14 || off == 18);
  FUZZ_CHECK(static_cast<size_t>(off) <= frame.size());
  const uint8_t* payload = f + off;
  const size_t len = frame.size() - off;

  ControlFrame plain;
  const int dr = decode(payload, len, &plain);
  FUZZ_CHECK(dr >= 0 && dr < SL_CTRL_R_COUNT);
  FUZZ_CHECK(!ctrl_reason_name(dr).empty() && !ctrl_reason_text(dr).empty());

  ControlFrame cf;
  const int r = accept_control(role, payload, len, &cf);
  FUZZ_CHECK(r >= 0 && r < SL_CTRL_R_COUNT);
  if (role == SL_PORT_NONE) {
    FUZZ_CHECK(r == SL_CTRL_R_UNKNOWN_PORT);
    return 0;
  }
  if (dr != SL_CTRL_R_OK) {
    FUZZ_CHECK(r == dr);
    return 0;
  }
  const bool allowed = sl_ctrl_port_allows(role, static_cast<uint32_t>(plain.type));
  FUZZ_CHECK(r == (allowed ? SL_CTRL_R_OK : SL_CTRL_R_WRONG_PORT));
  if (r != SL_CTRL_R_OK) return 0;

  // Accepted: the record count is in range and the frame re-encodes to
  // the bytes it came from.
  const size_t n = cf.count();
  FUZZ_CHECK(n <= SLUICE_CTRL_MAX_RECORDS);
  FUZZ_CHECK(n >= 1 || cf.type == CtrlType::kSwitchSyn);
  FUZZ_CHECK(!ctrl_type_name(cf.type).empty() && ctrl_type_name(cf.type) != "unknown");
  int er = -1;
  const std::vector<uint8_t> again = encode(cf, &er);
  FUZZ_CHECK(er == SL_CTRL_R_OK);
  FUZZ_CHECK(again.size() >= SLUICE_CTRL_HDR_LEN && again.size() <= len);
  const uint16_t length = static_cast<uint16_t>(payload[2] << 8 | payload[3]);
  FUZZ_CHECK(again.size() == length);
  FUZZ_CHECK(std::memcmp(again.data(), payload, again.size()) == 0);

  // Addresses print and parse back (the same text a log line or sluicectl
  // would show).
  auto roundtrip = [](const Addr& a) { FUZZ_CHECK(addr_parse(addr_str(a)) == a); };
  for (const auto& c : cf.credits) roundtrip(c.dst);
  for (const auto& s : cf.syns) roundtrip(s.dst);
  for (const auto& d : cf.dsts) roundtrip(d.dst);
  return 0;
}
