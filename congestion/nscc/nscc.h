// NSCC-style sender window (after UET 1.0's NSCC): the RTT of each ACK batch
// is compared with a target delay and crossed with ECN.
//
//                     RTT < target               RTT >= target
//   no ECN    proportional increase         fair increase
//             (more the further below)      (fixed step per RTT)
//   ECN       no change (ECN with a short   multiplicative decrease
//             RTT = imbalance; the path     (more the further above,
//             selector reacts, not CC)       bounded by max_md, <= 1/RTT)
// Both increases are per RTT (scaled by acked bytes / window), so flows of
// different windows gain the same bytes per RTT and converge (AIMD).
//
// A batch with k of n packets ECN-marked applies the no-ECN rule to the
// unmarked (n-k)/n of its bytes and the ECN rule once. Trims are congestion
// signals: they block increases and trigger a decrease of at least loss_md
// (same once-per-RTT limit) whatever the RTT. Losses (AckEvent::lost, not
// trimmed) count as congestion only when loss_is_congestion is set (drop-tail
// fabrics without trimming or ECN); by default they are random loss (failure,
// corruption) repaired by retransmission, and the batch's ACKs and RTT are
// handled as if nothing was lost. Quick adapt: over each observation
// period of target_delay, if trims (or, when they are congestion, losses)
// were seen or the RTT exceeded qa_delay_threshold, and fewer than
// qa_fraction x window bytes were delivered, the window is set to the
// delivered bytes (what the network drains for this flow per target RTT,
// e.g. the fair share in an incast).
//
// Failure-aware quick adapt (qa_failure_aware; the default, "nscc";
// "nscc-classic" turns it off): unless losses are congestion, quick adapt
// is held while the connection recovers from a path failure: no cut at a
// period end within qa_failure_hold_rtts (5) x max(RTT, target) of a
// non-trim loss (AckEvent::lost) or qa_stranded_hold_rtts (3) of a stranded
// transmission (AckEvent::stranded), since the delivery shortfall is then
// the stranded bytes, not the network's drain rate; and a cut leaves room
// for the bytes stranded in flight (window = delivered +
// AckEvent::stranded_bytes). It meets the link-flaps bar and slows an
// undisturbed all-to-all by ~1.3% on average (docs/congestion.md "Quick
// adapt"). The receiver's rx_window_penalty (in MTU packets, latest value
// wins, 0 clears) is subtracted from the window reported. A timeout halves the
// window. window_bytes() is always within [min_window, max_window]; the
// pacing rate is 0.
//
// Thread safety: none; one connection's thread. Pure and deterministic.
#ifndef PRISM_CONGESTION_NSCC_NSCC_H_
#define PRISM_CONGESTION_NSCC_NSCC_H_

#include <cstdint>

#include "absl/status/status.h"
#include "congestion/controller.h"

