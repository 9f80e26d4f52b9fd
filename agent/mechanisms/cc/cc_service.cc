// Mechanism "cc": the congestion controls of [cc] register, host-wide while
// the agent runs (the agent's HostService for this mechanism).
#include "cc.h"

namespace sluice {

namespace {

class CcService : public HostService {
 public:
  explicit CcService(const Config& config) {
    const CcConfig& cc = config.get<CcConfig>();
    for (const auto& r : cc.register_cc) {
      CcParams p;
      p.kind = r == "pulser" ? CcKind::Pulser : CcKind::Dctcp;
      p.name = r == "pulser" ? cc.pulser_name : cc.dctcp_name;
      p.dctcp_shift_g = cc.dctcp_shift_g;
      p.dctcp_alpha_on_init = cc.dctcp_alpha_on_init;
      p.pulser_cwnd_safe = cc.pulser_cwnd_safe;
      if (p.kind == CcKind::Pulser) p.ein_map_pin = ein_map_pin_path(config.agent.pin_root);
      // On a throw, ccs_ unregisters what was registered so far.
      ccs_.push_back(std::make_unique<RegisteredCc>(p));
    }
  }

  ~CcService() override {
    while (!ccs_.empty()) ccs_.pop_back();  // last registered, first gone
  }

  void status(nlohmann::json& out) const override {
    nlohmann::json ccs = nlohmann::json::array();
    for (const auto& c : ccs_) ccs.push_back(c->status());
    out["congestion_control"] = ccs;
  }

  void metrics(std::vector<MetricSample>& out) const override {
    for (const auto& c : ccs_) {
      auto s = c->stats();
      auto add = [&](const char* name, const char* help, uint64_t v) {
        out.push_back({std::string("sluice_cc_") + name + "_total", help, true, {{"cc", c->name()}}, double(v)});
      };
      add("sockets", "Sockets that took this congestion control", s.sockets);
      add("reno_fallback", "Sockets without ECN (Reno behaviour)", s.reno_fallback);
      add("alpha_updates", "DCTCP alpha updates", s.alpha_updates);
      add("ecn_cuts", "Window reductions computed from alpha", s.ecn_cuts);
      add("loss_events", "Recovery entries and timeouts", s.loss_events);
      add("repairs", "Impossible ssthresh/cwnd values undone (docs/pulser.md, A kernel anomaly)", s.repairs);
      if (c->params().kind == CcKind::Pulser) {
        add("ein_acks", "ACKs with a new EIN echo", s.ein_acks);
        add("brakes", "Pulser brakes (cwnd set to cwnd_safe)", s.brakes);
        add("brake_extends", "EIN echoes while braking", s.brake_extends);
        add("restores", "Pulser restores of the saved cwnd", s.restores);
        add("brakes_abandoned", "Brakes ended by a retransmission timeout", s.brakes_abandoned);
        add("braked_tx_starts", "Transmissions resumed from nothing in flight while braking", s.braked_tx_starts);
      }
    }
  }

 private:
  std::vector<std::unique_ptr<RegisteredCc>> ccs_;
};

}  // namespace

std::unique_ptr<HostService> make_cc_service(const ServiceContext& ctx) {
  return std::make_unique<CcService>(ctx.config);
}

std::string cc_used_by(const Config& cfg) { return cfg.get<CcConfig>().register_cc.empty() ? "" : "[cc] register"; }

}  // namespace sluice
