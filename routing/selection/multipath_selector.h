// MultipathSelector: the one PathSelector implementation behind
// MakePathSelector. It owns the MRC per-path state machine, the min_active
// floor, plane balance and the probe schedule; the policy (rotation, random,
// reps, p2c) only decides which usable path of a plane is used next.
//
// State machine (per path; see docs/congestion.md for the diagram):
//   GOOD --kEcn/kTrimmed--> SKIP        (refused if the floor would break)
//   SKIP --passed over 2^level times by the policy--> GOOD
//        (level: consecutive congestion of that path, see Path::level;
//         one ECN after clean ACKs = one pass = MRC's "one rotation")
//   GOOD --used, while known slow (srtt > kSlowRttFactor x typical)-->
//        SKIP for 2 x srtt / typical passes (at the next NextPath call)
//   GOOD/SKIP --kLost/kTimeout--> ASSUMED_BAD       (probe due after
//                                                    probe_interval, x
//                                                    2^(level-1) <= 16 for a
//                                                    known-slow path)
//   ASSUMED_BAD --kProbeOk--> GOOD (or SKIP: retired again, or slow)
// RTT samples: OnFeedback's rtt (a SACK trigger's echo) feeds the path's
// srtt and the typical RTT; OnAckDelay's only the path's; kProbeOk's
// neither (probes jump the data queue).
//   DENIED: from configuration; ignores all feedback, never used or probed.
// A plane that is down (SetPlaneUp(plane, false)) makes all of its paths
// unusable and unprobed without touching their own states; state() reports
// those paths as kAssumedBad (DENIED stays DENIED). They do not count against
// the floor; ECN/trim/loss/timeout feedback for them is ignored while the
// plane is down (the outage explains it). When the plane comes up, its paths
// resume their own states and its ASSUMED_BAD paths are due for a probe
// immediately.
//
// Floor: "usable" = GOOD on an up plane. An exclusion (GOOD -> SKIP or
// GOOD -> ASSUMED_BAD) that would leave fewer than min_active usable paths is
// handled as follows: a new SKIP is refused (the path stays GOOD); a new
// retirement first releases the oldest SKIP path (on an up plane) back to
// GOOD, and is refused only when no such path exists. Both are counted.
//
// Plane balance: planes are served round-robin, one pick each, skipping
// planes with nothing usable; within a plane the policy chooses. A retired
// path's share is therefore carried by the other paths of its own plane.
//
// Invariants: usable_ == number of GOOD paths on up planes; ready_planes_ ==
// number of up planes with a GOOD or SKIP path; the probe list
// holds exactly the ASSUMED_BAD paths on up planes, sorted by due time; the
// skip list holds exactly the SKIP paths, oldest first; each plane's members
// array holds exactly its GOOD and SKIP paths (paths_[p].slot = index).
// Thread safety: none; one connection's thread. No allocation after Create().
#ifndef PRISM_ROUTING_SELECTION_MULTIPATH_SELECTOR_H_
#define PRISM_ROUTING_SELECTION_MULTIPATH_SELECTOR_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "prism/types.h"
#include "routing/path_selector.h"
#include "transport/base/random.h"

namespace prism::routing {

enum class Policy : uint8_t { kRotation, kRandom, kReps, kP2c };

class MultipathSelector final : public PathSelector {
 public:
  // Clean-EV cache entries kept by "reps".
  static constexpr int kRepsCacheSize = 8;
  // Cap on Path::level: a SKIP lasts at most 2^kMaxSkipLevel passes.
  static constexpr uint8_t kMaxSkipLevel = 5;
  // A kGood with an RTT above this many times the connection's typical RTT
  // (EWMA of all samples) is taken as kEcn: a slow path the fabric did not
  // mark (counted in PathSelectorCounters::slow_rtt).
  static constexpr int kSlowRttFactor = 2;
  // Such a slow sample puts the path in SKIP for max(2^level, rtt / typical
  // RTT) passes, at most this many.
  static constexpr Time kMaxSlowPasses = 64;
  // A path retired again and again (skip level L) is probed every
  // probe_interval x 2^(L-1), at most this many doublings.
  static constexpr int kMaxProbeBackoff = 4;
  // "p2c": one pick in this many skips the comparison (exploration).
  static constexpr uint32_t kP2cExploreEvery = 16;
  // Bytes of reps per-connection state beyond the per-path and per-plane
  // arrays: the ring (8 x uint16), its head and count (2 x uint8), the owed
  // total (uint32), the plane cursor (uint16) and the generator (4 x uint64).
  static constexpr int kPolicyStateBytes = kRepsCacheSize * 2 + 2 + 4 + 2 + 32;

