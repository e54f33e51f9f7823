// Validation of the simulator (and the transports on it) against theory:
// a single flow reaches line rate, N flows through one bottleneck share it
// fairly, and queueing delay at a bottleneck matches rate/buffer
// arithmetic end to end.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "tests/sim/sim_test_util.h"

namespace prism::sim {
namespace {

using testing::ExpectInvariants;
using testing::Find;
using testing::MustParse;
using testing::MustRun;

// Two hosts on different T0s, one 100G plane; 16 MiB.
TEST(TheoryTest, SingleFlowReachesLineRate) {
  ScenarioConfig sc = MustParse(R"({
    "name": "single", "seed": 1,
    "topology": {"kind": "clos2", "planes": 1, "t0_per_plane": 2,
                 "t1_per_plane": 2, "hosts_per_t0": 2},
    "duration_us": 5000,
    "transports": ["prism", "roce"],
    "workload": {"type": "bulk", "src": 0, "dst": 2, "bytes": 16777216}
  })");
  std::vector<RunResult> rs = MustRun(sc);
  ASSERT_EQ(rs.size(), 2u);
  for (const RunResult& r : rs) {
    ExpectInvariants(r);
    EXPECT_TRUE(r.completed) << r.transport;
    // Of the payload rate a full packet allows at line rate ...
    EXPECT_GE(r.goodput_fraction, 0.97) << r.transport;
    // ... and of the raw 100 Gb/s line rate (headers count against us).
    EXPECT_GE(r.raw_goodput_fraction, 0.95) << r.transport;
    EXPECT_EQ(r.drops_total, 0u) << r.transport;
  }
}

// N senders behind different T0s into one receiver: its NIC port is the
// only bottleneck. Bytes delivered per flow over the middle of the run must
// be equal to within Jain >= 0.95, and the sum must fill the bottleneck.
TEST(TheoryTest, FlowsShareOneBottleneckFairly) {
  ScenarioConfig sc = MustParse(R"({
    "name": "fair", "seed": 2,
    "topology": {"kind": "clos2", "planes": 1, "t0_per_plane": 9,
                 "t1_per_plane": 2, "hosts_per_t0": 1},
    "duration_us": 20000,
    "sample_interval_us": 20,
    "transports": ["prism"],
    "workload": {"type": "incast", "senders": 8, "dst": 0, "bytes": 4194304}
  })");
  std::vector<RunResult> rs = MustRun(sc);
  ASSERT_EQ(rs.size(), 1u);
  const RunResult& r = rs[0];
  ExpectInvariants(r);
  ASSERT_TRUE(r.completed);
  Time first_done = kTimeInfinite;
  for (const FlowResult& f : r.flows)
    first_done = std::min(first_done, f.finish);
  // Window [20%, 90%] of the first completion.
  const Sample* a = nullptr;
  const Sample* b = nullptr;
  for (const Sample& s : r.samples) {
    if (!a && s.t >= first_done / 5) a = &s;
    if (s.t <= first_done * 9 / 10) b = &s;
  }
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_GT(b->t, a->t);
  std::vector<double> rates;
  double sum = 0;
  for (size_t i = 0; i < r.flows.size(); ++i) {
    const double bps = double(b->flow_bytes[i] - a->flow_bytes[i]) * 8 /
                       (double(b->t - a->t) / kSecond);
    rates.push_back(bps);
    sum += bps;
  }
  const double jain = JainIndex(rates);
  EXPECT_GE(jain, 0.95) << absl::StrFormat(
      "window %d..%d us", a->t / kMicrosecond, b->t / kMicrosecond);
  // The bottleneck stays busy: >= 90% of the payload rate of 100G.
  EXPECT_GE(sum, 0.9 * 100e9 * 4096 / (4096 + 130)) << sum;
}

// End to end through a transport: two roce flows (no DCQCN, windows larger
// than the buffer) into one receiver on drop-tail buffers. The bottleneck
// queue fills to its buffer (never above: invariants), overflow drops are
// the only drops, and the receiver port drains at line rate meanwhile.
TEST(TheoryTest, BottleneckQueueFillsToBufferAndDrainsAtLineRate) {
  const int buffer = 100 * 1024;
  ScenarioConfig sc = MustParse(absl::StrFormat(R"({
    "name": "qdelay", "seed": 3,
    "topology": {"kind": "clos2", "planes": 1, "t0_per_plane": 3,
                 "t1_per_plane": 1, "hosts_per_t0": 1},
    "fabric": {"trimming": false, "ecn": false, "buffer_bytes": %d},
    "duration_us": 3000,
    "sample_interval_us": 5,
    "transports": [{"name": "roce", "dcqcn": false, "window_bytes": 1048576}],
    "workload": {"type": "incast", "senders": 2, "dst": 0, "bytes": 2097152}
  })",
                                                buffer));
  std::vector<RunResult> rs = MustRun(sc);
  ASSERT_EQ(rs.size(), 1u);
  const RunResult& r = rs[0];
  ExpectInvariants(r);
  EXPECT_TRUE(r.completed);
  uint32_t peak = 0;
  for (const Sample& s : r.samples) peak = std::max(peak, s.max_queue);
  EXPECT_LE(peak, static_cast<uint32_t>(buffer));
  EXPECT_GE(peak, static_cast<uint32_t>(buffer - 2 * (4096 + 32 + 66)));
  EXPECT_GT(r.drops[static_cast<size_t>(DropReason::kBufferOverflow)], 0u);
  EXPECT_EQ(r.drops_total,
            r.drops[static_cast<size_t>(DropReason::kBufferOverflow)] +
                r.drops[static_cast<size_t>(DropReason::kReceiverDiscard)]);
  // While the queue is full the receiver gets exactly the line rate (minus
  // headers) in every sample interval of the first 40 us after it filled.
  const double payload_rate = 100e9 * 4096 / (4096 + 32 + 66);
  int checked = 0;
  for (size_t i = 1; i < r.samples.size() && checked < 8; ++i) {
    const Sample& p = r.samples[i - 1];
    const Sample& s = r.samples[i];
    if (p.max_queue < static_cast<uint32_t>(buffer / 2) ||
        s.max_queue < static_cast<uint32_t>(buffer / 2)) {
      continue;
    }
    const double bps = double(s.host_bytes[0] - p.host_bytes[0]) * 8 /
                       (double(s.t - p.t) / kSecond);
    EXPECT_NEAR(bps / payload_rate, 1.0, 0.2) << s.t;
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace prism::sim
