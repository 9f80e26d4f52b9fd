// Design A's agent half (switch_glue.cc): the keys of fg_egress's two
// tables and their slots in the .bss counter arrays.
//
// fg_egress (bpf/switch/floodgate.bpf.c) announces every key it adds to
// sl_fg_tx_v1 or sl_fg_rx_v1, with the key's slot in fg_tx / fg_rx, on the
// ring sl_fg_keys_v1; the agent reads the slots it knows through the
// skeleton's mapping every T, no syscall and no walk of the tables (a walk
// visits all SL_FG_SW_TABLE buckets: docs/floodgate.md "Why the Poisson
// flows were slow"). A key the ring could not take is counted in
// fg_keys_lost; when that count has grown, learn() walks both tables once,
// so every key is known either way.
//
// One ordered map per table serves both uses: every key every T (in key
// order: what the agent builds from them is keyed too) and one key's slot
// on a credit frame.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>

#include "sluice/floodgate_sw.h"
#include "switch/control.h"

struct ring_buffer;  // libbpf

namespace sluice::floodgate {

using SwKey = std::pair<uint32_t, sw::Addr>;  // (port_id, dst)

class KeySlots {
 public:
  // ring_fd: sl_fg_keys_v1; tx_fd, rx_fd: sl_fg_tx_v1, sl_fg_rx_v1; lost:
  // fg_keys_lost in the object's mapped .bss (BPF adds to it atomically).
  // Throws SysError when the ring cannot be opened.
  KeySlots(int ring_fd, int tx_fd, int rx_fd, const __u64* lost);
  ~KeySlots();
  KeySlots(const KeySlots&) = delete;
  KeySlots& operator=(const KeySlots&) = delete;

  // Takes the keys announced since the last call; if fg_keys_lost grew
  // since then, walks both tables (after the ring: BPF adds a key to its
  // table before it announces it, so the walk finds every lost one).
  void learn();

  const std::map<SwKey, uint32_t>& tx() const { return tx_; }
  const std::map<SwKey, uint32_t>& rx() const { return rx_; }
  std::optional<uint32_t> tx_slot(const SwKey& k) const {
    auto it = tx_.find(k);
    return it == tx_.end() ? std::nullopt : std::optional<uint32_t>(it->second);
  }
  uint64_t walks() const { return walks_; }
  uint64_t lost() const { return __atomic_load_n(lost_, __ATOMIC_RELAXED); }

 private:
  static int on_key(void* ctx, void* data, size_t size);
  void know(uint32_t table, const sl_fg_key& k, uint32_t slot);

  ring_buffer* ring_ = nullptr;
  int tx_fd_, rx_fd_;
  const __u64* lost_;
  uint64_t lost_seen_ = 0, walks_ = 0;
  std::map<SwKey, uint32_t> tx_, rx_;
};

}  // namespace sluice::floodgate