  static absl::StatusOr<std::unique_ptr<MultipathSelector>> Create(
      const PathSelectorConfig& config);

  int NextPath(Time now) override;
  void OnFeedback(PathId path, PathFeedback fb, Time now, Time rtt) override;
  void OnAckDelay(PathId path, Time now, Time delay) override;
  // The single calls in a loop, without virtual dispatch.
  size_t NextPaths(Time now, PathId* out, size_t n) override;
  void OnFeedbackBatch(const PathId* paths, size_t n, PathFeedback fb,
                       Time now) override;
  // Only "reps" keeps clean acks (its clean-EV cache); elsewhere a kGood
  // without an RTT sample changes nothing (see Apply).
  bool CleanAcksMatter() const override { return policy_ == Policy::kReps; }
  int NextProbe(Time now) override;
  Time NextProbeTime() const override;
  void SetPlaneUp(uint16_t plane, bool up, Time now) override;
  PathState state(PathId path) const override;
  uint16_t num_paths() const override { return num_paths_; }
  const char* name() const override;
  PathSelectorCounters counters() const override { return counters_; }
  uint32_t num_usable() const override { return usable_; }
  bool plane_up(uint16_t plane) const override {
    return plane < num_planes_ && planes_[plane].up;
  }

  // Smoothed RTT of `path` (EWMA, gain 1/8); 0 when unknown.
  Time srtt(PathId path) const {
    return path < num_paths_ ? paths_[path].srtt : 0;
  }
  uint16_t min_active() const { return min_active_; }
  // GOOD paths of `plane` that are usable now (0 when the plane is down);
  // an up plane with none left is what the engine reports to the peer.
  uint32_t plane_usable(uint16_t plane) const override {
    return plane < num_planes_ && planes_[plane].up ? planes_[plane].good : 0;
  }
  Policy policy() const { return policy_; }
  // True when `path` is known to be much slower than the typical path.
  bool slow(PathId path) const {
    return path < num_paths_ && typical_rtt_ > 0 &&
           paths_[path].srtt > kSlowRttFactor * typical_rtt_;
  }

 private:
  static constexpr uint16_t kNil = 0xFFFF;

 public:
  struct Path {
    PathState state = PathState::kGood;  // own state, plane status aside
    // Skip backoff level: raised by each ECN/trim that puts the path in
    // SKIP, lowered by each clean ACK. A SKIP lasts 2^level passes (level
    // before the raise), so one ECN is MRC's one rotation.
    uint8_t level = 0;
    uint16_t prev = kNil;  // probe list or skip list links
    uint16_t next = kNil;
    uint16_t slot = kNil;  // index in its plane's members, kNil if none
    // ASSUMED_BAD: when the next probe is due. SKIP: passes left.
    Time due = 0;
    Time srtt = 0;  // smoothed RTT, 0 = unknown
  };
  static constexpr int kPathStateBytes = sizeof(Path);

 private:
  struct List {
    uint16_t head = kNil;
    uint16_t tail = kNil;
  };
  struct Plane {
    uint16_t count = 0;   // paths on this plane
    uint16_t cursor = 0;  // rotation index into members
    uint16_t good = 0;    // GOOD paths
    uint16_t skip = 0;    // SKIP paths
    uint16_t owed = 0;    // reps: EVs that left circulation, to replace
    bool up = true;
    // GOOD and SKIP paths of this plane (dense, unordered after removals):
    // what the policies draw from, so a mostly-excluded plane costs O(1).
    // Reserved to `count` at construction; never reallocates.
    std::vector<uint16_t> members;
  };

