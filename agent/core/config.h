// sluiced configuration (TOML). Parsing validates everything up front: a bad
// value produces a ConfigError naming the key, the value and the reason, and
// nothing is attached. See agent/sluiced.example.toml for every key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "error.h"

namespace sluice {

enum class Role { Host, SwitchPort };
enum class AttachMode { Auto, Tcx, Clsact };
// Where aqm reads the root qdisc backlog (README "EIN on Linux").
enum class AqmQueueSource { Auto, KernCtx, Tracepoint };

const char* to_string(Role r);
const char* to_string(AttachMode m);
const char* to_string(AqmQueueSource s);

struct AgentConfig {
  std::string pin_root = "/sys/fs/bpf/sluice";
  std::string state_dir = "/run/sluice";
  std::string control_socket = "/run/sluice/sluiced.sock";
  std::string log_level = "info";
  AttachMode attach_mode = AttachMode::Auto;
  // How often the agent proves it is alive to the BPF side (fail-open).
  uint32_t heartbeat_ms = 20;
};

struct MetricsConfig {
  bool enabled = true;
  std::string bind = "127.0.0.1";
  uint16_t port = 9477;
  // Per-flow series can be many; off by default.
  bool per_flow = false;
};

struct FlowstatConfig {
  bool track_flows = true;
  // Flows idle longer than this are dropped from the table by the agent.
  uint32_t idle_timeout_s = 300;
};

// PAC (pac-icnp14 §III) on a receiver's interface. Defaults follow the
// paper's testbed (Table I) where it has one.
struct PacPortRange {
  uint16_t lo = 0, hi = 0;
};
struct PacPrefix {
  int family = 4;          // 4 or 6
  uint8_t addr[16] = {};   // network order
  uint8_t len = 0;
};
struct PacConfig {
  uint64_t buffer_bytes = 131072;             // initial (and largest) threshold: the switch buffer
  std::vector<uint64_t> mlfq_level_bytes{20480};  // MLFQ boundaries by bytes received
  double lambda = 0.8;                        // eq. (6) and slow-start inference
  bool ecn = true;                            // adapt the threshold to α (eq. 2)
  uint32_t max_held = 8192;                   // hold queue size (full: release, never drop)
  uint32_t max_hold_ms = 50;                  // no ACK is held longer
  uint32_t max_hold_request_ms = 5000;        // no request (hold_requests) is held longer: a request waits
                                              // behind the responses ahead of it (256 x 64 KB at 100 Mbit/s: 1.4 s)
  uint32_t fail_open_ms = 60;                 // BPF stops diverting when the heartbeat is older
  uint32_t reinject_mark = 0x50ac;            // skb->mark of re-injected ACKs
  uint32_t idle_timeout_s = 300;              // flow state dropped after this idle time
  uint32_t control_interval_min_us = 1000;    // floor of the control interval (average RTT)
  bool account_requests = true;               // a request counts its expected response as in flight
  bool cap_to_response = false;               // triggers never exceed what is left of a response
  bool hold_requests = false;                 // hold our data segments (requests) like ACKs (extension)
  uint32_t request_max_bytes = 1024;          // larger data segments we send are bulk: never requests
  uint32_t busy_poll_us = 200;                // while ACKs are held, poll for room this long after the last release before sleeping (0: sleep)
  uint32_t rwnd_cap_bytes = 0;                // clamp the window our segments advertise to this (0: off; extension);
                                              // "auto" (the default) is resolved when [pac] is parsed
  uint32_t trigger_age_min_us = 1000;         // expected bytes older than max(2 RTT, this) that never came are written off (0: off)
  std::vector<PacPortRange> local_ports;      // empty = any
  std::vector<PacPortRange> remote_ports;     // empty = any
  std::vector<PacPrefix> remote_prefixes;     // empty = any
};

// Congestion controls registered while the agent runs (bpf/cc/).
struct CcConfig {
  std::vector<std::string> register_cc;  // "dctcp", "pulser"
  std::string dctcp_name = "sluice_dctcp";
  std::string pulser_name = "sluice_pulser";
  uint32_t dctcp_shift_g = 4;            // DCTCP g = 1/2^shift_g
  uint32_t dctcp_alpha_on_init = 1024;   // α at connection start, 1/1024 units
  uint32_t pulser_cwnd_safe = 4;         // Pulser cwnd_safe, segments
};

// The EIN bit (shared by switch-side marking and host-side echo).
struct EinConfig {
  std::string bit = "tos:0x04";  // "tos:0xNN" (one DSCP bit) or "ipv4-reserved"
  uint8_t field = 0;             // SLUICE_EIN_FIELD_*, parsed from `bit`
  uint16_t mask = 0x04;
  uint32_t echo_fresh_us = 2000;  // receiver: an EIN mark older than this is not echoed
};

// Switch-port ECN + EIN marking (mechanism "aqm").
struct AqmConfig {
  bool ecn = true;
  // K: exactly one unit. Neither set: 20 packets (DCTCP's K at 1 Gbit/s).
  std::optional<uint64_t> ecn_threshold_bytes;
  std::optional<uint64_t> ecn_threshold_packets;
  bool ein = true;
  uint32_t ein_samples = 50;       // N
  double ein_threshold = 0.25;     // EIN_threshold as a fraction of the line rate
  std::optional<uint64_t> ein_high_water;  // HighWaterMark, K's unit; default K
  // Where EIN is written: on arrival at the qdisc, or (Pulser's dequeue
  // marking) on departure, at the far end of the port's link
  // (interface link_far_end).
  bool ein_at_departure = false;
  // auto: bpf_cast_to_kern_ctx (object aqm) where the kernel has it, else
  // the qdisc tracepoints (object aqm_compat).
  AqmQueueSource queue_source = AqmQueueSource::Auto;

