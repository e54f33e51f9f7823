#include "congestion/fixed/fixed_window.h"

#include <algorithm>

namespace prism::congestion {

uint64_t BdpBytes(uint64_t rate_bps, Time rtt) {
  if (rtt <= 0) return 0;
  const unsigned __int128 bits =
      static_cast<unsigned __int128>(rate_bps) * static_cast<uint64_t>(rtt);
  const unsigned __int128 bytes = bits / (8ull * 1000000000000ull);
  return bytes > kMaxDerivedWindowBytes ? kMaxDerivedWindowBytes
                                        : static_cast<uint64_t>(bytes);
}

FixedWindowController::FixedWindowController(const ControllerConfig& config) {
  uint64_t w = config.fixed_window_bytes;
  if (w == 0) {
    const uint64_t bdp = BdpBytes(config.link_rate_bps, config.base_rtt);
    w = bdp + bdp / 2;
  }
  window_ = std::max<uint64_t>(w, config.mtu_bytes);
}

}  // namespace prism::congestion
