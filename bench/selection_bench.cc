// Path selection and congestion control per-packet costs: NextPath +
// OnFeedback for each policy, and one controller OnAck per algorithm.
#include <benchmark/benchmark.h>

#include <cstdint>

#include "congestion/controller.h"
#include "routing/path_selector.h"
#include "transport/base/random.h"

namespace prism {
namespace {

const char* const kPolicies[] = {"rotation", "random", "reps", "p2c"};
const char* const kAlgos[] = {"nscc", "fixed", "dcqcn"};

// range(0): policy index; range(1): number of paths. Feedback: mostly GOOD,
// 2% ECN, 0.1% LOST, with probes answered as they come due.
void BM_PathSelect(benchmark::State& state) {
  routing::PathSelectorConfig c;
  c.policy = kPolicies[state.range(0)];
  c.num_paths = static_cast<uint16_t>(state.range(1));
  c.num_planes = 4;
  auto sel = routing::MakePathSelector(c);
  if (!sel.ok()) {
    state.SkipWithError("config");
    return;
  }
  routing::PathSelector& s = **sel;
  Rng rng(1);
  Time now = 0;
  for (auto _ : state) {
    now += 10 * kNanosecond;
    const int p = s.NextPath(now);
    const uint64_t r = rng.Uniform(1000);
    const auto fb = r < 20   ? routing::PathFeedback::kEcn
                    : r < 21 ? routing::PathFeedback::kLost
                             : routing::PathFeedback::kGood;
    s.OnFeedback(static_cast<PathId>(p), fb, now, 10 * kMicrosecond);
    if (s.NextProbeTime() <= now) {
      const int q = s.NextProbe(now);
      s.OnFeedback(static_cast<PathId>(q), routing::PathFeedback::kProbeOk, now,
                   0);
    }
    benchmark::DoNotOptimize(p);
  }
  state.SetLabel(c.policy);
}
BENCHMARK(BM_PathSelect)
    ->ArgsProduct({{0, 1, 2, 3}, {256, 4096}})
    ->ArgNames({"policy", "paths"});

void BM_ControllerOnAck(benchmark::State& state) {
  congestion::ControllerConfig c;
  c.algorithm = kAlgos[state.range(0)];
  auto cc = congestion::MakeController(c);
  if (!cc.ok()) {
    state.SkipWithError("config");
    return;
  }
  Rng rng(2);
  congestion::AckEvent e;
  e.acked_packets = 1;
  e.acked_bytes = 4096;
  for (auto _ : state) {
    e.now += 40 * kNanosecond;
    e.rtt = (10 + static_cast<Time>(rng.Uniform(10))) * kMicrosecond;
    e.ecn_marked = rng.Uniform(16) == 0 ? 1 : 0;
    (*cc)->OnAck(e);
    benchmark::DoNotOptimize((*cc)->window_bytes());
  }
  state.SetLabel(c.algorithm);
}
BENCHMARK(BM_ControllerOnAck)->DenseRange(0, 2)->ArgName("algo");

}  // namespace
}  // namespace prism
