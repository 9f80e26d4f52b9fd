// Log lines name a stable message id first ("ATTACH_OK", "CONFIG_REJECTED"),
// then what changed and why, so they can be grepped and alerted on.
#pragma once

#include <spdlog/spdlog.h>

#define SLOG_INFO(id, ...) spdlog::info("[" id "] " __VA_ARGS__)
#define SLOG_WARN(id, ...) spdlog::warn("[" id "] " __VA_ARGS__)
#define SLOG_ERROR(id, ...) spdlog::error("[" id "] " __VA_ARGS__)
#define SLOG_DEBUG(id, ...) spdlog::debug("[" id "] " __VA_ARGS__)

namespace sluice {
// Sets the level from a config/CLI string; returns false if unknown.
bool set_log_level(const std::string& level);
// Routes libbpf's own messages through spdlog (warnings and above).
void route_libbpf_logs(bool verbose);
}  // namespace sluice
