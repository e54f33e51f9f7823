// Helpers for the simulator tests: build scenarios from JSON text and run
// them.
#ifndef PRISM_TESTS_SIM_SIM_TEST_UTIL_H_
#define PRISM_TESTS_SIM_SIM_TEST_UTIL_H_

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/scenario.h"
#include "sim/simulator.h"
#include "transport/base/json.h"

namespace prism::sim::testing {

inline ScenarioConfig MustParse(const std::string& text) {
  absl::StatusOr<json::Value> v = json::Parse(text);
  EXPECT_TRUE(v.ok()) << v.status();
  if (!v.ok()) return ScenarioConfig{};
  absl::StatusOr<ScenarioConfig> sc = ParseScenario(*v, "");
  EXPECT_TRUE(sc.ok()) << sc.status();
  return sc.ok() ? *sc : ScenarioConfig{};
}

inline std::vector<RunResult> MustRun(const ScenarioConfig& sc) {
  absl::StatusOr<std::vector<RunResult>> r = RunScenario(sc, {});
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : std::vector<RunResult>{};
}

inline const RunResult* Find(const std::vector<RunResult>& rs,
                             const std::string& name) {
  for (const RunResult& r : rs) {
    if (r.transport == name) return &r;
  }
  return nullptr;
}

// Checks the invariants every run must satisfy.
inline void ExpectInvariants(const RunResult& r) {
  EXPECT_EQ(r.invariant_error, "") << r.transport;
  EXPECT_EQ(r.duplicates, 0u) << r.transport;
  EXPECT_EQ(r.mismatches, 0u) << r.transport;
  for (const FlowResult& f : r.flows) {
    if (f.finish >= 0) {
      EXPECT_EQ(f.delivered, f.bytes) << r.transport << " flow " << f.id;
    }
    EXPECT_LE(f.delivered, f.bytes);
  }
}

}  // namespace prism::sim::testing

#endif  // PRISM_TESTS_SIM_SIM_TEST_UTIL_H_
