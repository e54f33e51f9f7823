// MakeController: validates a ControllerConfig and builds the named algorithm.
#include "congestion/controller.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "congestion/dcqcn/dcqcn.h"
#include "congestion/fixed/fixed_window.h"
#include "congestion/nscc/nscc.h"

namespace prism::congestion {

absl::StatusOr<std::unique_ptr<Controller>> MakeController(
    const ControllerConfig& config) {
  if (config.link_rate_bps == 0) {
    return absl::InvalidArgumentError("congestion: link_rate_bps must be > 0");
  }
  if (config.base_rtt <= 0) {
    return absl::InvalidArgumentError("congestion: base_rtt must be > 0");
  }
  if (config.mtu_bytes == 0) {
    return absl::InvalidArgumentError("congestion: mtu_bytes must be > 0");
  }
  if (config.algorithm == "fixed") {
    return std::unique_ptr<Controller>(new FixedWindowController(config));
  }
  if (config.algorithm == "nscc" || config.algorithm == "nscc-fa" ||
      config.algorithm == "nscc-classic") {
    const NsccParams p = NsccParams::Defaults(config);
    if (absl::Status s = p.Validate(); !s.ok()) return s;
    return std::unique_ptr<Controller>(new NsccController(p));
  }
  if (config.algorithm == "dcqcn") {
    const DcqcnParams p = DcqcnParams::Defaults(config);
    if (absl::Status s = p.Validate(); !s.ok()) return s;
    return std::unique_ptr<Controller>(new DcqcnController(p));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("congestion: unknown algorithm '", config.algorithm,
                   "' (want nscc, nscc-classic, fixed or dcqcn)"));
}

}  // namespace prism::congestion
