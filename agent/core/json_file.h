// Result JSON of the lab tools (sluice-tg, sluice-qmon, sluice-fault,
// sluice-wire): "-" prints it, a path gets it whole or not at all (written
// beside it, then renamed, so a reader never sees half a file), "" skips it.
#pragma once

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "error.h"

namespace sluice {

inline void write_json_file(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  if (path == "-") {
    std::printf("%s\n", j.dump(1).c_str());
    std::fflush(stdout);
    return;
  }
  std::ofstream f(path + ".tmp");
  f << j.dump(1) << "\n";
  f.close();
  if (!f || std::rename((path + ".tmp").c_str(), path.c_str()) != 0) throw SysError("write " + path, errno);
}

}  // namespace sluice
