#include "control.h"

#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "bpf_util.h"
#include "error.h"
#include "log.h"

namespace sluice {

using boost::asio::local::stream_protocol;

namespace {

// True if something accepts connections at `path`.
bool socket_is_live(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::strncpy(sa.sun_path, path.c_str(), sizeof(sa.sun_path) - 1);
  bool live = connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
  close(fd);
  return live;
}

struct Session : std::enable_shared_from_this<Session> {
  stream_protocol::socket sock;
  boost::asio::streambuf buf{ControlServer::kMaxRequest};
  std::string reply;
  ControlServer::Handler& handler;
  Session(stream_protocol::socket s, ControlServer::Handler& h) : sock(std::move(s)), handler(h) {}

  void start() {
    auto self = shared_from_this();
    boost::asio::async_read_until(sock, buf, '\n', [self](const boost::system::error_code& ec, size_t n) {
      if (ec) {
        if (ec != boost::asio::error::not_found) return;  // client went away
        self->reply = nlohmann::json{{"ok", false}, {"error", "request too large"}}.dump() + "\n";
      } else {
        std::string line(boost::asio::buffers_begin(self->buf.data()),
                         boost::asio::buffers_begin(self->buf.data()) + n);
        self->reply = control_reply(line, self->handler);
      }
      boost::asio::async_write(self->sock, boost::asio::buffer(self->reply),
                               [self](const boost::system::error_code&, size_t) {
                                 boost::system::error_code ignore;
                                 self->sock.shutdown(stream_protocol::socket::shutdown_both, ignore);
                               });
    });
  }
};

}  // namespace

std::string control_reply(const std::string& line, const ControlServer::Handler& handler) {
  nlohmann::json resp;
  try {
    auto req = nlohmann::json::parse(line);
    if (!req.is_object() || !req.contains("cmd") || !req["cmd"].is_string())
      resp = {{"ok", false}, {"error", "request must be a JSON object with a string \"cmd\""}};
    else resp = handler(req);
  } catch (const nlohmann::json::exception& e) {
    resp = {{"ok", false}, {"error", std::string("bad JSON: ") + e.what()}};
  } catch (const std::exception& e) {
    resp = {{"ok", false}, {"error", e.what()}};
  }
  // A parse error quotes the bytes it stopped at, which need not be UTF-8:
  // replace them rather than throw from the reply.
  return resp.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

ControlServer::ControlServer(boost::asio::io_context& io, const std::string& path, Handler handler)
    : path_(path), acceptor_(io), handler_(std::move(handler)), alive_(std::make_shared<bool>(true)) {
  if (path.size() >= sizeof(sockaddr_un::sun_path)) throw Error("control socket path too long: " + path);
  make_dirs(path.substr(0, path.rfind('/')), 0700);
  if (access(path.c_str(), F_OK) == 0) {
    if (socket_is_live(path)) throw Error("control socket " + path + " is in use: is another sluiced running?");
    unlink(path.c_str());  // stale, from an agent that was killed
  }
  boost::system::error_code ec;
  acceptor_.open(stream_protocol(), ec);
  // umask 077 around bind: the socket is never visible with wider modes.
  mode_t old = umask(077);
  if (!ec) acceptor_.bind(stream_protocol::endpoint(path), ec);
  umask(old);
  if (!ec) acceptor_.listen(16, ec);
  if (ec) throw Error("control socket " + path + ": " + ec.message());
  chmod(path.c_str(), 0600);
  accept();
}

ControlServer::~ControlServer() {
  *alive_ = false;
  boost::system::error_code ec;
  acceptor_.close(ec);
  unlink(path_.c_str());
}

void ControlServer::accept() {
  std::weak_ptr<bool> alive = alive_;
  acceptor_.async_accept([this, alive](const boost::system::error_code& ec, stream_protocol::socket s) {
    auto a = alive.lock();
    if (!a || !*a) return;
    if (!ec) std::make_shared<Session>(std::move(s), handler_)->start();
    accept();
  });
}

nlohmann::json control_request(const std::string& path, const nlohmann::json& request, int timeout_ms) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw SysError("socket", errno);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::strncpy(sa.sun_path, path.c_str(), sizeof(sa.sun_path) - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    int e = errno;
    close(fd);
    throw SysError("connect to sluiced at " + path + (e == ENOENT ? " (is sluiced running?)" : ""), e);
  }
  std::string out = request.dump() + "\n";
  if (write(fd, out.data(), out.size()) != static_cast<ssize_t>(out.size())) {
    int e = errno;
    close(fd);
    throw SysError("write request", e);
  }
  std::string in;
  char buf[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    int r = poll(&p, 1, timeout_ms);
    if (r == 0) {
      close(fd);
      throw Error("sluiced did not answer within " + std::to_string(timeout_ms) + " ms");
    }
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    in.append(buf, n);
    if (!in.empty() && in.back() == '\n') break;
  }
  close(fd);
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw Error(std::string("bad reply from sluiced: ") + e.what());
  }
}

}  // namespace sluice