  MultipathSelector(const PathSelectorConfig& config, Policy policy);

  uint16_t PlaneOf(uint16_t p) const { return p % num_planes_; }
  static bool Ready(const Plane& pl) { return pl.up && pl.good + pl.skip > 0; }
  uint16_t PathAt(uint16_t plane, uint16_t k) const {
    return static_cast<uint16_t>(plane + k * num_planes_);
  }
  bool CanExclude() const { return usable_ > min_active_; }

  void MemberAdd(uint16_t p);
  void MemberRemove(uint16_t p);
  // Moves path p to state s, keeping counts and lists consistent.
  void SetState(uint16_t p, PathState s, Time due);
  void Retire(uint16_t p, Time now);
  // OnFeedback's body; typical_sample: rtt also feeds typical_rtt_.
  void Apply(PathId path, PathFeedback fb, Time now, Time rtt,
             bool typical_sample);
  // Passes a path with RTT `rtt` sits out: 2 x rtt / typical RTT, at most
  // kMaxSlowPasses. REQUIRES: typical_rtt_ > 0.
  Time SlowPasses(Time rtt) const {
    return std::min<Time>(kSlowRttFactor * rtt / typical_rtt_, kMaxSlowPasses);
  }
  // After a use of p: a GOOD path known to be slow goes to SKIP for
  // SlowPasses(its srtt) (not below the floor).
  void SitOutIfSlow(uint16_t p);
  // NextPaths for a batch of n > num_planes_ picks in the rotation's
  // steady state. REQUIRES: every plane ready, no path in SKIP, no reps
  // state.
  size_t NextPathsByPlane(Time now, PathId* out, size_t n);
  // NextPaths in any state: n NextPath calls (see NextPaths).
  size_t NextPathsGeneral(Time now, PathId* out, size_t n);
  // probe_interval x 2^(level - 1), at most x 2^kMaxProbeBackoff.
  Time ProbeDelay(uint16_t p) const;

  void ListRemove(List& l, uint16_t p);
  void ListAppend(List& l, uint16_t p);
  void ListInsertBefore(List& l, uint16_t before, uint16_t p);
  // Inserts p into the probe list by paths_[p].due, walking from the tail.
  void ProbeInsert(uint16_t p);

  // Next plane (round-robin) with a GOOD or SKIP path on an up plane, or -1.
  int NextPlane();
  // Policy choices within one plane. REQUIRES: plane has good+skip > 0.
  uint16_t RotateInPlane(uint16_t plane);
  uint16_t RandomInPlane(uint16_t plane);
  // A plane with only SKIP paths: p (one of them) is GOOD again and used.
  uint16_t ReleaseSkip(uint16_t p);
  // Uses one of a SKIP path's passes; returns true when p is GOOD.
  bool TakeIfGood(uint16_t p);

  void RepsPush(uint16_t p);
  void RepsOwe(uint16_t p);

  const uint16_t num_paths_;
  const uint16_t num_planes_;
  const Policy policy_;
  const uint16_t min_active_;
  const Time probe_interval_;

  std::vector<Path> paths_;
  std::vector<Plane> planes_;
  List probe_list_;
  List skip_list_;
  uint32_t usable_ = 0;
  uint16_t ready_planes_ = 0;  // up planes with a GOOD or SKIP path
  uint16_t plane_cursor_ = 0;
  Rng rng_;
  std::array<uint16_t, kRepsCacheSize> reps_ring_{};
  uint8_t reps_head_ = 0;  // oldest entry
  uint8_t reps_count_ = 0;
  uint32_t reps_owed_total_ = 0;  // sum of planes_[].owed
  uint32_t p2c_picks_ = 0;
  // The last path returned by NextPath, for SitOutIfSlow at the next call.
  uint16_t sit_out_ = kNil;
  // p2c: EWMA (gain 1/8) of every RTT sample of the connection; a path with
  // no sample of its own compares as this typical RTT (0 before any sample).
  Time typical_rtt_ = 0;
  PathSelectorCounters counters_;
};

}  // namespace prism::routing

#endif  // PRISM_ROUTING_SELECTION_MULTIPATH_SELECTOR_H_
