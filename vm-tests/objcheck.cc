// sluice-objcheck: loads and attaches every BPF object of a manifest on the
// running kernel and says, per object, whether it works, is unsupported on
// this kernel (it REQUIRES a feature the kernel's probe reports missing), or
// is broken (fails although the kernel has everything it declares).
//
// The manifest is written by CMake (bpf_object() in bpf/BpfObject.cmake):
//   name<TAB>path/to/name.bpf.o<TAB>feature,feature   ("-" for none)
// Feature names and probes are those of `sluiced --check` (features.cc), so
// the checker and the agent agree on what the kernel has.
//
// Attaching happens on a veth pair inside a private network namespace:
// tc programs through clsact + cls_bpf, XDP in native mode, tracing programs
// through their BTF attach point, syscall programs run once with
// BPF_PROG_TEST_RUN. struct_ops maps (TCP congestion control)
// are registered and unregistered only with --register-struct-ops, because
// registration is global to the kernel (the VM suite passes it; host runs
// only verify them).
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "core/netns.h"
#include <linux/if_link.h>
#include <net/if.h>
#include <netlink/netlink.h>
#include <netlink/route/link.h>
#include <netlink/route/link/veth.h>
#include <sched.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/features.h"

using namespace sluice;

namespace {

struct Entry {
  std::string name, path;
  std::vector<std::string> requires_;
};

std::vector<Entry> read_manifest(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read manifest " + file);
  std::vector<Entry> out;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> col;
    std::stringstream ss(line);
    std::string c;
    while (std::getline(ss, c, '\t')) col.push_back(c);
    if (col.size() != 3)
      throw std::runtime_error(file + ":" + std::to_string(lineno) + ": expected 3 tab-separated columns");
    Entry e{col[0], col[1], {}};
    if (col[2] != "-") {
      std::stringstream rs(col[2]);
      while (std::getline(rs, c, ','))
        if (!c.empty()) e.requires_.push_back(c);
    }
    out.push_back(e);
  }
  return out;
}

// libbpf messages of the object being checked (debug ones only with -v).
std::string g_log;
bool g_verbose = false;

int capture(enum libbpf_print_level level, const char* fmt, va_list args) {
  // Verifier logs come as one message and can be long: size it first.
  va_list copy;
  va_copy(copy, args);
  int n = vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  if (n < 0) return n;
  std::string buf(static_cast<size_t>(n) + 1, '\0');
  vsnprintf(buf.data(), buf.size(), fmt, args);
  buf.resize(static_cast<size_t>(n));
  if (level == LIBBPF_DEBUG) {
    if (g_verbose) std::fputs(buf.c_str(), stdout);
    return n;
  }
  g_log += buf;
  return n;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string l;
  while (std::getline(ss, l))
    if (!l.empty()) v.push_back(l);
  return v;
}

bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

// The one line of libbpf's output that says why a load failed.
std::string key_reason(const std::vector<std::string>& log) {
  static const char* kPatterns[] = {
      "failed to resolve CO-RE relocation",  // poisoned field/type access, with the field
      "relo #",                              // other CO-RE relocation trouble
      "not found in kernel",                 // kfunc / ksym the kernel lacks
      "failed to find BTF for extern",
      "failed to find kernel BTF type ID",  // tp_btf / fentry / struct_ops target missing
      "struct_ops init_kern",               // struct_ops member the kernel lacks
      "failed to find valid kernel BTF",
  };
  for (const char* p : kPatterns)
    for (const auto& l : log)
      if (contains(l, p)) return l;
  // A verifier rejection: its verdict is the last line of the log before
  // the statistics.
  bool in_vlog = false;
  std::string last;
  for (const auto& l : log) {
    if (contains(l, "BEGIN PROG LOAD LOG")) {
      in_vlog = true;
      continue;
    }
    if (contains(l, "END PROG LOAD LOG")) break;
    if (in_vlog && !contains(l, "processed ") && !contains(l, "verification time") && !contains(l, "stack depth"))
      last = l;
  }
  if (!last.empty()) return "verifier: " + last;
  for (auto it = log.rbegin(); it != log.rend(); ++it)
    if (!contains(*it, "failed to load object")) return *it;
  return log.empty() ? "" : log.back();
}

std::string errstr(int err) { return std::strerror(err < 0 ? -err : err); }

struct Attacher {
  int ifindex = 0;
  bool register_struct_ops = false;
  uint32_t next_prio = 1;

