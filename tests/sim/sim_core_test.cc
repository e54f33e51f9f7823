// Unit tests of the simulator core: event queue order and timers, packet
// pool, fabric mechanics (serialization, propagation, queueing, drop-tail,
// trimming, ECN, SRv6 and ECMP forwarding, link faults), workloads and
// scenario validation, and determinism with two simulators in one process.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <queue>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/event_queue.h"
#include "sim/fabric.h"
#include "sim/prism_host.h"
#include "sim/scenario.h"
#include "sim/workload.h"
#include "tests/sim/sim_test_util.h"

namespace prism::sim {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::MustParse;
using testing::MustRun;

TEST(EventQueueTest, OrdersByTimeThenSequence) {
  EventQueue q;
  q.Push(30, 5, 0, nullptr);
  q.Push(10, 5, 1, nullptr);
  q.Push(10, 5, 2, nullptr);
  q.Push(20, 5, 3, nullptr);
  q.Push(10, 5, 4, nullptr);
  std::vector<uint32_t> order;
  std::vector<Time> times;
  while (!q.empty()) {
    Event e = q.Pop();
    order.push_back(e.arg);
    times.push_back(e.time);
  }
  EXPECT_THAT(order, ::testing::ElementsAre(1, 2, 4, 3, 0));
  EXPECT_TRUE(std::is_sorted(times.begin(), times.end()));
}

TEST(EventQueueTest, ManyRandomEventsPopSorted) {
  EventQueue q;
  Rng rng(7);
  for (int i = 0; i < 20000; ++i) q.Push(rng.Range(0, 1000), 1, i, nullptr);
  Time last = -1;
  uint64_t last_seq = 0;
  while (!q.empty()) {
    Event e = q.Pop();
    ASSERT_GE(e.time, last);
    if (e.time == last) {
      ASSERT_GT(e.seq, last_seq);
    }
    last = e.time;
    last_seq = e.seq;
  }
  EXPECT_EQ(q.popped(), 20000u);
}

// The calendar queue pops exactly in (time, seq) order against a reference
// heap, with pushes into the bucket being drained, across the calendar's
// horizon, far beyond it, and interleaved with pops.
TEST(EventQueueTest, CalendarMatchesReferenceOrder) {
  EventQueue q;
  Rng rng(11);
  using Key = std::pair<Time, uint64_t>;
  std::priority_queue<Key, std::vector<Key>, std::greater<Key>> ref;
  const Time horizon = Time{EventQueue::kBuckets} << EventQueue::kShift;
  Time now = 0;
  uint64_t popped = 0;
  for (int round = 0; round < 200000; ++round) {
    const uint64_t r = rng.Uniform(10);
    if (r < 5 || ref.empty()) {
      Time d;
      switch (rng.Uniform(5)) {
        case 0:
          d = 0;
          break;
        case 1:
          d = rng.Range(0, 300);
          break;
        case 2:
          d = rng.Range(0, 2 * kMicrosecond);
          break;
        case 3:
          d = horizon - 512 + rng.Range(0, 1024);
          break;
        default:
          d = rng.Range(0, 200 * kMicrosecond);
          break;
      }
      const uint64_t seq = q.Push(now + d, 1, 0, nullptr);
      ref.push({now + d, seq});
    } else {
      ASSERT_EQ(q.next_time(), ref.top().first);
      const Event e = q.Pop();
      ASSERT_EQ(e.time, ref.top().first) << round;
      ASSERT_EQ(e.seq, ref.top().second) << round;
      ref.pop();
      now = e.time;
      ++popped;
    }
    ASSERT_EQ(q.size(), ref.size());
  }
  while (!ref.empty()) {
    const Event e = q.Pop();
    ASSERT_EQ(e.seq, ref.top().second);
    ref.pop();
  }
  EXPECT_TRUE(q.empty());
  EXPECT_GT(popped, 50000u);
}

// Buckets with many events (the counting-sort path), same-time ties, and far
// events that join a bucket already holding near ones.
TEST(EventQueueTest, CrowdedBucketsMatchReferenceOrder) {
  EventQueue q;
  Rng rng(12);
  using Key = std::pair<Time, uint64_t>;
  std::priority_queue<Key, std::vector<Key>, std::greater<Key>> ref;
  const Time bucket = Time{1} << EventQueue::kShift;
  const Time horizon = Time{EventQueue::kBuckets} << EventQueue::kShift;
  Time now = 0;
  uint64_t popped = 0;
  for (int round = 0; round < 400; ++round) {
    const int burst = static_cast<int>(rng.Uniform(300));
    const Time tie = now + rng.Range(0, 4 * bucket);
    for (int i = 0; i < burst; ++i) {
      Time t;
      switch (rng.Uniform(4)) {
        case 0:
          t = tie;
          break;
        case 1:
          t = now + horizon + rng.Range(0, 4 * bucket);
          break;
        default:
          t = now + rng.Range(0, 4 * bucket);
          break;
      }
      const uint64_t seq = q.Push(t, 1, 0, nullptr);
      ref.push({t, seq});
    }
    const uint64_t pops = rng.Uniform(ref.size() + 1);
    for (uint64_t i = 0; i < pops; ++i) {
      const Event e = q.Pop();
      ASSERT_EQ(e.time, ref.top().first) << round;
      ASSERT_EQ(e.seq, ref.top().second) << round;
      ref.pop();
      now = e.time;
      ++popped;
    }
  }
  while (!ref.empty()) {
    const Event e = q.Pop();
    ASSERT_EQ(e.seq, ref.top().second);
    ref.pop();
  }
  EXPECT_TRUE(q.empty());
  EXPECT_GT(popped, 10000u);
}

// Crowded buckets whose events fall in one 64 ps step, out of order and
// with same-time ties: the insertion sort gives up and the fallback sort
// orders them.
TEST(EventQueueTest, HugeBucketPopsInOrder) {
  EventQueue q;
  Rng rng(13);
  const Time bucket = Time{1} << EventQueue::kShift;
  using Key = std::pair<Time, uint64_t>;
  std::vector<Key> ref;
  for (int i = 0; i < 20000; ++i) {
    const Time t = bucket + rng.Range(0, 64);
    ref.push_back({t, q.Push(t, 1, 0, nullptr)});
  }
  for (int i = 0; i < 5000; ++i) {
    const Time t = 3 * bucket + rng.Range(0, 64);
    ref.push_back({t, q.Push(t, 1, 0, nullptr)});
  }
  std::sort(ref.begin(), ref.end());
  for (const Key& k : ref) {
    const Event e = q.Pop();
    ASSERT_EQ(e.time, k.first);
    ASSERT_EQ(e.seq, k.second);
  }
  EXPECT_TRUE(q.empty());
}

// PopUntil pops exactly what next_time() <= limit then Pop() would, and
// nothing once the earliest event is later than the limit or the queue is
// empty.
TEST(EventQueueTest, PopUntilStopsAtTheLimit) {
  EventQueue q;
  Rng rng(14);
  using Key = std::pair<Time, uint64_t>;
  std::priority_queue<Key, std::vector<Key>, std::greater<Key>> ref;
  EXPECT_EQ(q.PopUntil(kTimeInfinite), nullptr);
  Time now = 0;
  for (int round = 0; round < 2000; ++round) {
    for (int i = static_cast<int>(rng.Uniform(40)); i > 0; --i) {
      const Time t = now + rng.Range(0, 20 * kMicrosecond);
      ref.push({t, q.Push(t, 1, 0, nullptr)});
    }
    const Time limit = now + rng.Range(0, 2 * kMicrosecond);
    while (!ref.empty() && ref.top().first <= limit) {
      const Event* e = q.PopUntil(limit);
      ASSERT_NE(e, nullptr);
      ASSERT_EQ(e->time, ref.top().first);
      ASSERT_EQ(e->seq, ref.top().second);
      ref.pop();
      now = e->time;
    }
    const size_t left = q.size();
    ASSERT_EQ(q.PopUntil(limit), nullptr);
    ASSERT_EQ(q.size(), left);
    ASSERT_EQ(q.size(), ref.size());
  }
}

TEST(EventQueueTest, NeverSchedulesIntoThePast) {
  EventQueue q;
  q.Push(100, 1, 0, nullptr);
  q.Pop();
  q.Push(50, 1, 1, nullptr);
  EXPECT_EQ(q.Pop().time, 100);
}

// Batches: while one is open, a push before its end goes to the batch heap
// (popped in (time, seq) order by PopBatch, never by Pop), a later one to
// the calendar; the clock may be moved back for another node's events.
TEST(EventQueueTest, BatchHeapTakesPushesBeforeTheBatchEnd) {
  EventQueue q;
  q.Push(100, 1, 0, nullptr);
  q.Push(150, 1, 1, nullptr);
  q.Push(900, 1, 2, nullptr);
  q.BeginBatch(100, 500);
  std::vector<uint32_t> args;
  while (const Event* e = q.PopUntil(499)) args.push_back(e->arg);
  EXPECT_THAT(args, ::testing::ElementsAre(0u, 1u));
  q.SetClock(150);
  const uint64_t a = q.Push(300, 1, 3, nullptr);
  q.SetClock(100);  // back, to the other node's event
  const uint64_t b = q.Push(300, 1, 4, nullptr);
  q.Push(200, 1, 5, nullptr);
  q.Push(50, 1, 6, nullptr);   // before the clock: at the clock
  q.Push(500, 1, 7, nullptr);  // at the batch end: calendar
  EXPECT_LT(a, b);
  EXPECT_FALSE(q.batch_heap_empty());
  std::vector<std::pair<Time, uint32_t>> heap;
  while (!q.batch_heap_empty()) {
    const Event e = q.PopBatch();
    heap.emplace_back(e.time, e.arg);
  }
  EXPECT_THAT(heap, ::testing::ElementsAre(std::make_pair(Time{100}, 6u),
                                           std::make_pair(Time{200}, 5u),
                                           std::make_pair(Time{300}, 3u),
                                           std::make_pair(Time{300}, 4u)));
  q.EndBatch(300);
  EXPECT_EQ(q.now(), 300);
  q.Push(400, 1, 8, nullptr);  // no batch open: calendar
  std::vector<uint32_t> rest;
  while (!q.empty()) rest.push_back(q.Pop().arg);
  EXPECT_THAT(rest, ::testing::ElementsAre(8u, 7u, 2u));
}

// The batch heap against a reference sort: random times over a batch
// span, with ties, pushed in random order.
TEST(EventQueueTest, BatchHeapMatchesReferenceOrder) {
  Rng rng(21);
  for (Time span : {Time{1}, Time{63}, Time{64}, Time{500000}, Time{7777777}}) {
    EventQueue q;
    const Time start = 1000;
    q.Push(start, 1, 0, nullptr);
    q.BeginBatch(start, start + span);
    ASSERT_NE(q.PopUntil(start), nullptr);
    q.SetClock(start);
    std::vector<std::pair<Time, uint64_t>> want;
    for (uint32_t i = 0; i < 2000; ++i) {
      const Time t =
          start + static_cast<Time>(rng.Uniform(static_cast<uint64_t>(
                                        std::min<Time>(span, 300))) *
                                    (span / std::min<Time>(span, 300)));
      want.emplace_back(t, q.Push(t, 1, i, nullptr));
    }
    std::sort(want.begin(), want.end());
    std::vector<std::pair<Time, uint64_t>> got;
    while (!q.batch_heap_empty()) {
      const Event e = q.PopBatch();
      got.emplace_back(e.time, e.seq);
    }
    EXPECT_EQ(got, want) << "span " << span;
    q.EndBatch(start + span - 1);
    EXPECT_TRUE(q.empty());
  }
}

class Recorder : public TimerClient {
 public:
  void OnTimer(Time now, uint32_t tag) override { fired.push_back({now, tag}); }
  std::vector<std::pair<Time, uint32_t>> fired;
};

void Drain(EventQueue& q) {
  while (!q.empty()) {
    Event e = q.Pop();
    if (e.kind == EventQueue::kTimerKind)
      static_cast<Timer*>(e.ptr)->Fire(q, e);
  }
}

TEST(TimerTest, CancelRearmEarlierAndLater) {
  EventQueue q;
  Recorder r;
  Timer a(&r, 1), b(&r, 2), c(&r, 3), d(&r, 4);
  a.Arm(q, 100);
  b.Arm(q, 100);
  b.Cancel();  // never fires
  c.Arm(q, 100);
  c.Arm(q, 300);  // later: fires once at 300
  d.Arm(q, 500);
  d.Arm(q, 200);  // earlier: fires once at 200
  EXPECT_TRUE(a.armed());
  EXPECT_FALSE(b.armed());
  Drain(q);
  EXPECT_THAT(r.fired, ::testing::ElementsAre(std::make_pair(Time{100}, 1u),
                                              std::make_pair(Time{200}, 4u),
                                              std::make_pair(Time{300}, 3u)));
  EXPECT_FALSE(a.armed());
}

TEST(TimerTest, FrequentLaterRearmDoesNotGrowTheHeap) {
  EventQueue q;
  Recorder r;
  Timer t(&r, 9);
  for (int i = 1; i <= 1000; ++i) t.Arm(q, 10 * i);
  EXPECT_EQ(q.size(), 1u);
  Drain(q);
  ASSERT_EQ(r.fired.size(), 1u);
  EXPECT_EQ(r.fired[0].first, 10000);
}

TEST(PacketPoolTest, ReusesAndCounts) {
  PacketPool pool;
  std::vector<SimPacket*> v;
  for (int i = 0; i < 5000; ++i) v.push_back(pool.Alloc());
  const size_t cap = pool.capacity();
  for (SimPacket* p : v) pool.Free(p);
  for (int i = 0; i < 5000; ++i) pool.Free(pool.Alloc());
  EXPECT_EQ(pool.capacity(), cap);  // no growth in steady state
  EXPECT_EQ(pool.live(), 0u);
  EXPECT_EQ(pool.allocated(), 10000u);
}

// A fabric harness with a client that records deliveries.
class FabricHarness : public FabricClient {
 public:
  FabricHarness(const routing::TopologySpec& spec, const FabricConfig& cfg) {
    absl::StatusOr<routing::Topology> t = routing::Topology::Build(spec);
    EXPECT_TRUE(t.ok()) << t.status();
    topo = std::make_unique<routing::Topology>(std::move(*t));
    fabric = std::make_unique<Fabric>(topo.get(), cfg, &q, &pool, 42, this);
    absl::Status st = fabric->Init();
    EXPECT_TRUE(st.ok()) << st;
  }
  void DeliverToHost(Time now, uint32_t host, SimPacket* p) override {
    got.push_back({now, host, p->bl_psn, p->trimmed, p->ecn_ce, p->hops});
    pool.Free(p);
  }
  void HostPortIdle(Time, uint32_t, uint16_t) override {}
  void HostPortStatus(Time, uint32_t host, uint16_t plane, bool up) override {
    status.push_back({host, plane, up});
  }
  SimPacket* Data(uint32_t src, uint32_t dst, uint32_t psn, uint32_t payload,
                  uint32_t entropy = 1) {
    SimPacket* p = pool.Alloc();
    ResetPacket(p);
    p->src = src;
    p->dst = dst;
    p->bl_psn = psn;
    p->header_len = 64;
    p->payload = buf;
    p->payload_len = payload;
    p->entropy = entropy;
    return p;
  }
  void Run() {
    while (!q.empty()) fabric->HandleEvent(q.Pop());
  }
  struct Got {
    Time t;
    uint32_t host;
    uint32_t psn;
    bool trimmed;
    bool ecn;
    uint8_t hops;
  };
  EventQueue q;
  PacketPool pool;
  std::unique_ptr<routing::Topology> topo;
  std::unique_ptr<Fabric> fabric;
  std::vector<Got> got;
  struct St {
    uint32_t host;
    uint16_t plane;
    bool up;
  };
  std::vector<St> status;
  uint8_t buf[9000] = {};
};

routing::TopologySpec SmallClos(uint32_t planes = 1) {
  routing::TopologySpec s;
  s.kind = "clos2";
  s.planes = planes;
  s.t0_per_plane = 2;
  s.t1_per_plane = 2;
  s.hosts_per_t0 = 2;
  s.host_link_bps = 100'000'000'000ull;
  s.fabric_link_bps = 100'000'000'000ull;
  s.host_link_delay = 500 * kNanosecond;
  s.fabric_link_delay = 1000 * kNanosecond;
  return s;
}

TEST(FabricTest, SerializationAndPropagationArithmetic) {
  FabricConfig cfg;
  FabricHarness h(SmallClos(), cfg);
  const uint32_t payload = 4096;
  const int n = 10;
  for (int i = 0; i < n; ++i)
    h.fabric->HostSend(0, 0, 0, h.Data(0, 2, i, payload));
  h.Run();
  ASSERT_EQ(h.got.size(), static_cast<size_t>(n));
  const Time ser = SerializationTime(payload + 64 + cfg.wire_overhead_bytes,
                                     100'000'000'000ull);
  // host -> T0 -> T1 -> T0 -> host: 4 links, 4 serializations for the first
  // packet (store and forward), then one serialization apart.
  const Time prop = 2 * 500 * kNanosecond + 2 * 1000 * kNanosecond;
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(h.got[i].psn, static_cast<uint32_t>(i));
    EXPECT_EQ(h.got[i].t, prop + 4 * ser + i * ser) << i;
    EXPECT_EQ(h.got[i].hops, 3);
  }
  EXPECT_TRUE(h.fabric->CheckInvariants().ok());
}

// Two senders at line rate into one receiver port: the bottleneck queue
// grows by one packet per two serializations; with a drop-tail buffer of B
// bytes exactly floor(B / size) packets wait and the rest are dropped.
TEST(FabricTest, QueueingDelayAndDropTailMatchBufferArithmetic) {
  FabricConfig cfg;
  cfg.trimming = false;
  cfg.ecn = false;
  const uint32_t size = 1000 + 64 + cfg.wire_overhead_bytes;
  cfg.buffer_bytes = 20 * size;  // room for exactly 20 packets
  FabricHarness h(SmallClos(), cfg);
  const int n = 100;
  for (int i = 0; i < n; ++i) {
    h.fabric->HostSend(0, 0, 0, h.Data(0, 1, i, 1000));         // same T0
    h.fabric->HostSend(0, 2, 0, h.Data(2, 1, 1000 + i, 1000));  // via T1
  }
  h.Run();
  const uint64_t drops =
      h.fabric->drops()[static_cast<size_t>(DropReason::kBufferOverflow)];
  EXPECT_EQ(h.got.size() + drops, 2u * n);
  EXPECT_GT(drops, 0u);
  // The receiver port never idles once busy: deliveries are exactly one
  // serialization apart, and its queue peaked at the buffer.
  const Time ser = SerializationTime(size, 100'000'000'000ull);
  for (size_t i = 1; i < h.got.size(); ++i) {
    ASSERT_EQ(h.got[i].t - h.got[i - 1].t, ser) << i;
  }
  const Port& bottleneck = h.fabric->ports()[h.fabric->host_down_port(1, 0)];
  EXPECT_LE(bottleneck.max_dq_bytes, cfg.buffer_bytes);
  EXPECT_GE(bottleneck.max_dq_bytes, cfg.buffer_bytes - size);
  // Queueing delay of every delivered packet = the time it started
  // transmission at the bottleneck minus when it arrived there; it is
  // bounded by buffer / rate and reaches it (within one packet) once full.
  const Time host_d = 500 * kNanosecond, fab_d = 1000 * kNanosecond;
  Time max_q = 0;
  for (const auto& g : h.got) {
    const bool via_t1 = g.psn >= 1000;
    const uint32_t i = via_t1 ? g.psn - 1000 : g.psn;
    const Time arrive =
        (i + 1) * ser + host_d + (via_t1 ? 2 * (ser + fab_d) : 0);
    const Time start = g.t - ser - host_d;
    ASSERT_GE(start, arrive) << g.psn;
    max_q = std::max(max_q, start - arrive);
  }
  const Time full = SerializationTime(cfg.buffer_bytes, 100'000'000'000ull);
  EXPECT_LE(max_q, full);
  EXPECT_GE(max_q, full - 2 * ser);
  EXPECT_TRUE(h.fabric->CheckInvariants().ok());
  EXPECT_EQ(h.pool.live(), 0u);
}

TEST(FabricTest, TrimmingForwardsHeadersAtHighPriority) {
  FabricConfig cfg;
  cfg.ecn = false;
  const uint32_t size = 4096 + 64 + cfg.wire_overhead_bytes;
  cfg.buffer_bytes = 4 * size;
  FabricHarness h(SmallClos(), cfg);
  for (int i = 0; i < 50; ++i) {
    h.fabric->HostSend(0, 0, 0, h.Data(0, 1, i, 4096));
    h.fabric->HostSend(0, 2, 0, h.Data(2, 1, 1000 + i, 4096));
  }
  h.Run();
  EXPECT_EQ(h.got.size(), 100u);  // nothing lost: trimmed instead
  size_t trimmed = 0;
  for (const auto& g : h.got) trimmed += g.trimmed;
  EXPECT_GT(trimmed, 0u);
  EXPECT_EQ(trimmed, h.fabric->trims());
  EXPECT_EQ(h.fabric->total_drops(), 0u);
  // A trimmed header overtakes queued data: the first trimmed packet arrives
  // before the data packet that was queued ahead of it.
  Time first_trim = -1;
  for (const auto& g : h.got) {
    if (g.trimmed) {
      first_trim = g.t;
      break;
    }
  }
  size_t data_after = 0;
  for (const auto& g : h.got) data_after += !g.trimmed && g.t > first_trim;
  EXPECT_GT(data_after, 0u);
}

TEST(FabricTest, LastHopCanBeExemptFromTrimming) {
  FabricConfig cfg;
  cfg.ecn = false;
  cfg.trim_last_hop = false;
  const uint32_t size = 4096 + 64 + cfg.wire_overhead_bytes;
  cfg.buffer_bytes = 4 * size;
  FabricHarness h(SmallClos(), cfg);
  for (int i = 0; i < 50; ++i) {
    h.fabric->HostSend(0, 0, 0, h.Data(0, 1, i, 4096));
    h.fabric->HostSend(0, 2, 0, h.Data(2, 1, 1000 + i, 4096));
  }
  h.Run();
  EXPECT_EQ(h.fabric->trims(), 0u);
  EXPECT_GT(h.fabric->drops()[static_cast<size_t>(DropReason::kBufferOverflow)],
            0u);
}

// Per-switch queue overrides: trimming off on one T0's down ports only
// (the last hop of host 1) turns its overflow into drops; the same override
// aimed at the other T0 leaves trimming on; ECN thresholds set per tier mark
// only where that tier's queue builds.
TEST(FabricTest, PerSwitchOverridesSetTrimmingAndEcn) {
  const uint32_t size = 4096 + 64 + FabricConfig{}.wire_overhead_bytes;
  auto run = [&](const std::vector<QueueOverride>& ov, bool ecn) {
    FabricConfig cfg;
    cfg.ecn = ecn;
    cfg.ecn_kmin_bytes = 64 * size;  // never reached by the base profile
    cfg.ecn_kmax_bytes = 65 * size;
    cfg.buffer_bytes = 4 * size;
    cfg.overrides = ov;
    auto h = std::make_unique<FabricHarness>(SmallClos(), cfg);
    for (int i = 0; i < 50; ++i) {
      h->fabric->HostSend(0, 0, 0, h->Data(0, 1, i, 4096));
      h->fabric->HostSend(0, 2, 0, h->Data(2, 1, 1000 + i, 4096));
    }
    h->Run();
    EXPECT_TRUE(h->fabric->CheckInvariants().ok());
    EXPECT_EQ(h->pool.live(), 0u);
    return h;
  };
  QueueOverride no_trim_t0_0;
  no_trim_t0_0.tier = static_cast<int>(routing::NodeKind::kT0);
  no_trim_t0_0.index = 0;
  no_trim_t0_0.ports = QueueOverride::Ports::kDown;
  no_trim_t0_0.trimming = false;
  {
    auto h = run({no_trim_t0_0}, false);
    EXPECT_EQ(h->fabric->trims(), 0u);
    EXPECT_GT(
        h->fabric->drops()[static_cast<size_t>(DropReason::kBufferOverflow)],
        0u);
    // Only T0 0's down-facing ports got the new profile.
    const Port& last = h->fabric->ports()[h->fabric->host_down_port(1, 0)];
    const Port& other = h->fabric->ports()[h->fabric->host_down_port(2, 0)];
    EXPECT_FALSE(h->fabric->profiles()[last.profile].trimming);
    EXPECT_TRUE(h->fabric->profiles()[other.profile].trimming);
  }
  {
    QueueOverride o = no_trim_t0_0;
    o.index = 1;  // the other T0: the bottleneck keeps trimming
    auto h = run({o}, false);
    EXPECT_GT(h->fabric->trims(), 0u);
    EXPECT_EQ(h->fabric->total_drops(), 0u);
  }
  {
    QueueOverride up_only = no_trim_t0_0;
    up_only.index = -1;
    up_only.ports =
        QueueOverride::Ports::kUp;  // T0 uplinks: not the bottleneck
    auto h = run({up_only}, false);
    EXPECT_GT(h->fabric->trims(), 0u);
  }
  QueueOverride ecn_t0;
  ecn_t0.tier = static_cast<int>(routing::NodeKind::kT0);
  ecn_t0.ecn = true;
  ecn_t0.ecn_kmin_bytes = size;
  ecn_t0.ecn_kmax_bytes = 2 * size;
  {
    auto h = run({ecn_t0}, false);  // ECN off globally, on at T0s
    EXPECT_GT(h->fabric->ecn_marks(), 0u);
    size_t marked = 0;
    for (const auto& g : h->got) marked += g.ecn;
    EXPECT_EQ(marked, h->fabric->ecn_marks());
  }
  {
    QueueOverride ecn_t1 = ecn_t0;
    ecn_t1.tier = static_cast<int>(routing::NodeKind::kT1);
    auto h = run({ecn_t1}, false);  // T1 queues never build here
    EXPECT_EQ(h->fabric->ecn_marks(), 0u);
    // A later override wins: T0 on, then T0 0 off again.
    QueueOverride off = ecn_t0;
    off.index = 0;
    off.ecn = false;
    auto h2 = run({ecn_t0, off}, false);
    EXPECT_EQ(h2->fabric->ecn_marks(), 0u);
  }
  {
    QueueOverride bad = ecn_t0;
    bad.ecn_kmax_bytes = 10;
    FabricConfig cfg;
    cfg.overrides = {bad};
    EventQueue q;
    PacketPool pool;
    absl::StatusOr<routing::Topology> t = routing::Topology::Build(SmallClos());
    ASSERT_TRUE(t.ok());
    Fabric f(&*t, cfg, &q, &pool, 1, nullptr);
    EXPECT_THAT(std::string(f.Init().message()), HasSubstr("kmax"));
  }
}

TEST(ScenarioTest, ParsesFabricOverrides) {
  ScenarioConfig sc = MustParse(R"({
    "topology": {"kind": "clos2", "planes": 2, "t0_per_plane": 2,
                 "t1_per_plane": 2, "hosts_per_t0": 2},
    "fabric": {"overrides": [
      {"tier": "t0", "ports": "down", "trimming": false},
      {"tier": "t1", "plane": 1, "index": 0, "trim_threshold_bytes": 20000,
       "ecn": {"kmin_bytes": 1000, "kmax_bytes": 9000, "pmax": 0.5}},
      {"ecn": false}]},
    "workload": {"type": "bulk", "src": 0, "dst": 3, "bytes": 65536},
    "transports": ["roce"]})");
  ASSERT_EQ(sc.fabric.overrides.size(), 3u);
  const QueueOverride& a = sc.fabric.overrides[0];
  EXPECT_EQ(a.tier, static_cast<int>(routing::NodeKind::kT0));
  EXPECT_EQ(a.ports, QueueOverride::Ports::kDown);
  EXPECT_EQ(a.trimming, std::optional<bool>(false));
  EXPECT_FALSE(a.ecn.has_value());
  const QueueOverride& b = sc.fabric.overrides[1];
  EXPECT_EQ(b.plane, 1);
  EXPECT_EQ(b.index, 0);
  EXPECT_EQ(b.trim_threshold_bytes, std::optional<uint32_t>(20000));
  EXPECT_EQ(b.ecn_kmin_bytes, std::optional<uint32_t>(1000));
  EXPECT_EQ(b.ecn_kmax_bytes, std::optional<uint32_t>(9000));
  EXPECT_EQ(b.ecn_pmax, std::optional<double>(0.5));
  EXPECT_EQ(sc.fabric.overrides[2].tier, -1);
  EXPECT_EQ(sc.fabric.overrides[2].ecn, std::optional<bool>(false));
  // The resolved configuration lists them.
  const std::string desc = json::Serialize(DescribeScenario(sc));
  EXPECT_THAT(desc, HasSubstr("overrides"));
  // A run with them keeps every invariant.
  std::vector<RunResult> rs = MustRun(sc);
  ASSERT_EQ(rs.size(), 1u);
  testing::ExpectInvariants(rs[0]);
  EXPECT_TRUE(rs[0].completed);
  // The bench's memory figures: one entry per setup stage, then the run.
  std::vector<std::string> stages;
  for (const auto& st : rs[0].setup_rss_mib) stages.push_back(st.first);
  EXPECT_THAT(stages, ::testing::ElementsAre("topology", "fabric", "workload",
                                             "transport", "run"));
  EXPECT_GT(rs[0].fabric_bytes, 0u);
  EXPECT_GT(rs[0].queue_bytes, 0u);
  EXPECT_GT(rs[0].pool_bytes, 0u);

  auto bad = [](const std::string& ov) -> std::string {
    absl::StatusOr<json::Value> v = json::Parse(
        R"({"topology": {"kind": "clos2", "planes": 1}, "workload": {},
            "fabric": {"overrides": )" +
        ov + "}}");
    EXPECT_TRUE(v.ok());
    absl::StatusOr<ScenarioConfig> r = ParseScenario(*v, "");
    EXPECT_FALSE(r.ok()) << ov;
    return r.ok() ? "" : std::string(r.status().message());
  };
  EXPECT_THAT(bad(R"({"tier": "t0"})"), HasSubstr("array"));
  EXPECT_THAT(bad(R"([{"tier": "t7"}])"), HasSubstr("tier"));
  EXPECT_THAT(bad(R"([{"ports": "sideways"}])"), HasSubstr("ports"));
  EXPECT_THAT(bad(R"([{"trim": false}])"), HasSubstr("unknown key \"trim\""));
  EXPECT_THAT(bad(R"([{"ecn": {"kmin_bytes": 9, "kmax_bytes": 9}}])"),
              HasSubstr("kmin < kmax"));
  EXPECT_THAT(bad(R"([{"ecn": {"pmax": 2}}])"), HasSubstr("pmax"));
}

TEST(FabricTest, EcnMarksAboveKmax) {
  FabricConfig cfg;
  cfg.trimming = false;
  cfg.ecn_kmin_bytes = 4000;
  cfg.ecn_kmax_bytes = 8000;
  cfg.ecn_pmax = 0.5;
  FabricHarness h(SmallClos(), cfg);
  for (int i = 0; i < 100; ++i) {
    h.fabric->HostSend(0, 0, 0, h.Data(0, 1, i, 1000));
    h.fabric->HostSend(0, 2, 0, h.Data(2, 1, 1000 + i, 1000));
  }
  h.Run();
  size_t marked = 0;
  for (const auto& g : h.got) marked += g.ecn;
  EXPECT_GT(marked, 0u);
  EXPECT_EQ(marked, h.fabric->ecn_marks());
  // The first packets met an empty queue and are never marked.
  EXPECT_FALSE(h.got[0].ecn);
  EXPECT_FALSE(h.got[1].ecn);
}

TEST(FabricTest, FailureGroupsNameTheCarriersUplinkAcrossPeers) {
  // 2 planes, 4 T0, 4 T1, 2 hosts per T0. A group must name one (plane,
  // T1) for all of a host's peers (ids are engine-wide), be the same from
  // both ends, and be absent between hosts of one T0.
  routing::TopologySpec spec = SmallClos(2);
  spec.t0_per_plane = 4;
  spec.t1_per_plane = 4;
  FabricHarness h(spec, FabricConfig{});
  constexpr uint16_t kPaths = 32;
  const uint32_t hosts = h.topo->num_hosts();
  for (uint32_t a = 0; a < hosts; ++a) {
    std::map<uint16_t, std::pair<uint16_t, uint16_t>> t1_of;  // id -> T1
    for (uint32_t b = 0; b < hosts; ++b) {
      if (a == b) continue;
      const std::vector<uint16_t> g =
          CarrierFailureGroups(*h.fabric, a, b, kPaths);
      EXPECT_EQ(g, CarrierFailureGroups(*h.fabric, b, a, kPaths));
      for (uint16_t x = 0; x < kPaths; ++x) {
        const uint16_t plane = x % 2;
        if (a / 2 == b / 2) {  // same T0
          EXPECT_EQ(g[x], kNoFailureGroup);
          continue;
        }
        SimPacket* p = h.Data(a, b, x, 100);
        h.fabric->BuildCarrier(a, b, plane, CarrierChoice(2, a, b, x), p);
        ASSERT_EQ(p->usid_len, 3);
        const auto t1 = std::make_pair(plane, p->usids[1]);
        h.pool.Free(p);
        ASSERT_NE(g[x], kNoFailureGroup);
        auto [it, fresh] = t1_of.emplace(g[x], t1);
        EXPECT_EQ(it->second, t1)
            << "group " << g[x] << " of " << a << "->" << b << " path " << x;
      }
    }
    EXPECT_EQ(t1_of.size(), 2u * 4);  // one id per (plane, T1)
  }
}

TEST(FabricTest, Srv6CarrierFollowsChoiceAndMismatchDrops) {
  FabricConfig cfg;
  FabricHarness h(SmallClos(2), cfg);
  // Two choices on plane 1 take the two different T1s.
  SimPacket* a = h.Data(0, 2, 1, 100);
  SimPacket* b = h.Data(0, 2, 2, 100);
  h.fabric->BuildCarrier(0, 2, 1, 0, a);
  h.fabric->BuildCarrier(0, 2, 1, 1, b);
  ASSERT_EQ(a->usid_len, 3);
  ASSERT_EQ(b->usid_len, 3);
  EXPECT_EQ(a->usids[0], b->usids[0]);
  EXPECT_NE(a->usids[1], b->usids[1]);
  EXPECT_EQ(a->usids[2], b->usids[2]);
  h.fabric->HostSend(0, 0, 1, a);
  h.fabric->HostSend(0, 0, 1, b);
  SimPacket* bad = h.Data(0, 2, 3, 100);
  h.fabric->BuildCarrier(0, 2, 1, 0, bad);
  bad->usids[1] ^= 0x7;  // names no neighbour
  h.fabric->HostSend(0, 0, 1, bad);
  SimPacket* wrong = h.Data(0, 2, 4, 100);
  h.fabric->BuildCarrier(0, 2, 1, 0, wrong);
  wrong->usids[0] ^= 0x1;  // first uSID is not the source T0
  h.fabric->HostSend(0, 0, 1, wrong);
  h.Run();
  ASSERT_EQ(h.got.size(), 2u);
  EXPECT_EQ(h.fabric->drops()[static_cast<size_t>(DropReason::kNoRoute)], 1u);
  EXPECT_EQ(h.fabric->drops()[static_cast<size_t>(DropReason::kUsidMismatch)],
            1u);
  // The T1 named by each carrier carried one packet.
  const routing::Topology& t = *h.topo;
  uint64_t via[2] = {};
  for (uint32_t k = 0; k < 2; ++k) {
    const uint32_t l = t.fabric_link(1, 0, k, 0);
    via[k] = h.fabric->ports()[h.fabric->link_port(l, 0)].c.tx_packets +
             h.fabric->ports()[h.fabric->link_port(l, 1)].c.tx_packets;
  }
  EXPECT_EQ(via[0], 1u);
  EXPECT_EQ(via[1], 1u);
}

TEST(FabricTest, EcmpSpreadsEntropyAndAvoidsDownLinksAfterConvergence) {
  FabricConfig cfg;
  cfg.routing_convergence = 10 * kMicrosecond;
  routing::TopologySpec s = SmallClos();
  s.t1_per_plane = 4;
  FabricHarness h(s, cfg);
  for (uint32_t e = 0; e < 400; ++e)
    h.fabric->HostSend(0, 0, 0, h.Data(0, 2, e, 100, e));
  h.Run();
  ASSERT_EQ(h.got.size(), 400u);
  const routing::Topology& t = *h.topo;
  for (uint32_t k = 0; k < 4; ++k) {
    const uint32_t l = t.fabric_link(0, 0, k, 0);
    EXPECT_GT(h.fabric->ports()[h.fabric->link_port(l, 0)].c.tx_packets, 50u)
        << k;
  }
  // Take T0 0 - T1 0 down: before convergence packets hashed onto it are
  // lost, after it none are.
  const uint32_t l0 = t.fabric_link(0, 0, 0, 0);
  const Time t0 = h.q.now();
  h.fabric->SetLinkUp(t0, l0, false);
  for (uint32_t e = 0; e < 400; ++e)
    h.fabric->HostSend(t0, 0, 0, h.Data(0, 2, e, 100, e));
  h.Run();
  const uint64_t lost =
      h.fabric->drops()[static_cast<size_t>(DropReason::kLinkDown)];
  EXPECT_GT(lost, 50u);
  const Time t1 = h.q.now();
  for (uint32_t e = 0; e < 400; ++e)
    h.fabric->HostSend(t1, 0, 0, h.Data(0, 2, e, 100, e));
  h.Run();
  EXPECT_EQ(h.fabric->drops()[static_cast<size_t>(DropReason::kLinkDown)],
            lost);
  EXPECT_EQ(h.got.size(), 1200u - lost);
}

TEST(FabricTest, HostLinkDownReportsPortStatusAndFlushes) {
  FabricConfig cfg;
  FabricHarness h(SmallClos(2), cfg);
  for (int i = 0; i < 10; ++i)
    h.fabric->HostSend(0, 0, 1, h.Data(0, 1, i, 4096));
  h.fabric->SetLinkUp(0, h.topo->host_link(0, 1), false);
  ASSERT_EQ(h.status.size(), 1u);
  EXPECT_EQ(h.status[0].host, 0u);
  EXPECT_EQ(h.status[0].plane, 1);
  EXPECT_FALSE(h.status[0].up);
  EXPECT_FALSE(h.fabric->HostPortUp(0, 1));
  h.fabric->HostSend(0, 0, 1, h.Data(0, 1, 99, 4096));
  h.Run();
  EXPECT_TRUE(h.got.empty());
  const auto& d = h.fabric->drops();
  EXPECT_EQ(d[static_cast<size_t>(DropReason::kLinkDown)] +
                d[static_cast<size_t>(DropReason::kLinkDownInFlight)] +
                d[static_cast<size_t>(DropReason::kNicPortDown)],
            11u);
  EXPECT_EQ(h.pool.live(), 0u);
}

TEST(WorkloadTest, KindsAndValidation) {
  Rng rng(1);
  auto build = [&](const std::string& text) {
    absl::StatusOr<json::Value> v = json::Parse(text);
    EXPECT_TRUE(v.ok());
    return BuildWorkload(*v, 16, 4096, rng, "");
  };
  auto perm = build(R"({"type":"permutation","bytes":1000})");
  ASSERT_TRUE(perm.ok());
  ASSERT_EQ(perm->size(), 16u);
  std::vector<int> in(16, 0);
  for (const Flow& f : *perm) {
    EXPECT_NE(f.src, f.dst);
    ++in[f.dst];
  }
  EXPECT_THAT(in, ::testing::Each(1));
  auto a2a = build(R"({"type":"all_to_all","bytes":1000,"group_size":4})");
  ASSERT_TRUE(a2a.ok());
  EXPECT_EQ(a2a->size(), 16u * 3);
  for (const Flow& f : *a2a) EXPECT_EQ(f.src % 4, f.dst % 4);  // strided
  auto ring = build(R"({"type":"ring_allreduce","bytes":16000,"steps":3})");
  ASSERT_TRUE(ring.ok());
  ASSERT_EQ(ring->size(), 48u);
  EXPECT_TRUE((*ring)[0].after.empty());
  EXPECT_THAT((*ring)[16 + 5].after, ::testing::UnorderedElementsAre(5u, 4u));
  auto inc = build(R"({"type":"incast","senders":7,"dst":0,"bytes":1000,
                       "victim":{"src":1,"dst":8}})");
  ASSERT_TRUE(inc.ok());
  EXPECT_EQ(inc->size(), 8u);
  EXPECT_EQ(inc->back().group, "victim");
  EXPECT_THAT(build(R"({"type":"bulk","src":0,"dst":99})").status().message(),
              HasSubstr("out of range"));
  EXPECT_THAT(build(R"({"type":"bulk","src":3,"dst":3})").status().message(),
              HasSubstr("itself"));
  // A host number is range-checked as read: 2^32 + 1 was narrowed to host 1
  // (and 2^32 + 3 to 3) before the check, in every place that names one.
  for (const char* w :
       {R"({"type":"bulk","src":0,"dst":4294967297})",
        R"({"type":"bulk","src":4294967299,"dst":1})",
        R"({"type":"bulk","flows":[{"src":4294967297,"dst":2}]})",
        R"({"type":"bulk","flows":[{"src":2,"dst":4294967297}]})",
        R"({"type":"incast","senders":3,"dst":4294967296})",
        R"({"type":"incast","senders":3,"dst":0,
            "victim":{"src":4294967297,"dst":2}})",
        R"({"type":"incast","senders":3,"dst":0,
            "victim":{"src":1,"dst":4294967298}})"}) {
    EXPECT_THAT(build(w).status().message(), HasSubstr("host out of range"))
        << w;
  }
  const std::string trace = ::testing::TempDir() + "/wide_host_trace.csv";
  {
    std::FILE* f = std::fopen(trace.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("0,1,2,4096\n5,4294967297,2,4096\n", f);
    std::fclose(f);
  }
  EXPECT_THAT(
      build(R"({"type":"trace","file":")" + trace + R"("})").status().message(),
      AllOf(HasSubstr(":2: host out of range"), HasSubstr("4294967297 -> 2")));
  std::remove(trace.c_str());
  // A victim that is not an object was ignored (the run had no victim).
  EXPECT_THAT(build(R"({"type":"incast","senders":3,"dst":0,"victim":5})")
                  .status()
                  .message(),
              HasSubstr("incast.victim must be an object"));
  EXPECT_THAT(build(R"({"type":"nope"})").status().message(),
              HasSubstr("unknown workload"));
  EXPECT_THAT(
      build(R"({"type":"trace","file":"/nonexistent.csv"})").status().message(),
      HasSubstr("does not exist"));
  // A device would be read without end: refused before reading.
  EXPECT_THAT(
      build(R"({"type":"trace","file":"/dev/zero"})").status().message(),
      HasSubstr("not a regular file"));
  EXPECT_FALSE(build(R"({"type":"all_to_all","group_size":5})").ok());
  EXPECT_THAT(build(R"({"type":"bulk","src":0,"dst":1,"start_us":1e300})")
                  .status()
                  .message(),
              HasSubstr("start_us"));
}

