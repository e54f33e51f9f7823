// Checks the built plugin's dynamic symbol table and dependencies with the
// same tools a user would: nm -D --defined-only, ldd, readelf -d.
#include <dlfcn.h>

#include <cstdio>
#include <set>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace {

std::string RunCommand(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  pclose(f);
  return out;
}

TEST(NcclExports, OnlyPluginSymbolsAreExported) {
  const std::string out =
      RunCommand(std::string("nm -D --defined-only ") + PRISM_NCCL_PLUGIN);
  std::istringstream in(out);
  std::string line;
  std::set<std::string> syms;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string addr, type, name;
    ls >> addr >> type >> name;
    if (name.empty()) continue;
    EXPECT_EQ(type, "D") << line;  // initialised data (the const tables)
    syms.insert(name);
  }
  const std::set<std::string> want = {"ncclNetPlugin_v11", "ncclNetPlugin_v10",
                                      "ncclNetPlugin_v9", "ncclNetPlugin_v8"};
  EXPECT_EQ(syms, want) << out;
}

TEST(NcclExports, NoCudaOrNcclDependency) {
  const std::string out = RunCommand(std::string("ldd ") + PRISM_NCCL_PLUGIN);
  ASSERT_NE(out.find("libc.so"), std::string::npos) << out;
  for (const char* bad : {"libcuda", "libcudart", "libnccl", "libnvidia"}) {
    EXPECT_EQ(out.find(bad), std::string::npos) << bad << " in\n" << out;
  }
  const std::string dyn =
      RunCommand(std::string("readelf -d ") + PRISM_NCCL_PLUGIN);
  EXPECT_NE(dyn.find("NODELETE"), std::string::npos) << dyn;
}

TEST(NcclExports, DlopenLocalNow) {
  void* h = dlopen(PRISM_NCCL_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  EXPECT_NE(dlsym(h, "ncclNetPlugin_v11"), nullptr);
  EXPECT_EQ(dlsym(h, "ncclNetPlugin_v7"), nullptr);
  // Internal functions are not reachable by name.
  EXPECT_EQ(dlsym(h, "_ZN5prism4nccl4TestEPvPiS2_"), nullptr);
  dlclose(h);
}

}  // namespace