  // Attaches and detaches one loaded program; returns "" or the error.
  std::string program(bpf_program* p, std::string* how) {
    int fd = bpf_program__fd(p);
    switch (bpf_program__type(p)) {
      case BPF_PROG_TYPE_SCHED_CLS: {
        DECLARE_LIBBPF_OPTS(bpf_tc_hook, h, .ifindex = ifindex, .attach_point = BPF_TC_INGRESS);
        int rc = bpf_tc_hook_create(&h);
        if (rc && rc != -EEXIST) return "create clsact qdisc: " + errstr(rc);
        DECLARE_LIBBPF_OPTS(bpf_tc_opts, o, .prog_fd = fd, .handle = 1, .priority = next_prio++);
        rc = bpf_tc_attach(&h, &o);
        if (rc) return "tc attach (clsact ingress, direct-action): " + errstr(rc);
        o.prog_fd = 0;
        o.prog_id = 0;
        o.flags = 0;
        bpf_tc_detach(&h, &o);
        *how = "tc";
        return "";
      }
      case BPF_PROG_TYPE_XDP: {
        int rc = bpf_xdp_attach(ifindex, fd, XDP_FLAGS_DRV_MODE, nullptr);
        if (rc) return "native XDP attach on veth: " + errstr(rc);
        bpf_xdp_detach(ifindex, XDP_FLAGS_DRV_MODE, nullptr);
        *how = "xdp";
        return "";
      }
      case BPF_PROG_TYPE_STRUCT_OPS:
        *how = register_struct_ops ? "struct_ops" : "struct_ops (verified, not registered)";
        return "";  // registered through its map, below
      case BPF_PROG_TYPE_SYSCALL: {
        // Not attached anywhere: its user runs it with BPF_PROG_TEST_RUN.
        // With a zeroed context: the kernel refuses a run whose ctx_in is
        // shorter than what the program reads of its context (EINVAL), and
        // every context of ours is a small struct whose zero value is valid
        // (e.g. swhold's sw_hold_sync: port 0, nothing to read yet).
        std::vector<uint8_t> ctx(512, 0);
        LIBBPF_OPTS(bpf_test_run_opts, o, .ctx_in = ctx.data(), .ctx_size_in = uint32_t(ctx.size()));
        int rc = bpf_prog_test_run_opts(fd, &o);
        if (rc) return "test run (syscall program): " + errstr(rc);
        *how = "syscall (test run)";
        return "";
      }
      default: {
        bpf_link* l = bpf_program__attach(p);
        if (!l) return std::string("attach (") + bpf_program__section_name(p) + "): " + errstr(errno);
        bpf_link__destroy(l);
        *how = bpf_program__section_name(p);
        return "";
      }
    }
  }

  std::string struct_ops(bpf_map* m) {
    if (!register_struct_ops) return "";
    bpf_link* l = bpf_map__attach_struct_ops(m);
    if (!l) return std::string("register struct_ops ") + bpf_map__name(m) + ": " + errstr(errno);
    bpf_link__destroy(l);  // unregisters
    return "";
  }
};

enum class Outcome { Pass, Unsupported, Fail };

struct Result {
  Outcome outcome = Outcome::Fail;
  std::string summary;              // one line
  std::vector<std::string> detail;  // libbpf lines worth showing
};

