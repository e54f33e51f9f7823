#include "transport/wire/crc32c.h"

#include <array>
#include <atomic>
#include <cstring>

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

// Little-endian 64-bit load; the shift-or form compiles to one load on
// little-endian hosts.
inline uint64_t Load64Le(const uint8_t* p) {
  return uint64_t{p[0]} | uint64_t{p[1]} << 8 | uint64_t{p[2]} << 16 |
         uint64_t{p[3]} << 24 | uint64_t{p[4]} << 32 | uint64_t{p[5]} << 40 |
         uint64_t{p[6]} << 48 | uint64_t{p[7]} << 56;
}

// Crc32cZero4At4StoreStrided's length field (host order) and store
// (little-endian, at bytes [4, 8)).
inline size_t StridedLen(const uint8_t* p, size_t len_off) {
  uint16_t l;
  std::memcpy(&l, p + len_off, sizeof(l));
  return l;
}
inline void StoreCrc(uint8_t* p, uint32_t crc) {
  const uint8_t b[4] = {
      static_cast<uint8_t>(crc), static_cast<uint8_t>(crc >> 8),
      static_cast<uint8_t>(crc >> 16), static_cast<uint8_t>(crc >> 24)};
  std::memcpy(p + 4, b, 4);
}

// Raw register (no pre/post inversion) after feeding one zero byte.
constexpr uint32_t ShiftByte(uint32_t c) {
  return (c >> 8) ^ kTables[0][c & 0xFFu];
}

// The hardware path runs three independent crc32 chains over three adjacent
// blocks of kStripe bytes and merges them: by linearity, the register after
// A||B equals Shift_|B|(reg after A) ^ (reg of B started from 0). kShift[k][b]
// is Shift_kStripe applied to byte b placed at byte k of the register.
constexpr size_t kStripe = 256;
static_assert(kStripe % 8 == 0);
using ShiftTable = std::array<std::array<uint32_t, 256>, 4>;

constexpr ShiftTable MakeShiftTable() {
  uint32_t basis[32] = {};
  for (int bit = 0; bit < 32; ++bit) {
    uint32_t c = 1u << bit;
    for (size_t i = 0; i < kStripe; ++i) c = ShiftByte(c);
    basis[bit] = c;
  }
  ShiftTable t{};
  for (int k = 0; k < 4; ++k) {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = 0;
      for (int bit = 0; bit < 8; ++bit) {
        if (b & (1u << bit)) c ^= basis[8 * k + bit];
      }
      t[k][b] = c;
    }
  }
  return t;
}

constexpr ShiftTable kShift = MakeShiftTable();

inline uint32_t ShiftStripe(uint32_t c) {
  return kShift[0][c & 0xFF] ^ kShift[1][(c >> 8) & 0xFF] ^
         kShift[2][(c >> 16) & 0xFF] ^ kShift[3][c >> 24];
}

