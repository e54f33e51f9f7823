// Fixed-window baseline controller: the window never changes.
//
// Contract: window_bytes() == the configured fixed window, or 1.5 x BDP
// (BDP = link_rate_bps / 8 * base_rtt) when none is given, at least one MTU.
// Ignores every event. Pure; one connection's thread only.
#ifndef PRISM_CONGESTION_FIXED_FIXED_WINDOW_H_
#define PRISM_CONGESTION_FIXED_FIXED_WINDOW_H_

#include <cstdint>

#include "congestion/controller.h"

namespace prism::congestion {

// Largest window any controller derives (1 PiB): keeps 1.5x / 4x multiples
// of a BDP far from uint64 overflow whatever the configured rate and RTT.
inline constexpr uint64_t kMaxDerivedWindowBytes = 1ull << 50;

// Bandwidth-delay product in bytes: rate_bps / 8 * rtt, capped at
// kMaxDerivedWindowBytes; 0 for rtt <= 0.
uint64_t BdpBytes(uint64_t rate_bps, Time rtt);

class FixedWindowController final : public Controller {
 public:
  // REQUIRES: config validated by MakeController (rate > 0, base_rtt > 0).
  explicit FixedWindowController(const ControllerConfig& config);

  void OnAck(const AckEvent&) override {}
  void OnTimeout(Time) override {}
  uint64_t window_bytes() const override { return window_; }
  const char* name() const override { return "fixed"; }

 private:
  uint64_t window_;
};

}  // namespace prism::congestion

#endif  // PRISM_CONGESTION_FIXED_FIXED_WINDOW_H_
