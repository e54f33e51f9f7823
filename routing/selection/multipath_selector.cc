#include "routing/selection/multipath_selector.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace prism::routing {

const char* PathStateName(PathState s) {
  switch (s) {
    case PathState::kGood:
      return "GOOD";
    case PathState::kSkip:
      return "SKIP";
    case PathState::kAssumedBad:
      return "ASSUMED_BAD";
    case PathState::kDenied:
      return "DENIED";
  }
  return "UNKNOWN";
}

absl::StatusOr<std::unique_ptr<PathSelector>> MakePathSelector(
    const PathSelectorConfig& config) {
  auto s = MultipathSelector::Create(config);
  if (!s.ok()) return s.status();
  return std::unique_ptr<PathSelector>(std::move(*s));
}

absl::StatusOr<std::unique_ptr<MultipathSelector>> MultipathSelector::Create(
    const PathSelectorConfig& config) {
  Policy policy;
  if (config.policy == "rotation") {
    policy = Policy::kRotation;
  } else if (config.policy == "random") {
    policy = Policy::kRandom;
  } else if (config.policy == "reps") {
    policy = Policy::kReps;
  } else if (config.policy == "p2c") {
    policy = Policy::kP2c;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("path selector: unknown policy '", config.policy,
                     "' (want rotation, random, reps or p2c)"));
  }
  // num_paths is a uint16_t, so at most 65535; id 65535 is never a path.
  if (config.num_paths == 0) {
    return absl::InvalidArgumentError("path selector: num_paths must be > 0");
  }
  if (config.num_planes == 0 || config.num_planes > config.num_paths) {
    return absl::InvalidArgumentError(absl::StrCat(
        "path selector: num_planes must be in [1, num_paths=", config.num_paths,
        "], got ", config.num_planes));
  }
  if (config.min_active > config.num_paths) {
    return absl::InvalidArgumentError(
        absl::StrCat("path selector: min_active ", config.min_active,
                     " exceeds num_paths ", config.num_paths));
  }
  if (config.probe_interval <= 0) {
    return absl::InvalidArgumentError(
        "path selector: probe_interval must be > 0");
  }
  std::vector<bool> denied(config.num_paths, false);
  for (PathId d : config.denied) {
    if (d >= config.num_paths) {
      return absl::InvalidArgumentError(
          absl::StrCat("path selector: denied path ", d, " out of range [0, ",
                       config.num_paths, ")"));
    }
    denied[d] = true;
  }
  if (std::find(denied.begin(), denied.end(), false) == denied.end()) {
    return absl::InvalidArgumentError("path selector: every path is denied");
  }
  return std::unique_ptr<MultipathSelector>(
      new MultipathSelector(config, policy));
}

static_assert(MultipathSelector::kPathStateBytes == 24,
              "per-path state size is documented in docs/congestion.md");

MultipathSelector::MultipathSelector(const PathSelectorConfig& config,
                                     Policy policy)
    : num_paths_(config.num_paths),
      num_planes_(config.num_planes),
      policy_(policy),
      min_active_(config.min_active != 0
                      ? config.min_active
                      : std::max<uint16_t>(1, config.num_paths / 8)),
      probe_interval_(config.probe_interval),
      paths_(config.num_paths),
      planes_(config.num_planes),
      rng_(config.seed) {
  for (uint16_t p = 0; p < num_paths_; ++p) ++planes_[PlaneOf(p)].count;
  for (Plane& pl : planes_) pl.members.reserve(pl.count);
  for (uint16_t p = 0; p < num_paths_; ++p) {
    Plane& pl = planes_[PlaneOf(p)];
    ++pl.good;
    MemberAdd(p);
  }
  usable_ = num_paths_;
  for (const Plane& pl : planes_) ready_planes_ += Ready(pl) ? 1 : 0;
  for (PathId d : config.denied) {
    if (paths_[d].state != PathState::kDenied)
      SetState(d, PathState::kDenied, 0);
  }
}

const char* MultipathSelector::name() const {
  switch (policy_) {
    case Policy::kRotation:
      return "rotation";
    case Policy::kRandom:
      return "random";
    case Policy::kReps:
      return "reps";
    case Policy::kP2c:
      return "p2c";
  }
  return "unknown";
}

// ---- intrusive lists -------------------------------------------------------

