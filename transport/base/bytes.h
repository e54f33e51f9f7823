// Little-endian field access for wire formats and descriptors: Put16/32/64
// store, Get16/32/64 load, byte by byte.
//
// Contract: no alignment assumptions, no struct punning, the same bytes on
// every host (compilers fold these into single loads/stores on x86-64).
// REQUIRES: the caller has checked that [p, p + width) is inside its buffer.
#ifndef PRISM_BASE_BYTES_H_
#define PRISM_BASE_BYTES_H_

#include <cstdint>

namespace prism {

inline void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline void Put32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v >> 16);
  p[3] = static_cast<uint8_t>(v >> 24);
}
inline void Put64(uint8_t* p, uint64_t v) {
  Put32(p, static_cast<uint32_t>(v));
  Put32(p + 4, static_cast<uint32_t>(v >> 32));
}
inline uint16_t Get16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | p[1] << 8);
}
inline uint32_t Get32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 |
         uint32_t{p[3]} << 24;
}
inline uint64_t Get64(const uint8_t* p) {
  return uint64_t{Get32(p)} | uint64_t{Get32(p + 4)} << 32;
}

}  // namespace prism

#endif  // PRISM_BASE_BYTES_H_
