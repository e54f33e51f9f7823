// Little-endian field access for wire formats and descriptors: Put16/32/64
// store, Get16/32/64 load.
//
// Contract: no alignment assumptions, no struct punning, the same bytes on
// every host.
// REQUIRES: the caller has checked that [p, p + width) is inside its buffer.
#ifndef PRISM_BASE_BYTES_H_
#define PRISM_BASE_BYTES_H_

#include <bit>
#include <cstdint>
#include <cstring>

namespace prism {

// On a little-endian host each is one memcpy of the value (a single load or
// store): the byte-by-byte form is only folded into one when nothing between
// the byte stores may alias them, which a uint8_t buffer written next to
// other fields often prevents (the engine's header encode was 4 stores per
// Put32).
inline constexpr bool kHostLittleEndian =
    std::endian::native == std::endian::little;

inline void Put16(uint8_t* p, uint16_t v) {
  if constexpr (kHostLittleEndian) {
    std::memcpy(p, &v, sizeof(v));
  } else {
    p[0] = static_cast<uint8_t>(v);
    p[1] = static_cast<uint8_t>(v >> 8);
  }
}
inline void Put32(uint8_t* p, uint32_t v) {
  if constexpr (kHostLittleEndian) {
    std::memcpy(p, &v, sizeof(v));
  } else {
    p[0] = static_cast<uint8_t>(v);
    p[1] = static_cast<uint8_t>(v >> 8);
    p[2] = static_cast<uint8_t>(v >> 16);
    p[3] = static_cast<uint8_t>(v >> 24);
  }
}
inline void Put64(uint8_t* p, uint64_t v) {
  if constexpr (kHostLittleEndian) {
    std::memcpy(p, &v, sizeof(v));
  } else {
    Put32(p, static_cast<uint32_t>(v));
    Put32(p + 4, static_cast<uint32_t>(v >> 32));
  }
}
inline uint16_t Get16(const uint8_t* p) {
  if constexpr (kHostLittleEndian) {
    uint16_t v;
    std::memcpy(&v, p, sizeof(v));
    return v;
  } else {
    return static_cast<uint16_t>(p[0] | p[1] << 8);
  }
}
inline uint32_t Get32(const uint8_t* p) {
  if constexpr (kHostLittleEndian) {
    uint32_t v;
    std::memcpy(&v, p, sizeof(v));
    return v;
  } else {
    return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 |
           uint32_t{p[3]} << 24;
  }
}
inline uint64_t Get64(const uint8_t* p) {
  if constexpr (kHostLittleEndian) {
    uint64_t v;
    std::memcpy(&v, p, sizeof(v));
    return v;
  } else {
    return uint64_t{Get32(p)} | uint64_t{Get32(p + 4)} << 32;
  }
}

}  // namespace prism

#endif  // PRISM_BASE_BYTES_H_