void MultipathSelector::ListRemove(List& l, uint16_t p) {
  Path& x = paths_[p];
  if (x.prev != kNil) {
    paths_[x.prev].next = x.next;
  } else {
    l.head = x.next;
  }
  if (x.next != kNil) {
    paths_[x.next].prev = x.prev;
  } else {
    l.tail = x.prev;
  }
  x.prev = x.next = kNil;
}

void MultipathSelector::ListAppend(List& l, uint16_t p) {
  Path& x = paths_[p];
  x.next = kNil;
  x.prev = l.tail;
  if (l.tail != kNil) {
    paths_[l.tail].next = p;
  } else {
    l.head = p;
  }
  l.tail = p;
}

void MultipathSelector::ListInsertBefore(List& l, uint16_t before, uint16_t p) {
  if (before == kNil) {
    ListAppend(l, p);
    return;
  }
  Path& x = paths_[p];
  Path& b = paths_[before];
  x.next = before;
  x.prev = b.prev;
  if (b.prev != kNil) {
    paths_[b.prev].next = p;
  } else {
    l.head = p;
  }
  b.prev = p;
}

void MultipathSelector::ProbeInsert(uint16_t p) {
  const Time due = paths_[p].due;
  // Common case: due = now + interval is the latest, so this is O(1).
  uint16_t at = probe_list_.tail;
  while (at != kNil && paths_[at].due > due) at = paths_[at].prev;
  ListInsertBefore(probe_list_, at == kNil ? probe_list_.head : paths_[at].next,
                   p);
}

// ---- state changes ---------------------------------------------------------

void MultipathSelector::MemberAdd(uint16_t p) {
  std::vector<uint16_t>& m = planes_[PlaneOf(p)].members;
  paths_[p].slot = static_cast<uint16_t>(m.size());
  m.push_back(p);  // within the reserved capacity
}

void MultipathSelector::MemberRemove(uint16_t p) {
  Plane& pl = planes_[PlaneOf(p)];
  const uint16_t i = paths_[p].slot;
  const uint16_t last = pl.members.back();
  pl.members[i] = last;
  paths_[last].slot = i;
  pl.members.pop_back();
  paths_[p].slot = kNil;
  if (pl.cursor >= pl.members.size()) pl.cursor = 0;
}

void MultipathSelector::SetState(uint16_t p, PathState s, Time due) {
  Path& x = paths_[p];
  Plane& pl = planes_[PlaneOf(p)];
  const bool was_ready = Ready(pl);
  const bool was_member =
      x.state == PathState::kGood || x.state == PathState::kSkip;
  const bool is_member = s == PathState::kGood || s == PathState::kSkip;
  if (was_member && !is_member) MemberRemove(p);
  if (!was_member && is_member) MemberAdd(p);
  switch (x.state) {  // leave the old state
    case PathState::kGood:
      --pl.good;
      if (pl.up) --usable_;
      break;
    case PathState::kSkip:
      --pl.skip;
      ListRemove(skip_list_, p);
      break;
    case PathState::kAssumedBad:
      if (pl.up) ListRemove(probe_list_, p);
      break;
    case PathState::kDenied:
      break;
  }
  x.state = s;
  switch (s) {  // enter the new one
    case PathState::kGood:
      ++pl.good;
      if (pl.up) ++usable_;
      break;
    case PathState::kSkip:
      ++pl.skip;
      ListAppend(skip_list_, p);
      x.due = due;  // passes left
      break;
    case PathState::kAssumedBad:
      x.due = due;
      if (pl.up) ProbeInsert(p);
      break;
    case PathState::kDenied:
      break;
  }
  ready_planes_ = static_cast<uint16_t>(ready_planes_ + Ready(pl) - was_ready);
}

void MultipathSelector::Retire(uint16_t p, Time now) {
  const bool counted =
      paths_[p].state == PathState::kGood && planes_[PlaneOf(p)].up;
  if (counted && !CanExclude()) {
    // Release the oldest SKIP path on an up plane, if any, to make room.
    uint16_t s = skip_list_.head;
    while (s != kNil && !planes_[PlaneOf(s)].up) s = paths_[s].next;
    if (s == kNil) {
      ++counters_.floor_refusals;
      return;
    }
    SetState(s, PathState::kGood, 0);
    ++counters_.floor_releases;
  }
  Path& x = paths_[p];
  if (x.level < kMaxSkipLevel) ++x.level;
  SetState(p, PathState::kAssumedBad, now + ProbeDelay(p));
  ++counters_.retirements;
}