// The trace reader on text: the lines it takes and skips, their order, and
// the line its refusals name.
TEST(WorkloadTest, TraceReaderTakesEveryFlowLineAndNamesTheBadOne) {
  absl::StatusOr<std::vector<Flow>> f = ParseTrace(
      "# start_us,src,dst,bytes\n\n  0.5 , 1 , 2 , 4096  \r\n"
      "10,15,0,1\n   # indented comment\n2e1,3,4,5000\n",
      "t.csv", 16, 4096, 65536);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->size(), 3u);
  EXPECT_EQ((*f)[0].start, kMicrosecond / 2);
  EXPECT_EQ((*f)[0].src, 1u);
  EXPECT_EQ((*f)[0].dst, 2u);
  EXPECT_EQ((*f)[0].bytes, 4096u);
  EXPECT_EQ((*f)[1].start, 10 * kMicrosecond);
  EXPECT_EQ((*f)[1].bytes, 1u);
  // Messages as every workload has them: the smaller of message_bytes and
  // bytes + mtu, in whole packets.
  EXPECT_EQ((*f)[1].message_bytes, 8192u);
  EXPECT_EQ((*f)[2].start, 20 * kMicrosecond);
  EXPECT_EQ((*f)[2].message_bytes, 12288u);
  for (size_t i = 0; i < f->size(); ++i) {
    EXPECT_EQ((*f)[i].id, i);
    EXPECT_EQ((*f)[i].group, "trace");
  }
  EXPECT_TRUE(ParseTrace("", "t.csv", 16, 4096, 65536)->empty());
  const auto err = [](const char* text) {
    absl::StatusOr<std::vector<Flow>> r =
        ParseTrace(text, "t.csv", 16, 4096, 65536);
    EXPECT_FALSE(r.ok()) << text;
    return r.ok() ? std::string() : std::string(r.status().message());
  };
  EXPECT_EQ(err("0,1,2,10\n\n0,1,2\n"),
            "workload: t.csv:3: expected start_us,src,dst,bytes");
  EXPECT_EQ(err("0,1,2,10,5\n"),
            "workload: t.csv:1: expected start_us,src,dst,bytes");
  EXPECT_EQ(err("x,1,2,10\n"),
            "workload: t.csv:1: expected start_us,src,dst,bytes");
  EXPECT_EQ(err("0,1,2,1.5\n"),
            "workload: t.csv:1: expected start_us,src,dst,bytes");
  EXPECT_EQ(err("nan,1,2,10\n"),
            "workload: t.csv:1: expected start_us,src,dst,bytes");
  EXPECT_EQ(err("1000000001,1,2,10\n"),
            "workload: t.csv:1: expected start_us,src,dst,bytes");
  EXPECT_EQ(err("0,1,-2,10\n"),
            "workload: t.csv:1: expected start_us,src,dst,bytes");
  EXPECT_EQ(err("#\n0,1,16,10\n"),
            "workload: t.csv:2: host out of range (1 -> 16, 16 hosts)");
  EXPECT_EQ(err("0,4,4,10\n"), "workload: t.csv:1: flow 4 -> 4 to itself");
  EXPECT_EQ(err("0,1,2,0\n"), "workload: t.csv:1: bytes must be in 1..2^40");
  EXPECT_EQ(err("0,1,2,1099511627777\n"),
            "workload: t.csv:1: bytes must be in 1..2^40");
  EXPECT_FALSE(ParseTrace("0,1,2,3", "t", 16, 4096, 0).ok());
  EXPECT_FALSE(ParseTrace("0,1,2,3", "t", 16, 0, 65536).ok());
}

