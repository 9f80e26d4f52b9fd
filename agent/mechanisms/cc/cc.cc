#include "cc.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <elf.h>
#include <unistd.h>

#include <cstring>

#include "core/bpf_util.h"
#include "dctcp.skel.h"
#include "core/log.h"
#include "pulser.skel.h"

namespace sluice {

const char* to_string(CcKind k) { return k == CcKind::Dctcp ? "dctcp" : "pulser"; }

namespace {

const char* default_name(CcKind k) { return k == CcKind::Dctcp ? "sluice_dctcp" : "sluice_pulser"; }

// Replaces the congestion control name inside the object's .struct_ops
// section (the initial value of the tcp_congestion_ops variable) before
// libbpf opens it. libbpf 1.1 offers no way to change struct_ops data after
// open, and a per-run name is what lets tests and concurrent experiments
// register side by side.
void patch_struct_ops_name(std::vector<uint8_t>& elf, const std::string& from, const std::string& to) {
  auto fail = [](const std::string& why) { throw Error("rename congestion control: " + why); };
  if (elf.size() < sizeof(Elf64_Ehdr)) fail("object too small");
  Elf64_Ehdr eh;
  std::memcpy(&eh, elf.data(), sizeof(eh));
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64) fail("not ELF64");
  if (eh.e_shoff + uint64_t(eh.e_shnum) * sizeof(Elf64_Shdr) > elf.size() || eh.e_shstrndx >= eh.e_shnum)
    fail("bad section table");
  auto shdr = [&](size_t i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, elf.data() + eh.e_shoff + i * sizeof(Elf64_Shdr), sizeof(sh));
    return sh;
  };
  Elf64_Shdr strtab = shdr(eh.e_shstrndx);
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh = shdr(i);
    if (sh.sh_name >= strtab.sh_size || strtab.sh_offset + sh.sh_name >= elf.size()) continue;
    const char* nm = reinterpret_cast<const char*>(elf.data() + strtab.sh_offset + sh.sh_name);
    if (std::strncmp(nm, ".struct_ops", 12) != 0) continue;
    if (sh.sh_offset + sh.sh_size > elf.size()) fail(".struct_ops out of bounds");
    // The name field is char[16]: the old name, NUL-padded.
    std::vector<uint8_t> field(kCcNameMax, 0);
    std::memcpy(field.data(), from.data(), from.size());
    uint8_t* base = elf.data() + sh.sh_offset;
    uint8_t* hit = nullptr;
    for (size_t off = 0; off + kCcNameMax <= sh.sh_size; ++off) {
      if (std::memcmp(base + off, field.data(), kCcNameMax) == 0) {
        if (hit) fail("name \"" + from + "\" found twice in .struct_ops");
        hit = base + off;
      }
    }
    if (!hit) fail("name \"" + from + "\" not found in .struct_ops");
    std::memset(hit, 0, kCcNameMax);
    std::memcpy(hit, to.data(), to.size());
    return;
  }
  fail("no .struct_ops section");
}

template <typename T>
T* open_renamed(int (*create)(T*), void (*destroy)(T*), const char* obj_name, const std::string& from,
                const std::string& to, std::vector<uint8_t>& buf) {
  T* o = static_cast<T*>(calloc(1, sizeof(T)));
  if (!o) throw SysError(std::string("open BPF object ") + obj_name, ENOMEM);
  int rc = create(o);
  if (rc) {
    destroy(o);
    throw SysError(std::string("open BPF object ") + obj_name, rc);
  }
  bpf_object_skeleton* s = o->skeleton;
  const auto* data = static_cast<const uint8_t*>(s->data);
  buf.assign(data, data + s->data_sz);
  try {
    if (from != to) patch_struct_ops_name(buf, from, to);
  } catch (...) {
    destroy(o);
    throw;
  }
  // libbpf keeps pointing into `buf` until load; it lives in the Impl.
  s->data = buf.data();
  rc = bpf_object__open_skeleton(s, nullptr);
  if (rc) {
    destroy(o);
    throw SysError(std::string("open BPF object ") + obj_name, rc);
  }
  return o;
}

// Offsets of the CA name inside a tcp_congestion_ops struct_ops map value,
// from the running kernel's BTF.
size_t ca_name_offset_in_value() {
  static size_t off = [] {
    btf* b = btf__load_vmlinux_btf();
    if (!b) return size_t(0);
    size_t result = 0;
    auto member_off = [&](const char* type, const char* member) -> long {
      int id = btf__find_by_name_kind(b, type, BTF_KIND_STRUCT);
      if (id < 0) return -1;
      const btf_type* t = btf__type_by_id(b, id);
      const btf_member* m = btf_members(t);
      for (int i = 0; i < btf_vlen(t); ++i)
        if (std::strcmp(btf__name_by_offset(b, m[i].name_off), member) == 0)
          return long(btf_member_bit_offset(t, i) / 8);
      return -1;
    };
    long data = member_off("bpf_struct_ops_tcp_congestion_ops", "data");
    long name = member_off("tcp_congestion_ops", "name");
    if (data >= 0 && name >= 0) result = size_t(data + name);
    btf__free(b);
    return result;
  }();
  return off;
}

}  // namespace