void MultipathSelector::OnFeedback(PathId path, PathFeedback fb, Time now,
                                   Time rtt) {
  Apply(path, fb, now, rtt, /*typical_sample=*/true);
}

void MultipathSelector::OnAckDelay(PathId path, Time now, Time delay) {
  // The path's own sample, but not one for the typical RTT: the engine
  // reports only delays that look slow, so they would pull it up.
  Apply(path, PathFeedback::kGood, now, delay, /*typical_sample=*/false);
}

void MultipathSelector::Apply(PathId path, PathFeedback fb, Time now, Time rtt,
                              bool typical_sample) {
  if (path >= num_paths_) {
    ++counters_.bad_input;
    return;
  }
  Path& x = paths_[path];
  if (x.state == PathState::kDenied) return;
  if (!planes_[PlaneOf(path)].up && fb != PathFeedback::kGood &&
      fb != PathFeedback::kProbeOk) {
    // Its plane is down: congestion or loss on it is explained by the outage
    // (late outcomes of packets sent before it), not by the path itself.
    ++counters_.plane_down_feedback;
    return;
  }
  Time slow_passes = 0;  // a slow-RTT sample: passes it is worth
  // A probe's RTT is not this path's data RTT: probes travel at control
  // priority, ahead of the data queue that makes a path slow, so a slow
  // path's probe comes back as fast as any. Only data samples count.
  if (rtt > 0 && fb != PathFeedback::kProbeOk) {
    // A clean ACK far slower than the connection's typical RTT is this
    // path's congestion sign where the fabric did not mark (a slow or
    // degraded link, a deep queue below the ECN threshold): ECN for the
    // state machine. Judged against the typical RTT before this sample.
    const bool slow_sample =
        (fb == PathFeedback::kGood || fb == PathFeedback::kEcn) &&
        typical_rtt_ > 0 && rtt > kSlowRttFactor * typical_rtt_;
    if (slow_sample) {
      if (fb == PathFeedback::kGood) {
        fb = PathFeedback::kEcn;
        ++counters_.slow_rtt;
      }
      // A path k times slower than typical (marked or not) sits out about
      // k passes, so its use falls with its RTT (as a clean-EV cache's
      // does on its own).
      slow_passes = SlowPasses(rtt);
    }
    x.srtt = x.srtt == 0 ? rtt : x.srtt + (rtt - x.srtt) / 8;
    // The typical RTT is what the connection's ordinary paths show: a
    // sample above kSlowRttFactor x typical counts as that much, so a few
    // slow paths (a degraded link is sampled often: its late packets arrive
    // out of order and trigger SACKs at once) cannot drag the reference up
    // to their own RTT and hide themselves. A real rise on every path still
    // moves it, by up to 1/8 per sample.
    if (typical_sample) {
      const Time capped = typical_rtt_ == 0
                              ? rtt
                              : std::min(rtt, kSlowRttFactor * typical_rtt_);
      typical_rtt_ =
          typical_rtt_ == 0 ? rtt : typical_rtt_ + (capped - typical_rtt_) / 8;
    }
  }
  if (policy_ == Policy::kReps && fb != PathFeedback::kProbeOk) {
    // A clean ACK on a GOOD path puts its EV back in circulation; any other
    // data outcome takes it out, and its plane is owed a replacement.
    if (x.state == PathState::kGood && fb == PathFeedback::kGood) {
      RepsPush(path);
    } else {
      RepsOwe(path);
    }
  }
  switch (x.state) {
    case PathState::kGood:
      if (fb == PathFeedback::kEcn || fb == PathFeedback::kTrimmed) {
        if (planes_[PlaneOf(path)].up && !CanExclude()) {
          ++counters_.floor_refusals;
          return;
        }
        // Backoff: 2^level passes, then one more level for next time.
        SetState(path, PathState::kSkip,
                 std::max(Time{1} << x.level, slow_passes));
        if (x.level < kMaxSkipLevel) ++x.level;
        ++counters_.skips;
      } else if (fb == PathFeedback::kLost || fb == PathFeedback::kTimeout) {
        Retire(path, now);
      } else if (fb == PathFeedback::kGood && rtt > 0 && x.level > 0) {
        --x.level;  // a clean ACK with a normal RTT sample
      }
      return;
    case PathState::kSkip:
      if (fb == PathFeedback::kLost || fb == PathFeedback::kTimeout) {
        Retire(path, now);  // not counted as usable: never refused
      } else if (fb == PathFeedback::kGood && rtt > 0 && x.level > 0) {
        --x.level;  // (the current SKIP runs its course)
      }
      return;
    case PathState::kAssumedBad:
      if (fb == PathFeedback::kProbeOk) {
        // Back in service; a path retired again and again (level >= 2)
        // first sits out its backoff as SKIP.
        // A path known to be slow (its own srtt; the probe itself travels
        // at control priority and says nothing about its queue) also sits
        // out rtt / typical passes, as a slow sample would have it.
        Time passes = x.level >= 2 ? Time{1} << (x.level - 1) : 0;
        if (slow(path)) {
          passes = std::max(passes, SlowPasses(x.srtt));
        }
        if (passes > 0) {
          SetState(path, PathState::kSkip, passes);
        } else {
          SetState(path, PathState::kGood, 0);
        }
        ++counters_.restores;
      }
      return;
    case PathState::kDenied:
      return;
  }
}

