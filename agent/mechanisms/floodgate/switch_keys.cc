// The keys of fg_egress's tables and their slots (switch_keys.h).
#include "mechanisms/floodgate/switch_keys.h"

#include <bpf/libbpf.h>

#include <cerrno>
#include <cstring>

#include "core/bpf_util.h"
#include "core/error.h"

namespace sluice::floodgate {

KeySlots::KeySlots(int ring_fd, int tx_fd, int rx_fd, const __u64* lost) : tx_fd_(tx_fd), rx_fd_(rx_fd), lost_(lost) {
  ring_ = ring_buffer__new(ring_fd, &KeySlots::on_key, this, nullptr);
  if (!ring_) throw SysError("floodgate: key ring", errno);
}

KeySlots::~KeySlots() { ring_buffer__free(ring_); }

int KeySlots::on_key(void* ctx, void* data, size_t size) {
  if (size >= sizeof(sl_fg_new_key)) {
    const auto& e = *static_cast<const sl_fg_new_key*>(data);
    static_cast<KeySlots*>(ctx)->know(e.table, e.key, e.slot);
  }
  return 0;
}

void KeySlots::know(uint32_t table, const sl_fg_key& bk, uint32_t slot) {
  if (slot >= SL_FG_SW_TABLE) return;
  SwKey k{bk.port_id, {}};
  std::memcpy(k.second.data(), bk.dst, 16);
  if (table == SL_FG_KEY_TX) tx_.emplace(k, slot);
  else if (table == SL_FG_KEY_RX) rx_.emplace(k, slot);
}

void KeySlots::learn() {
  ring_buffer__consume(ring_);
  const uint64_t lost = this->lost();
  if (lost == lost_seen_) return;
  lost_seen_ = lost;
  ++walks_;
  for_each_entry<sl_fg_key, uint32_t>(tx_fd_, [&](const sl_fg_key& k, const uint32_t& s) { know(SL_FG_KEY_TX, k, s); });
  for_each_entry<sl_fg_key, uint32_t>(rx_fd_, [&](const sl_fg_key& k, const uint32_t& s) { know(SL_FG_KEY_RX, k, s); });
}

}  // namespace sluice::floodgate
