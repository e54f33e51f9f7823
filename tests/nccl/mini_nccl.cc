#include "tests/nccl/mini_nccl.h"

#include <dlfcn.h>
#include <strings.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <sstream>

namespace prism::nccl_test {
namespace {
std::mutex g_log_mu;
std::vector<LogLine>* g_log = new std::vector<LogLine>();
bool g_echo = true;
}  // namespace

bool LoadNet(const std::string& value, Net* net, std::string* error) {
  *net = Net();
  std::stringstream ss(value);
  std::string entry;
  std::string errors;
  while (std::getline(ss, entry, ',')) {
    if (entry.empty()) continue;
    for (const std::string& name : {entry, "libnccl-net-" + entry + ".so"}) {
      void* dl = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (dl == nullptr) {
        errors += std::string(dlerror()) + "; ";
        continue;
      }
      net->dl = dl;
      net->opened = name;
      static const char* kSymbols[] = {"ncclNetPlugin_v11", "ncclNetPlugin_v10",
                                       "ncclNetPlugin_v9",  "ncclNetPlugin_v8",
                                       "ncclNetPlugin_v7",  "ncclNetPlugin_v6"};
      for (int i = 0; i < 6; ++i) {
        if (void* sym = dlsym(dl, kSymbols[i]); sym != nullptr) {
          net->version = 11 - i;
          net->table = sym;
          return true;
        }
      }
      errors += name + ": no ncclNetPlugin_vN symbol; ";
      dlclose(dl);
      net->dl = nullptr;
    }
  }
  *error = errors;
  return false;
}

void UnloadNet(Net* net) {
  if (net->dl != nullptr) dlclose(net->dl);
  *net = Net();
}

const void* FindTable(const Net& net, int version) {
  if (net.dl == nullptr) return nullptr;
  const std::string sym = "ncclNetPlugin_v" + std::to_string(version);
  return dlsym(net.dl, sym.c_str());
}

void TestLogger(int level, unsigned long flags, const char* file, int line,
                const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(g_log_mu);
  g_log->push_back(LogLine{level, flags, buf});
  if (g_echo && level == kPrismNcclLogWarn) {
    fprintf(stderr, "[plugin WARN %s:%d] %s\n", file, line, buf);
  }
  // NCCL_DEBUG=INFO: INFO lines too, as NCCL prints them.
  static const bool info = [] {
    const char* d = getenv("NCCL_DEBUG");
    return d != nullptr && strcasecmp(d, "INFO") == 0;
  }();
  if (info && level == kPrismNcclLogInfo) {
    fprintf(stderr, "[plugin INFO] %s\n", buf);
  }
}

std::vector<LogLine> LogSnapshot() {
  std::lock_guard<std::mutex> lock(g_log_mu);
  return *g_log;
}

int LogLinesSince(size_t from, int level, const std::string& text) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  int n = 0;
  for (size_t i = from; i < g_log->size(); ++i) {
    const LogLine& l = (*g_log)[i];
    if (l.level == level && l.text.find(text) != std::string::npos) ++n;
  }
  return n;
}

void SetLogEcho(bool echo) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  g_echo = echo;
}

void FillPattern(uint8_t* dst, uint64_t len, uint64_t seed, uint64_t round,
                 uint32_t index) {
  uint64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint8_t w[8];
    for (int b = 0; b < 8; ++b) w[b] = PatternByte(seed, round, index, i + b);
    memcpy(dst + i, w, 8);
  }
  for (; i < len; ++i) dst[i] = PatternByte(seed, round, index, i);
}

int64_t CheckPattern(const uint8_t* p, uint64_t len, uint64_t seed,
                     uint64_t round, uint32_t index) {
  for (uint64_t i = 0; i < len; ++i) {
    if (p[i] != PatternByte(seed, round, index, i)) {
      return static_cast<int64_t>(i);
    }
  }
  return -1;
}

bool ReadAll(int fd, void* p, size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  while (n > 0) {
    const ssize_t r = read(fd, b, n);
    if (r <= 0) return false;
    b += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool WriteAll(int fd, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t w = write(fd, b, n);
    if (w <= 0) return false;
    b += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace prism::nccl_test
