// DCQCN-like rate controller (after Zhu et al., SIGCOMM '15) for the
// single-path RoCE baseline. Rate based: pacing_rate_bps() is the current
// rate Rc; the window is a large safety cap (4 x BDP at line rate).
//
// Congestion notification: an ACK batch with ECN marks, trims or losses acts
// as a CNP (at most one per cnp_interval, as a receiver paces CNPs):
//   Rt = Rc; Rc = Rc * (1 - alpha / 2); alpha = (1 - g) alpha + g.
// Without CNPs alpha decays by (1 - g) every alpha_period. Increase events
// come from a timer (every increase_period) and a byte counter (every
// byte_counter acked bytes); with T and BC the counts since the last cut:
//   max(T, BC) < F      fast recovery:  Rc = (Rt + Rc) / 2
//   min(T, BC) > F      hyper increase: Rt += (min(T,BC) - F) * R_HAI, then
//   otherwise           additive:       Rt += R_AI, then Rc = (Rt + Rc) / 2.
// Timers advance with the `now` of each event (no clock is read); a long idle
// gap runs at most kMaxCatchUp steps and then re-arms. A timeout is a CNP.
// Rates stay in [min_rate_bps, line_rate_bps].
//
// Thread safety: none; one connection's thread. Pure and deterministic.
#ifndef PRISM_CONGESTION_DCQCN_DCQCN_H_
#define PRISM_CONGESTION_DCQCN_DCQCN_H_

#include <cstdint>

#include "absl/status/status.h"
#include "congestion/controller.h"

namespace prism::congestion {

struct DcqcnParams {
  uint64_t line_rate_bps = 0;
  uint64_t min_rate_bps = 0;  // default line / 1000
  double g = 1.0 / 256;       // alpha EWMA gain
  double initial_alpha = 1.0;
  Time alpha_period = 55 * kMicrosecond;
  Time increase_period = 55 * kMicrosecond;
  uint64_t byte_counter = 10'000'000;  // bytes per byte-counter event
  uint32_t fast_recovery_steps = 5;    // F
  uint64_t rai_bps = 0;                // default line / 1000
  uint64_t rhai_bps = 0;               // default line / 100
  Time cnp_interval = 50 * kMicrosecond;
  uint64_t window_bytes = 0;  // default 4 x BDP, >= 4 MTU

  static DcqcnParams Defaults(const ControllerConfig& config);
  absl::Status Validate() const;
};

struct DcqcnCounters {
  uint64_t cuts = 0;
  uint64_t fast_recovery = 0;
  uint64_t additive = 0;
  uint64_t hyper = 0;
};

class DcqcnController final : public Controller {
 public:
  static constexpr int kMaxCatchUp = 256;

  // REQUIRES: params.Validate().ok().
  explicit DcqcnController(const DcqcnParams& params);

  void OnAck(const AckEvent& ev) override;
  void OnTimeout(Time now) override;
  uint64_t window_bytes() const override { return p_.window_bytes; }
  uint64_t pacing_rate_bps() const override { return ToBps(rc_); }
  const char* name() const override { return "dcqcn"; }

  const DcqcnParams& params() const { return p_; }
  const DcqcnCounters& counters() const { return counters_; }
  double alpha() const { return alpha_; }
  uint64_t target_rate_bps() const { return ToBps(rt_); }

 private:
  // Rates are doubles; a rate near 2^64 must not be converted out of range.
  static uint64_t ToBps(double r) {
    return r >= 0x1p64 ? UINT64_MAX : static_cast<uint64_t>(r);
  }
  void Advance(Time now);
  void Cut(Time now);
  void Increase();

  DcqcnParams p_;
  double rc_;
  double rt_;
  double alpha_;
  bool started_ = false;
  bool cut_once_ = false;
  Time last_cut_ = 0;
  Time next_alpha_ = 0;
  Time next_increase_ = 0;
  uint64_t bytes_ = 0;
  uint32_t t_count_ = 0;
  uint32_t bc_count_ = 0;
  DcqcnCounters counters_;
};

}  // namespace prism::congestion

#endif  // PRISM_CONGESTION_DCQCN_DCQCN_H_
