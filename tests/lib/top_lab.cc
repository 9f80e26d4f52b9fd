#include "lib/top_lab.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <sstream>

namespace sluice::test {

TopPair add_top_pair(Lab& lab, const std::string& net) {
  static int n = 0;
  const std::string k = std::to_string(n++);
  TopPair p{lab.add_ns("s" + k), lab.add_ns("r" + k), "s" + k, "r" + k};
  lab.add_veth(p.snd, p.sif, net + ".1/24", p.rcv, p.rif, net + ".2/24");
  return p;
}

Process top_recv(Lab& lab, const std::string& ns, const std::string& bind, const std::vector<std::string>& extra,
                 const std::string& log) {
  std::vector<std::string> argv = {
      build_path("agent/mechanisms/top/sluice-top"), "recv", "--bind", bind, "--link-mbit", "100", "--rtt-us", "500"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return lab.spawn(ns, argv, log);
}

nlohmann::json top_send(Lab& lab, const std::string& ns, const std::string& bind, const std::string& to,
                        const std::vector<std::string>& extra, const std::string& log, int* exit_code) {
  std::vector<std::string> argv = {
      build_path("agent/mechanisms/top/sluice-top"), "send", "--bind", bind, "--to", to, "--rtt-us", "500"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  Process p = lab.spawn(ns, argv, log);
  int st = p.wait(std::chrono::seconds(60));
  *exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::istringstream in(p.log());
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty() && line[0] == '{') last = line;
  if (last.empty()) {
    ADD_FAILURE() << "no summary from sluice-top send:\n" << p.log();
    return nlohmann::json::object();
  }
  try {
    return nlohmann::json::parse(last);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "sluice-top send: bad summary (" << e.what() << "): " << last;
    return nlohmann::json::object();
  }
}

uint64_t json_sum(const nlohmann::json& counts) {
  uint64_t n = 0;
  for (const auto& v : counts) n += v.get<uint64_t>();
  return n;
}

}  // namespace sluice::test
