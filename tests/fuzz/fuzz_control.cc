// The control socket's request line (JSON, from any local root process):
// whatever arrives, the reply is one JSON object with a boolean "ok" that
// serialises to a single line, and the handler sees only objects with a
// string "cmd". The handler here reads the arguments the agent's commands
// read ("iface", "limit") the way the agent does.
#include <nlohmann/json.hpp>

#include "fuzz_input.h"
#include "core/control.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string line(reinterpret_cast<const char*>(data), size);
  bool called = false;
  auto handler = [&](const nlohmann::json& req) -> nlohmann::json {
    called = true;
    FUZZ_CHECK(req.is_object() && req.contains("cmd") && req["cmd"].is_string());
    const std::string cmd = req["cmd"];
    std::string iface = req.contains("iface") && req["iface"].is_string() ? req["iface"].get<std::string>() : "";
    size_t limit = req.contains("limit") && req["limit"].is_number_unsigned() ? req["limit"].get<size_t>() : 0;
    if (cmd == "throw") throw std::runtime_error("handler failed");
    return {{"ok", true}, {"cmd", cmd}, {"iface", iface}, {"limit", limit}};
  };
  std::string out = sluice::control_reply(line, handler);
  // One line, and it parses back to an object with a boolean "ok" (a
  // reply that cannot be serialised must not throw out of the server).
  FUZZ_CHECK(!out.empty() && out.back() == '\n' && out.find('\n') == out.size() - 1);
  nlohmann::json r = nlohmann::json::parse(out);
  FUZZ_CHECK(r.is_object() && r.contains("ok") && r["ok"].is_boolean());
  if (!r["ok"].get<bool>()) FUZZ_CHECK(r.contains("error") && r["error"].is_string());
  (void)called;
  return 0;
}