void MultipathSelector::SetPlaneUp(uint16_t plane, bool up, Time now) {
  if (plane >= num_planes_) {
    ++counters_.bad_input;
    return;
  }
  Plane& pl = planes_[plane];
  if (pl.up == up) return;
  for (uint16_t k = 0; k < pl.count; ++k) {  // probe list membership
    const uint16_t p = PathAt(plane, k);
    if (paths_[p].state != PathState::kAssumedBad) continue;
    if (up) {
      paths_[p].due = now;  // probe at once
    } else {
      ListRemove(probe_list_, p);
    }
  }
  if (pl.good + pl.skip > 0) {
    ready_planes_ =
        static_cast<uint16_t>(up ? ready_planes_ + 1 : ready_planes_ - 1);
  }
  pl.up = up;
  if (!up) {
    reps_owed_total_ -= pl.owed;
    pl.owed = 0;
  }
  if (up) {
    usable_ += pl.good;
    // All due now: they go, in path order, before the first probe due later
    // (one walk for the whole plane).
    uint16_t at = probe_list_.head;
    while (at != kNil && paths_[at].due <= now) at = paths_[at].next;
    for (uint16_t k = 0; k < pl.count; ++k) {
      const uint16_t p = PathAt(plane, k);
      if (paths_[p].state == PathState::kAssumedBad) {
        ListInsertBefore(probe_list_, at, p);
      }
    }
  } else {
    usable_ -= pl.good;
  }
}

PathState MultipathSelector::state(PathId path) const {
  if (path >= num_paths_) return PathState::kDenied;
  const PathState s = paths_[path].state;
  if (s != PathState::kDenied && !planes_[PlaneOf(path)].up) {
    return PathState::kAssumedBad;
  }
  return s;
}

// ---- probing ---------------------------------------------------------------

Time MultipathSelector::ProbeDelay(uint16_t p) const {
  // Only a path known to be slow backs off: its probe is answered at once
  // (control priority) and the next data on it is late again. A path lost
  // to random loss or a failure is probed at the configured interval (a
  // backoff for every retired path cost random-loss 1% 0.918 -> 0.881).
  if (!slow(p)) return probe_interval_;
  const uint8_t level = paths_[p].level;
  const int shift = std::min<int>(level > 0 ? level - 1 : 0, kMaxProbeBackoff);
  return probe_interval_ << shift;
}

int MultipathSelector::NextProbe(Time now) {
  const uint16_t p = probe_list_.head;
  if (p == kNil || paths_[p].due > now) return -1;
  ListRemove(probe_list_, p);
  paths_[p].due = now + ProbeDelay(p);
  ProbeInsert(p);
  ++counters_.probes_sent;
  return p;
}

Time MultipathSelector::NextProbeTime() const {
  return probe_list_.head == kNil ? kTimeInfinite
                                  : paths_[probe_list_.head].due;
}

// ---- choosing --------------------------------------------------------------

