#include "congestion/nscc/nscc.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "congestion/fixed/fixed_window.h"

namespace prism::congestion {

NsccParams NsccParams::Defaults(const ControllerConfig& c) {
  NsccParams p;
  p.link_rate_bps = c.link_rate_bps;
  p.base_rtt = c.base_rtt;
  p.mtu_bytes = c.mtu_bytes;
  const Time two_pkts = SerializationTime(2ull * c.mtu_bytes, c.link_rate_bps);
  p.target_delay = c.target_delay != 0 ? c.target_delay
                                       : std::max(c.base_rtt + c.base_rtt / 2,
                                                  c.base_rtt + two_pkts);
  p.bdp_bytes = BdpBytes(c.link_rate_bps, c.base_rtt);
  p.min_window_bytes = c.mtu_bytes;
  p.max_window_bytes = c.max_window_bytes != 0
                           ? c.max_window_bytes
                           : std::max<uint64_t>(p.bdp_bytes + p.bdp_bytes / 2,
                                                2ull * c.mtu_bytes);
  // (max < min is left for Validate() to reject.)
  p.initial_window_bytes =
      std::max(p.min_window_bytes, std::min(p.bdp_bytes, p.max_window_bytes));
  p.fair_increase_bytes = c.mtu_bytes;
  p.prop_increase_bytes = std::max<uint64_t>(p.bdp_bytes / 4, c.mtu_bytes);
  p.qa_delay_threshold = 4 * p.target_delay;
  p.loss_is_congestion = c.loss_is_congestion;
  p.qa_failure_aware = c.algorithm != "nscc-classic";
  return p;
}

absl::Status NsccParams::Validate() const {
  auto bad = [](const char* what) {
    return absl::InvalidArgumentError(absl::StrCat("nscc: ", what));
  };
  if (link_rate_bps == 0) return bad("link_rate_bps must be > 0");
  if (base_rtt <= 0) return bad("base_rtt must be > 0");
  if (mtu_bytes == 0) return bad("mtu_bytes must be > 0");
  if (target_delay <= base_rtt) return bad("target_delay must exceed base_rtt");
  if (min_window_bytes == 0) return bad("min_window_bytes must be > 0");
  if (max_window_bytes < min_window_bytes) {
    return bad("max_window_bytes must be >= min_window_bytes");
  }
  if (initial_window_bytes < min_window_bytes ||
      initial_window_bytes > max_window_bytes) {
    return bad("initial_window_bytes must lie in [min, max]");
  }
  if (prop_increase_bytes == 0) return bad("prop_increase_bytes must be > 0");
  if (!(md_gain >= 0 && md_gain <= 16)) return bad("md_gain in [0,16]");
  if (!(max_md > 0 && max_md < 1)) return bad("max_md in (0,1)");
  if (!(loss_md >= 0 && loss_md <= max_md)) return bad("loss_md in [0,max_md]");
  if (!(qa_fraction >= 0 && qa_fraction <= 1))
    return bad("qa_fraction in [0,1]");
  if (!(qa_failure_hold_rtts >= 0 && qa_failure_hold_rtts <= 64)) {
    return bad("qa_failure_hold_rtts in [0,64]");
  }
  if (!(qa_stranded_hold_rtts >= 0 && qa_stranded_hold_rtts <= 64)) {
    return bad("qa_stranded_hold_rtts in [0,64]");
  }
  if (qa_delay_threshold <= 0) return bad("qa_delay_threshold must be > 0");
  return absl::OkStatus();
}

NsccController::NsccController(const NsccParams& params)
    : p_(params),
      cwnd_(static_cast<double>(params.initial_window_bytes)),
      last_rtt_(params.base_rtt) {}

void NsccController::Clamp() {
  cwnd_ = std::clamp(cwnd_, static_cast<double>(p_.min_window_bytes),
                     static_cast<double>(p_.max_window_bytes));
}

uint64_t NsccController::window_bytes() const {
  const uint64_t w = static_cast<uint64_t>(cwnd_);
  const uint64_t pen = static_cast<uint64_t>(penalty_packets_) * p_.mtu_bytes;
  return w > pen + p_.min_window_bytes ? w - pen : p_.min_window_bytes;
}

void NsccController::MaybeDecrease(Time now, Time rtt, bool loss) {
  // At most one decrease per RTT: its effect shows an RTT later.
  if (decreased_once_ && now - last_decrease_ < std::max(rtt, p_.base_rtt)) {
    return;
  }
  double md = 0;
  if (rtt > p_.target_delay) {
    md = p_.md_gain * static_cast<double>(rtt - p_.target_delay) /
         static_cast<double>(rtt - p_.base_rtt);
  }
  if (loss) md = std::max(md, p_.loss_md);
  md = std::min(md, p_.max_md);
  cwnd_ *= 1.0 - md;
  decreased_once_ = true;
  last_decrease_ = now;
  ++counters_.decreases;
}

void NsccController::QuickAdapt(const AckEvent& ev, Time rtt, bool loss) {
  if (!qa_started_) {
    qa_started_ = true;
    qa_start_ = ev.now;
  }
  qa_delivered_ += ev.acked_bytes;
  if (loss) qa_congested_ = true;
  if (rtt > p_.qa_delay_threshold) qa_congested_ = true;
  if (p_.qa_failure_aware && !p_.loss_is_congestion) {
    if (ev.lost > 0) {
      loss_seen_ = true;
      last_loss_ = ev.now;
    }
    if (ev.stranded) {
      stranded_seen_ = true;
      last_stranded_ = ev.now;
    }
  }
  // Delivered per target_delay: what the network drains for this flow in
  // the RTT the window aims for (the RTT itself may be inflated by queues).
  if (ev.now - qa_start_ < p_.target_delay) return;
  if (qa_congested_ &&
      static_cast<double>(qa_delivered_) < p_.qa_fraction * cwnd_) {
    // Failure-aware, recovering from a path failure: the shortfall is the
    // bytes stranded on the failed paths (held in the window until their
    // path timeout), not what the network drains; cutting to it would
    // leave the window full of stranded bytes. A declared loss holds it
    // longer than a stranded transmission, which may be merely late.
    const double unit = static_cast<double>(std::max(rtt, p_.target_delay));
    const bool after_loss =
        loss_seen_ && static_cast<double>(ev.now - last_loss_) <
                          p_.qa_failure_hold_rtts * unit;
    const bool after_stranded =
        stranded_seen_ && static_cast<double>(ev.now - last_stranded_) <
                              p_.qa_stranded_hold_rtts * unit;
    if (p_.qa_failure_aware && (after_loss || after_stranded)) {
      ++counters_.quick_adapts_held;
    } else {
      // Failure-aware: the window keeps room for the bytes stranded in
      // flight as well (AckEvent::stranded_bytes), so what is delivered
      // per period can still be sent while they wait for their timeout.
      cwnd_ = static_cast<double>(
          qa_delivered_ + (p_.qa_failure_aware ? ev.stranded_bytes : 0));
      Clamp();
      decreased_once_ = true;
      last_decrease_ = ev.now;
      ++counters_.quick_adapts;
    }
  }
  qa_start_ = ev.now;
  qa_delivered_ = 0;
  qa_congested_ = false;
}

void NsccController::OnAck(const AckEvent& ev) {
  penalty_packets_ = ev.rx_window_penalty;
  if (ev.rtt > 0) last_rtt_ = ev.rtt;
  const Time rtt = last_rtt_;
  // Trims always signal congestion; plain losses only on drop-tail fabrics.
  const bool loss = ev.trimmed > 0 || (p_.loss_is_congestion && ev.lost > 0);
  const bool above = rtt >= p_.target_delay;

  // Split the batch: unmarked bytes take the no-ECN rule.
  double clean = static_cast<double>(ev.acked_bytes);
  uint32_t marked = ev.ecn_marked;
  if (ev.acked_packets > 0) {
    marked = std::min(marked, ev.acked_packets);
    clean = clean * static_cast<double>(ev.acked_packets - marked) /
            static_cast<double>(ev.acked_packets);
  } else if (marked > 0) {
    clean = 0;
  }

  if (clean > 0 && !loss) {
    if (!above) {
      const double span = static_cast<double>(p_.target_delay - p_.base_rtt);
      const double f = std::clamp(
          static_cast<double>(p_.target_delay - rtt) / span, 0.0, 1.0);
      cwnd_ += static_cast<double>(p_.prop_increase_bytes) * f * clean / cwnd_;
      ++counters_.proportional_increases;
    } else {
      cwnd_ += static_cast<double>(p_.fair_increase_bytes) * clean / cwnd_;
      ++counters_.fair_increases;
    }
  }
  if (loss || (marked > 0 && above)) {
    MaybeDecrease(ev.now, rtt, loss);
  } else if (marked > 0) {
    ++counters_.ecn_no_change;  // ECN below target: a load-balancing signal
  }
  Clamp();
  QuickAdapt(ev, rtt, loss);
}

void NsccController::OnTimeout(Time now) {
  cwnd_ /= 2;
  Clamp();
  decreased_once_ = true;
  last_decrease_ = now;
  qa_started_ = false;
  qa_delivered_ = 0;
  qa_congested_ = false;
  ++counters_.timeouts;
}

}  // namespace prism::congestion
