#include "transport/wire/crc32c.h"

#include <array>

#include "transport/wire/packet.h"

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define PRISM_CRC32C_X86 1
#else
#define PRISM_CRC32C_X86 0
#endif

namespace prism::wire {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

// kTable[k][b]: CRC contribution of byte b followed by k zero bytes.
using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables MakeTables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? kPoly : 0u);
    t[0][b] = c;
  }
  for (uint32_t b = 0; b < 256; ++b) {
    for (int k = 1; k < 8; ++k) {
      const uint32_t prev = t[k - 1][b];
      t[k][b] = (prev >> 8) ^ t[0][prev & 0xFFu];
    }
  }
  return t;
}

constexpr Tables kTables = MakeTables();
static_assert(kTables[0][1] == 0xF26B8303u, "CRC32C table");

inline uint64_t Load64Le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

#if PRISM_CRC32C_X86
__attribute__((target("sse4.2"))) uint32_t HardwareImpl(const uint8_t* p,
                                                        size_t len,
                                                        uint32_t crc) {
  uint64_t c = ~crc;
  while (len > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --len;
  }
  while (len >= 8) {
    c = _mm_crc32_u64(c, Load64Le(p));
    p += 8;
    len -= 8;
  }
  while (len > 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --len;
  }
  return ~static_cast<uint32_t>(c);
}

bool DetectSse42() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#endif

}  // namespace

uint32_t Crc32cSoftware(const uint8_t* p, size_t len, uint32_t crc) {
  uint32_t c = ~crc;
  while (len >= 8) {
    const uint64_t v = Load64Le(p) ^ c;
    c = kTables[7][v & 0xFF] ^ kTables[6][(v >> 8) & 0xFF] ^
        kTables[5][(v >> 16) & 0xFF] ^ kTables[4][(v >> 24) & 0xFF] ^
        kTables[3][(v >> 32) & 0xFF] ^ kTables[2][(v >> 40) & 0xFF] ^
        kTables[1][(v >> 48) & 0xFF] ^ kTables[0][(v >> 56) & 0xFF];
    p += 8;
    len -= 8;
  }
  while (len > 0) {
    c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xFFu];
    --len;
  }
  return ~c;
}

bool Crc32cHardwareAvailable() {
#if PRISM_CRC32C_X86
  static const bool available = DetectSse42();
  return available;
#else
  return false;
#endif
}

uint32_t Crc32cHardware(const uint8_t* data, size_t len, uint32_t crc) {
#if PRISM_CRC32C_X86
  if (Crc32cHardwareAvailable()) return HardwareImpl(data, len, crc);
#endif
  return Crc32cSoftware(data, len, crc);
}

uint32_t Crc32c(const uint8_t* data, size_t len, uint32_t crc) {
#if PRISM_CRC32C_X86
  if (Crc32cHardwareAvailable()) return HardwareImpl(data, len, crc);
#endif
  return Crc32cSoftware(data, len, crc);
}

}  // namespace prism::wire