constexpr char kTiny[] = R"({
  "name": "tiny", "seed": 3,
  "topology": {"kind": "clos2", "planes": 2, "t0_per_plane": 2,
               "t1_per_plane": 2, "hosts_per_t0": 2},
  "duration_us": 2000,
  "transports": ["roce", "multiqp"],
  "workload": {"type": "permutation", "bytes": 200000}
})";

// The message ParseScenario refuses `text` with ("" when it accepts it, a
// test failure then).
std::string ParseError(const std::string& text) {
  absl::StatusOr<json::Value> v = json::Parse(text);
  if (!v.ok()) return std::string(v.status().message());
  absl::StatusOr<ScenarioConfig> sc = ParseScenario(*v, "");
  EXPECT_FALSE(sc.ok()) << text;
  return sc.ok() ? "" : std::string(sc.status().message());
}

// The message Simulator::Init gives kTiny with `faults` ("" when it
// accepts them).
std::string FaultInitError(const char* faults) {
  ScenarioConfig sc = MustParse(kTiny);
  sc.faults = *json::Parse(faults);
  Simulator s(sc, sc.transports[0]);
  return std::string(s.Init().message());
}

TEST(ScenarioTest, RejectsBadConfigsClearly) {
  const std::string topo = R"("topology": {"kind": "clos2", "planes": 1})";
  EXPECT_THAT(
      ParseError("{" + topo + R"(, "workload": {}, "transports": ["tcp"]})"),
      HasSubstr("unknown transport"));
  EXPECT_THAT(ParseError(R"({"workload": {}})"), HasSubstr("missing topology"));
  EXPECT_THAT(ParseError("{" + topo + "}"), HasSubstr("missing workload"));
  EXPECT_THAT(
      ParseError("{" + topo + R"(, "workload": {}, "duration_us": -1})"),
      HasSubstr("duration_us"));
  EXPECT_THAT(
      ParseError("{" + topo +
                 R"(, "workload": {}, "fabric": {"forwarding": "ospf"}})"),
      HasSubstr("forwarding"));
  EXPECT_THAT(
      ParseError(
          "{" + topo +
          R"(, "workload": {}, "fabric": {"ecn": {"kmin_bytes": 10, "kmax_bytes": 5}}})"),
      HasSubstr("kmin"));
  EXPECT_THAT(
      ParseError("{" + topo +
                 R"(, "workload": {}, "transports": ["roce", "roce"]})"),
      HasSubstr("duplicate"));
  // Bad faults and workloads fail at Init with a clear error.
  ScenarioConfig sc = MustParse(kTiny);
  sc.faults =
      *json::Parse(R"([{"type": "switch_reboot", "switch": {"tier": "t9"}}])");
  Simulator s(sc, sc.transports[0]);
  EXPECT_THAT(std::string(s.Init().message()), HasSubstr("tier"));
  sc.faults =
      *json::Parse(R"([{"type": "link_down", "link": {"id": 100000}}])");
  Simulator s2(sc, sc.transports[0]);
  EXPECT_THAT(std::string(s2.Init().message()), HasSubstr("out of range"));
}