namespace prism::congestion {

struct NsccParams {
  uint64_t link_rate_bps = 0;  // sender rate, all planes together
  Time base_rtt = 0;           // unloaded RTT
  uint32_t mtu_bytes = 0;
  Time target_delay = 0;   // RTT target (base RTT + allowed queueing)
  uint64_t bdp_bytes = 0;  // link_rate_bps / 8 * base_rtt
  uint64_t initial_window_bytes = 0;
  uint64_t min_window_bytes = 0;
  uint64_t max_window_bytes = 0;
  // Proportional increase: up to this many bytes per RTT, scaled by
  // f = (target - rtt) / (target - base_rtt) clamped to [0, 1]:
  // window += prop_increase_bytes * f * unmarked bytes / window.
  uint64_t prop_increase_bytes = 0;
  // Fair increase: this many bytes added per window's worth of clean ACKs.
  uint64_t fair_increase_bytes = 0;
  // Multiplicative decrease, relative to the queueing delay:
  //   window *= 1 - min(max_md, md_gain * (rtt - target) / (rtt - base_rtt))
  // at most once per RTT.
  // 0.3: gentler cuts of the randomly marked flows keep the per-100 us
  // Jain index of 8 flows through one bottleneck at >= 0.96 (1.0: 0.91-0.94
  // in tests/cc_sim fairness8; see docs/congestion.md).
  double md_gain = 0.3;
  double max_md = 0.5;
  // Minimum decrease for a batch with trims (or losses, see below).
  double loss_md = 0.25;
  // Whether non-trim losses (AckEvent::lost) are a congestion signal like
  // trims: block increases, decrease by >= loss_md, arm quick adapt. False
  // (default) for trimming/ECN fabrics (MRC/UET), where a loss is random
  // (failure, corruption, flaky link) and only retransmission repairs it.
  // Set true for drop-tail fabrics without trimming or ECN.
  bool loss_is_congestion = false;
  // Quick adapt.
  double qa_fraction = 0.5;
  Time qa_delay_threshold = 0;
  // Failure-aware quick adapt (hold after path failures, room for stranded
  // bytes; see the header comment). Set by Defaults() except for
  // "nscc-classic"; false: NSCC's plain quick adapt, qa_failure_hold_rtts
  // unused.
  bool qa_failure_aware = false;
  // With qa_failure_aware: quick adapt is held for this many
  // max(RTT, target) after a non-trim loss (only when !loss_is_congestion);
  // 0 = no hold. The resends and the window's regrowth take a few RTTs
  // (2: the link-flaps bar is missed; 4: missed on 1 seed of 10;
  // docs/congestion.md "Quick adapt").
  double qa_failure_hold_rtts = 5;
  // The same after a stranded transmission (AckEvent::stranded), weaker
  // evidence (it may be merely late): shorter.
  double qa_stranded_hold_rtts = 3;

  // Defaults from link rate, base RTT and MTU (see docs/congestion.md):
  // target = max(1.5 x base_rtt, base_rtt + 2 MTU serialisations),
  // BDP from rate x base_rtt, initial = BDP, max = 1.5 x BDP, min = 1 MTU,
  // fair increase = 1 MTU per RTT, qa threshold = 4 x target. ControllerConfig
  // target_delay / max_window_bytes override when non-zero;
  // loss_is_congestion is copied from ControllerConfig; qa_failure_aware is
  // set unless algorithm is "nscc-classic".
  static NsccParams Defaults(const ControllerConfig& config);
  absl::Status Validate() const;
};

// What the controller did, per rule (for tests and the simulator).
struct NsccCounters {
  uint64_t proportional_increases = 0;
  uint64_t fair_increases = 0;
  uint64_t decreases = 0;
  uint64_t ecn_no_change = 0;  // ECN-marked batches below target
  uint64_t quick_adapts = 0;
  uint64_t quick_adapts_held = 0;  // qa_failure_aware: cuts held (failure)
  uint64_t timeouts = 0;
};

class NsccController final : public Controller {
 public:
  // REQUIRES: params.Validate().ok().
  explicit NsccController(const NsccParams& params);

  void OnAck(const AckEvent& ev) override;
  void OnTimeout(Time now) override;
  uint64_t window_bytes() const override;
  const char* name() const override {
    return p_.qa_failure_aware ? "nscc" : "nscc-classic";
  }

  const NsccParams& params() const { return p_; }
  const NsccCounters& counters() const { return counters_; }
  // Window before the receiver penalty.
  uint64_t cwnd_bytes() const { return static_cast<uint64_t>(cwnd_); }

 private:
  void Clamp();
  void MaybeDecrease(Time now, Time rtt, bool loss);
  void QuickAdapt(const AckEvent& ev, Time rtt, bool loss);

  NsccParams p_;
  double cwnd_;
  Time last_rtt_;
  bool decreased_once_ = false;
  Time last_decrease_ = 0;
  uint32_t penalty_packets_ = 0;
  // Quick adapt observation period.
  bool qa_started_ = false;
  Time qa_start_ = 0;
  uint64_t qa_delivered_ = 0;
  bool qa_congested_ = false;
  bool loss_seen_ = false;      // a non-trim loss (failure-aware)
  Time last_loss_ = 0;          // ... the latest one
  bool stranded_seen_ = false;  // a stranded transmission
  Time last_stranded_ = 0;      // ... the latest one
  NsccCounters counters_;
};

}  // namespace prism::congestion

#endif  // PRISM_CONGESTION_NSCC_NSCC_H_
