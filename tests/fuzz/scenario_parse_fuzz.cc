// fuzz-libs: prism_sim
// Fuzzes the simulator's scenario reader (sim/scenario.h ParseScenario: the
// topology, fabric, faults, workload and transports of a scenario JSON) on
// JSON text. Any input must be accepted or rejected with a status, never
// crash or trip a sanitizer (out-of-range numbers cast to integers, sizes
// that overflow). An accepted scenario must describe itself
// (DescribeScenario, what the CLI prints) and that description must be JSON
// that serializes. A small accepted scenario (a clos2 of at most 4 planes,
// 4 x 4 T0/T1 and 4 hosts per T0, or a fattree of k <= 4) is also set up
// (Simulator::Init: fabric, faults, workload, engines), not run: the fault
// list and the workload are read there. Scenarios naming a trace file are
// skipped: they would read whatever file the input names.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "routing/topology.h"
#include "sim/scenario.h"
#include "sim/simulator.h"
#include "transport/base/json.h"

namespace {

void Check(bool ok) {
  if (!ok) abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 16384) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (text.find("trace") != std::string_view::npos) return 0;
  auto v = prism::json::Parse(text);
  if (!v.ok()) return 0;
  auto sc = prism::sim::ParseScenario(*v, "/nonexistent-prism-fuzz");
  if (!sc.ok()) {
    Check(!sc.status().message().empty());
    return 0;
  }
  const prism::json::Value d = prism::sim::DescribeScenario(*sc);
  Check(d.is_object());
  Check(!prism::json::Serialize(d, 0).empty());
  const prism::routing::TopologySpec& t = sc->topology;
  const bool small = t.kind == "fattree3"
                         ? t.fattree_k <= 4
                         : t.planes <= 4 && t.t0_per_plane <= 4 &&
                               t.t1_per_plane <= 4 && t.hosts_per_t0 <= 4 &&
                               t.parallel_links <= 2;
  if (small && !sc->transports.empty()) {
    prism::sim::Simulator sim(*sc, sc->transports[0]);
    (void)sim.Init();
  }
  return 0;
}