bool MultipathSelector::TakeIfGood(uint16_t p) {
  Path& x = paths_[p];
  if (x.state == PathState::kGood) return true;
  // SKIP: passed over this time; GOOD again after its last pass.
  if (x.state == PathState::kSkip && --x.due <= 0) {
    SetState(p, PathState::kGood, 0);
  }
  return false;
}

int MultipathSelector::NextPlane() {
  // reps: planes whose EVs left circulation get the explorations first.
  while (reps_owed_total_ > 0) {
    for (uint16_t i = 0; i < num_planes_; ++i) {
      const uint16_t c =
          static_cast<uint16_t>((plane_cursor_ + i) % num_planes_);
      Plane& pl = planes_[c];
      if (pl.owed == 0) continue;
      if (pl.up && pl.good + pl.skip > 0) {
        --pl.owed;
        --reps_owed_total_;
        return c;
      }
      reps_owed_total_ -= pl.owed;  // nothing to send there
      pl.owed = 0;
    }
  }
  for (uint16_t i = 0; i < num_planes_; ++i) {
    const uint16_t c = plane_cursor_;
    plane_cursor_ = static_cast<uint16_t>(c + 1 == num_planes_ ? 0 : c + 1);
    const Plane& pl = planes_[c];
    if (pl.up && pl.good + pl.skip > 0) return c;
  }
  return -1;
}

uint16_t MultipathSelector::ReleaseSkip(uint16_t p) {
  SetState(p, PathState::kGood, 0);
  ++counters_.floor_releases;
  return p;
}

uint16_t MultipathSelector::RotateInPlane(uint16_t plane) {
  Plane& pl = planes_[plane];
  const uint32_t n = static_cast<uint32_t>(pl.members.size());
  if (pl.good == 0) {  // only SKIP paths: the next one serves at once
    const uint16_t k = pl.cursor;
    pl.cursor = static_cast<uint16_t>(k + 1u >= n ? 0 : k + 1);
    return ReleaseSkip(pl.members[k]);
  }
  // A GOOD path exists: at most one pass (SKIPs on the way use a pass).
  for (uint32_t i = 0; i < n; ++i) {
    const uint16_t k = pl.cursor;
    pl.cursor = static_cast<uint16_t>(k + 1u >= n ? 0 : k + 1);
    const uint16_t p = pl.members[k];
    if (TakeIfGood(p)) return p;
  }
  return pl.members[0];  // unreachable given the REQUIRES
}

uint16_t MultipathSelector::RandomInPlane(uint16_t plane) {
  const Plane& pl = planes_[plane];
  const uint32_t n = static_cast<uint32_t>(pl.members.size());
  if (pl.good == 0) {  // only SKIP paths: a random one serves at once
    return ReleaseSkip(pl.members[rng_.Uniform(n)]);
  }
  // Every member is GOOD or SKIP; a SKIP draw uses a pass and is redrawn.
  for (int tries = 0; tries < 4; ++tries) {
    const uint16_t p = pl.members[rng_.Uniform(n)];
    if (TakeIfGood(p)) return p;
  }
  // Mostly SKIP: scan from a random start (one pass finds a GOOD path).
  uint32_t k = static_cast<uint32_t>(rng_.Uniform(n));
  for (uint32_t i = 0; i < n; ++i) {
    const uint16_t p = pl.members[k];
    if (TakeIfGood(p)) return p;
    k = k + 1 == n ? 0 : k + 1;
  }
  return pl.members[0];  // unreachable given the REQUIRES
}

void MultipathSelector::RepsOwe(uint16_t p) {
  Plane& pl = planes_[PlaneOf(p)];
  if (pl.owed < pl.count) {
    ++pl.owed;
    ++reps_owed_total_;
  }
}

void MultipathSelector::RepsPush(uint16_t p) {
  if (reps_count_ == kRepsCacheSize) {  // full: overwrite the oldest
    RepsOwe(reps_ring_[reps_head_]);
    reps_ring_[reps_head_] = p;
    reps_head_ = static_cast<uint8_t>((reps_head_ + 1) % kRepsCacheSize);
    return;
  }
  reps_ring_[(reps_head_ + reps_count_) % kRepsCacheSize] = p;
  ++reps_count_;
}

