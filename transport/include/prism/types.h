// Basic vocabulary types shared by every Prism module.
//
// Contract: time inside Prism is an integer count of picoseconds
// (`prism::Time`). The engine, congestion control, routing and the simulator
// never read a clock; callers pass `now` in. 2^63 ps is about 106 days, far
// beyond any run.
#ifndef PRISM_TYPES_H_
#define PRISM_TYPES_H_

#include <cstdint>
#include <limits>

namespace prism {

// Picoseconds since an arbitrary epoch chosen by the caller (the datapath's
// clock or the simulator's virtual clock). Monotonic non-decreasing per engine.
using Time = int64_t;

inline constexpr Time kPicosecond = 1;
inline constexpr Time kNanosecond = 1000;
inline constexpr Time kMicrosecond = 1000 * kNanosecond;
inline constexpr Time kMillisecond = 1000 * kMicrosecond;
inline constexpr Time kSecond = 1000 * kMillisecond;
// "Never": returned by NextEventTime() when nothing is scheduled.
inline constexpr Time kTimeInfinite = std::numeric_limits<Time>::max();

// Local identifier of a connection inside one engine. 0 is never valid.
using ConnId = uint32_t;
inline constexpr ConnId kInvalidConn = 0;

// Index of a path (entropy value slot) within a connection's path set,
// 0 .. num_paths-1. By convention path p belongs to plane p % num_planes.
using PathId = uint16_t;
// A failure group id (ConnectionOptions::path_groups) that shares fate
// with no other path.
inline constexpr uint16_t kNoFailureGroup = 0xFFFF;

// Duration of sending `bytes` at `rate_bps` bits per second, in picoseconds.
constexpr Time SerializationTime(uint64_t bytes, uint64_t rate_bps) {
  // bytes*8*1e12/rate, computed without overflow for bytes < 2^40.
  return rate_bps == 0
             ? 0
             : static_cast<Time>((static_cast<unsigned __int128>(bytes) * 8 *
                                  1000000000000ull) /
                                 rate_bps);
}

}  // namespace prism

#endif  // PRISM_TYPES_H_
