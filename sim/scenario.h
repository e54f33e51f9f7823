// Scenario files: parse a scenario JSON (docs/simulator.md), run every
// transport it lists on the same seed, and write the outputs
// (summary.json, time-series CSVs).
//
// Contract: ParseScenario rejects unknown transports, bad numbers and bad
// topologies with InvalidArgument; RunScenario runs the transports one after
// the other (each its own Simulator), so results are independent of order.
// Digest() is a stable 64-bit hash of a run's deterministic results
// (completion times, counters, bytes), used by the golden tests.
#ifndef PRISM_SIM_SCENARIO_H_
#define PRISM_SIM_SCENARIO_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/simulator.h"
#include "transport/base/json.h"

namespace prism::sim {

absl::StatusOr<ScenarioConfig> ParseScenario(const json::Value& v,
                                             const std::string& base_dir);
absl::StatusOr<ScenarioConfig> LoadScenarioFile(const std::string& path);

// The resolved configuration, as printed by the CLI.
json::Value DescribeScenario(const ScenarioConfig& sc);

using ProgressFn = std::function<void(const std::string& transport, double)>;
absl::StatusOr<std::vector<RunResult>> RunScenario(const ScenarioConfig& sc,
                                                   const ProgressFn& progress);

uint64_t Digest(const RunResult& r);
// summary.json content.
json::Value Summarize(const ScenarioConfig& sc,
                      const std::vector<RunResult>& results);
// Writes summary.json and <transport>_{flows,hosts,queues}.csv under dir.
absl::Status WriteOutputs(const std::string& dir, const ScenarioConfig& sc,
                          const std::vector<RunResult>& results);

// Jain's fairness index of the values (1 = perfectly fair).
double JainIndex(const std::vector<double>& x);

}  // namespace prism::sim

#endif  // PRISM_SIM_SCENARIO_H_