Result check(const Entry& e, const FeatureReport& rep, Attacher& at) {
  g_log.clear();
  Result r;
  std::vector<std::string> missing;
  for (const auto& f : e.requires_) {
    bool known = false;
    for (Feature k : all_features())
      if (f == to_string(k)) {
        known = true;
        auto it = rep.find(k);
        if (it == rep.end() || !it->second.ok)
          missing.push_back(f + " (" + (it == rep.end() ? std::string("not probed") : it->second.detail) + ")");
      }
    if (!known) {
      r.summary = "manifest names unknown feature '" + f + "'";
      return r;
    }
  }

  std::string failure, attached;
  bpf_object* obj = bpf_object__open_file(e.path.c_str(), nullptr);
  if (!obj) {
    failure = "open " + e.path + ": " + errstr(errno);
  } else {
    int rc = bpf_object__load(obj);
    if (rc) {
      failure = "load failed (" + errstr(rc) + ")";
    } else {
      bpf_program* p;
      int n = 0;
      bpf_object__for_each_program(p, obj) {
        if (!bpf_program__autoload(p)) continue;
        std::string how;
        std::string err = at.program(p, &how);
        if (!err.empty()) {
          failure = std::string("program ") + bpf_program__name(p) + ": " + err;
          break;
        }
        attached += (n++ ? ", " : "") + std::string(bpf_program__name(p)) + " " + how;
      }
      bpf_map* m;
      if (failure.empty()) bpf_object__for_each_map(m, obj) {
          if (bpf_map__type(m) != BPF_MAP_TYPE_STRUCT_OPS) continue;
          std::string err = at.struct_ops(m);
          if (!err.empty()) {
            failure = err;
            break;
          }
          if (at.register_struct_ops) attached += std::string(", ") + bpf_map__name(m) + " registered";
        }
    }
    bpf_object__close(obj);
  }

  auto log = lines_of(g_log);
  if (failure.empty()) {
    if (!missing.empty()) {
      r.summary = "loaded and attached although it REQUIRES " + missing.front() +
                  ": its REQUIRES list or the kernel probe is wrong";
      return r;
    }
    r.outcome = Outcome::Pass;
    r.summary = attached.empty() ? "loaded (no programs)" : attached;
    return r;
  }
  std::string why = key_reason(log);
  if (!missing.empty()) {
    r.outcome = Outcome::Unsupported;
    r.summary = "needs ";
    for (size_t i = 0; i < missing.size(); ++i) r.summary += (i ? ", " : "") + missing[i];
    r.summary += "; " + failure;
    r.detail = log;
    return r;
  }
  r.summary = failure + (why.empty() ? "" : ": " + why);
  // Everything libbpf said except the verifier log's middle.
  bool in_vlog = false;
  std::vector<std::string> vlog;
  for (const auto& l : log) {
    if (contains(l, "BEGIN PROG LOAD LOG")) {
      in_vlog = true;
      vlog.clear();
      r.detail.push_back(l);
      continue;
    }
    if (contains(l, "END PROG LOAD LOG")) {
      in_vlog = false;
      size_t from = !g_verbose && vlog.size() > 12 ? vlog.size() - 12 : 0;
      if (from) r.detail.push_back("  ... (" + std::to_string(from) + " verifier lines omitted; -v for all)");
      for (size_t i = from; i < vlog.size(); ++i) r.detail.push_back(vlog[i]);
      r.detail.push_back(l);
      continue;
    }
    (in_vlog ? vlog : r.detail).push_back(l);
  }
  if (in_vlog) {
    // The log ended without its END line (libbpf cut a long log): its tail
    // still says why the verifier refused.
    size_t from = !g_verbose && vlog.size() > 12 ? vlog.size() - 12 : 0;
    if (from) r.detail.push_back("  ... (" + std::to_string(from) + " verifier lines omitted; -v for all)");
    for (size_t i = from; i < vlog.size(); ++i) r.detail.push_back(vlog[i]);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sluice-objcheck: load and attach every sluice BPF object on this kernel"};
  std::vector<std::string> manifests;
  std::vector<std::string> only;
  bool register_struct_ops = false;
  app.add_option("-m,--manifest", manifests, "manifest(s) written by the build (vm-tests/bpf-objects.tsv)")->required();
  app.add_option("--only", only, "check only these objects");
  app.add_flag("--register-struct-ops", register_struct_ops,
               "also register and unregister struct_ops maps (global to the kernel: use in a VM)");
  app.add_flag("-v,--verbose", g_verbose, "show libbpf debug output");
  CLI11_PARSE(app, argc, argv);
  if (geteuid() != 0) {
    std::fprintf(stderr, "sluice-objcheck: needs root (BPF, network namespaces)\n");
    return 2;
  }

  std::vector<Entry> entries;
  try {
    for (const auto& m : manifests)
      for (auto& e : read_manifest(m))
        if (only.empty() || std::find(only.begin(), only.end(), e.name) != only.end()) entries.push_back(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice-objcheck: %s\n", e.what());
    return 2;
  }
  if (entries.empty()) {
    std::fprintf(stderr, "sluice-objcheck: no objects to check\n");
    return 2;
  }

  std::printf("kernel %s\n", kernel_release().c_str());
  FeatureReport rep = probe_features();
  std::printf("features:");
  for (Feature f : all_features()) std::printf(" %s=%s", to_string(f), rep[f].ok ? "yes" : "no");
  std::printf("\n");

  Attacher at;
  at.register_struct_ops = register_struct_ops;
  try {
    if (unshare(CLONE_NEWNET) != 0) throw std::runtime_error(std::string("unshare(CLONE_NEWNET): ") + strerror(errno));
    sluice::make_veth_pair("slck0", "slck1");
    at.ifindex = static_cast<int>(if_nametoindex("slck0"));
    if (!at.ifindex) throw std::runtime_error("veth slck0 not found after creating it");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice-objcheck: attach namespace: %s\n", e.what());
    return 2;
  }

  libbpf_set_print(capture);
  int pass = 0, unsupported = 0, fail = 0;
  for (const auto& e : entries) {
    Result r = check(e, rep, at);
    const char* tag = r.outcome == Outcome::Pass ? "PASS" : r.outcome == Outcome::Unsupported ? "UNSUPPORTED" : "FAIL";
    std::printf("%-11s %s: %s\n", tag, e.name.c_str(), r.summary.c_str());
    if (r.outcome == Outcome::Fail) std::printf("            object %s\n", e.path.c_str());
    for (const auto& d : r.detail) std::printf("            | %s\n", d.c_str());
    (r.outcome == Outcome::Pass ? pass : r.outcome == Outcome::Unsupported ? unsupported : fail)++;
    std::fflush(stdout);
  }
  std::printf("objects: %d pass, %d unsupported on this kernel, %d fail\n", pass, unsupported, fail);
  return fail ? 1 : 0;
}
