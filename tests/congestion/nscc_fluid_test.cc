// NSCC in closed loop: a small fluid model (not the packet simulator) of N
// window-limited flows through one FIFO bottleneck that ECN-marks at dequeue
// when the queueing delay exceeds a threshold, with feedback delayed by the
// base RTT. Checks convergence to fairness within 1 ms, full utilisation and
// a queue that stays near the target delay.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <vector>

#include "congestion/nscc/nscc.h"
#include "gtest/gtest.h"

namespace prism::congestion {
namespace {

struct FluidResult {
  double jain = 0;         // over [measure_from, measure_to)
  double utilisation = 0;  // same interval
  double mean_qdelay_us = 0;
  double max_qdelay_us = 0;
};

// 100 Gb/s bottleneck, 10 us base RTT, 100 ns steps. Flow 0 starts at the max
// window, the others at two MTUs.
FluidResult RunFluid(int n, double ecn_threshold_us, Time measure_from,
                     Time measure_to) {
  ControllerConfig cfg;
  cfg.link_rate_bps = 100'000'000'000ull;
  cfg.base_rtt = 10 * kMicrosecond;
  cfg.mtu_bytes = 4096;
  constexpr Time kStep = 100 * kNanosecond;
  constexpr double kBytesPerStep = 1250;  // 100 Gb/s x 100 ns
  constexpr int kFeedbackSteps = 100;     // base RTT
  std::vector<NsccController> flows;
  for (int i = 0; i < n; ++i) {
    NsccParams p = NsccParams::Defaults(cfg);
    p.initial_window_bytes = i == 0 ? p.max_window_bytes : 2 * p.mtu_bytes;
    flows.emplace_back(p);
  }
  struct Batch {
    std::vector<double> bytes;
    int64_t enqueued;
  };
  struct Departure {
    std::vector<double> bytes;
    double qdelay_ns;
  };
  std::deque<Batch> queue;
  std::deque<Departure> feedback;
  std::vector<double> inflight(n, 0), measured(n, 0);
  double queued = 0, qsum = 0, qmax = 0;
  int64_t qsamples = 0;
  const int64_t steps = measure_to / kStep + kFeedbackSteps;
  for (int64_t step = 0; step < steps; ++step) {
    const Time now = step * kStep;
    Batch in{std::vector<double>(n, 0), step};
    for (int i = 0; i < n; ++i) {
      const double room =
          static_cast<double>(flows[i].window_bytes()) - inflight[i];
      in.bytes[i] = std::max(0.0, std::min(room, 2 * kBytesPerStep));
      inflight[i] += in.bytes[i];
      queued += in.bytes[i];
    }
    queue.push_back(in);
    Departure out{std::vector<double>(n, 0), 0};
    double budget = kBytesPerStep;
    while (budget > 1e-9 && !queue.empty()) {
      Batch& head = queue.front();
      double total = 0;
      for (double b : head.bytes) total += b;
      const double take = std::min(budget, total);
      for (int i = 0; i < n && total > 0; ++i) {
        const double t = head.bytes[i] * take / total;
        out.bytes[i] += t;
        head.bytes[i] -= t;
      }
      if (take > 0)
        out.qdelay_ns = static_cast<double>(step - head.enqueued) * 100;
      budget -= take;
      queued -= take;
      if (take >= total - 1e-9) queue.pop_front();
    }
    feedback.push_back(out);
    if (static_cast<int>(feedback.size()) > kFeedbackSteps) {
      const Departure d = feedback.front();
      feedback.pop_front();
      const bool marked = d.qdelay_ns > ecn_threshold_us * 1000;
      for (int i = 0; i < n; ++i) {
        if (d.bytes[i] <= 0) continue;
        AckEvent ev;
        ev.now = now;
        ev.acked_bytes = static_cast<uint64_t>(std::llround(d.bytes[i]));
        ev.acked_packets = 1;
        ev.rtt = cfg.base_rtt + static_cast<Time>(d.qdelay_ns * 1000);
        ev.ecn_marked = marked ? 1 : 0;
        inflight[i] = std::max(0.0, inflight[i] - d.bytes[i]);
        flows[i].OnAck(ev);
        if (now >= measure_from && now < measure_to) measured[i] += d.bytes[i];
      }
    }
    if (now >= measure_from && now < measure_to) {
      const double q = queued / 12.5;  // ns of queue at 12.5 B/ns
      qsum += q;
      qmax = std::max(qmax, q);
      ++qsamples;
    }
  }
  FluidResult r;
  double s = 0, s2 = 0;
  for (double x : measured) {
    s += x;
    s2 += x * x;
  }
  r.jain = s2 > 0 ? s * s / (n * s2) : 0;
  r.utilisation =
      s / (kBytesPerStep *
           static_cast<double>((measure_to - measure_from) / kStep));
  r.mean_qdelay_us = qsum / static_cast<double>(qsamples) / 1000;
  r.max_qdelay_us = qmax / 1000;
  std::printf("fluid n=%d: jain=%.4f util=%.4f mean_q=%.2fus max_q=%.2fus\n", n,
              r.jain, r.utilisation, r.mean_qdelay_us, r.max_qdelay_us);
  return r;
}

// ECN threshold just above the target queueing delay (15 - 10 = 5 us), as
// docs/congestion.md recommends for switches.
constexpr double kEcnUs = 6;

TEST(NsccFluidTest, EightFlowsConvergeWithinOneMillisecond) {
  const FluidResult r =
      RunFluid(8, kEcnUs, 900 * kMicrosecond, 1000 * kMicrosecond);
  EXPECT_GE(r.jain, 0.95);
  EXPECT_GE(r.utilisation, 0.95);
  // The queue stays near the 5 us target queueing delay.
  EXPECT_GT(r.mean_qdelay_us, 2.5);
  EXPECT_LT(r.mean_qdelay_us, 10);
  EXPECT_LT(r.max_qdelay_us, 20);
}

TEST(NsccFluidTest, FewAndManyFlowsConverge) {
  for (int n : {2, 4, 16}) {
    const FluidResult r =
        RunFluid(n, kEcnUs, 900 * kMicrosecond, 1000 * kMicrosecond);
    EXPECT_GE(r.jain, 0.95) << n;
    EXPECT_GE(r.utilisation, 0.95) << n;
  }
}

TEST(NsccFluidTest, SingleFlowFillsThePipeWithoutStandingQueue) {
  const FluidResult r =
      RunFluid(1, kEcnUs, 200 * kMicrosecond, 1000 * kMicrosecond);
  EXPECT_GE(r.utilisation, 0.99);
  EXPECT_LT(r.max_qdelay_us, 6);  // max window 1.5 BDP: at most 5 us
}

}  // namespace
}  // namespace prism::congestion
