// The per-packet calls allocate nothing: NextPath / OnFeedback / NextProbe /
// NextProbeTime / SetPlaneUp on every policy, and OnAck / OnTimeout on every
// controller. Counts calls to the global operator new in this binary.

#include "congestion/controller.h"
#include "gtest/gtest.h"
#include "routing/path_selector.h"
#include "tests/count_new.h"
#include "transport/base/random.h"

namespace prism {
namespace {

TEST(NoAllocTest, PathSelectorHotPath) {
  for (const char* policy : {"rotation", "random", "reps", "p2c"}) {
    routing::PathSelectorConfig c;
    c.num_paths = 256;
    c.num_planes = 4;
    c.policy = policy;
    c.denied = {7};
    const uint64_t at_start = testing::NewCalls();
    auto s = routing::MakePathSelector(c);
    ASSERT_TRUE(s.ok());
    ASSERT_GT(testing::NewCalls(), at_start);  // the counting hook works
    Rng rng(1);
    const uint64_t before = testing::NewCalls();
    for (int i = 0; i < 50000; ++i) {
      const Time now = i * kMicrosecond;
      const int p = (*s)->NextPath(now);
      if (p >= 0) {
        (*s)->OnFeedback(static_cast<PathId>(p),
                         static_cast<routing::PathFeedback>(rng.Uniform(6)),
                         now,
                         static_cast<Time>(rng.Uniform(50)) * kMicrosecond);
      }
      const int q = (*s)->NextProbe(now);
      if (q >= 0) {
        (*s)->OnFeedback(static_cast<PathId>(q),
                         routing::PathFeedback::kProbeOk, now, 0);
      }
      (void)(*s)->NextProbeTime();
      if (i % 5000 == 0) (*s)->SetPlaneUp(i / 5000 % 4, i % 10000 != 0, now);
    }
    EXPECT_EQ(testing::NewCalls(), before) << policy;
  }
}

TEST(NoAllocTest, ControllerHotPath) {
  for (const char* algo : {"nscc", "nscc-classic", "fixed", "dcqcn"}) {
    congestion::ControllerConfig c;
    c.algorithm = algo;
    auto cc = congestion::MakeController(c);
    ASSERT_TRUE(cc.ok());
    Rng rng(2);
    const uint64_t before = testing::NewCalls();
    for (int i = 0; i < 50000; ++i) {
      congestion::AckEvent e;
      e.now = i * kMicrosecond;
      e.acked_packets = static_cast<uint32_t>(rng.Uniform(8));
      e.acked_bytes = 4096ull * e.acked_packets;
      e.rtt = static_cast<Time>(rng.Uniform(80)) * kMicrosecond;
      e.ecn_marked = static_cast<uint32_t>(rng.Uniform(3));
      e.trimmed = rng.Bernoulli(0.02) ? 1 : 0;
      e.lost = rng.Bernoulli(0.01) ? 1 : 0;
      e.stranded = rng.Bernoulli(0.05);
      (*cc)->OnAck(e);
      if (i % 1000 == 999) (*cc)->OnTimeout(e.now);
      (void)(*cc)->window_bytes();
      (void)(*cc)->pacing_rate_bps();
    }
    EXPECT_EQ(testing::NewCalls(), before) << algo;
  }
}

}  // namespace
}  // namespace prism
