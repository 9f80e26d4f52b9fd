// Attaching tc programs idempotently, through tcx links (6.6+) or a clsact
// qdisc with cls_bpf direct-action filters.
//
// Rules (see docs/operations.md "Attaching"): an existing clsact qdisc is reused; only
// the filter we add (our handle, our priority) is ever deleted; the clsact
// qdisc is deleted only when sluice created it and no filter of anyone is
// left on it. A TcAttachment detaches itself when destroyed, so a vector of
// them rolls back a partial attach by going out of scope.
#pragma once

#include <cstdint>
#include <string>

#include "config.h"

namespace sluice {

enum class Hook { Ingress, Egress };
const char* to_string(Hook h);

// cls_bpf handle used for every sluice filter; priorities come per program.
constexpr uint32_t kTcHandle = 0x51;
// Filter priorities: lower runs first. Each program kind gets a fixed slot so
// a restart replaces its own earlier filter instead of stacking a new one.
// A mechanism declares its slots in its own folder and lists them in its row
// of the mechanisms table (MechanismInfo::tc, core/module.h); no two
// mechanisms share one (tests/unit/mechanisms/tc_prio_test.cc). Slots are
// 16-bit (the tc priority field).
//
// The last slot, for lab instruments that must see a packet after every
// mechanism (sluice-fault); no mechanism takes it.
constexpr uint32_t kTcPrioLabLast = 0xA5F0;

// tcx has no priorities, only an order: a program with a priority below
// this goes to the front of the chain (BPF_F_BEFORE), the rest are appended,
// so what runs first under clsact runs first under tcx too.
constexpr uint32_t kPrioTcxFront = 0xA400;

class TcAttachment {
 public:
  // `mode` must be Tcx or Clsact (resolve Auto first). `state_dir` holds the
  // marker that remembers a clsact qdisc sluice created, across restarts.
  static TcAttachment attach(const std::string& ifname, Hook hook, int prog_fd, const std::string& prog_name,
                             uint32_t prio, AttachMode mode, const std::string& state_dir);

  TcAttachment(TcAttachment&& o) noexcept;
  TcAttachment& operator=(TcAttachment&& o) noexcept;
  TcAttachment(const TcAttachment&) = delete;
  TcAttachment& operator=(const TcAttachment&) = delete;
  ~TcAttachment() { detach(); }

  void detach() noexcept;
  bool attached() const { return ifindex_ != 0; }
  std::string describe() const;
  AttachMode mode() const { return mode_; }
  Hook hook() const { return hook_; }
  const std::string& prog_name() const { return prog_name_; }
  const std::string& ifname() const { return ifname_; }

 private:
  TcAttachment() = default;
  std::string ifname_;
  std::string prog_name_;
  std::string state_dir_;
  int ifindex_ = 0;
  Hook hook_ = Hook::Ingress;
  AttachMode mode_ = AttachMode::Clsact;
  uint32_t prio_ = 0;
  int link_fd_ = -1;
};

// Whether `ifindex` has a clsact qdisc (ours or anyone's).
bool clsact_exists(int ifindex);

// Number of tc filters (any kind, anyone's) on the clsact ingress+egress
// hooks of `ifindex`; -1 if there is no clsact qdisc.
int count_clsact_filters(int ifindex);

// Resolves Auto to Tcx when the kernel has tcx, else Clsact.
AttachMode resolve_attach_mode(AttachMode requested, bool kernel_has_tcx);

// Creates tcx link (raw syscall: libbpf 1.1 predates bpf_program__attach_tcx),
// appended to the chain or, with `front`, before every program on it.
// Returns the link fd or a negative errno.
int tcx_link_create(int prog_fd, int ifindex, Hook hook, bool front = false);

// Network namespace identity (inode of /proc/self/ns/net), to key state that
// names an ifindex.
uint64_t current_netns_id();

}  // namespace sluice