#if PRISM_CRC32C_X86
__attribute__((target("sse4.2"))) uint32_t HardwareImpl(const uint8_t* p,
                                                        size_t len,
                                                        uint32_t crc) {
  uint64_t c = ~crc;
  while (len >= 3 * kStripe) {
    uint64_t c1 = 0, c2 = 0;
    const uint8_t* q = p;
    for (size_t i = 0; i < kStripe; i += 8, q += 8) {
      c = _mm_crc32_u64(c, Load64Le(q));
      c1 = _mm_crc32_u64(c1, Load64Le(q + kStripe));
      c2 = _mm_crc32_u64(c2, Load64Le(q + 2 * kStripe));
    }
    c = ShiftStripe(ShiftStripe(static_cast<uint32_t>(c)) ^
                    static_cast<uint32_t>(c1)) ^
        static_cast<uint32_t>(c2);
    p += 3 * kStripe;
    len -= 3 * kStripe;
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

__attribute__((target("sse4.2"))) uint32_t HardwareZero4At4(const uint8_t* p,
                                                            size_t len) {
  uint64_t c = _mm_crc32_u64(0xFFFFFFFFu, Load64Le(p) & 0xFFFFFFFFull);
  return HardwareImpl(p + 8, len - 8, ~static_cast<uint32_t>(c));
}

inline uint32_t Load32Le(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 |
         uint32_t{p[3]} << 24;
}

// Four buffers of the same length `len` (>= 8), bytes [4, 8) of each taken
// as zero: four independent chains, interleaved.
__attribute__((target("sse4.2"))) void HardwareZero4At4x4(
    const uint8_t* const* p, size_t len, uint32_t* out) {
  const uint8_t* a = p[0];
  const uint8_t* b = p[1];
  const uint8_t* c = p[2];
  const uint8_t* d = p[3];
  uint64_t ca = _mm_crc32_u64(0xFFFFFFFFu, Load64Le(a) & 0xFFFFFFFFull);
  uint64_t cb = _mm_crc32_u64(0xFFFFFFFFu, Load64Le(b) & 0xFFFFFFFFull);
  uint64_t cc = _mm_crc32_u64(0xFFFFFFFFu, Load64Le(c) & 0xFFFFFFFFull);
  uint64_t cd = _mm_crc32_u64(0xFFFFFFFFu, Load64Le(d) & 0xFFFFFFFFull);
  size_t i = 8;
  for (; i + 8 <= len; i += 8) {
    ca = _mm_crc32_u64(ca, Load64Le(a + i));
    cb = _mm_crc32_u64(cb, Load64Le(b + i));
    cc = _mm_crc32_u64(cc, Load64Le(c + i));
    cd = _mm_crc32_u64(cd, Load64Le(d + i));
  }
  uint32_t ra = static_cast<uint32_t>(ca), rb = static_cast<uint32_t>(cb),
           rc = static_cast<uint32_t>(cc), rd = static_cast<uint32_t>(cd);
  if (i + 4 <= len) {
    ra = _mm_crc32_u32(ra, Load32Le(a + i));
    rb = _mm_crc32_u32(rb, Load32Le(b + i));
    rc = _mm_crc32_u32(rc, Load32Le(c + i));
    rd = _mm_crc32_u32(rd, Load32Le(d + i));
    i += 4;
  }
  for (; i < len; ++i) {
    ra = _mm_crc32_u8(ra, a[i]);
    rb = _mm_crc32_u8(rb, b[i]);
    rc = _mm_crc32_u8(rc, c[i]);
    rd = _mm_crc32_u8(rd, d[i]);
  }
  out[0] = ~ra;
  out[1] = ~rb;
  out[2] = ~rc;
  out[3] = ~rd;
}

// HardwareZero4At4 / HardwareZero4At4x4 for a length known at compile time
// (the header sizes that dominate: 64-byte DATA, 84-byte SACK), fully
// unrolled: no loop counters and no data-dependent loop exits, which the
// generic versions mispredict at the end of every header.
template <size_t kLen>
__attribute__((target("sse4.2"), always_inline)) inline uint32_t FixedTail(
    uint64_t c64, const uint8_t* p) {
  static_assert(kLen >= 8);
  size_t i = 8;
#pragma GCC unroll 16
  for (; i + 8 <= kLen; i += 8) c64 = _mm_crc32_u64(c64, Load64Le(p + i));
  uint32_t c = static_cast<uint32_t>(c64);
  if constexpr (kLen % 8 >= 4) {
    c = _mm_crc32_u32(c, Load32Le(p + kLen - kLen % 8));
  }
#pragma GCC unroll 4
  for (size_t j = kLen - kLen % 4; j < kLen; ++j) c = _mm_crc32_u8(c, p[j]);
  return ~c;
}

template <size_t kLen>
__attribute__((target("sse4.2"), always_inline)) inline uint32_t
HardwareZero4At4Fixed(const uint8_t* p) {
  return FixedTail<kLen>(
      _mm_crc32_u64(0xFFFFFFFFu, Load64Le(p) & 0xFFFFFFFFull), p);
}

template <size_t kLen>
__attribute__((target("sse4.2"), always_inline)) inline void
HardwareZero4At4x4Fixed(const uint8_t* const* p, uint32_t* out) {
  const uint8_t* a = p[0];
  const uint8_t* b = p[1];
  const uint8_t* c = p[2];
  const uint8_t* d = p[3];
  // Four independent chains (straight-line code once inlined), stored only
  // at the end so that no store orders the loads of the next chain.
  const uint32_t ra = FixedTail<kLen>(
      _mm_crc32_u64(0xFFFFFFFFu, Load64Le(a) & 0xFFFFFFFFull), a);
  const uint32_t rb = FixedTail<kLen>(
      _mm_crc32_u64(0xFFFFFFFFu, Load64Le(b) & 0xFFFFFFFFull), b);
  const uint32_t rc = FixedTail<kLen>(
      _mm_crc32_u64(0xFFFFFFFFu, Load64Le(c) & 0xFFFFFFFFull), c);
  const uint32_t rd = FixedTail<kLen>(
      _mm_crc32_u64(0xFFFFFFFFu, Load64Le(d) & 0xFFFFFFFFull), d);
  out[0] = ra;
  out[1] = rb;
  out[2] = rc;
  out[3] = rd;
}

__attribute__((target("sse4.2"))) inline uint32_t HardwareZero4At4Any(
    const uint8_t* p, size_t len) {
  if (len == 64) return HardwareZero4At4Fixed<64>(p);
  if (len == 84) return HardwareZero4At4Fixed<84>(p);
  return HardwareZero4At4(p, len);
}

// Crc32cZero4At4 (one header): the fixed-length chains for the DATA and
// SACK header sizes, the general loop otherwise. Same checksum.
__attribute__((target("sse4.2"))) uint32_t HardwareZero4At4One(const uint8_t* p,
                                                               size_t len) {
  return HardwareZero4At4Any(p, len);
}

// Four headers of one length `len` through the interleaved chains: the
// fixed 64- and 84-byte kernels where they apply (DATA and SACK headers),
// the general one otherwise. Shared by the array and the strided forms.
__attribute__((target("sse4.2"), always_inline)) inline void
HardwareZero4At4x4Equal(const uint8_t* const* p, size_t len, uint32_t* out) {
  if (len == 64) {
    HardwareZero4At4x4Fixed<64>(p, out);
  } else if (len == 84) {
    HardwareZero4At4x4Fixed<84>(p, out);
  } else {
    HardwareZero4At4x4(p, len, out);
  }
}

// With the target of the kernels it calls, so that they are inlined (the
// four-header chains were a call each).
__attribute__((target("sse4.2"))) void HardwareZero4At4Multi(
    const uint8_t* const* p, const size_t* len, size_t n, uint32_t* out) {
  size_t i = 0;
  while (i + 4 <= n) {
    if (len[i] == len[i + 1] && len[i] == len[i + 2] && len[i] == len[i + 3]) {
      HardwareZero4At4x4Equal(p + i, len[i], out + i);
      i += 4;
    } else {
      out[i] = HardwareZero4At4Any(p[i], len[i]);
      ++i;
    }
  }
  for (; i < n; ++i) out[i] = HardwareZero4At4Any(p[i], len[i]);
}

// Crc32cZero4At4StoreStrided: groups of four equal lengths through the
// interleaved chains (HardwareZero4At4x4Equal), the rest one by one.
__attribute__((target("sse4.2"))) void HardwareStoreStrided(uint8_t* first,
                                                            size_t stride,
                                                            size_t len_off,
                                                            size_t n) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    uint8_t* const q0 = first + i * stride;
    uint8_t* const q1 = q0 + stride;
    uint8_t* const q2 = q1 + stride;
    uint8_t* const q3 = q2 + stride;
    const uint8_t* const p[4] = {q0, q1, q2, q3};
    const size_t l = StridedLen(q0, len_off);
    const bool same = l == StridedLen(q1, len_off) &&
                      l == StridedLen(q2, len_off) &&
                      l == StridedLen(q3, len_off);
    uint32_t out[4];
    if (same) {
      HardwareZero4At4x4Equal(p, l, out);
    } else {
      for (size_t j = 0; j < 4; ++j)
        out[j] = HardwareZero4At4Any(p[j], StridedLen(p[j], len_off));
    }
    StoreCrc(q0, out[0]);
    StoreCrc(q1, out[1]);
    StoreCrc(q2, out[2]);
    StoreCrc(q3, out[3]);
  }
  for (; i < n; ++i) {
    uint8_t* const q = first + i * stride;
    StoreCrc(q, HardwareZero4At4Any(q, StridedLen(q, len_off)));
  }
}