// Times beyond what int64 picoseconds hold (the cast was undefined, found by
// tests/fuzz/scenario_parse_fuzz.cc), and fault entries that would loop
// without end, are refused with the field's name.
TEST(ScenarioTest, RejectsOutOfRangeTimes) {
  const std::string head =
      R"({"topology": {"kind": "clos2", "planes": 1}, "workload": {}, )";
  for (const char* key : {"duration_us", "sample_interval_us", "warmup_us"}) {
    EXPECT_THAT(ParseError(head + "\"" + key + "\": 5e101}"), HasSubstr(key));
  }
  EXPECT_THAT(
      ParseError(head + R"("fabric": {"routing_convergence_us": 5e101}})"),
      HasSubstr("routing_convergence_us"));
  for (const char* key : {"rto_min_us", "probe_interval_us", "rto_us",
                          "oracle_reroute_after_us"}) {
    EXPECT_THAT(ParseError(head + R"("transport_defaults": {")" + key +
                           R"(": 1e300}})"),
                HasSubstr(key));
  }
  // Within range: accepted.
  ScenarioConfig ok = MustParse(kTiny);
  EXPECT_EQ(ok.duration, 2000 * kMicrosecond);

  EXPECT_THAT(FaultInitError(R"([{"type": "link_down", "link": "random_fabric",
                        "at_us": 1e300}])"),
              HasSubstr("at_us"));
  EXPECT_THAT(
      FaultInitError(R"([{"type": "switch_reboot", "switch": {"tier": "t1"},
                        "duration_us": 1e300}])"),
      HasSubstr("duration_us"));
  EXPECT_THAT(FaultInitError(R"([{"type": "link_flap", "link": "random_fabric",
                        "start_us": 1e20, "end_us": 2e20}])"),
              HasSubstr("[0, 1e9]"));
  // A period that cannot move the flap time: refused, not an endless loop.
  EXPECT_THAT(FaultInitError(R"([{"type": "link_flap", "link": "random_fabric",
                        "start_us": 1e8, "end_us": 1e9, "period_us": 1e-9,
                        "down_us": 1e-10}])"),
              HasSubstr("more than 1e6 flaps"));
  EXPECT_THAT(FaultInitError(R"([{"type": "random_flaps", "start_us": 0,
                        "end_us": 1e300}])"),
              HasSubstr("[0, 1e9]"));
}