std::string ein_map_pin_path(const std::string& pin_root) { return pin_root + "/cc/sl_ein_sk_v1"; }

bool is_sluice_struct_ops(const std::string& map_name) {
  return map_name == "sluice_dctcp" || map_name == "sluice_pulser";
}

std::vector<StructOpsCc> list_struct_ops_cc() {
  std::vector<StructOpsCc> out;
  size_t name_off = ca_name_offset_in_value();
  uint32_t id = 0;
  while (bpf_map_get_next_id(id, &id) == 0) {
    int fd = bpf_map_get_fd_by_id(id);
    if (fd < 0) continue;
    bpf_map_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && info.type == BPF_MAP_TYPE_STRUCT_OPS) {
      StructOpsCc c;
      c.map_id = id;
      c.map_name = info.name;
      std::vector<uint8_t> val(info.value_size);
      uint32_t key = 0;
      if (name_off && name_off + kCcNameMax <= val.size() && bpf_map_lookup_elem(fd, &key, val.data()) == 0) {
        const char* n = reinterpret_cast<const char*>(val.data() + name_off);
        c.ca_name.assign(n, strnlen(n, kCcNameMax));
      }
      // Only registered tcp_congestion_ops have a name in their value.
      if (!c.ca_name.empty()) out.push_back(c);
    }
    close(fd);
  }
  return out;
}

int unregister_struct_ops(uint32_t map_id) {
  int fd = bpf_map_get_fd_by_id(map_id);
  if (fd < 0) return -errno;
  uint32_t key = 0;
  int rc = bpf_map_delete_elem(fd, &key);
  rc = rc ? -errno : 0;
  close(fd);
  return rc;
}

int unregister_sluice_cc_if(const std::function<bool(const std::string&)>& pred) {
  int n = 0;
  for (const auto& c : list_struct_ops_cc())
    if (is_sluice_struct_ops(c.map_name) && pred(c.ca_name) && unregister_struct_ops(c.map_id) == 0) ++n;
  return n;
}

struct RegisteredCc::Impl {
  std::vector<uint8_t> elf;
  dctcp* d = nullptr;
  pulser* p = nullptr;
  bpf_link* link = nullptr;
  ~Impl() {
    if (link) bpf_link__destroy(link);
    if (d) dctcp__destroy(d);
    if (p) pulser__destroy(p);
  }
  bpf_map* ops() const { return d ? d->maps.sluice_dctcp : p->maps.sluice_pulser; }
  const sluice_cc_stats* stats() const { return d ? &d->bss->sl_cc_stats : &p->bss->sl_cc_stats; }
};

