// mini-NCCL: a test driver that loads the Prism net plugin the way NCCL
// 2.28.9 does and replays NCCL's call patterns against it.
//
// Loading (as src/plugin/net.cc does it): each comma-separated entry of the
// NCCL_NET_PLUGIN value is tried with dlopen(entry) and then
// dlopen("libnccl-net-<entry>.so"), RTLD_NOW | RTLD_LOCAL; the first library
// that opens is searched for ncclNetPlugin_v11, _v10, _v9, _v8, _v7, _v6 in
// that order and the first symbol found wins.
//
// Thread safety: the logger is thread-safe; a Net is read-only after Load.
#ifndef PRISM_TESTS_NCCL_MINI_NCCL_H_
#define PRISM_TESTS_NCCL_MINI_NCCL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/nccl/net_abi.h"

namespace prism::nccl_test {

struct Net {
  void* dl = nullptr;
  std::string opened;  // the name dlopen accepted
  int version = 0;     // 11, 10, 9, 8 (7/6 are reported but not used)
  const void* table = nullptr;
  const PrismNcclNetV11* v11() const {
    return version == 11 ? static_cast<const PrismNcclNetV11*>(table) : nullptr;
  }
};

// Loads like NCCL; false with *error set when nothing loads.
bool LoadNet(const std::string& nccl_net_plugin, Net* net, std::string* error);
void UnloadNet(Net* net);
// A specific table version from an opened library (nullptr if absent).
const void* FindTable(const Net& net, int version);

// NCCL-style logger; records every message.
struct LogLine {
  int level;
  unsigned long flags;
  std::string text;
};
void TestLogger(int level, unsigned long flags, const char* file, int line,
                const char* fmt, ...);
std::vector<LogLine> LogSnapshot();
// Lines logged at `level` since line `from` of LogSnapshot() that contain
// `text`.
int LogLinesSince(size_t from, int level, const std::string& text);
inline int WarningsSince(size_t from, const std::string& text) {
  return LogLinesSince(from, kPrismNcclLogWarn, text);
}
inline int InfosSince(size_t from, const std::string& text) {
  return LogLinesSince(from, kPrismNcclLogInfo, text);
}
void SetLogEcho(bool echo_warnings);

// Deterministic payload pattern: byte `offset` of message (round, index).
inline uint8_t PatternByte(uint64_t seed, uint64_t round, uint32_t index,
                           uint64_t offset) {
  uint64_t z = seed ^ (round * 0x9e3779b97f4a7c15ull) ^
               (static_cast<uint64_t>(index) << 56) ^ (offset >> 3);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<uint8_t>(z >> (8 * (offset & 7)));
}
void FillPattern(uint8_t* dst, uint64_t len, uint64_t seed, uint64_t round,
                 uint32_t index);
// Offset of the first wrong byte, or -1 when all `len` bytes match.
int64_t CheckPattern(const uint8_t* p, uint64_t len, uint64_t seed,
                     uint64_t round, uint32_t index);

// Blocking read/write of exactly `n` bytes on a pipe or socket; false on an
// error or end of file.
bool ReadAll(int fd, void* p, size_t n);
bool WriteAll(int fd, const void* p, size_t n);

}  // namespace prism::nccl_test

#endif  // PRISM_TESTS_NCCL_MINI_NCCL_H_
