// Acceptance tests of the simulator:
// - every scenario in tests/sim/scenarios/ runs every transport it lists
//   with the invariant checkers (bytes exactly once and intact, every packet
//   accounted for by a counter, queues within their buffers), and Prism
//   completes all flows despite the faults;
// - golden digests: the same scenarios at their fixed seeds must reproduce
//   tests/sim/golden/digests.txt (PRISM_UPDATE_GOLDEN=1 rewrites it; explain
//   the change in the commit);
// - the same scenarios and permutation with the faster, opt-in fabric
//   models (lazy_switch_ports, nic_pull_watermark 2): invariants, Prism
//   completes, permutation still separates spraying from hashing;
// - permutation traffic on the 8-plane, 128-host Clos of
//   sim/scenarios/permutation.json: Prism >= 95% of the ideal aggregate
//   goodput, single-path roce well under 70%, both in summary.json.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "tests/sim/sim_test_util.h"

namespace prism::sim {
namespace {

using testing::ExpectInvariants;
using testing::Find;

const std::string kSrc = PRISM_SOURCE_DIR;

std::vector<std::string> TestScenarios() {
  std::vector<std::string> out;
  for (const auto& e :
       std::filesystem::directory_iterator(kSrc + "/tests/sim/scenarios")) {
    if (e.path().extension() == ".json") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::map<std::string, std::string> ReadGolden(const std::string& path) {
  std::map<std::string, std::string> m;
  std::ifstream in(path);
  std::string a, b, c;
  while (in >> a >> b >> c) m[a + " " + b] = c;
  return m;
}

TEST(AcceptanceTest, ScenariosKeepInvariantsAndMatchGolden) {
  const std::string golden_path = kSrc + "/tests/sim/golden/digests.txt";
  const std::map<std::string, std::string> golden = ReadGolden(golden_path);
  const bool update = std::getenv("PRISM_UPDATE_GOLDEN") != nullptr;
  std::ostringstream fresh;
  const std::vector<std::string> files = TestScenarios();
  ASSERT_GE(files.size(), 6u);
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    absl::StatusOr<ScenarioConfig> sc = LoadScenarioFile(file);
    ASSERT_TRUE(sc.ok()) << sc.status();
    absl::StatusOr<std::vector<RunResult>> rs = RunScenario(*sc, {});
    ASSERT_TRUE(rs.ok()) << rs.status();
    for (const RunResult& r : *rs) {
      SCOPED_TRACE(r.transport);
      ExpectInvariants(r);
      if (r.transport.rfind("prism", 0) == 0) {
        // Prism must finish every flow despite the faults (MRC's claim).
        EXPECT_TRUE(r.completed)
            << sc->name << ": " << r.transport << " completed "
            << std::count_if(r.flows.begin(), r.flows.end(),
                             [](const FlowResult& f) { return f.finish >= 0; })
            << "/" << r.flows.size() << " flows by "
            << r.end_time / kMicrosecond << " us (retransmissions "
            << r.totals.retransmissions << ", timeouts " << r.totals.timeouts
            << ")";
        EXPECT_EQ(r.totals.connection_errors, 0u);
      }
      const std::string key = sc->name + " " + r.transport;
      const std::string digest = absl::StrFormat("%016x", Digest(r));
      fresh << key << " " << digest << "\n";
      if (!update) {
        auto it = golden.find(key);
        if (it == golden.end()) {
          ADD_FAILURE() << "no golden digest for " << key
                        << " (run with PRISM_UPDATE_GOLDEN=1)";
        } else {
          EXPECT_EQ(it->second, digest)
              << key << " changed behaviour; if intended, rerun with "
              << "PRISM_UPDATE_GOLDEN=1 and explain the change in the commit";
        }
      }
    }
  }
  if (update) {
    std::ofstream out(golden_path);
    out << fresh.str();
  }
}

TEST(AcceptanceTest, PermutationSprayingBeatsHashing) {
  absl::StatusOr<ScenarioConfig> sc =
      LoadScenarioFile(kSrc + "/sim/scenarios/permutation.json");
  ASSERT_TRUE(sc.ok()) << sc.status();
  ASSERT_EQ(sc->topology.planes, 8u);
  ASSERT_GE(sc->topology.t0_per_plane * sc->topology.hosts_per_t0, 128u);
  absl::StatusOr<std::vector<RunResult>> rs = RunScenario(*sc, {});
  ASSERT_TRUE(rs.ok()) << rs.status();
  const RunResult* prism = Find(*rs, "prism");
  const RunResult* roce = Find(*rs, "roce");
  ASSERT_NE(prism, nullptr);
  ASSERT_NE(roce, nullptr);
  ExpectInvariants(*prism);
  ExpectInvariants(*roce);
  EXPECT_TRUE(prism->completed);
  EXPECT_GE(prism->goodput_fraction, 0.95);
  EXPECT_LT(roce->goodput_fraction, 0.70);
  // Both figures land in summary.json.
  const std::string dir = ::testing::TempDir() + "/sim_perm";
  ASSERT_TRUE(WriteOutputs(dir, *sc, *rs).ok());
  absl::StatusOr<json::Value> sum = json::ParseFile(dir + "/summary.json");
  ASSERT_TRUE(sum.ok()) << sum.status();
  const json::Value* t = sum->Find("transports");
  ASSERT_NE(t, nullptr);
  for (const char* name : {"prism", "roce"}) {
    const json::Value* o = t->Find(name);
    ASSERT_NE(o, nullptr) << name;
    for (const char* k :
         {"goodput_fraction", "completed", "drops", "trims", "retransmissions",
          "path_retirements", "fct_us", "flow_completion_us"}) {
      EXPECT_NE(o->Find(k), nullptr) << name << "." << k;
    }
  }
  EXPECT_DOUBLE_EQ(t->Find("prism")->Find("goodput_fraction")->as_double(),
                   prism->goodput_fraction);
  std::printf("permutation: prism %.3f roce %.3f of ideal\n",
              prism->goodput_fraction, roce->goodput_fraction);
}

// The opt-in fabric models used by the speed benchmark (docs/simulator.md):
// switch ports without a port-done per transmit, NIC pulls in batches. Not
// golden (they reorder simultaneous events): invariants and outcomes only.
ScenarioConfig FastModel(ScenarioConfig sc) {
  sc.fabric.lazy_switch_ports = true;
  sc.fabric.nic_pull_watermark = 2;
  return sc;
}

TEST(AcceptanceTest, FastModelKeepsInvariants) {
  for (const std::string& file : TestScenarios()) {
    SCOPED_TRACE(file);
    absl::StatusOr<ScenarioConfig> sc = LoadScenarioFile(file);
    ASSERT_TRUE(sc.ok()) << sc.status();
    absl::StatusOr<std::vector<RunResult>> rs = RunScenario(FastModel(*sc), {});
    ASSERT_TRUE(rs.ok()) << rs.status();
    for (const RunResult& r : *rs) {
      SCOPED_TRACE(r.transport);
      ExpectInvariants(r);
      if (r.transport.rfind("prism", 0) == 0) {
        EXPECT_TRUE(r.completed);
        EXPECT_EQ(r.totals.connection_errors, 0u);
      }
    }
  }
  absl::StatusOr<ScenarioConfig> sc =
      LoadScenarioFile(kSrc + "/sim/scenarios/permutation.json");
  ASSERT_TRUE(sc.ok()) << sc.status();
  absl::StatusOr<std::vector<RunResult>> rs = RunScenario(FastModel(*sc), {});
  ASSERT_TRUE(rs.ok()) << rs.status();
  const RunResult* prism = Find(*rs, "prism");
  const RunResult* roce = Find(*rs, "roce");
  ASSERT_NE(prism, nullptr);
  ASSERT_NE(roce, nullptr);
  ExpectInvariants(*prism);
  ExpectInvariants(*roce);
  EXPECT_GE(prism->goodput_fraction, 0.95);
  EXPECT_LT(roce->goodput_fraction, 0.70);
  std::printf("permutation (fast model): prism %.3f roce %.3f of ideal\n",
              prism->goodput_fraction, roce->goodput_fraction);
}

}  // namespace
}  // namespace prism::sim
