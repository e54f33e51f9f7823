// Workloads: the flows a scenario runs, built from the scenario JSON.
//
// A Flow moves `bytes` from host src to host dst, split into messages of at
// most message_bytes (one RDMA WRITE each), starting at `start` or, when
// `after` is not empty, when every flow listed there has completed (ring
// all-reduce steps). Kinds (docs/simulator.md has the JSON):
//   bulk            explicit list of {src, dst, bytes, start_us}
//   permutation     every host sends to a distinct other host (random
//                   derangement from the seed, or a fixed shift)
//   all_to_all      every host sends `bytes` to every other host of its
//                   group (MoE style; group_size, strided across T0s)
//   ring_allreduce  `steps` ring steps of bytes/hosts each; step k of host i
//                   starts when its own step k-1 and its predecessor's step
//                   k-1 have completed
//   incast          N senders to one receiver plus an optional victim flow
//   trace           CSV file: start_us,src,dst,bytes per line
//
// Contract: BuildWorkload validates hosts and sizes and returns
// InvalidArgument naming the bad entry; flows are numbered densely in a
// deterministic order.
#ifndef PRISM_SIM_WORKLOAD_H_
#define PRISM_SIM_WORKLOAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "prism/types.h"
#include "transport/base/json.h"
#include "transport/base/random.h"

namespace prism::sim {

// The largest time a scenario may give, in microseconds (1000 s). Times
// past it, negative ones where not documented otherwise, and NaN are refused
// with InvalidArgument, so every conversion to Time (int64 picoseconds)
// stays in range.
inline constexpr double kMaxScenarioUs = 1e9;

struct Flow {
  uint32_t id = 0;
  uint32_t src = 0;
  uint32_t dst = 0;
  uint64_t bytes = 0;
  Time start = 0;
  uint32_t message_bytes = 0;  // resolved (> 0)
  std::vector<uint32_t> after;
  std::string group;  // "bulk", "permutation", "incast", "victim", ...
  int32_t step = -1;  // ring all-reduce step
};

// Default and maximum message size (also bounds the payload pattern buffer).
inline constexpr uint32_t kDefaultMessageBytes = 16u << 20;

// `spec` is the scenario's "workload": one object or an array of objects.
absl::StatusOr<std::vector<Flow>> BuildWorkload(const json::Value& spec,
                                                uint32_t num_hosts,
                                                uint32_t mtu, Rng& rng,
                                                const std::string& base_dir);

// The `trace` workload's reader, on the file's text: one flow per line,
// `start_us,src,dst,bytes` (spaces around fields allowed; blank lines and
// lines starting with '#' skipped; '\n' ends a line), in line order, each
// with messages of `message_bytes` (1 .. kDefaultMessageBytes; rounded as
// BuildWorkload rounds them) and group "trace". Any other line is an
// InvalidArgument naming `where`:LINE: not four fields, a field that is not
// a number (start_us a decimal in [0, kMaxScenarioUs], the others whole
// numbers), a host outside [0, num_hosts), a flow to itself, bytes outside
// 1 .. 2^40. An empty trace gives no flows (BuildWorkload then refuses the
// scenario). BuildWorkload reads the file named by the workload's `file`
// and calls this.
absl::StatusOr<std::vector<Flow>> ParseTrace(absl::string_view text,
                                             const std::string& where,
                                             uint32_t num_hosts, uint32_t mtu,
                                             uint32_t message_bytes);

}  // namespace prism::sim

#endif  // PRISM_SIM_WORKLOAD_H_