// A misspelt key anywhere in a scenario is an error naming it and where it
// was, not a setting silently left at its default (before 2026-12-06 only
// topology and fabric.overrides checked their keys: "fabric":
// {"ecn_kmin_bytes": ...} ran with the default thresholds).
TEST(ScenarioTest, UnknownKeysAreErrorsAtEveryLevel) {
  const std::string topo = R"("topology": {"kind": "clos2", "planes": 1})";
  const std::string wl = R"("workload": {"type": "permutation"})";
  struct Case {
    std::string text;
    const char* where;
    const char* key;
  };
  const Case cases[] = {
      {"{" + topo + ", " + wl + R"(, "mtu": 9000})", "scenario:", "mtu"},
      {"{" + topo + ", " + wl + R"(, "fabric": {"ecn_kmin_bytes": 5}})",
       "scenario: fabric:", "ecn_kmin_bytes"},
      {"{" + topo + ", " + wl + R"(, "fabric": {"ecn": {"kmin": 5}}})",
       "scenario: fabric.ecn:", "kmin"},
      {"{" + topo + ", " + wl +
           R"(, "fabric": {"overrides": [{"ecn": {"p_max": 1}}]}})",
       "scenario: fabric.overrides.ecn:", "p_max"},
      {"{" + topo + ", " + wl +
           R"(, "transports": [{"name": "prism", "paths": 8}]})",
       "scenario: transports entry:", "paths"},
      {"{" + topo + ", " + wl + R"(, "transport_defaults": {"name": "x"}})",
       "scenario: transport_defaults:", "name"},
  };
  for (const Case& c : cases) {
    const std::string err = ParseError(c.text);
    EXPECT_THAT(err, HasSubstr(c.where)) << c.text;
    EXPECT_THAT(err, HasSubstr(std::string("unknown key \"") + c.key + "\""))
        << c.text;
  }
  // Everything a checked-in scenario uses is known (kTiny, and a transports
  // entry with its name, kind and fields; comments anywhere).
  EXPECT_TRUE(json::Parse(kTiny).ok());
  MustParse(kTiny);
  MustParse("{" + topo + ", " + wl +
            R"(, "comment": "c", "fabric": {"comment": "c", "ecn":
               {"enabled": true, "last_hop": false, "comment": "c"},
               "overrides": [{"comment": "c", "ecn": {"comment": "c"}}]},
               "transports":
               [{"name": "p2", "kind": "prism", "num_paths": 8,
                 "comment": "c"}]})");

  // Workloads: each type's own keys, its entries' too.
  Rng rng(1);
  auto workload = [&](const std::string& text) {
    absl::StatusOr<json::Value> v = json::Parse(text);
    EXPECT_TRUE(v.ok()) << text;
    absl::StatusOr<std::vector<Flow>> f = BuildWorkload(*v, 16, 4096, rng, "");
    EXPECT_FALSE(f.ok()) << text;
    return f.ok() ? std::string() : std::string(f.status().message());
  };
  EXPECT_THAT(workload(R"({"type": "permutation", "group_size": 4})"),
              HasSubstr("workload: permutation: unknown key \"group_size\""));
  EXPECT_THAT(workload(R"({"type": "all_to_all", "groupsize": 4})"),
              HasSubstr("unknown key \"groupsize\""));
  EXPECT_THAT(workload(R"({"type": "ring_allreduce", "step": 4})"),
              HasSubstr("unknown key \"step\""));
  EXPECT_THAT(workload(R"({"type": "incast", "sender": 3})"),
              HasSubstr("unknown key \"sender\""));
  EXPECT_THAT(workload(R"({"type": "incast", "victim": {"src": 1, "dst": 2,
                           "start_us": 5}})"),
              HasSubstr("workload: incast.victim: unknown key \"start_us\""));
  EXPECT_THAT(workload(R"({"type": "bulk", "flows": [{"src": 0, "dst": 1,
                           "size": 5}]})"),
              HasSubstr("workload: bulk.flows entry: unknown key \"size\""));
  // Values that were read as another host: a string, 2^32 + 1, 1.5.
  for (const char* list :
       {R"(["3"])", "[4294967297]", "[1.5]", "[16]", "[]", R"({"a": 1})"}) {
    EXPECT_THAT(workload(std::string(R"({"type": "incast", "sender_list": )") +
                         list + "}"),
                HasSubstr("sender_list"))
        << list;
  }
  EXPECT_THAT(workload(R"({"type": "trace", "path": "x.csv"})"),
              HasSubstr("unknown key \"path\""));
  EXPECT_THAT(workload(R"([{"type": "permutation"},
                           {"type": "bulk", "src": 0, "dst": 1, "to": 2}])"),
              HasSubstr("workload: bulk: unknown key \"to\""));

  // Faults (checked at Init): each type's keys, and the link and switch
  // selectors'.
  EXPECT_THAT(FaultInitError(R"([{"type": "link_down", "link": "random_fabric",
                        "duration": 5}])"),
              HasSubstr("faults: link_down: unknown key \"duration\""));
  EXPECT_THAT(
      FaultInitError(R"([{"type": "switch_reboot", "switch": {"tier": "t1"},
                        "link": {"id": 0}}])"),
      HasSubstr("faults: switch_reboot: unknown key \"link\""));
  EXPECT_THAT(FaultInitError(R"([{"type": "link_flap", "link": "random_fabric",
                        "period": 5}])"),
              HasSubstr("unknown key \"period\""));
  EXPECT_THAT(FaultInitError(R"([{"type": "random_flaps", "flaps": 5}])"),
              HasSubstr("unknown key \"flaps\""));
  EXPECT_THAT(FaultInitError(R"([{"type": "random_reboots", "plane": 0}])"),
              HasSubstr("unknown key \"plane\""));
  EXPECT_THAT(FaultInitError(R"([{"type": "link_loss", "loss": 0.1}])"),
              HasSubstr("unknown key \"loss\""));
  // The flaps time their own outages: a duration_us would be ignored.
  EXPECT_THAT(FaultInitError(R"([{"type": "link_flap", "link": "random_fabric",
                        "duration_us": 50}])"),
              HasSubstr("link_flap: duration_us does not apply"));
  EXPECT_THAT(
      FaultInitError(R"([{"type": "random_flaps", "duration_us": 50}])"),
      HasSubstr("random_flaps: duration_us does not apply"));
  EXPECT_THAT(FaultInitError(R"([{"type": "degrade", "link": "random_fabric",
                        "rate": 0.5}])"),
              HasSubstr("faults: degrade: unknown key \"rate\""));
  EXPECT_THAT(
      FaultInitError(R"([{"type": "nic_port_down", "host": 0, "port": 1}])"),
      HasSubstr("unknown key \"port\""));
  EXPECT_THAT(FaultInitError(
                  R"([{"type": "link_down", "link": {"t0": 0, "spine": 1}}])"),
              HasSubstr("faults: link: unknown key \"spine\""));
  EXPECT_THAT(FaultInitError(R"([{"type": "link_down", "link": {"id": "3"}}])"),
              HasSubstr("link id out of range"));
  EXPECT_THAT(FaultInitError(R"([{"type": "link_down", "link": {"id": 0.5}}])"),
              HasSubstr("link id out of range"));
  EXPECT_THAT(
      FaultInitError(R"([{"type": "switch_reboot", "switch": {"idx": 1}}])"),
      HasSubstr("faults: switch: unknown key \"idx\""));
  // A comment is welcome in every object.
  EXPECT_EQ(FaultInitError(R"([{"type": "link_down", "link": {"t0": 0, "t1": 1,
                      "comment": "c"}, "at_us": 5, "duration_us": 10,
                      "comment": "c"}, {"type": "switch_reboot", "switch":
                      {"tier": "t1", "comment": "c"}}])"),
            "");
}