  bool k_in_packets() const { return !ecn_threshold_bytes.has_value(); }
  uint64_t k() const { return ecn_threshold_bytes ? *ecn_threshold_bytes : ecn_threshold_packets.value_or(20); }
  uint64_t high_water() const { return ein_high_water.value_or(k()); }
};

struct InterfaceConfig {
  std::string name;
  Role role = Role::Host;
  std::vector<std::string> mechanisms{"flowstat"};
  std::optional<uint64_t> line_rate_mbps;
  // Switch port: the interface where this port's packets arrive after its
  // queue, "NETNS:IFNAME" (a name of `ip netns list`) or "IFNAME" in the
  // agent's namespace. Empty: not configured.
  std::string link_far_end;

  // link_far_end split into {netns ("" = ours), ifname}.
  std::pair<std::string, std::string> far_end() const;
};

struct Config {
  AgentConfig agent;
  MetricsConfig metrics;
  FlowstatConfig flowstat;
  PacConfig pac;
  CcConfig cc;
  EinConfig ein;
  AqmConfig aqm;
  std::vector<InterfaceConfig> interfaces;

  const InterfaceConfig* find_interface(const std::string& name) const;
  bool uses_mechanism(const std::string& mech) const;
};

// One rejected key. `key` is the dotted path ("interface[1].role").
struct ConfigProblem {
  std::string key;
  std::string value;
  std::string reason;
  std::string to_string() const;
};

class ConfigError : public Error {
 public:
  explicit ConfigError(std::vector<ConfigProblem> problems);
  const std::vector<ConfigProblem>& problems() const { return problems_; }

 private:
  std::vector<ConfigProblem> problems_;
};

// The mechanisms table (core/module.h) that names the mechanisms an
// interface may list.
struct MechanismInfo;
using MechanismTable = std::vector<MechanismInfo>;

// Throws ConfigError (bad content) or Error (unreadable file / TOML syntax).
// agent/mechanisms/mechanisms.h has the same two with sluice's own table.
Config parse_config_file(const std::string& path, const MechanismTable& mechanisms);
Config parse_config_string(const std::string& text, const std::string& origin, const MechanismTable& mechanisms);

// Checks a congestion control name ([cc] dctcp_name, pulser_name); returns
// an empty string or why not.
std::string check_cc_name(const std::string& name);

}  // namespace sluice
