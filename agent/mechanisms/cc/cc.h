// BPF congestion controls (bpf/cc/): sluice_dctcp and sluice_pulser.
//
// Registering a tcp_congestion_ops is a change to the whole machine (every
// network namespace sees it), and a registration made through a struct_ops
// map outlives the process that made it unless it is deleted. So a
// RegisteredCc unregisters in its destructor, the agent keeps them only
// while it runs, and a name already held by a sluice struct_ops map (a
// crashed agent) is taken over, never one held by anybody else.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cc_config.h"
#include "core/module.h"
#include "sluice/pulser.h"

namespace sluice {

enum class CcKind { Dctcp, Pulser };
const char* to_string(CcKind k);

struct CcParams {
  CcKind kind = CcKind::Dctcp;
  // TCP_CONGESTION name, 1..15 characters [a-z0-9_]. Defaults to
  // sluice_dctcp / sluice_pulser.
  std::string name;
  uint32_t dctcp_shift_g = 4;           // g = 1/2^shift_g
  uint32_t dctcp_alpha_on_init = 1024;  // 1/1024 units
  uint32_t pulser_cwnd_safe = 4;        // segments
  // Pulser: where the per-socket EIN map (sl_ein_sk_v1) is pinned so the ein
  // tc programs share it. Empty: not pinned (tests pass the fd around).
  std::string ein_map_pin;
};

class RegisteredCc {
 public:
  // Loads, renames, registers. Throws Error (nothing registered) on failure.
  explicit RegisteredCc(const CcParams& p);
  ~RegisteredCc();
  RegisteredCc(const RegisteredCc&) = delete;
  RegisteredCc& operator=(const RegisteredCc&) = delete;

  const CcParams& params() const { return params_; }
  const std::string& name() const { return params_.name; }
  sluice_cc_stats stats() const;
  // sl_ein_sk_v1 of sluice_pulser (-1 for dctcp).
  int ein_map_fd() const;
  nlohmann::json status() const;
  // Unregisters now (also done by the destructor). Idempotent.
  void unregister() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  CcParams params_;
};

// The host-wide part of mechanism "cc" (the mechanisms table): registers
// the congestion controls of [cc] register while the agent runs.
std::unique_ptr<HostService> make_cc_service(const ServiceContext& ctx);
// "[cc] register" when cfg registers any, else "".
std::string cc_used_by(const Config& cfg);

// Where sl_ein_sk_v1 (per-socket EIN state) is pinned under an agent's
// pin_root: shared by sluice_pulser and the ein programs of every
// interface (all agents of one host must use the same pin_root).
std::string ein_map_pin_path(const std::string& pin_root);

// A tcp_congestion_ops registered through a struct_ops map.
struct StructOpsCc {
  uint32_t map_id = 0;
  std::string map_name;  // the struct_ops variable name (sluice_dctcp, ...)
  std::string ca_name;   // the TCP_CONGESTION name
};

// Every congestion control registered through a struct_ops map, by anyone.
std::vector<StructOpsCc> list_struct_ops_cc();
// Deletes the registration held by struct_ops map `map_id`. Returns 0 or a
// negative errno.
int unregister_struct_ops(uint32_t map_id);
// True for the struct_ops map names sluice's objects use.
bool is_sluice_struct_ops(const std::string& map_name);
// Unregisters sluice registrations whose CC name satisfies `pred` (tests:
// names carrying the pid of a dead run). Returns how many.
int unregister_sluice_cc_if(const std::function<bool(const std::string& ca_name)>& pred);

}  // namespace sluice
