#include "switch/pfc.h"

namespace sluice::sw {

Verdict PfcLogic::on_enqueue(const PacketMeta& pkt, PortId) {
  size_t n = sw_->port(pkt.out_port).queues.size();
  // The same choice the classifier makes for a flow nobody placed
  // (SL_SW_PORT_HASH_DEFAULT), so model and data path agree.
  return Verdict::enqueue(QueueId(n ? pkt.flow_hash % n : 0));
}

void PfcLogic::apply(PortId port, uint32_t q, uint32_t seq, bool pause) {
  if (q >= sw_->port(port).queues.size()) {
    ++c_.out_of_range;
    return;
  }
  auto key = std::make_pair(port, q);
  auto it = last_seq_.find(key);
  // Serial-number arithmetic: a frame is applied only if newer than the
  // last one applied for this queue (BFC §3.3.2; reordering and a stale
  // bitmap never undo a newer pause or resume).
  if (it != last_seq_.end() && int32_t(seq - it->second) <= 0) {
    ++c_.stale;
    return;
  }
  last_seq_[key] = seq;
  sw_->set_paused(port, QueueId(q), pause);
  ++(pause ? c_.pauses : c_.resumes);
}

void PfcLogic::on_control(const ControlFrame& f, PortId port) {
  switch (f.type) {
    case CtrlType::kPause:
    case CtrlType::kResume:
      for (const auto& r : f.queues) apply(port, r.queue, r.seq, f.type == CtrlType::kPause);
      break;
    case CtrlType::kPauseBitmap:
      for (const auto& b : f.bitmaps) {
        size_t n = sw_->port(port).queues.size();
        for (uint32_t i = 0; i < SLUICE_CTRL_BITMAP_QUEUES && b.first_queue + i < n; ++i) {
          bool want = (b.paused >> i) & 1;
          // A bitmap restates state: apply only where it changes something,
          // but record its seq so an older frame cannot undo it.
          uint32_t q = b.first_queue + i;
          auto it = last_seq_.find({port, q});
          if (it != last_seq_.end() && int32_t(b.seq - it->second) < 0) {
            ++c_.stale;
            continue;
          }
          last_seq_[{port, q}] = b.seq;
          if (sw_->paused(port, QueueId(q)) != want) {
            sw_->set_paused(port, QueueId(q), want);
            ++(want ? c_.pauses : c_.resumes);
          }
        }
      }
      break;
    default: break;  // credits, switchSYN, dstPause: not this logic's
  }
}

nlohmann::json pfc_view(const Logic& logic, const Substrate&) {
  const auto& c = static_cast<const PfcLogic&>(logic).counters();
  return {{"pauses_applied", c.pauses},
          {"resumes_applied", c.resumes},
          {"stale_records", c.stale},
          {"out_of_range_records", c.out_of_range}};
}

}  // namespace sluice::sw
