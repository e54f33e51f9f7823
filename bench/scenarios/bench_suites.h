// Scenario benchmark suites: failover, loss, incast and permutation runs of
// Prism against the single-path (`roce`) and multi-QP (`multiqp`) baselines
// on the simulator (sim/), with the figures of docs/benchmarks.md.
//
// Each suite builds one or more scenarios; every scenario runs each of its
// transports on the same fabric, seed, workload and fault schedule (each
// transport in its own sim::Simulator), then derives the suite's figures
// from the run results and their goodput time series. RunSuite returns
//   {"suite": S, "quick": b, "seed": n,
//    "scenarios": [{"name": ..., "description": ..., "fault_spans_us": [...],
//                   "transports": {"prism": {...}, "roce": {...}, ...}}]}
// where every transport object holds the figures under the key names of
// issue 6 (documented per suite in docs/benchmarks.md) plus common counters.
//
// When SuiteOptions::out_dir is not empty, the goodput time series of each
// scenario is written to out_dir/SUITE/<scenario>.csv
// (transport,time_us,goodput_gbps) for the plot script.
//
// Determinism: a suite's figures depend only on (suite, quick, seed); the
// wall-clock seconds reported under "wall_seconds" are the only exception.
// Thread safety: none; run one suite per thread.
// REQUIRES: suite is one of SuiteNames().
#ifndef PRISM_BENCH_SCENARIOS_BENCH_SUITES_H_
#define PRISM_BENCH_SCENARIOS_BENCH_SUITES_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/base/json.h"

namespace prism::bench {

struct SuiteOptions {
  bool quick = false;
  uint64_t seed = 1;
  std::string out_dir;  // empty: write no CSV files
  // Only the transport with this name (e.g. "prism"); empty: all. Figures
  // comparing transports are then absent from the tables.
  std::string only_transport;
  // Sets sim::TransportConfig::oracle_reroute_after (in us) for every Prism
  // transport: a what-if bound for diagnosis, never a result; < 0: off.
  double oracle_reroute_after_us = -1;
  // false: Prism runs without the fate-sharing hint
  // (sim::TransportConfig::fate_sharing), for A/B runs.
  bool fate_sharing = true;
  // false: Prism runs without group balance
  // (sim::TransportConfig::group_balance), for A/B runs.
  bool group_balance = true;
  // false: Prism runs without tail resends
  // (sim::TransportConfig::tail_resend), for A/B runs.
  bool tail_resend = true;
  // false: Prism runs without the spurious-loss undo
  // (sim::TransportConfig::spurious_undo), for A/B runs.
  bool spurious_undo = true;
  // Called before each transport run (scenario, transport); may be empty.
  std::function<void(const std::string&, const std::string&)> on_run;
};

// "port-loss", "link-flaps", "t1-reboot", "random-loss", "incast",
// "permutation", "headline".
const std::vector<std::string>& SuiteNames();

// InvalidArgument for an only_transport that a known suite does not run
// (the message lists those it does) and an oracle_reroute_after_us that is
// not < 0 or in [0, 1e9]; OK otherwise (an unknown suite is RunSuite's
// error).
absl::Status ValidateSuiteOptions(const std::string& suite,
                                  const SuiteOptions& opt);

// Runs one suite. InvalidArgument, before anything runs, for an unknown
// suite and for what ValidateSuiteOptions refuses; errors of the simulator
// (bad scenario, failed init) are passed on.
absl::StatusOr<json::Value> RunSuite(const std::string& suite,
                                     const SuiteOptions& opt);

// A compact, human-readable table of a RunSuite result.
std::string FormatTable(const json::Value& suite_result);

}  // namespace prism::bench

#endif  // PRISM_BENCH_SCENARIOS_BENCH_SUITES_H_
