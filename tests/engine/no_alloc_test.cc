// The engine allocates nothing per packet once warm: two engines over the
// loopback datapath move a steady stream of WRITEs of mixed sizes (with and
// without immediates) under loss, burst loss, trimming, corruption,
// duplication, reordering and ECN marks, and after a warm-up the global
// operator new is not called again, whatever the engines do (segmenting,
// spraying, SACKs and NACKs, selective and timeout retransmissions, probes,
// in-order completion). Counts calls to the global operator new in this
// binary (operator new[] goes through it; malloc itself is not counted:
// the engine is C++ throughout).
#include <algorithm>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "prism/engine.h"
#include "tests/count_new.h"
#include "tests/protocol/harness.h"
#include "transport/base/random.h"

namespace prism {
namespace {

struct StreamResult {
  uint64_t completed = 0;
  uint64_t failed = 0;
  uint64_t immediates = 0;
  uint64_t allocs_in_warmup = 0;  // the connection state, rings growing
  uint64_t allocs_after_warmup = 0;
  uint64_t retransmissions = 0;
  uint64_t trims = 0;
  bool stuck = false;
};

// Keeps `depth` WRITEs outstanding from engine 0 to engine 1 until `total`
// have completed; counts operator new calls after the first `warmup`.
StreamResult Stream(const loopback::FaultPlan& faults, uint64_t total,
                    uint64_t warmup, size_t depth, uint64_t seed) {
  EngineOptions eo;
  eo.seed = seed;
  eo.mtu_payload = 4096;
  loopback::LinkConfig link;
  link.delay = 2 * kMicrosecond;
  link.port_rate_bps = 100'000'000'000ull;
  testing::LoopbackHarness h(2, eo, link, faults);
  ConnectionOptions co;
  co.num_paths = 64;
  co.num_planes = 4;
  co.base_rtt = 8 * kMicrosecond;
  co.rto_min = 50 * kMicrosecond;
  co.link_rate_bps = 100'000'000'000ull;
  const auto [ca, cb] = h.Connect(0, 1, co, co);
  EXPECT_NE(ca, kInvalidConn);
  constexpr size_t kBuf = 4 << 20;
  std::vector<uint8_t> src(kBuf), dst(kBuf);
  Rng rng(seed);
  for (auto& x : src) x = static_cast<uint8_t>(rng.Next32());
  const MemoryRegion ms =
      *h.engine(0).RegisterMemory(src.data(), src.size(), kAccessLocal);
  const MemoryRegion md =
      *h.engine(1).RegisterMemory(dst.data(), dst.size(), kAccessRemoteWrite);
  // Room for everything the run collects, reserved up front.
  h.completions(0).reserve(4096);
  h.completions(1).reserve(4096);

  StreamResult r;
  const uint64_t first = testing::NewCalls();
  uint64_t posted = 0, outstanding = 0, before = 0;
  const uint64_t sizes[] = {1, 100, 4096, 4097, 65536, 300000, 1 << 20};
  uint64_t steps = 0;
  while (r.completed + r.failed < total) {
    while (outstanding < depth && posted < total) {
      const uint64_t len = sizes[rng.Uniform(7)];
      const uint64_t off = rng.Uniform(kBuf - len + 1);
      WriteRequest w;
      w.wr_id = ++posted;
      w.local_addr = src.data() + off;
      w.length = len;
      w.lkey = ms.lkey;
      w.remote_addr = md.addr + off;
      w.rkey = md.rkey;
      w.has_immediate = posted % 3 == 0;
      w.immediate = static_cast<uint32_t>(posted);
      if (!h.engine(0).PostWrite(h.now(), ca, w).ok()) {
        --posted;
        break;
      }
      ++outstanding;
    }
    if (!h.Step() || ++steps > 50'000'000) {
      r.stuck = true;
      break;
    }
    for (const Completion& c : h.completions(0)) {
      if (c.type != CompletionType::kWrite) continue;
      --outstanding;
      if (c.status == absl::StatusCode::kOk) {
        ++r.completed;
      } else {
        ++r.failed;
      }
      if (r.completed + r.failed == warmup) before = testing::NewCalls();
    }
    for (const Completion& c : h.completions(1)) {
      r.immediates += c.type == CompletionType::kRecvImmediate;
    }
    h.completions(0).clear();
    h.completions(1).clear();
  }
  r.allocs_in_warmup = before - first;
  r.allocs_after_warmup = testing::NewCalls() - before;
  const ConnectionStats st = *h.engine(0).connection_stats(ca);
  r.retransmissions = st.retransmitted_packets;
  r.trims = st.trims_received;
  return r;
}

TEST(EngineNoAlloc, CleanStreamAllocatesNothingOnceWarm) {
  const uint64_t at_start = testing::NewCalls();
  std::vector<int> probe(3);  // the counting hook works
  ASSERT_GT(testing::NewCalls(), at_start);
  const StreamResult r = Stream({}, 3000, 500, 16, 1);
  ASSERT_FALSE(r.stuck);
  EXPECT_EQ(r.failed, 0u);
  EXPECT_EQ(r.completed, 3000u);
  EXPECT_GT(r.allocs_in_warmup, 0u) << "the hook sees the engine's";
  EXPECT_EQ(r.allocs_after_warmup, 0u);
}

TEST(EngineNoAlloc, FaultyStreamAllocatesNothingOnceWarm) {
  loopback::FaultPlan f;
  f.seed = 7;
  f.loss = 0.01;
  f.p_enter_bad = 0.001;
  f.trim = 0.01;
  f.corrupt = 0.002;
  f.duplicate = 0.01;
  f.ecn = 0.02;
  f.reorder = 0.05;
  f.reorder_max_delay = 20 * kMicrosecond;
  const StreamResult r = Stream(f, 3000, 1000, 16, 2);
  ASSERT_FALSE(r.stuck);
  EXPECT_EQ(r.failed, 0u);
  EXPECT_EQ(r.completed, 3000u);
  EXPECT_GT(r.retransmissions, 0u);
  EXPECT_GT(r.trims, 0u);
  EXPECT_GT(r.allocs_in_warmup, 0u) << "the hook sees the engine's";
  EXPECT_EQ(r.allocs_after_warmup, 0u);
}

}  // namespace
}  // namespace prism
