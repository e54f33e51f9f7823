// Baseline transports run through the same fabric as Prism:
//   roce     RoCE-like RC: per connection `qps` queue pairs (default: one per
//            NIC port / plane), each pinned to one plane and one entropy
//            value for its lifetime (ECMP decides its path; it changes only
//            when routing reconverges). Go-back-N: the receiver accepts only
//            the expected PSN, NAKs the first gap, and the sender rewinds to
//            the NAKed PSN; a retransmission timeout rewinds to the oldest
//            unacknowledged PSN. DCQCN-like rate control per QP: receivers
//            send a CNP for ECN-marked packets (at most one per
//            cnp_interval); senders cut Rc by alpha/2, then recover in
//            timer-driven fast-recovery and additive-increase stages.
//   multiqp  the same QP model with more QPs per connection (default 4 per
//            plane), NCCL-style: the message is striped across them.
// Trimmed packets are meaningless to a RoCE receiver and are discarded
// (counted as receiver_discard): the go-back-N machinery recovers them.
// Assumptions and parameters: docs/simulator.md.
#ifndef PRISM_SIM_BASELINE_H_
#define PRISM_SIM_BASELINE_H_

#include <memory>

#include "sim/simulator.h"

namespace prism::sim {

std::unique_ptr<TransportDriver> MakeBaselineDriver(const TransportConfig& tc);

}  // namespace prism::sim

#endif  // PRISM_SIM_BASELINE_H_
