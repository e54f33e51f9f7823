// Path selection: which path (entropy value) the next packet takes, and what
// per-path feedback does to that choice.
//
// Contract: pure and deterministic (randomness only from the seed in the
// config); owned by one connection. Path p belongs to plane p % num_planes.
// States follow MRC's EV state machine:
//   GOOD        -> usable.
//   SKIP        -> skipped for one rotation after an ECN-marked ACK or a trim.
//   ASSUMED_BAD -> after a loss by timeout without a trim; not used for data
//                  until a probe on it is answered (PROBE_OK).
//   DENIED      -> excluded by configuration; never used or probed.
// A floor (min_active) bounds how many paths may be excluded at once.
#ifndef PRISM_ROUTING_PATH_SELECTOR_H_
#define PRISM_ROUTING_PATH_SELECTOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prism/types.h"

namespace prism::routing {

enum class PathFeedback : uint8_t {
  kGood,     // acknowledged, no ECN
  kEcn,      // acknowledged with ECN CE
  kTrimmed,  // TRIMMED NACK: congestion, not failure
  kLost,     // inferred lost (reordering-tolerant inference), not trimmed
  kTimeout,  // retransmission timeout on this path
  kProbeOk,  // a probe on this path was answered
};

enum class PathState : uint8_t { kGood, kSkip, kAssumedBad, kDenied };

const char* PathStateName(PathState s);

struct PathSelectorConfig {
  uint16_t num_paths = 256;
  uint16_t num_planes = 1;
  // "rotation" (oblivious), "random", "reps", "p2c".
  std::string policy = "rotation";
  // Never exclude (SKIP/ASSUMED_BAD) so many paths that fewer than this remain
  // usable; 0 means max(1, num_paths / 8).
  uint16_t min_active = 0;
  // How often an ASSUMED_BAD path is probed.
  Time probe_interval = 50 * kMicrosecond;
  std::vector<PathId> denied;  // paths excluded by configuration
  uint64_t seed = 1;
};

// Event counts kept by a selector (for the simulator's summaries and tests).
struct PathSelectorCounters {
  uint64_t picks = 0;           // NextPath calls that returned a path
  uint64_t no_path = 0;         // NextPath calls that returned -1
  uint64_t skips = 0;           // GOOD -> SKIP transitions
  uint64_t retirements = 0;     // -> ASSUMED_BAD transitions
  uint64_t restores = 0;        // ASSUMED_BAD -> GOOD (probe answered)
  uint64_t floor_refusals = 0;  // exclusions refused to honour min_active
  uint64_t floor_releases = 0;  // SKIP paths released early: for the floor,
                                // or on a plane with no GOOD path left
  uint64_t probes_sent = 0;     // NextProbe calls that returned a path
  uint64_t recycled = 0;        // "reps": picks served from the clean-EV cache
  uint64_t bad_input = 0;       // out-of-range path or plane arguments
  uint64_t plane_down_feedback = 0;  // ECN/trim/loss on a down plane, ignored
  uint64_t slow_rtt = 0;    // clean ACKs taken as ECN for their RTT (additive)
  uint64_t slow_skips = 0;  // known-slow paths put in SKIP after a use
};

class PathSelector {
 public:
  virtual ~PathSelector() = default;
  // Path for the next data packet; -1 if no path is usable.
  virtual int NextPath(Time now) = 0;
  // Feedback about one packet sent on `path`. `rtt` is 0 when unknown.
  virtual void OnFeedback(PathId path, PathFeedback fb, Time now, Time rtt) = 0;
  // A path whose probe is due at `now`, or -1. Marks that probe as sent.
  virtual int NextProbe(Time now) = 0;
  // Earliest time a probe becomes due; kTimeInfinite if none.
  virtual Time NextProbeTime() const = 0;
  // The local NIC port / remote port for `plane` went down or came back.
  virtual void SetPlaneUp(uint16_t plane, bool up, Time now) = 0;
  virtual PathState state(PathId path) const = 0;
  virtual uint16_t num_paths() const = 0;
  virtual const char* name() const = 0;
  // Additive: a clean ACK that is not its SACK's trigger (so carries no
  // echoed timestamp), for a packet sent once on `path`, `delay` after it
  // was sent (its RTT plus the receiver's SACK delay: an upper bound). The
  // engine reports such an ACK here instead of as a plain kGood when the
  // delay is well above the connection's RTT: a slow path's packets are
  // rarely a SACK's trigger, and this is how their RTT is seen at all. The
  // sample updates the path's own RTT, not the connection's typical RTT
  // (only slow ones are reported). Default: a plain kGood.
  virtual void OnAckDelay(PathId path, Time now, Time /*delay*/) {
    OnFeedback(path, PathFeedback::kGood, now, 0);
  }
  // Additive (issue 4): counters, usable-path count (GOOD on an up plane)
  // and plane status. Defaults keep older implementations compiling.
  virtual PathSelectorCounters counters() const { return {}; }
  virtual uint32_t num_usable() const { return 0; }
  virtual bool plane_up(uint16_t /*plane*/) const { return true; }
  // Usable (GOOD) paths left on `plane`; 0 on an up plane means every path
  // of it failed: the engine may report the plane down to the peer.
  virtual uint32_t plane_usable(uint16_t /*plane*/) const { return 0; }

  // Additive batch calls (the engine's per-burst hot path). Each is exactly
  // the same sequence of single calls, so results, state and counters are
  // identical; implementations override them to save the per-call dispatch.
  //
  // n NextPath(now) calls in a row: fills out[0, r) and returns r; r < n
  // means the (r+1)-th call returned -1 (and was made; no further call).
  virtual size_t NextPaths(Time now, PathId* out, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const int p = NextPath(now);
      if (p < 0) return i;
      out[i] = static_cast<PathId>(p);
    }
    return n;
  }
  // OnFeedback(paths[i], fb, now, 0) for i = 0 .. n-1, in order (no RTT
  // sample: the acks of a SACK other than its trigger).
  virtual void OnFeedbackBatch(const PathId* paths, size_t n, PathFeedback fb,
                               Time now) {
    for (size_t i = 0; i < n; ++i) OnFeedback(paths[i], fb, now, 0);
  }
  // Additive: false when OnFeedback(path, kGood, now, 0) for a path below
  // num_paths() never changes anything (state, counters, later choices), so
  // the engine may leave such clean acks out. Fixed for the selector's life.
  virtual bool CleanAcksMatter() const { return true; }
};

absl::StatusOr<std::unique_ptr<PathSelector>> MakePathSelector(
    const PathSelectorConfig& config);

}  // namespace prism::routing

#endif  // PRISM_ROUTING_PATH_SELECTOR_H_