RegisteredCc::RegisteredCc(const CcParams& p) : impl_(std::make_unique<Impl>()), params_(p) {
  if (params_.name.empty()) params_.name = default_name(p.kind);
  if (auto why = check_cc_name(params_.name); !why.empty())
    throw Error("congestion control name \"" + params_.name + "\": " + why);
  const char* orig = default_name(p.kind);
  int rc;
  if (p.kind == CcKind::Dctcp) {
    impl_->d = open_renamed<dctcp>(dctcp__create_skeleton, dctcp__destroy, "dctcp", orig, params_.name, impl_->elf);
    impl_->d->rodata->dctcp_shift_g = p.dctcp_shift_g;
    impl_->d->rodata->dctcp_alpha_on_init = p.dctcp_alpha_on_init;
    rc = dctcp__load(impl_->d);
  } else {
    impl_->p = open_renamed<pulser>(pulser__create_skeleton, pulser__destroy, "pulser", orig, params_.name, impl_->elf);
    impl_->p->rodata->dctcp_shift_g = p.dctcp_shift_g;
    impl_->p->rodata->dctcp_alpha_on_init = p.dctcp_alpha_on_init;
    impl_->p->rodata->pulser_cwnd_safe = p.pulser_cwnd_safe;
    if (!p.ein_map_pin.empty()) {
      auto slash = p.ein_map_pin.rfind('/');
      if (slash != std::string::npos && slash > 0) make_dirs(p.ein_map_pin.substr(0, slash));
      rc = bpf_map__set_pin_path(impl_->p->maps.sl_ein_sk_v1, p.ein_map_pin.c_str());
      if (rc) throw SysError("set pin path " + p.ein_map_pin, rc);
    }
    rc = pulser__load(impl_->p);
  }
  if (rc) throw SysError(std::string("load BPF congestion control ") + params_.name, rc);

  for (int attempt = 0; attempt < 2; ++attempt) {
    impl_->link = bpf_map__attach_struct_ops(impl_->ops());
    if (impl_->link) break;
    int err = errno;
    if (err != EEXIST || attempt) throw SysError("register congestion control " + params_.name, err);
    // The name is taken. A sluice struct_ops map holding it belongs to an
    // agent that died without unregistering: take it over. Anything else
    // is not ours to touch.
    bool replaced = false;
    for (const auto& c : list_struct_ops_cc()) {
      if (c.ca_name != params_.name) continue;
      if (!is_sluice_struct_ops(c.map_name))
        throw Error("congestion control name " + params_.name + " is already registered by struct_ops map " +
                    c.map_name + " (id " + std::to_string(c.map_id) + "), not by sluice; choose another name");
      int urc = unregister_struct_ops(c.map_id);
      // An unregistered map keeps its value, name included, for as long as
      // sockets still use the control (the kernel's TOBEFREE state: the
      // delete answers EINPROGRESS), and a map never registered answers
      // ENOENT: neither holds the name. An agent that stopped cleanly while
      // connections used its control leaves such a map behind.
      if (urc == -EINPROGRESS || urc == -ENOENT) continue;
      if (urc) throw SysError("take over stale registration of " + params_.name, -urc);
      SLOG_WARN("CC_STALE_REPLACED",
                "congestion control {} was still registered by struct_ops map id {} (a sluice process that did not "
                "unregister); replaced",
                params_.name, c.map_id);
      replaced = true;
    }
    if (!replaced)
      throw Error("congestion control name " + params_.name +
                  " is taken by a kernel module or another program; choose another name");
  }
  SLOG_INFO("CC_REGISTERED", "congestion control {} registered ({}, shift_g {}, alpha_on_init {}{})", params_.name,
            to_string(p.kind), p.dctcp_shift_g, p.dctcp_alpha_on_init,
            p.kind == CcKind::Pulser ? ", cwnd_safe " + std::to_string(p.pulser_cwnd_safe) : std::string());
}

RegisteredCc::~RegisteredCc() { unregister(); }

void RegisteredCc::unregister() noexcept {
  if (impl_ && impl_->link) {
    // Destroying a struct_ops "link" made without a kernel link deletes the
    // map element: that is the unregistration. Sockets using the control
    // keep it until they close.
    int rc = bpf_link__destroy(impl_->link);
    impl_->link = nullptr;
    if (rc) SLOG_ERROR("CC_UNREGISTER_FAILED", "unregister congestion control {}: {}", params_.name, strerror(-rc));
    else SLOG_INFO("CC_UNREGISTERED", "congestion control {} unregistered", params_.name);
  }
}

sluice_cc_stats RegisteredCc::stats() const {
  sluice_cc_stats s{};
  // .bss is mmap()ed: the counters are live.
  std::memcpy(&s, impl_->stats(), sizeof(s));
  return s;
}

int RegisteredCc::ein_map_fd() const { return impl_->p ? bpf_map__fd(impl_->p->maps.sl_ein_sk_v1) : -1; }

nlohmann::json RegisteredCc::status() const {
  auto s = stats();
  nlohmann::json j = {
      {"name", params_.name},
      {"algorithm", to_string(params_.kind)},
      {"registered", impl_->link != nullptr},
      {"dctcp_shift_g", params_.dctcp_shift_g},
      {"dctcp_alpha_on_init", params_.dctcp_alpha_on_init},
      {"sockets", s.sockets},
      {"reno_fallback", s.reno_fallback},
      {"alpha_updates", s.alpha_updates},
      {"ecn_cuts", s.ecn_cuts},
      {"loss_events", s.loss_events},
      {"repairs", s.repairs},
      {"last_repair",
       {{"ssthresh", s.repair_ssthresh},
        {"cwnd", s.repair_cwnd},
        {"bound", s.repair_bound},
        {"ca_state", s.repair_ca_state}}},
  };
  if (params_.kind == CcKind::Pulser) {
    j["cwnd_safe"] = params_.pulser_cwnd_safe;
    j["ein_map_pin"] = params_.ein_map_pin;
    j["ein_acks"] = s.ein_acks;
    j["brakes"] = s.brakes;
    j["brake_extends"] = s.brake_extends;
    j["restores"] = s.restores;
    j["brakes_abandoned"] = s.brakes_abandoned;
    j["braked_tx_starts"] = s.braked_tx_starts;
  }
  return j;
}

}  // namespace sluice
