// The pinned-map naming rule (docs/architecture.md "Pinned maps"), checked
// on every BPF object the build makes (both manifests: the product objects
// and the TEST_ONLY ones, so a map added anywhere is covered): each map is sl_<mech>_<what>_v<N>,
// at most 15 characters (the kernel keeps BPF_OBJ_NAME_LEN - 1 of a name,
// and pins and bpftool show the kernel's), except the maps of bpf/lib
// (sl_counters), whose layout is frozen. The objects are opened, not
// loaded: no kernel needed.
#include <bpf/libbpf.h>
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Object {
  std::string name, path;
};

std::vector<Object> manifest(const std::string& file) {
  std::vector<Object> out;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream f(line);
    Object o;
    std::getline(f, o.name, '\t');
    std::getline(f, o.path, '\t');
    out.push_back(o);
  }
  return out;
}

// Maps of bpf/lib, shared by every program; their layout never changes.
const std::set<std::string> kFrozen = {"sl_counters"};

TEST(BpfMapNames, EveryMapFollowsTheNamingRule) {
  std::vector<Object> objs = manifest(SLUICE_BPF_MANIFEST);
  ASSERT_GE(objs.size(), 5u) << "the manifest " << SLUICE_BPF_MANIFEST << " lists too few objects";
  std::vector<Object> test_objs = manifest(SLUICE_BPF_TEST_MANIFEST);
  ASSERT_GE(test_objs.size(), 1u) << "the manifest " << SLUICE_BPF_TEST_MANIFEST << " lists no object";
  objs.insert(objs.end(), test_objs.begin(), test_objs.end());
  const std::regex versioned("^sl_[a-z0-9]+_[a-z0-9_]+_v[0-9]+$");
  size_t maps = 0;
  for (const auto& o : objs) {
    bpf_object* obj = bpf_object__open_file(o.path.c_str(), nullptr);
    ASSERT_NE(obj, nullptr) << o.name << ": cannot open " << o.path << " (built?)";
    bpf_map* m;
    bpf_object__for_each_map(m, obj) {
      if (bpf_map__is_internal(m) || bpf_map__type(m) == BPF_MAP_TYPE_STRUCT_OPS) continue;
      std::string n = bpf_map__name(m);
      ++maps;
      EXPECT_LE(n.size(), 15u) << o.name << ": map " << n << " is longer than the kernel keeps";
      if (kFrozen.count(n)) continue;
      EXPECT_TRUE(std::regex_match(n, versioned))
          << o.name << ": map " << n << " is not sl_<mech>_<what>_v<N> (docs/architecture.md)";
    }
    bpf_object__close(obj);
  }
  EXPECT_GE(maps, 10u) << "fewer maps than the objects are known to have: was the manifest read?";
}

}  // namespace
