// Congestion controller interface: the engine reports one event per ACK batch
// and asks for the window and pacing rate.
//
// Contract: a controller is pure (no clock, no I/O, no global state), owned by
// one connection and called from that connection's thread only. All inputs
// arrive as arguments; the same event sequence yields the same outputs.
#ifndef PRISM_CONGESTION_CONTROLLER_H_
#define PRISM_CONGESTION_CONTROLLER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prism/types.h"

namespace prism::congestion {

// What one batch of acknowledgements (one SACK, or several coalesced) said.
struct AckEvent {
  Time now = 0;
  uint64_t acked_bytes = 0;    // newly acknowledged payload bytes
  uint32_t acked_packets = 0;  // newly acknowledged packets
  Time rtt = 0;                // RTT sample from the echoed timestamp; 0: none
  uint32_t ecn_marked = 0;     // acknowledged packets that carried ECN CE
  uint32_t trimmed = 0;        // TRIMMED NACKs in this batch
  uint32_t lost = 0;           // packets declared lost (not trimmed)
  uint32_t rx_window_penalty = 0;  // receiver push-back, 0 = none
  uint64_t inflight_bytes = 0;     // bytes in flight after this batch
  // The oldest transmission in flight is older than the connection's
  // smoothed RTT and a transmission sent after it on its plane was acked
  // (within a plane both queue behind the same NIC port): it was probably
  // lost on a failed path and awaits its path timeout (not yet in `lost`).
  // Set by the engine on SACK and path-timeout events; read only by NSCC's
  // failure-aware quick adapt (the others ignore it).
  bool stranded = false;
  // Bytes of the oldest transmissions in flight (at most 64 of them, in
  // send order, up to the first that is not) older than the connection's
  // smoothed RTT with a later-sent transmission acked: what the window
  // holds for packets probably stranded on failed paths. Same events.
  uint64_t stranded_bytes = 0;
};

class Controller {
 public:
  virtual ~Controller() = default;
  virtual void OnAck(const AckEvent& ev) = 0;
  // A retransmission timeout fired (no feedback for an RTO).
  virtual void OnTimeout(Time now) = 0;
  // Bytes the connection may have in flight.
  virtual uint64_t window_bytes() const = 0;
  // Pacing rate in bits per second; 0 means "not paced, window only".
  virtual uint64_t pacing_rate_bps() const { return 0; }
  virtual const char* name() const = 0;
};

struct ControllerConfig {
  // "nscc" (default), "nscc-classic", "fixed", "dcqcn". "nscc" is NSCC with
  // failure-aware quick adapt (NsccParams::qa_failure_aware: no quick-adapt
  // cut while recovering from a path failure, from AckEvent::lost /
  // AckEvent::stranded, and room for AckEvent::stranded_bytes in a cut);
  // "nscc-classic" is NSCC's plain quick adapt (before 2026-12-03's
  // default). "nscc-fa", the earlier opt-in name, is the same as "nscc"
  // (docs/congestion.md "Quick adapt").
  std::string algorithm = "nscc";
  uint64_t link_rate_bps = 100'000'000'000ull;  // sender NIC rate (all planes)
  Time base_rtt = 10 * kMicrosecond;            // unloaded fabric RTT
  uint32_t mtu_bytes = 4096;                    // payload bytes per packet
  uint64_t fixed_window_bytes = 0;              // "fixed": 0 = 1.5 x BDP
  // Additive (issue 4) overrides for "nscc"; 0 = derived from rate and RTT
  // (see congestion/nscc/nscc.h and docs/congestion.md).
  Time target_delay = 0;          // RTT target; 0 = base_rtt * 1.5
  uint64_t max_window_bytes = 0;  // 0 = 1.5 x BDP
  // Additive: "nscc" treats non-trim losses as congestion (true for drop-tail
  // fabrics without trimming/ECN); false = losses are random, repaired by
  // retransmission only. See NsccParams::loss_is_congestion.
  bool loss_is_congestion = false;
};

absl::StatusOr<std::unique_ptr<Controller>> MakeController(
    const ControllerConfig& config);

}  // namespace prism::congestion

#endif  // PRISM_CONGESTION_CONTROLLER_H_
