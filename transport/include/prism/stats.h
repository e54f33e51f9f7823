// Counters the engine keeps: per engine (drops of bad input), per connection,
// and per path. Plain structs, cheap to copy; ToString() prints them.
//
// Invariant: every received packet the engine does not use is counted in
// exactly one drop counter (rx_drop_*), so "nothing is lost without a counter
// saying why" can be checked by summing.
#ifndef PRISM_STATS_H_
#define PRISM_STATS_H_

#include <cstdint>
#include <string>

#include "prism/types.h"

namespace prism {

struct EngineStats {
  uint64_t rx_packets = 0;
  uint64_t tx_packets = 0;
  // Drops of bad input, one counter per reason.
  uint64_t rx_drop_malformed = 0;  // decoder rejected (length, type, ...)
  uint64_t rx_drop_bad_magic = 0;
  uint64_t rx_drop_bad_version = 0;
  uint64_t rx_drop_bad_checksum = 0;     // header checksum mismatch
  uint64_t rx_drop_payload_corrupt = 0;  // payload CRC32C mismatch
  uint64_t rx_drop_unknown_conn = 0;
  uint64_t rx_drop_bad_key = 0;        // rkey unknown / no remote-write access
  uint64_t rx_drop_bad_range = 0;      // address range outside the region
  uint64_t rx_drop_out_of_window = 0;  // PSN outside the receive window
  uint64_t rx_drop_placement = 0;      // Placer::Place failed
  // DATA of a message beyond the receive message ring while delivery is
  // held by a full completion queue: NACK NO_BUFFER, the sender resends.
  uint64_t rx_drop_no_buffer = 0;
  uint64_t rx_duplicates = 0;  // already received (suppressed, re-acked)
  // Well-formed in-band CONNECT / CONNECT_ACK: the engine does not run the
  // wire setup exchange (connections are set up with Connect() from a
  // ConnectionInfo exchanged out of band, e.g. transport/runtime's blob), so
  // these are dropped here and not counted as malformed.
  uint64_t rx_drop_inband_setup = 0;
  // CreateConnection / Connect calls refused with InvalidArgument (a bad
  // option, e.g. an mtu_payload the datapath cannot carry).
  uint64_t config_errors = 0;
  // Completion queue (EngineOptions::cq_capacity; prism/engine.h):
  // PostWrite calls refused because no completion slot could be reserved;
  // times a connection's in-order delivery was held at a complete
  // WRITE-with-immediate message by a full queue (once per hold, not per
  // packet); the most completions the queue has held at once.
  uint64_t writes_refused_cq_full = 0;
  uint64_t cq_delivery_holds = 0;
  uint64_t cq_peak = 0;
  uint32_t connections = 0;
  uint32_t memory_regions = 0;

  std::string ToString() const;
};

struct ConnectionStats {
  uint64_t tx_data_packets = 0;
  uint64_t tx_data_bytes = 0;  // payload bytes incl. retransmissions
  uint64_t retransmitted_packets = 0;
  uint64_t retransmitted_bytes = 0;
  uint64_t rto_events = 0;            // retransmission timeouts fired
  uint64_t tail_loss_probes = 0;      // PTO firings (early retransmits)
  uint64_t path_timeouts = 0;         // lost by path timeout (engine.h)
  uint64_t plane_status_repeats = 0;  // PLANE_STATUS re-sends (see engine.h)
  uint64_t trims_received = 0;        // TRIMMED NACKs received (as sender)
  uint64_t nacks_received = 0;        // all NACKs received
  uint64_t sacks_received = 0;
  // SACK / PROBE_ACK whose echoed send timestamp cannot be one this side
  // sent (0, later than now, or older than connection_timeout): the packet
  // is used, its RTT sample ignored (a forged or corrupted echo would
  // otherwise set srtt, the RTO and the path timers to anything).
  uint64_t rtt_samples_rejected = 0;
  uint64_t ecn_echoes = 0;       // ACKed packets that had ECN CE
  uint64_t rx_data_packets = 0;  // as receiver
  uint64_t rx_data_bytes = 0;    // payload bytes placed (first copies)
  uint64_t rx_trimmed = 0;       // trimmed headers received (as receiver)
  uint64_t tx_sacks = 0;
  uint64_t tx_nacks = 0;
  uint64_t probes_sent = 0;
  uint64_t probe_acks_received = 0;
  uint64_t paths_retired = 0;   // transitions to ASSUMED_BAD
  uint64_t paths_restored = 0;  // ASSUMED_BAD -> GOOD after a probe
  // Fate sharing (ConnectionOptions::path_groups): transmissions in flight
  // resent at once because a path of their failure group was retired on
  // another connection of the engine.
  uint64_t group_resends = 0;
  // Group balance (ConnectionOptions::group_balance): path picks passed
  // over because their failure group held more than its share of the
  // connection's transmissions in flight.
  uint64_t group_balance_passes = 0;
  // Tail resends (ConnectionOptions::tail_resend): transmissions resent
  // because nothing new was left to send and they were older than the
  // typical paths' loss timeout.
  uint64_t tail_resends = 0;
  // Losses found spurious: a copy declared lost on its path (path timeout,
  // per-path inference, PTO, RTO) was acked after all (the SACK's echo
  // named it). paths_unretired: paths that such a finding put back into
  // service (retired by the wrong declaration; not in paths_restored).
  uint64_t spurious_losses = 0;
  uint64_t paths_unretired = 0;
  uint64_t messages_completed = 0;  // sender side
  uint64_t messages_received = 0;   // receiver side (all WRITEs)
  // Completion queue backpressure (EngineOptions::cq_capacity): as
  // EngineStats' counters of the same names, for this connection; NO_BUFFER
  // NACKs received as sender (the connection's data pauses, rto_min and
  // longer while they go on: prism/engine.h, before the packets are
  // resent); RNR probes sent (one packet at the end of each such pause
  // until one is acked); connections failed by
  // ConnectionOptions::rnr_timeout (0 or 1).
  uint64_t writes_refused_cq_full = 0;
  uint64_t cq_delivery_holds = 0;
  uint64_t rnr_nacks_received = 0;
  uint64_t rnr_probes_sent = 0;
  uint64_t rnr_timeouts = 0;
  uint64_t bytes_acked = 0;
  uint64_t inflight_bytes = 0;
  uint64_t cwnd_bytes = 0;
  Time srtt = 0;
  Time rto = 0;
  uint16_t paths_active = 0;  // paths currently GOOD or SKIP

  std::string ToString() const;
};

struct PathStats {
  uint64_t tx_packets = 0;
  uint64_t tx_bytes = 0;
  uint64_t acked_packets = 0;
  uint64_t lost_packets = 0;
  uint64_t trimmed_packets = 0;
  uint64_t ecn_marked = 0;
  uint64_t retired = 0;   // times put in ASSUMED_BAD
  uint64_t restored = 0;  // times a probe brought it back
  Time srtt = 0;
  uint8_t state = 0;  // routing::PathState value

  std::string ToString() const;
};

}  // namespace prism

#endif  // PRISM_STATS_H_