// The resolved configuration the CLI prints (and summary.json's "config")
// is itself a scenario that resolves to the same configuration: every
// checked-in scenario, and one that sets what the files leave at defaults.
// kTiny's copy also runs to the same result.
TEST(ScenarioTest, ResolvedConfigurationRunsAgainAsItWas) {
  const auto round_trip = [](const json::Value& v, const std::string& what) {
    absl::StatusOr<ScenarioConfig> a = ParseScenario(v, "");
    EXPECT_TRUE(a.ok()) << what << ": " << a.status();
    if (!a.ok()) return;
    const json::Value d1 = DescribeScenario(*a);
    absl::StatusOr<ScenarioConfig> b = ParseScenario(d1, "");
    ASSERT_TRUE(b.ok()) << what
                        << ": the description does not parse: " << b.status()
                        << "\n"
                        << json::Serialize(d1, 2);
    EXPECT_EQ(json::Serialize(DescribeScenario(*b), 2), json::Serialize(d1, 2))
        << what;
  };
  const std::string src = PRISM_SOURCE_DIR;
  int files = 0;
  for (const char* dir :
       {"/sim/scenarios", "/tests/sim/scenarios", "/tests/cc_sim/scenarios",
        "/bench/scenarios/repro"}) {
    for (const auto& e : std::filesystem::directory_iterator(src + dir)) {
      if (e.path().extension() != ".json") continue;
      absl::StatusOr<json::Value> v = json::ParseFile(e.path().string());
      ASSERT_TRUE(v.ok()) << e.path() << ": " << v.status();
      round_trip(*v, e.path().string());
      ++files;
    }
  }
  EXPECT_GE(files, 20);
  const std::string rich = R"({
    "name": "rich", "seed": 9, "sample_interval_us": 7, "timeseries": false,
    "check_bytes": false, "warmup_us": 3, "duration_us": 900,
    "topology": {"kind": "clos2", "planes": 2, "t0_per_plane": 2,
                 "t1_per_plane": 2, "hosts_per_t0": 2, "parallel_links": 2},
    "fabric": {"forwarding": "ecmp", "buffer_bytes": 100000,
               "ecn": {"kmin_bytes": 1000, "kmax_bytes": 9000, "pmax": 0.5},
               "overrides": [{"tier": "t1", "plane": 1, "trimming": false}],
               "nic_queue_packets": 3, "lazy_switch_ports": true},
    "workload": [{"type": "permutation", "bytes": 10000},
                 {"type": "incast", "sender_list": [1, 2], "dst": 0}],
    "faults": [{"type": "link_down", "link": {"t0": 0, "t1": 1, "k": 1},
                "at_us": 5, "duration_us": 10}],
    "transport_defaults": {"mtu": 2048},
    "transports": ["prism", {"name": "mine", "kind": "prism-reps",
                             "num_paths": 16, "payload_checksum": true,
                             "fate_sharing": false, "window_packets": 512},
                   {"name": "r2", "kind": "roce", "qps": 3, "dcqcn": false}]
  })";
  round_trip(*json::Parse(rich), "rich");
  // A name that is a variant keeps its variant with a "type" beside it.
  absl::StatusOr<ScenarioConfig> reps =
      ParseScenario(*json::Parse(R"({"topology": {"kind": "clos2",
                                   "planes": 1}, "workload": {},
                                   "transports": [{"name": "prism-reps",
                                                   "type": "prism"}]})"),
                    "");
  ASSERT_TRUE(reps.ok()) << reps.status();
  EXPECT_EQ(reps->transports[0].path_policy, "reps");
  // A "type" that contradicts the kind is an error.
  EXPECT_THAT(ParseError(R"({"topology": {"kind": "clos2", "planes": 1},
                 "workload": {}, "transports": [{"name": "x",
                 "kind": "prism-reps", "type": "roce"}]})"),
              HasSubstr("does not match kind"));

  ScenarioConfig tiny = MustParse(kTiny);
  ScenarioConfig again = MustParse(json::Serialize(DescribeScenario(tiny), 0));
  const std::vector<RunResult> r1 = MustRun(tiny), r2 = MustRun(again);
  ASSERT_EQ(r1.size(), r2.size());
  for (size_t i = 0; i < r1.size(); ++i) {
    EXPECT_EQ(r1[i].end_time, r2[i].end_time);
    EXPECT_EQ(r1[i].delivered_bytes, r2[i].delivered_bytes);
    EXPECT_EQ(r1[i].events, r2[i].events);
  }
}