int MultipathSelector::NextPath(Time /*now*/) {
  if (sit_out_ != kNil) {
    SitOutIfSlow(sit_out_);
    sit_out_ = kNil;
  }
  if (policy_ == Policy::kReps) {
    while (reps_count_ > 0) {
      const uint16_t p = reps_ring_[reps_head_];
      reps_head_ = static_cast<uint8_t>((reps_head_ + 1) % kRepsCacheSize);
      --reps_count_;
      if (planes_[PlaneOf(p)].up && TakeIfGood(p)) {
        ++counters_.picks;
        ++counters_.recycled;
        return p;
      }
      RepsOwe(p);  // excluded since it was cached
    }
  }
  const int plane = NextPlane();
  if (plane < 0) {
    ++counters_.no_path;
    return -1;
  }
  const uint16_t pl = static_cast<uint16_t>(plane);
  uint16_t p;
  switch (policy_) {
    case Policy::kRotation:
      p = RotateInPlane(pl);
      break;
    case Policy::kP2c: {
      // First choice: the rotation's next path (an even spread, as
      // rotation's); second: a random one, taken only when the first is
      // over kSlowRttFactor x slower. (Two random candidates and "the lower
      // RTT wins" herded the connections of the 128-host permutation onto
      // whichever paths' sparse samples were lowest: 0.878 of ideal against
      // rotation's 0.977; this form: 0.977.)
      const uint16_t a = RotateInPlane(pl);
      // One pick in kP2cExploreEvery (drawn, so not at a fixed phase of the
      // rotation) takes the first choice as is: a path that lost
      // comparisons gets its RTT sampled again.
      ++p2c_picks_;
      if (rng_.Uniform(kP2cExploreEvery) == 0) {
        p = a;
        break;
      }
      uint16_t b = RandomInPlane(pl);
      // Two distinct candidates when the plane has them (bounded redraws).
      for (int i = 0; i < 2 && b == a && planes_[pl].good > 1; ++i) {
        b = RandomInPlane(pl);
      }
      // A path with no RTT sample yet compares as the connection's typical
      // RTT: it beats a known-slow path and loses to a known-fast one. (When
      // paths outnumber the packets per RTT, as with 256 paths, "unknown =
      // best" made p2c mostly blind exploration.)
      const Time ra = paths_[a].srtt != 0 ? paths_[a].srtt : typical_rtt_;
      const Time rb = paths_[b].srtt != 0 ? paths_[b].srtt : typical_rtt_;
      p = kSlowRttFactor * rb < ra ? b : a;
      break;
    }
    case Policy::kReps:
      // An exploration (the clean-EV cache was empty): the plane's next
      // path in rotation order, an even sweep (random explorations left
      // the 128-host permutation at 0.939 of ideal; this: 0.968).
      p = RotateInPlane(pl);
      break;
    case Policy::kRandom:
    default:
      p = RandomInPlane(pl);
      break;
  }
  ++counters_.picks;
  // Applied at the next pick, so a returned path is always GOOD.
  sit_out_ = p;
  return p;
}

void MultipathSelector::SitOutIfSlow(uint16_t p) {
  // A GOOD path known to be slow (its own srtt over kSlowRttFactor x the
  // typical RTT) sits out 2 x srtt / typical passes after each use, as
  // after a slow sample: most of its acks carry no RTT sample (only a
  // SACK's trigger does), so without this it would be used on every pass
  // between two samples. Not below the floor.
  Path& x = paths_[p];
  if (x.state != PathState::kGood || !slow(p) || !CanExclude()) return;
  SetState(p, PathState::kSkip, SlowPasses(x.srtt));
  ++counters_.slow_skips;
}

