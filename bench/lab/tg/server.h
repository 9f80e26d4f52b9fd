#pragma once

#include <cstdint>
#include <string>

namespace sluice::tg {

struct ServerOptions {
  std::string bind = "::";
  uint16_t port = 5001;
  std::string cc;  // TCP_CONGESTION on the listener and every accepted socket
  bool verbose = false;
};

// Serves requests until SIGTERM/SIGINT. One thread per connection: blocking
// writes keep the data path simple and fast, and a lab sender host holds at
// most a few hundred connections.
int run_server(const ServerOptions& o);

}  // namespace sluice::tg
