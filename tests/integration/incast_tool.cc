// A minimal barrier-synchronized incast for the PAC integration test (the
// lab's traffic generator is the full product; this one has no options the
// test does not use).
//   incast_tool server PORT [CC]          answers each 8-byte request (u64 n) with n bytes
//   incast_tool client N BYTES ROUNDS CC ADDR:PORT...
//   incast_tool client-fresh N BYTES ROUNDS CC ADDR:PORT...
//     opens N connections spread over the addresses (client-fresh: new ones
//     before every round, outside the timing, the old ones closed), runs ROUNDS rounds
//     (request to all, read BYTES from each), prints one JSON line per round
//     {"round":i,"us":t,"bytes":b} and a summary line {"goodput_mbps":...}.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

void set_cc(int fd, const char* cc) {
  if (cc && *cc && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, std::strlen(cc)) != 0) die("TCP_CONGESTION");
}

int serve(int port, const char* cc) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  set_cc(l, cc);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) die("bind");
  if (listen(l, 1024) != 0) die("listen");
  static std::vector<char> buf(1 << 20, 'x');
  for (;;) {
    int c = accept(l, nullptr, nullptr);
    if (c < 0) continue;
    std::thread([c] {
      uint64_t n;
      for (;;) {
        size_t got = 0;
        while (got < sizeof(n)) {
          ssize_t r = read(c, reinterpret_cast<char*>(&n) + got, sizeof(n) - got);
          if (r <= 0) {
            close(c);
            return;
          }
          got += size_t(r);
        }
        while (n) {
          ssize_t w = write(c, buf.data(), std::min<uint64_t>(n, buf.size()));
          if (w <= 0) {
            close(c);
            return;
          }
          n -= uint64_t(w);
        }
      }
    }).detach();
  }
}

std::vector<int> connect_all(int n, const char* cc, const std::vector<std::string>& targets) {
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    const std::string& t = targets[size_t(i) % targets.size()];
    auto colon = t.rfind(':');
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(std::atoi(t.c_str() + colon + 1)));
    inet_pton(AF_INET, t.substr(0, colon).c_str(), &a.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    set_cc(fd, cc);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    bool ok = false;
    for (int tries = 0; tries < 50 && !ok; ++tries) {
      ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
      if (!ok) {
        close(fd);
        fd = socket(AF_INET, SOCK_STREAM, 0);
        set_cc(fd, cc);
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    if (!ok) die("connect");
    fds.push_back(fd);
  }
  return fds;
}

int client(int n, uint64_t bytes, int rounds, const char* cc, const std::vector<std::string>& targets, bool fresh) {
  std::vector<int> fds = connect_all(n, cc, targets);
  std::vector<char> buf(1 << 16);
  double total_us = 0;
  uint64_t total_bytes = 0;
  int slow_rounds = 0;
  for (int r = 0; r < rounds; ++r) {
    if (fresh && r) {
      for (int fd : fds) close(fd);
      fds = connect_all(n, cc, targets);
      // The servers' threads pick the new connections up.
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    auto t0 = std::chrono::steady_clock::now();
    for (int fd : fds)
      if (write(fd, &bytes, sizeof(bytes)) != sizeof(bytes)) die("request");
    std::vector<uint64_t> left(fds.size(), bytes);
    size_t open = fds.size();
    std::vector<pollfd> pf(fds.size());
    while (open) {
      for (size_t i = 0; i < fds.size(); ++i) pf[i] = {fds[i], short(left[i] ? POLLIN : 0), 0};
      if (poll(pf.data(), pf.size(), 30000) <= 0) {
        std::fprintf(stderr, "round %d: no progress for 30 s (%zu connections unfinished)\n", r, open);
        return 2;
      }
      for (size_t i = 0; i < fds.size(); ++i) {
        if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t got = read(fds[i], buf.data(), std::min<uint64_t>(left[i], buf.size()));
        if (got <= 0) die("read");
        left[i] -= uint64_t(got);
        if (!left[i]) --open;
      }
    }
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    total_us += us;
    total_bytes += bytes * fds.size();
    if (us > 150000) ++slow_rounds;
    std::printf("{\"round\":%d,\"us\":%.0f,\"bytes\":%llu}\n", r, us,
                static_cast<unsigned long long>(bytes * fds.size()));
    std::fflush(stdout);
  }
  std::printf("{\"goodput_mbps\":%.1f,\"rounds\":%d,\"slow_rounds\":%d}\n", total_bytes * 8.0 / total_us, rounds,
              slow_rounds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "server") return serve(std::atoi(argv[2]), argc > 3 ? argv[3] : "");
  if (argc >= 7 && (std::string(argv[1]) == "client" || std::string(argv[1]) == "client-fresh")) {
    std::vector<std::string> t(argv + 6, argv + argc);
    return client(std::atoi(argv[2]), std::strtoull(argv[3], nullptr, 10), std::atoi(argv[4]), argv[5], t,
                  std::string(argv[1]) == "client-fresh");
  }
  std::fprintf(stderr, "usage: incast_tool server PORT [CC] | client|client-fresh N BYTES ROUNDS CC ADDR:PORT...\n");
  return 2;
}