// Each pick is the next plane's cursor member, and a plane's cursor moves
// only on its own picks: the picks are made plane by plane (the t-th plane
// from the cursor takes picks t, t + np, ...: the same paths as in pick
// order), then checked in pick order for the first whose previous pick must
// sit out (SitOutIfSlow's test; its inputs do not change here). The picks
// from there on are taken back (each plane's cursor moved back over those
// of its picks: a cursor below `good` steps by one modulo `good`), that path
// sits out, and NextPaths makes them. Out of line: NextPaths' smaller
// batches (the simulator's) do not pay for its frame.
[[gnu::noinline]] size_t MultipathSelector::NextPathsByPlane(Time now,
                                                             PathId* out,
                                                             size_t n) {
  const Time slow_above =
      typical_rtt_ > 0 ? kSlowRttFactor * typical_rtt_ : kTimeInfinite;
  const uint16_t np = num_planes_;
  Plane* const planes = planes_.data();
  const uint16_t cursor = plane_cursor_;
  uint16_t c = cursor;
  for (size_t t = 0; t < np; ++t) {
    Plane& pl = planes[c];
    const uint16_t g = pl.good;
    const uint16_t* const m = pl.members.data();
    uint16_t k = pl.cursor;  // < g: members are the g GOOD paths
    // The plane's picks, in stretches up to the end of its members (where
    // the cursor wraps to 0).
    size_t left = (n - t + np - 1) / np;
    size_t j = t;
    while (left > 0) {
      const size_t run = std::min<size_t>(left, g - k);
      const uint16_t* const from = m + k;
      for (size_t r = 0; r < run; ++r, j += np) out[j] = from[r];
      left -= run;
      k = static_cast<uint16_t>(k + run == g ? 0 : k + run);
    }
    pl.cursor = k;
    c = static_cast<uint16_t>(c + 1 == np ? 0 : c + 1);
  }
  const Path* const paths = paths_.data();
  const auto sits_out = [&](uint16_t p) {
    return paths[p].srtt > slow_above && paths[p].state == PathState::kGood;
  };
  size_t stop = n;
  if (slow_above != kTimeInfinite && CanExclude()) {
    if (sit_out_ != kNil && sits_out(sit_out_)) {
      stop = 0;
    } else {
      for (size_t j = 1; j < n; ++j) {
        if (sits_out(out[j - 1])) {
          stop = j;
          break;
        }
      }
    }
  }
  if (stop < n) {
    c = cursor;
    for (size_t t = 0; t < np; ++t) {
      Plane& pl = planes[c];
      const size_t made = (n - t + np - 1) / np;
      const size_t kept = stop > t ? (stop - t + np - 1) / np : 0;
      const size_t back = (made - kept) % pl.good;
      pl.cursor = static_cast<uint16_t>((pl.cursor + pl.good - back) % pl.good);
      c = static_cast<uint16_t>(c + 1 == np ? 0 : c + 1);
    }
  }
  counters_.picks += stop;
  plane_cursor_ = static_cast<uint16_t>((cursor + stop) % np);
  if (stop > 0) sit_out_ = out[stop - 1];
  if (stop == n) return n;
  // NextPath's first step for pick `stop`; with nothing left to sit out,
  // NextPaths cannot stop before that pick again.
  SitOutIfSlow(sit_out_);
  sit_out_ = kNil;
  return stop + MultipathSelector::NextPaths(now, out + stop, n - stop);
}

// The rotation's steady state (every plane has a path and no path anywhere
// is in SKIP: the skip list holds them all), the engine's every batch: each
// pick is the next plane's cursor member. More picks than planes: plane by
// plane (NextPathsByPlane). Otherwise in turn, the cursors and the last pick
// in locals (`out` may alias uint16_t members, which would force reloads),
// until a pick must sit out (NextPathsGeneral does that, and everything
// after it). Anything else is NextPathsGeneral's. Small: the simulator's
// one- and two-pick batches pay for no more than this.
size_t MultipathSelector::NextPaths(Time now, PathId* out, size_t n) {
  const uint16_t np = num_planes_;
  if (policy_ != Policy::kRotation || reps_owed_total_ != 0 ||
      ready_planes_ != np || skip_list_.head != kNil) {
    return NextPathsGeneral(now, out, n);
  }
  if (n > np) return NextPathsByPlane(now, out, n);
  const Time slow_above =
      typical_rtt_ > 0 ? kSlowRttFactor * typical_rtt_ : kTimeInfinite;
  const Path* const paths = paths_.data();
  Plane* const planes = planes_.data();
  uint16_t sit = sit_out_;
  uint16_t cursor = plane_cursor_;
  size_t i = 0;
  while (i < n) {
    if (sit != kNil) {
      const Path& x = paths[sit];
      if (x.srtt > slow_above && x.state == PathState::kGood && CanExclude()) {
        break;
      }
      sit = kNil;
    }
    const uint16_t c = cursor;
    cursor = static_cast<uint16_t>(c + 1 == np ? 0 : c + 1);
    Plane& pl = planes[c];
    const uint16_t k = pl.cursor;
    pl.cursor = static_cast<uint16_t>(k + 1u >= pl.good ? 0 : k + 1);
    const uint16_t p = pl.members[k];
    sit = p;
    out[i++] = p;
  }
  counters_.picks += i;
  sit_out_ = sit;
  plane_cursor_ = cursor;
  if (i == n) return n;
  return i + NextPathsGeneral(now, out + i, n - i);
}

