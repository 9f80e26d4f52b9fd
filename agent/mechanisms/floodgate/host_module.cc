#include "mechanisms/floodgate/host_module.h"

#include <algorithm>
#include <chrono>

#include "core/bpf_util.h"
#include "core/event_loop.h"
#include "core/heartbeat.h"
#include "mechanisms/floodgate/config.h"
#include "mechanisms/floodgate/host_runner.h"
#include "sluice/dstpause.h"

namespace sluice::floodgate {

namespace {

// Every millisecond: a pause applies to frames stolen since, and the
// pause timeout (fail open; [floodgate] host_pause_timeout_ms, 20 ms by
// default) is kept to within a tick.
constexpr auto kPollPeriod = std::chrono::milliseconds(1);

class HostModule final : public Module {
 public:
  explicit HostModule(const ModuleContext& ctx) : uplink_(ctx.iface.name), runner_(runner_config(ctx)) {
    // dp_egress holds frames while this is fresh: refreshed by the
    // heartbeat thread every fail_open / 4 while this loop has run within
    // fail_open (core/heartbeat.h); a killed or stopped sluiced fails open.
    beat_ = ctx.loop.heartbeats().add_fail_open(runner_.liveness(), std::chrono::milliseconds(fail_open_ms_),
                                                "floodgate-host");
    timer_ = ctx.loop.every(kPollPeriod, [this] { runner_.poll(monotonic_ns()); });
  }
  std::string name() const override { return "floodgate"; }
  std::vector<ProgramCounters> counters() const override { return {}; }
  nlohmann::json status() const override {
    const HostPauseStats& s = runner_.state().stats();
    const HostPauseConfig& c = runner_.state().config();
    return {{"uplink", uplink_},
            {"programs", {"dp_ingress", "dp_egress"}},
            {"pause_timeout_ms", c.pause_timeout_ns / 1'000'000},
            {"max_held_frames", c.max_frames},
            {"fail_open_ms", fail_open_ms_},
            {"paused_dsts", s.paused_dsts},
            {"queued_frames", s.queued_frames},
            {"pauses", s.pauses},
            {"resumes", s.resumes},
            {"stale", s.stale},
            {"expired", s.expired},
            {"overflow", s.overflow},
            {"held_frames", s.held_frames},
            {"resent_frames", s.resent_frames},
            {"passed_frames", s.passed_frames},
            {"send_errors", runner_.send_errors()},
            {"bpf",
             {{"held", runner_.counter(SL_DP_CNT_HELD)},
              {"passed", runner_.counter(SL_DP_CNT_PASSED)},
              {"reinjected", runner_.counter(SL_DP_CNT_REINJECTED)},
              {"net_control", runner_.counter(SL_DP_CNT_NET_CONTROL)},
              {"too_big", runner_.counter(SL_DP_CNT_TOO_BIG)},
              {"held_ring_full", runner_.counter(SL_DP_CNT_HELD_RING_FULL)},
              {"ctrl_ring_full", runner_.counter(SL_DP_CNT_CTRL_RING_FULL)},
              {"fail_open", runner_.counter(SL_DP_CNT_FAIL_OPEN)}}}};
  }
  nlohmann::json stats() const override { return status(); }

 private:
  static HostRunnerConfig runner_config(const ModuleContext& ctx) {
    HostRunnerConfig c;
    c.uplink = ctx.iface.name;
    // dp_egress steals held frames (TC_ACT_STOLEN): cls_bpf under clsact
    // only (host_runner.h), whatever the agent's attach mode.
    c.attach_mode = AttachMode::Clsact;
    c.state_dir = ctx.config.agent.state_dir;
    c.pause = ctx.config.get<Section>().host;
    c.fail_open_ns = ctx.config.get<Section>().host_fail_open_ns;
    return c;
  }
  std::string uplink_;
  HostRunner runner_;
  uint64_t fail_open_ms_ = runner_.fail_open_ns() / 1'000'000;
  std::unique_ptr<HeartbeatThread::Registration> beat_;
  std::unique_ptr<PeriodicTimer> timer_;
};

}  // namespace

std::unique_ptr<Module> make_host_module(const ModuleContext& ctx) { return std::make_unique<HostModule>(ctx); }

}  // namespace sluice::floodgate