bool DetectSse42() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#endif

uint32_t SoftwareZero4At4(const uint8_t* p, size_t len) {
  uint8_t first[8] = {p[0], p[1], p[2], p[3], 0, 0, 0, 0};
  return Crc32cSoftware(p + 8, len - 8, Crc32cSoftware(first, 8));
}

void SoftwareStoreStrided(uint8_t* first, size_t stride, size_t len_off,
                          size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint8_t* const q = first + i * stride;
    StoreCrc(q, SoftwareZero4At4(q, StridedLen(q, len_off)));
  }
}

void SoftwareZero4At4Multi(const uint8_t* const* p, const size_t* len, size_t n,
                           uint32_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = SoftwareZero4At4(p[i], len[i]);
}

using CrcFn = uint32_t (*)(const uint8_t*, size_t, uint32_t);
using HdrFn = uint32_t (*)(const uint8_t*, size_t);
using MultiFn = void (*)(const uint8_t* const*, const size_t*, size_t,
                         uint32_t*);
using StridedFn = void (*)(uint8_t*, size_t, size_t, size_t);

// Resolved on first use (a static initializer elsewhere may call Crc32c
// before ours runs); afterwards one relaxed load and an indirect call.
uint32_t ResolveCrc(const uint8_t* p, size_t len, uint32_t crc);
uint32_t ResolveHdr(const uint8_t* p, size_t len);
void ResolveMulti(const uint8_t* const* p, const size_t* len, size_t n,
                  uint32_t* out);
