#include "congestion/dcqcn/dcqcn.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "congestion/fixed/fixed_window.h"

namespace prism::congestion {

DcqcnParams DcqcnParams::Defaults(const ControllerConfig& c) {
  DcqcnParams p;
  p.line_rate_bps = c.link_rate_bps;
  p.min_rate_bps = std::max<uint64_t>(1, c.link_rate_bps / 1000);
  p.rai_bps = std::max<uint64_t>(1, c.link_rate_bps / 1000);
  p.rhai_bps = std::max<uint64_t>(1, c.link_rate_bps / 100);
  p.window_bytes = std::max<uint64_t>(4 * BdpBytes(c.link_rate_bps, c.base_rtt),
                                      4ull * c.mtu_bytes);
  return p;
}

absl::Status DcqcnParams::Validate() const {
  auto bad = [](const char* what) {
    return absl::InvalidArgumentError(absl::StrCat("dcqcn: ", what));
  };
  if (line_rate_bps == 0) return bad("line_rate_bps must be > 0");
  if (min_rate_bps == 0 || min_rate_bps > line_rate_bps) {
    return bad("min_rate_bps must be in [1, line_rate_bps]");
  }
  if (!(g > 0 && g < 1)) return bad("g in (0,1)");
  if (!(initial_alpha >= 0 && initial_alpha <= 1)) return bad("alpha in [0,1]");
  if (alpha_period <= 0 || increase_period <= 0) return bad("periods > 0");
  if (byte_counter == 0) return bad("byte_counter must be > 0");
  if (cnp_interval < 0) return bad("cnp_interval must be >= 0");
  if (window_bytes == 0) return bad("window_bytes must be > 0");
  return absl::OkStatus();
}

DcqcnController::DcqcnController(const DcqcnParams& params)
    : p_(params),
      rc_(static_cast<double>(params.line_rate_bps)),
      rt_(static_cast<double>(params.line_rate_bps)),
      alpha_(params.initial_alpha) {}

void DcqcnController::Advance(Time now) {
  if (!started_) {
    started_ = true;
    next_alpha_ = now + p_.alpha_period;
    next_increase_ = now + p_.increase_period;
    return;
  }
  int steps = 0;
  while (next_alpha_ <= now && steps < kMaxCatchUp) {
    alpha_ *= 1.0 - p_.g;
    next_alpha_ += p_.alpha_period;
    ++steps;
  }
  if (next_alpha_ <= now) next_alpha_ = now + p_.alpha_period;
  steps = 0;
  while (next_increase_ <= now && steps < kMaxCatchUp) {
    ++t_count_;
    Increase();
    next_increase_ += p_.increase_period;
    ++steps;
  }
  if (next_increase_ <= now) next_increase_ = now + p_.increase_period;
}

void DcqcnController::Cut(Time now) {
  rt_ = rc_;
  rc_ =
      std::max(rc_ * (1.0 - alpha_ / 2), static_cast<double>(p_.min_rate_bps));
  alpha_ = (1.0 - p_.g) * alpha_ + p_.g;
  t_count_ = bc_count_ = 0;
  bytes_ = 0;
  next_alpha_ = now + p_.alpha_period;
  next_increase_ = now + p_.increase_period;
  cut_once_ = true;
  last_cut_ = now;
  ++counters_.cuts;
}

void DcqcnController::Increase() {
  const uint32_t f = p_.fast_recovery_steps;
  const uint32_t hi = std::max(t_count_, bc_count_);
  const uint32_t lo = std::min(t_count_, bc_count_);
  const double line = static_cast<double>(p_.line_rate_bps);
  if (hi < f) {
    ++counters_.fast_recovery;
  } else if (lo > f) {
    rt_ += static_cast<double>(lo - f) * static_cast<double>(p_.rhai_bps);
    ++counters_.hyper;
  } else {
    rt_ += static_cast<double>(p_.rai_bps);
    ++counters_.additive;
  }
  rt_ = std::min(rt_, line);
  rc_ = std::min((rt_ + rc_) / 2, line);
}

void DcqcnController::OnAck(const AckEvent& ev) {
  Advance(ev.now);
  const bool cnp = ev.ecn_marked > 0 || ev.trimmed > 0 || ev.lost > 0;
  if (cnp) {
    if (!cut_once_ || ev.now - last_cut_ >= p_.cnp_interval) Cut(ev.now);
    return;
  }
  bytes_ += ev.acked_bytes;
  int steps = 0;
  while (bytes_ >= p_.byte_counter && steps < kMaxCatchUp) {
    bytes_ -= p_.byte_counter;
    ++bc_count_;
    Increase();
    ++steps;
  }
  if (bytes_ >= p_.byte_counter) bytes_ %= p_.byte_counter;
}

void DcqcnController::OnTimeout(Time now) {
  Advance(now);
  Cut(now);
}

}  // namespace prism::congestion
