// ToString() for the engine's counters (prism/stats.h): one "name=value"
// per counter, space separated, in declaration order, so that lines diff
// well and grep easily.
#include "prism/stats.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace prism {
namespace {

void Add(std::string* s, const char* name, uint64_t v) {
  if (!s->empty()) s->push_back(' ');
  absl::StrAppend(s, name, "=", v);
}

void AddTime(std::string* s, const char* name, Time t) {
  if (!s->empty()) s->push_back(' ');
  // Microseconds with nanosecond resolution.
  absl::StrAppend(s, name, "=", t / kMicrosecond, ".",
                  absl::Dec((t % kMicrosecond) / kNanosecond, absl::kZeroPad3),
                  "us");
}

const char* StateName(uint8_t s) {
  switch (s) {
    case 0:
      return "GOOD";
    case 1:
      return "SKIP";
    case 2:
      return "ASSUMED_BAD";
    case 3:
      return "DENIED";
  }
  return "UNKNOWN";
}

}  // namespace

std::string EngineStats::ToString() const {
  std::string s;
  Add(&s, "rx_packets", rx_packets);
  Add(&s, "tx_packets", tx_packets);
  Add(&s, "rx_drop_malformed", rx_drop_malformed);
  Add(&s, "rx_drop_bad_magic", rx_drop_bad_magic);
  Add(&s, "rx_drop_bad_version", rx_drop_bad_version);
  Add(&s, "rx_drop_bad_checksum", rx_drop_bad_checksum);
  Add(&s, "rx_drop_payload_corrupt", rx_drop_payload_corrupt);
  Add(&s, "rx_drop_unknown_conn", rx_drop_unknown_conn);
  Add(&s, "rx_drop_bad_key", rx_drop_bad_key);
  Add(&s, "rx_drop_bad_range", rx_drop_bad_range);
  Add(&s, "rx_drop_out_of_window", rx_drop_out_of_window);
  Add(&s, "rx_drop_placement", rx_drop_placement);
  Add(&s, "rx_drop_no_buffer", rx_drop_no_buffer);
  Add(&s, "rx_duplicates", rx_duplicates);
  Add(&s, "rx_drop_inband_setup", rx_drop_inband_setup);
  Add(&s, "config_errors", config_errors);
  Add(&s, "writes_refused_cq_full", writes_refused_cq_full);
  Add(&s, "cq_delivery_holds", cq_delivery_holds);
  Add(&s, "cq_peak", cq_peak);
  Add(&s, "connections", connections);
  Add(&s, "memory_regions", memory_regions);
  return s;
}

std::string ConnectionStats::ToString() const {
  std::string s;
  Add(&s, "tx_data_packets", tx_data_packets);
  Add(&s, "tx_data_bytes", tx_data_bytes);
  Add(&s, "retransmitted_packets", retransmitted_packets);
  Add(&s, "retransmitted_bytes", retransmitted_bytes);
  Add(&s, "rto_events", rto_events);
  Add(&s, "tail_loss_probes", tail_loss_probes);
  Add(&s, "path_timeouts", path_timeouts);
  Add(&s, "plane_status_repeats", plane_status_repeats);
  Add(&s, "trims_received", trims_received);
  Add(&s, "nacks_received", nacks_received);
  Add(&s, "sacks_received", sacks_received);
  Add(&s, "rtt_samples_rejected", rtt_samples_rejected);
  Add(&s, "ecn_echoes", ecn_echoes);
  Add(&s, "rx_data_packets", rx_data_packets);
  Add(&s, "rx_data_bytes", rx_data_bytes);
  Add(&s, "rx_trimmed", rx_trimmed);
  Add(&s, "tx_sacks", tx_sacks);
  Add(&s, "tx_nacks", tx_nacks);
  Add(&s, "probes_sent", probes_sent);
  Add(&s, "probe_acks_received", probe_acks_received);
  Add(&s, "paths_retired", paths_retired);
  Add(&s, "paths_restored", paths_restored);
  Add(&s, "group_resends", group_resends);
  Add(&s, "group_balance_passes", group_balance_passes);
  Add(&s, "tail_resends", tail_resends);
  Add(&s, "spurious_losses", spurious_losses);
  Add(&s, "paths_unretired", paths_unretired);
  Add(&s, "messages_completed", messages_completed);
  Add(&s, "messages_received", messages_received);
  Add(&s, "writes_refused_cq_full", writes_refused_cq_full);
  Add(&s, "cq_delivery_holds", cq_delivery_holds);
  Add(&s, "rnr_nacks_received", rnr_nacks_received);
  Add(&s, "rnr_probes_sent", rnr_probes_sent);
  Add(&s, "rnr_timeouts", rnr_timeouts);
  Add(&s, "bytes_acked", bytes_acked);
  Add(&s, "inflight_bytes", inflight_bytes);
  Add(&s, "cwnd_bytes", cwnd_bytes);
  AddTime(&s, "srtt", srtt);
  AddTime(&s, "rto", rto);
  Add(&s, "paths_active", paths_active);
  return s;
}

std::string PathStats::ToString() const {
  std::string s;
  Add(&s, "tx_packets", tx_packets);
  Add(&s, "tx_bytes", tx_bytes);
  Add(&s, "acked_packets", acked_packets);
  Add(&s, "lost_packets", lost_packets);
  Add(&s, "trimmed_packets", trimmed_packets);
  Add(&s, "ecn_marked", ecn_marked);
  Add(&s, "retired", retired);
  Add(&s, "restored", restored);
  AddTime(&s, "srtt", srtt);
  absl::StrAppend(&s, " state=", StateName(state));
  return s;
}

}  // namespace prism
