#include "ein_module.h"

#include "mechanisms/cc/cc.h"
#include "ein.skel.h"
#include "core/log.h"
#include "core/tc.h"

SLUICE_SKELETON(ein);

namespace sluice {

namespace {

class EinModule : public Module {
 public:
  explicit EinModule(const ModuleContext& ctx) : ifname_(ctx.iface.name) {
    const auto& ec = ctx.config.get<EinConfig>();
    skel_->rodata->ein_field = ec.field;
    skel_->rodata->ein_mask = ec.mask;
    skel_->rodata->echo_fresh_ns = uint64_t(ec.echo_fresh_us) * 1000;
    skel_.pin_maps(ctx.pin_dir);
    // sl_ein_sk_v1 is host-wide, shared with sluice_pulser and the other
    // interfaces: one pin outside the per-interface directory.
    shared_pin_ = ein_map_pin_path(ctx.config.agent.pin_root);
    make_dirs(shared_pin_.substr(0, shared_pin_.rfind('/')));
    int rc = bpf_map__set_pin_path(skel_->maps.sl_ein_sk_v1, shared_pin_.c_str());
    if (rc) throw SysError("set pin path " + shared_pin_, rc);
    skel_.load();
    bit_ = ec.bit;
    attachments_.push_back(TcAttachment::attach(ifname_, Hook::Ingress, bpf_program__fd(skel_->progs.ein_ingress),
                                                "ein_ingress", kEinTcPrio, ctx.attach_mode,
                                                ctx.config.agent.state_dir));
    attachments_.push_back(TcAttachment::attach(ifname_, Hook::Egress, bpf_program__fd(skel_->progs.ein_egress),
                                                "ein_egress", kEinTcPrio, ctx.attach_mode, ctx.config.agent.state_dir));
    if (std::find(ctx.config.get<CcConfig>().register_cc.begin(), ctx.config.get<CcConfig>().register_cc.end(),
                  "pulser") == ctx.config.get<CcConfig>().register_cc.end())
      SLOG_INFO("EIN_NO_PULSER",
                "{}: ein attached; this agent does not register sluice_pulser, so flows are managed only if "
                "another sluiced with pin_root {} does",
                ifname_, ctx.config.agent.pin_root);
  }
  ~EinModule() override {
    while (!attachments_.empty()) attachments_.pop_back();
  }

  std::string name() const override { return "ein"; }

  std::vector<ProgramCounters> counters() const override {
    return {{"ein", read_reason_counters(bpf_map__fd(skel_->maps.sl_counters))}};
  }

  nlohmann::json status() const override {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& t : attachments_)
      a.push_back({{"program", t.prog_name()}, {"hook", to_string(t.hook())}, {"mode", to_string(t.mode())}});
    return {{"attachments", a}, {"pin_dir", skel_.pin_dir()}, {"ein_bit", bit_}, {"ein_map", shared_pin_}};
  }

  nlohmann::json stats() const override {
    auto c = read_reason_counters(bpf_map__fd(skel_->maps.sl_counters));
    return {
        {"marks_recorded", c[SLUICE_R_EIN_MARK_RECORDED].packets},
        {"marks_unmanaged", c[SLUICE_R_EIN_MARK_UNMANAGED].packets},
        {"echoes_set", c[SLUICE_R_EIN_ECHO_SET].packets},
        {"echoes_stale", c[SLUICE_R_EIN_ECHO_STALE].packets},
        {"echoes_received", c[SLUICE_R_EIN_ECHO_RECEIVED].packets},
        {"echoes_unmanaged", c[SLUICE_R_EIN_ECHO_UNMANAGED].packets},
    };
  }

  void metrics(std::vector<MetricSample>& out) const override {
    auto st = stats();
    for (auto it = st.begin(); it != st.end(); ++it)
      out.push_back({"sluice_ein_" + it.key() + "_total",
                     "EIN echo program: " + it.key(),
                     true,
                     {{"iface", ifname_}},
                     double(it.value().get<uint64_t>())});
  }

 private:
  std::string ifname_;
  std::string bit_;
  std::string shared_pin_;
  Skeleton<ein> skel_;
  std::vector<TcAttachment> attachments_;
};

}  // namespace

std::unique_ptr<Module> make_ein_module(const ModuleContext& ctx) { return std::make_unique<EinModule>(ctx); }

}  // namespace sluice