// flatten: NextPath and its helpers are inlined into the loop (the batch's
// point); the behaviour is that of the single calls.
[[gnu::flatten, gnu::noinline]] size_t MultipathSelector::NextPathsGeneral(
    Time now, PathId* out, size_t n) {
  if (policy_ == Policy::kRotation && reps_owed_total_ == 0) {
    // NextPath's rotation case with its invariants read once: the slow
    // threshold (typical_rtt_ does not change while choosing; slow() folded
    // into it), the cursors and the last pick in locals (`out` may alias
    // uint16_t members, which would force reloads), and no reps state
    // (reps_owed_total_ stays 0 outside "reps"). Per pick: the previous
    // pick's SitOutIfSlow, NextPlane, RotateInPlane.
    const Time slow_above =
        typical_rtt_ > 0 ? kSlowRttFactor * typical_rtt_ : kTimeInfinite;
    const uint16_t np = num_planes_;
    Path* const paths = paths_.data();
    Plane* const planes = planes_.data();
    uint16_t sit = sit_out_;
    uint16_t cursor = plane_cursor_;
    // Whether a plane has a GOOD or SKIP path on an up plane cannot change
    // while choosing (the state changes here are GOOD <-> SKIP): when every
    // plane has one, NextPlane is the cursor itself.
    const bool all_planes = ready_planes_ == np;
    size_t i = 0;
    for (; i < n; ++i) {
      if (sit != kNil) {
        Path& x = paths[sit];
        if (x.srtt > slow_above && x.state == PathState::kGood &&
            CanExclude()) {
          SetState(sit, PathState::kSkip, SlowPasses(x.srtt));
          ++counters_.slow_skips;
        }
        sit = kNil;
      }
      // NextPlane: round-robin, planes with a GOOD or SKIP path.
      int plane = -1;
      if (all_planes) {
        plane = cursor;
        cursor = static_cast<uint16_t>(cursor + 1 == np ? 0 : cursor + 1);
      }
      for (uint16_t j = 0; plane < 0 && j < np; ++j) {
        const uint16_t c = cursor;
        cursor = static_cast<uint16_t>(c + 1 == np ? 0 : c + 1);
        const Plane& q = planes[c];
        if (q.up && q.good + q.skip > 0) {
          plane = c;
          break;
        }
      }
      if (plane < 0) {
        ++counters_.no_path;
        break;
      }
      Plane& pl = planes[plane];
      uint16_t p;
      if (pl.skip == 0) {
        // Every member is GOOD (members = GOOD + SKIP paths): the one at
        // the cursor, RotateInPlane's first TakeIfGood.
        const uint16_t k = pl.cursor;
        pl.cursor = static_cast<uint16_t>(k + 1u >= pl.good ? 0 : k + 1);
        p = pl.members[k];
      } else {
        p = RotateInPlane(static_cast<uint16_t>(plane));
      }
      sit = p;
      out[i] = p;
    }
    counters_.picks += i;
    sit_out_ = sit;
    plane_cursor_ = cursor;
    return i;
  }
  for (size_t i = 0; i < n; ++i) {
    const int p = MultipathSelector::NextPath(now);
    if (p < 0) return i;
    out[i] = static_cast<PathId>(p);
  }
  return n;
}

[[gnu::flatten]] void MultipathSelector::OnFeedbackBatch(const PathId* paths,
                                                         size_t n,
                                                         PathFeedback fb,
                                                         Time now) {
  if (fb == PathFeedback::kGood && policy_ != Policy::kReps) {
    // Apply(path, kGood, now, rtt = 0): without an RTT sample and outside
    // "reps" a clean ACK changes no state in any path state (only a sample
    // lowers the skip level); only an out-of-range path is counted.
    for (size_t i = 0; i < n; ++i) {
      if (paths[i] >= num_paths_) ++counters_.bad_input;
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    MultipathSelector::OnFeedback(paths[i], fb, now, 0);
  }
}

}  // namespace prism::routing