// The scheduler option: parsed, echoed only when not the default, refused
// with lazy switch ports (at parse time and by Simulator::Init), and a
// batched ring all-reduce (dependent flows on other hosts) starts each
// step at most one lookahead after its last prerequisite completed.
TEST(ScenarioTest, SchedulerOption) {
  EXPECT_THAT(ParseError(R"({"topology": {"kind": "clos2", "planes": 1},
                 "workload": {}, "scheduler": "fast"})"),
              HasSubstr("scheduler must be exact or batched"));
  EXPECT_THAT(ParseError(R"({"topology": {"kind": "clos2", "planes": 1},
                 "workload": {}, "scheduler": "batched",
                 "fabric": {"lazy_switch_ports": true}})"),
              HasSubstr("lazy_switch_ports"));
  ScenarioConfig tiny = MustParse(kTiny);
  EXPECT_EQ(tiny.scheduler, Scheduler::kExact);
  EXPECT_EQ(DescribeScenario(tiny).Find("scheduler"), nullptr);
  tiny.scheduler = Scheduler::kBatched;
  const json::Value d = DescribeScenario(tiny);
  ASSERT_NE(d.Find("scheduler"), nullptr);
  EXPECT_EQ(MustParse(json::Serialize(d, 0)).scheduler, Scheduler::kBatched);
  tiny.fabric.lazy_switch_ports = true;
  Simulator lazy(tiny, tiny.transports[0]);
  EXPECT_THAT(std::string(lazy.Init().message()),
              HasSubstr("lazy_switch_ports"));

  ScenarioConfig ring = MustParse(R"({
    "topology": {"kind": "clos2", "planes": 2, "t0_per_plane": 2,
                 "t1_per_plane": 2, "hosts_per_t0": 2},
    "duration_us": 5000, "scheduler": "batched",
    "workload": {"type": "ring_allreduce", "bytes": 400000, "steps": 3},
    "transports": ["prism", "roce"]})");
  const Time lookahead = 500 * kNanosecond;  // the default link delay
  for (const TransportConfig& tc : ring.transports) {
    Simulator s(ring, tc);
    ASSERT_TRUE(s.Init().ok());
    ASSERT_TRUE(s.Run().ok());
    const RunResult& r = s.result();
    SCOPED_TRACE(r.transport);
    testing::ExpectInvariants(r);
    EXPECT_TRUE(r.completed);
    EXPECT_EQ(r.batch_violations, 0u);
    EXPECT_GT(r.batches, 0u);
    int dependent = 0;
    for (const Flow& f : s.flows()) {
      if (f.after.empty()) continue;
      ++dependent;
      Time ready = 0;
      for (uint32_t a : f.after) ready = std::max(ready, r.flows[a].finish);
      EXPECT_GE(r.flows[f.id].start, ready) << "flow " << f.id;
      EXPECT_LE(r.flows[f.id].start, ready + lookahead) << "flow " << f.id;
    }
    EXPECT_GT(dependent, 0);
  }
}

