// Control socket: a UNIX stream socket (mode 0600, root only). One request
// per connection: a JSON object on one line ({"cmd": "status"}); one JSON
// object back on one line ({"ok": true, ...} or {"ok": false, "error": ...}).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace sluice {

class ControlServer {
 public:
  using Handler = std::function<nlohmann::json(const nlohmann::json& request)>;
  // Creates the socket at `path` (replacing a stale one left by a killed
  // agent, refusing if another agent is live on it). Throws Error.
  ControlServer(boost::asio::io_context& io, const std::string& path, Handler handler);
  ~ControlServer();
  const std::string& path() const { return path_; }

  // Requests larger than this are refused (bad input must not grow memory).
  static constexpr size_t kMaxRequest = 64 * 1024;

 private:
  void accept();
  std::string path_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  Handler handler_;
  std::shared_ptr<bool> alive_;
};

// One request line to its reply line (one JSON object and '\n'); never
// throws. Bad JSON, a non-object or a missing string "cmd" get
// {"ok": false, "error": ...} without reaching the handler; a handler
// exception becomes {"ok": false, "error": what()}.
std::string control_reply(const std::string& line, const ControlServer::Handler& handler);

// Client side (sluicectl): sends one request, returns the reply. Throws Error.
nlohmann::json control_request(const std::string& path, const nlohmann::json& request, int timeout_ms = 5000);

}  // namespace sluice