void ResolveStrided(uint8_t* first, size_t stride, size_t len_off, size_t n);
std::atomic<CrcFn> g_crc{&ResolveCrc};
std::atomic<HdrFn> g_hdr{&ResolveHdr};
std::atomic<MultiFn> g_multi{&ResolveMulti};
std::atomic<StridedFn> g_strided{&ResolveStrided};

void Resolve() {
#if PRISM_CRC32C_X86
  if (DetectSse42()) {
    g_crc.store(&HardwareImpl, std::memory_order_relaxed);
    g_hdr.store(&HardwareZero4At4One, std::memory_order_relaxed);
    g_multi.store(&HardwareZero4At4Multi, std::memory_order_relaxed);
    g_strided.store(&HardwareStoreStrided, std::memory_order_relaxed);
    return;
  }
#endif
  g_crc.store(&Crc32cSoftware, std::memory_order_relaxed);
  g_hdr.store(&SoftwareZero4At4, std::memory_order_relaxed);
  g_multi.store(&SoftwareZero4At4Multi, std::memory_order_relaxed);
  g_strided.store(&SoftwareStoreStrided, std::memory_order_relaxed);
}

uint32_t ResolveCrc(const uint8_t* p, size_t len, uint32_t crc) {
  Resolve();
  return g_crc.load(std::memory_order_relaxed)(p, len, crc);
}
uint32_t ResolveHdr(const uint8_t* p, size_t len) {
  Resolve();
  return g_hdr.load(std::memory_order_relaxed)(p, len);
}
void ResolveMulti(const uint8_t* const* p, const size_t* len, size_t n,
                  uint32_t* out) {
  Resolve();
  g_multi.load(std::memory_order_relaxed)(p, len, n, out);
}
void ResolveStrided(uint8_t* first, size_t stride, size_t len_off, size_t n) {
  Resolve();
  g_strided.load(std::memory_order_relaxed)(first, stride, len_off, n);
}

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
  return g_crc.load(std::memory_order_relaxed)(data, len, crc);
}

uint32_t Crc32cZero4At4(const uint8_t* data, size_t len) {
  return g_hdr.load(std::memory_order_relaxed)(data, len);
}

void Crc32cZero4At4Multi(const uint8_t* const* data, const size_t* len,
                         size_t n, uint32_t* out) {
  g_multi.load(std::memory_order_relaxed)(data, len, n, out);
}

void Crc32cZero4At4StoreStrided(uint8_t* first, size_t stride, size_t len_off,
                                size_t n) {
  g_strided.load(std::memory_order_relaxed)(first, stride, len_off, n);
}

}  // namespace prism::wire