// Two simulators alive in one process, stepped in the same thread, give the
// same result for the same seed and a different one for another seed.
TEST(DeterminismTest, TwoSimulatorsOneProcess) {
  ScenarioConfig sc = MustParse(kTiny);
  sc.faults = *json::Parse(
      R"([{"type": "link_loss", "rate": 0.01, "links": "fabric"}])");
  Simulator a(sc, sc.transports[0]);
  Simulator b(sc, sc.transports[0]);
  ScenarioConfig sc2 = sc;
  sc2.seed = 4;
  Simulator c(sc2, sc2.transports[0]);
  ASSERT_TRUE(a.Init().ok());
  ASSERT_TRUE(b.Init().ok());
  ASSERT_TRUE(c.Init().ok());
  ASSERT_TRUE(a.Run().ok());
  ASSERT_TRUE(c.Run().ok());
  ASSERT_TRUE(b.Run().ok());
  EXPECT_EQ(Digest(a.result()), Digest(b.result()));
  EXPECT_NE(Digest(a.result()), Digest(c.result()));
  EXPECT_TRUE(a.result().completed);
  EXPECT_GT(a.result().drops[static_cast<size_t>(DropReason::kRandomLoss)], 0u);
  testing::ExpectInvariants(a.result());
  testing::ExpectInvariants(c.result());
}

// link_loss with duration_us ends (rate 0) at at_us + duration_us: every
// fabric link losing everything for 100 us still lets the run complete,
// after losses; without the duration nothing crosses the fabric again.
TEST(FaultTest, LinkLossEndsAfterItsDuration) {
  for (const bool healed : {true, false}) {
    SCOPED_TRACE(healed ? "duration_us 100" : "no duration");
    ScenarioConfig sc = MustParse(kTiny);
    sc.duration = 1 * kMillisecond;
    sc.faults = *json::Parse(
        healed ? R"([{"type": "link_loss", "rate": 1, "links": "fabric",
                      "at_us": 5, "duration_us": 100}])"
               : R"([{"type": "link_loss", "rate": 1, "links": "fabric",
                      "at_us": 5}])");
    for (const TransportConfig& tc : sc.transports) {
      Simulator s(sc, tc);
      ASSERT_TRUE(s.Init().ok());
      ASSERT_TRUE(s.Run().ok());
      const RunResult& r = s.result();
      testing::ExpectInvariants(r);
      EXPECT_GT(r.drops[static_cast<size_t>(DropReason::kRandomLoss)], 0u);
      EXPECT_EQ(r.completed, healed) << tc.name;
    }
  }
}

// The engine window option: validated at parse time, and a Prism run with a
// small window and message cap completes with every invariant held.
TEST(ScenarioTest, EngineWindowOption) {
  absl::StatusOr<json::Value> v = json::Parse(R"({
    "topology": {"kind": "clos2", "planes": 2, "t0_per_plane": 2,
                 "t1_per_plane": 2, "hosts_per_t0": 2},
    "workload": {"type": "permutation", "bytes": 200000},
    "transport_defaults": {"window_packets": 300},
    "transports": ["prism"]})");
  ASSERT_TRUE(v.ok());
  absl::StatusOr<ScenarioConfig> bad = ParseScenario(*v, "");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("window_packets"));
  ScenarioConfig sc = MustParse(kTiny);
  TransportConfig tc;  // prism
  tc.window_packets = 256;
  tc.max_messages = 256;
  Simulator s(sc, tc);
  ASSERT_TRUE(s.Init().ok());
  ASSERT_TRUE(s.Run().ok());
  EXPECT_TRUE(s.result().completed);
  EXPECT_GE(s.result().cpu_seconds, 0.0);
  testing::ExpectInvariants(s.result());
}

// "prism-classic": Prism with NSCC's plain quick adapt ("nscc-classic", the
// default before the failure-aware rule); "prism-fa", the rule's earlier
// opt-in name, is Prism with "nscc-fa" (= "nscc"). A run completes with
// every invariant held.
TEST(ScenarioTest, PrismClassicIsPrismWithNsccClassic) {
  ScenarioConfig sc = MustParse(R"({
    "topology": {"kind": "clos2", "planes": 2, "t0_per_plane": 2,
                 "t1_per_plane": 2, "hosts_per_t0": 2},
    "duration_us": 2000,
    "workload": {"type": "permutation", "bytes": 200000},
    "transports": ["prism", "prism-classic", "prism-fa"]})");
  ASSERT_EQ(sc.transports.size(), 3u);
  EXPECT_EQ(sc.transports[0].congestion, "nscc");
  EXPECT_EQ(sc.transports[1].name, "prism-classic");
  EXPECT_EQ(sc.transports[1].type, "prism");
  EXPECT_EQ(sc.transports[1].congestion, "nscc-classic");
  EXPECT_EQ(sc.transports[2].type, "prism");
  EXPECT_EQ(sc.transports[2].congestion, "nscc-fa");
  Simulator s(sc, sc.transports[1]);
  ASSERT_TRUE(s.Init().ok());
  ASSERT_TRUE(s.Run().ok());
  EXPECT_TRUE(s.result().completed);
  testing::ExpectInvariants(s.result());
}

// summary.json reports the completion-queue backpressure counters per
// transport: the RNR side (rnr_nacks_received, rnr_probes_sent,
// rnr_timeouts), the receivers' (rx_drop_no_buffer, cq_delivery_holds) and
// refused posts (writes_refused_cq_full), from TransportTotals; a Prism run
// (which polls at once: all zero) and a baseline report them too.
TEST(ScenarioTest, SummaryReportsRnrAndCompletionQueueCounters) {
  const char* const kKeys[] = {"rnr_nacks_received", "rnr_probes_sent",
                               "rnr_timeouts",       "rx_drop_no_buffer",
                               "cq_delivery_holds",  "writes_refused_cq_full"};
  ScenarioConfig sc = MustParse(kTiny);
  TransportConfig tc;  // prism
  Simulator s(sc, tc);
  ASSERT_TRUE(s.Init().ok());
  ASSERT_TRUE(s.Run().ok());
  ASSERT_TRUE(s.result().completed);
  std::vector<RunResult> rs = {s.result()};
  RunResult made;  // hand-made totals: each key reads its own field
  made.transport = "made";
  made.totals.rnr_nacks_received = 11;
  made.totals.rnr_probes_sent = 12;
  made.totals.rnr_timeouts = 13;
  made.totals.rx_drop_no_buffer = 14;
  made.totals.cq_delivery_holds = 15;
  made.totals.writes_refused_cq_full = 16;
  rs.push_back(made);
  const json::Value root = Summarize(sc, rs);
  const json::Value* tr = root.Find("transports");
  ASSERT_NE(tr, nullptr);
  const json::Value* prism = tr->Find(s.result().transport);
  const json::Value* m = tr->Find("made");
  ASSERT_NE(prism, nullptr);
  ASSERT_NE(m, nullptr);
  int64_t want = 11;
  for (const char* k : kKeys) {
    SCOPED_TRACE(k);
    const json::Value* v = prism->Find(k);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->as_int(), 0);
    v = m->Find(k);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->as_int(), want++);
  }
}

TEST(ScenarioTest, JainIndex) {
  EXPECT_DOUBLE_EQ(JainIndex({1, 1, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(JainIndex({1, 0, 0, 0}), 0.25);
}

}  // namespace
}  // namespace prism::sim
