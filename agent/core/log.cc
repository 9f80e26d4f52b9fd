#include "log.h"

#include <bpf/libbpf.h>

#include <cstdarg>
#include <cstdio>
#include <string>

namespace sluice {

bool set_log_level(const std::string& level) {
  auto l = spdlog::level::from_str(level);
  if (l == spdlog::level::off && level != "off") return false;
  spdlog::set_level(l);
  return true;
}

namespace {
bool g_libbpf_verbose = false;

int libbpf_print(enum libbpf_print_level level, const char* fmt, va_list args) {
  if (level == LIBBPF_DEBUG && !g_libbpf_verbose) return 0;
  char buf[1024];
  int n = std::vsnprintf(buf, sizeof(buf), fmt, args);
  std::string s(buf, n > 0 ? std::min<size_t>(n, sizeof(buf) - 1) : 0);
  while (!s.empty() && s.back() == '\n') s.pop_back();
  if (level == LIBBPF_WARN) spdlog::warn("[LIBBPF] {}", s);
  else spdlog::debug("[LIBBPF] {}", s);
  return n;
}
}  // namespace

void route_libbpf_logs(bool verbose) {
  g_libbpf_verbose = verbose;
  libbpf_set_print(libbpf_print);
}

}  // namespace sluice
