#include "mechanisms/floodgate/host_runner.h"

#include <bpf/libbpf.h>
#include <net/if.h>

#include <vector>

#include "core/bpf_util.h"
#include "core/error.h"
#include "core/heartbeat.h"
#include "core/tc.h"
#include "mechanisms/pac/reinject.h"
#include "sluice/dstpause.h"
#include "sluice/switch.h"
#include "dstpause.skel.h"
#include "dstpause_compat.skel.h"

// dstpause_compat (Linux 6.1) decides by the heartbeat alone (bpf/lib/liveness.h).
SLUICE_SKELETON_TWIN(dstpause, dstpause_compat, sluice::liveness_object);

namespace sluice::floodgate {

struct HostRunner::Impl {
  HostRunnerConfig cfg;
  Skeleton<dstpause> skel;
  std::vector<TcAttachment> attached;
  std::unique_ptr<pac::Reinjector> reinjector;
  ring_buffer* ctrl_ring = nullptr;
  ring_buffer* held_ring = nullptr;
  HostPause pause;
  std::vector<HostPause::Effect> effects;
  uint64_t now = 0;
  uint64_t send_errors = 0;

  explicit Impl(HostRunnerConfig c) : cfg(std::move(c)), pause(cfg.pause) {}
  ~Impl() {
    if (ctrl_ring) ring_buffer__free(ctrl_ring);
    if (held_ring) ring_buffer__free(held_ring);
  }

  static int on_ctrl(void* ctx, void* data, size_t size) {
    auto* self = static_cast<Impl*>(ctx);
    if (size < sizeof(sl_sw_ctrl_event)) return 0;
    const auto* ev = static_cast<const sl_sw_ctrl_event*>(data);
    if (ev->payload_off >= ev->len || ev->len > SLUICE_SW_CTRL_FRAME_MAX) return 0;
    sw::ControlFrame f;
    // The BPF gate checked it; the agent checks again with the same parser.
    if (sw::accept_control(SL_PORT_HOST_UPLINK, ev->frame + ev->payload_off, ev->len - ev->payload_off, &f) !=
        SL_CTRL_R_OK)
      return 0;
    self->pause.on_control(f, self->now, self->effects);
    return 0;
  }
  static int on_held(void* ctx, void* data, size_t size) {
    auto* self = static_cast<Impl*>(ctx);
    if (size < sizeof(sl_dp_frame)) return 0;
    const auto* ev = static_cast<const sl_dp_frame*>(data);
    if (ev->len > SLUICE_DP_FRAME_MAX) return 0;
    sw::Addr dst;
    std::copy(ev->dst.addr, ev->dst.addr + 16, dst.begin());
    self->pause.on_frame(dst, ev->frame, ev->len, self->now, self->effects);
    return 0;
  }

  void apply() {
    int held = bpf_map__fd(skel->maps.sl_fg_held_v1);
    for (auto& e : effects) {
      sl_dp_dst key{};
      std::copy(e.dst.begin(), e.dst.end(), key.addr);
      if (e.kind == HostPause::Effect::kHold) {
        uint32_t one = 1;
        bpf_map_update_elem(held, &key, &one, BPF_ANY);
      } else if (e.kind == HostPause::Effect::kRelease) {
        bpf_map_delete_elem(held, &key);
      } else if (!reinjector->send(e.frame.data(), e.frame.size())) {
        ++send_errors;
      }
    }
    effects.clear();
  }
};

HostRunner::HostRunner(HostRunnerConfig cfg) : impl_(std::make_unique<Impl>(std::move(cfg))) {
  Impl& m = *impl_;
  if (!m.cfg.reinject_mark) throw Error("floodgate host: reinject_mark must not be 0");
  const unsigned ifindex = if_nametoindex(m.cfg.uplink.c_str());
  if (!ifindex) throw SysError("floodgate host: uplink " + m.cfg.uplink, errno);
  m.skel->rodata->fail_open_ns = m.cfg.fail_open_ns;
  m.skel.load();
  sl_dp_port port{SL_PORT_HOST_UPLINK, m.cfg.reinject_mark};
  uint32_t key = ifindex;
  if (bpf_map_update_elem(bpf_map__fd(m.skel->maps.sl_fg_ports_v1), &key, &port, BPF_ANY))
    throw SysError("floodgate host: sl_fg_ports_v1", errno);
  m.ctrl_ring = ring_buffer__new(bpf_map__fd(m.skel->maps.sl_fg_ctrl_v1), &Impl::on_ctrl, &m, nullptr);
  m.held_ring = ring_buffer__new(bpf_map__fd(m.skel->maps.sl_fg_hring_v1), &Impl::on_held, &m, nullptr);
  if (!m.ctrl_ring || !m.held_ring) throw SysError("floodgate host: ring buffers", errno);
  m.reinjector = std::make_unique<pac::Reinjector>(m.cfg.uplink, m.cfg.reinject_mark);
  m.attached.push_back(TcAttachment::attach(m.cfg.uplink, Hook::Ingress, bpf_program__fd(m.skel->progs.dp_ingress),
                                            "dp_ingress", kDstPauseTcPrio, m.cfg.attach_mode, m.cfg.state_dir));
  m.attached.push_back(TcAttachment::attach(m.cfg.uplink, Hook::Egress, bpf_program__fd(m.skel->progs.dp_egress),
                                            "dp_egress", kDstPauseTcPrio, m.cfg.attach_mode, m.cfg.state_dir));
}

HostRunner::~HostRunner() {
  if (!impl_) return;
  // Detach first, then send what is still held: nothing is lost on the way out.
  impl_->attached.clear();
  impl_->now = UINT64_MAX;
  ring_buffer__consume(impl_->held_ring);
  impl_->pause.on_tick(UINT64_MAX, impl_->effects);
  impl_->apply();
}

void HostRunner::poll(uint64_t now_ns) {
  Impl& m = *impl_;
  m.now = now_ns;
  ring_buffer__consume(m.ctrl_ring);
  m.apply();
  ring_buffer__consume(m.held_ring);
  m.apply();
  m.pause.on_tick(now_ns, m.effects);
  m.apply();
}

const HostPause& HostRunner::state() const { return impl_->pause; }
sluice_liveness* HostRunner::liveness() { return &impl_->skel->bss->dp_live; }
uint64_t HostRunner::fail_open_ns() const { return impl_->cfg.fail_open_ns; }
uint64_t HostRunner::send_errors() const { return impl_->send_errors; }

uint64_t HostRunner::counter(uint32_t slot) const {
  int ncpu = libbpf_num_possible_cpus();
  std::vector<sl_sw_counter> v(size_t(ncpu > 0 ? ncpu : 1));
  if (bpf_map_lookup_elem(bpf_map__fd(impl_->skel->maps.sl_fg_cnt_v1), &slot, v.data())) return 0;
  uint64_t n = 0;
  for (const auto& c : v) n += c.packets;
  return n;
}

}  // namespace sluice::floodgate
