// The bounded completion queue (EngineOptions::cq_capacity, contract in
// prism/engine.h): a receiver that does not poll holds delivery instead of
// growing its queue or dropping anything (the sender is told NO_BUFFER and
// retries); PostWrite reserves a slot for its completion and is refused
// when none is left; a connection that fails while the queue is full still
// reports its failure; runs are deterministic.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "prism/engine.h"
#include "tests/protocol/harness.h"
#include "transport/base/random.h"

namespace prism {
namespace {

using testing::LoopbackHarness;

loopback::LinkConfig Link() {
  loopback::LinkConfig l;
  l.delay = 2 * kMicrosecond;
  return l;
}

ConnectionOptions Opts() {
  ConnectionOptions o;
  o.congestion = "fixed";
  o.num_paths = 16;
  o.num_planes = 2;
  // The smallest window: a receive message ring of 256 messages, so a
  // receiver that does not poll soon answers NO_BUFFER.
  o.max_inflight_packets = 256;
  return o;
}

struct Msg {
  uint64_t src_off = 0, dst_off = 0, len = 0;
  uint32_t imm = 0;
};

// Engine 0 sends `count` WRITE-with-immediate messages (0 .. 6000 bytes,
// random immediates) to engine 1, whose completion queue holds
// `rx_capacity`. Engine 1 does not poll until `hold` has passed, then
// polls every step. Returns a digest of everything observable (for the
// determinism test) and checks the outcome. With `settle` (< hold) the
// sender's connection stats are also taken at that time.
struct Outcome {
  std::string digest;
  EngineStats rx_stats_while_held;
  ConnectionStats tx_conn_while_held;
  ConnectionStats tx_conn_at_settle;
  size_t rx_completions_while_held = 0;
};

Outcome RunFlood(uint64_t seed, int count, uint32_t rx_capacity, Time hold,
                 Time settle = 0) {
  Outcome out;
  EngineOptions eo;
  eo.seed = seed;
  eo.mtu_payload = 1024;
  LoopbackHarness h(2, eo, Link(), {}, [&](int i, EngineOptions* o) {
    if (i == 1) o->cq_capacity = rx_capacity;
  });
  const auto [c0, c1] = h.Connect(0, 1, Opts(), Opts());
  EXPECT_NE(c0, kInvalidConn);
  Rng r(seed);
  std::vector<Msg> msgs(count);
  uint64_t src_total = 0, dst_total = 0;
  for (Msg& m : msgs) {
    m.len = r.Bernoulli(0.1) ? 0 : r.Uniform(6000);
    m.src_off = src_total;
    m.dst_off = dst_total;
    m.imm = r.Next32();
    src_total += m.len;
    dst_total += m.len + 8;
  }
  std::vector<uint8_t> src(src_total + 1), dst(dst_total + 1, 0xA5);
  for (size_t i = 0; i < src.size(); ++i) {
    src[i] = static_cast<uint8_t>(r.Next32());
  }
  const MemoryRegion smr =
      *h.engine(0).RegisterMemory(src.data(), src.size(), kAccessLocal);
  const MemoryRegion dmr =
      *h.engine(1).RegisterMemory(dst.data(), dst.size(), kAccessRemoteWrite);
  h.SetPolling(1, kTimeInfinite);

  size_t posted = 0;
  auto post = [&]() {
    while (posted < msgs.size()) {
      const Msg& m = msgs[posted];
      WriteRequest w;
      w.wr_id = posted;
      w.local_addr = src.data() + m.src_off;
      w.length = m.len;
      w.lkey = smr.lkey;
      w.remote_addr = dmr.addr + m.dst_off;
      w.rkey = dmr.rkey;
      w.has_immediate = true;
      w.immediate = m.imm;
      const absl::Status st = h.engine(0).PostWrite(h.now(), c0, w);
      if (absl::IsResourceExhausted(st)) return;  // max_outstanding_messages
      EXPECT_TRUE(st.ok()) << st;
      ++posted;
    }
  };
  auto writes_done = [&]() {
    size_t n = 0;
    for (const Completion& c : h.completions(0)) {
      n += c.type == CompletionType::kWrite ? 1 : 0;
    }
    return n;
  };
  // Phase 1: the receiver does not poll.
  if (settle > 0) {
    h.RunUntil(
        [&]() {
          post();
          return false;
        },
        settle);
    out.tx_conn_at_settle = *h.engine(0).connection_stats(c0);
  }
  h.RunUntil(
      [&]() {
        post();
        return false;
      },
      hold);
  out.rx_completions_while_held = h.completions(1).size();
  out.rx_stats_while_held = h.engine(1).stats();
  out.tx_conn_while_held = *h.engine(0).connection_stats(c0);
  // Phase 2: it polls every step; everything drains.
  h.SetPolling(1, 0);
  const bool done = h.RunUntil(
      [&]() {
        post();
        return writes_done() == msgs.size() &&
               h.completions(1).size() == msgs.size();
      },
      hold + 10 * kSecond);
  EXPECT_TRUE(done) << "writes done " << writes_done() << " immediates "
                    << h.completions(1).size() << "\n"
                    << h.engine(1).stats().ToString() << "\n"
                    << h.engine(0).connection_stats(c0)->ToString();
  // Every immediate exactly once, in MSN order, bytes intact.
  const auto& rx = h.completions(1);
  for (size_t i = 0; i < rx.size() && i < msgs.size(); ++i) {
    const Completion& c = rx[i];
    const Msg& m = msgs[i];
    EXPECT_EQ(c.type, CompletionType::kRecvImmediate) << i;
    EXPECT_EQ(c.status, absl::StatusCode::kOk) << i;
    EXPECT_EQ(c.msn, i);
    EXPECT_EQ(c.immediate, m.imm) << i;
    EXPECT_EQ(c.byte_len, m.len) << i;
    EXPECT_EQ(c.remote_addr, dmr.addr + m.dst_off) << i;
  }
  for (size_t i = 0; i < msgs.size(); ++i) {
    const Msg& m = msgs[i];
    EXPECT_EQ(
        std::memcmp(dst.data() + m.dst_off, src.data() + m.src_off, m.len), 0)
        << "message " << i;
    for (int k = 0; k < 8; ++k) {
      EXPECT_EQ(dst[m.dst_off + m.len + k], 0xA5) << "canary " << i;
    }
  }
  for (const Completion& c : h.completions(0)) {
    EXPECT_EQ(c.status, absl::StatusCode::kOk);
  }
  out.digest =
      absl::StrCat("t=", h.now(), " rx: ", h.engine(1).stats().ToString(),
                   " tx: ", h.engine(0).connection_stats(c0)->ToString());
  for (int e = 0; e < 2; ++e) {
    for (const Completion& c : h.completions(e)) {
      absl::StrAppend(&out.digest, " ", static_cast<int>(c.type), ":", c.msn,
                      ":", c.immediate);
    }
  }
  return out;
}

TEST(CqCapacity, ReceiverThatDoesNotPollStaysBoundedThenGetsEverything) {
  constexpr uint32_t kCap = 8;
  constexpr int kCount = 3000;
  const Outcome o = RunFlood(7, kCount, kCap, 5 * kMillisecond);
  // While it did not poll: the queue never held more than its capacity,
  // delivery was held, and messages beyond the 256-message ring were
  // refused with NO_BUFFER (the sender paused and resent them) rather than
  // dropped.
  EXPECT_EQ(o.rx_completions_while_held, 0u);
  EXPECT_EQ(o.rx_stats_while_held.cq_peak, kCap);
  EXPECT_GE(o.rx_stats_while_held.cq_delivery_holds, 1u);
  EXPECT_GT(o.rx_stats_while_held.rx_drop_no_buffer, 0u);
  EXPECT_GT(o.tx_conn_while_held.rnr_nacks_received, 0u);
  // Not every message could have been acknowledged: the ring holds 256
  // past the held one.
  EXPECT_LT(o.tx_conn_while_held.messages_completed,
            static_cast<uint64_t>(kCount));
  EXPECT_GE(o.tx_conn_while_held.messages_completed, 256u);
}

// A receiver (capacity 8) that does not poll for 100 ms while the sender
// has about 9000 packets to send: once the first burst has been refused,
// each pause (rto_min doubling to 16 rto_min = 800 us) ends with one RNR
// probe, the oldest refused packet, and nothing else until it is answered,
// so the sender transmits O(pauses) DATA packets, not a window per pause
// (the old behaviour: about 30 000 here). Then the receiver polls, the
// probe is acked, the window reopens and everything arrives once, in
// order, intact (RunFlood checks).
TEST(CqCapacity, StalledReceiverCostsOneProbePerPause) {
  constexpr Time kSettle = 10 * kMillisecond;
  constexpr Time kHold = 110 * kMillisecond;
  const Outcome o = RunFlood(31, 3000, 8, kHold, kSettle);
  const ConnectionStats& a = o.tx_conn_at_settle;
  const ConnectionStats& b = o.tx_conn_while_held;
  ASSERT_GT(a.rnr_nacks_received, 0u);
  // Pauses in (kSettle, kHold]: at most one per 16 rto_min (rto_min 50 us).
  const uint64_t max_pauses = (kHold - kSettle) / (16 * 50 * kMicrosecond) + 1;
  const uint64_t sent = b.tx_data_packets - a.tx_data_packets;
  const uint64_t probes = b.rnr_probes_sent - a.rnr_probes_sent;
  EXPECT_LE(sent, max_pauses + 2) << b.ToString();  // + tail-loss probes
  EXPECT_GE(probes, max_pauses - 2) << b.ToString();
  EXPECT_LE(probes, sent);
  // Every probe was refused: one NO_BUFFER per pause.
  EXPECT_LE(b.rnr_nacks_received - a.rnr_nacks_received, sent);
  EXPECT_EQ(b.messages_completed, a.messages_completed);
  EXPECT_EQ(b.rnr_timeouts, 0u);
}

// The same stall twice with one seed: the same packets, probes and
// completions (RunFlood's digest has every counter and completion).
TEST(CqCapacity, StalledReceiverSameSeedSameResult) {
  const Outcome a = RunFlood(41, 1500, 8, 30 * kMillisecond);
  const Outcome b = RunFlood(41, 1500, 8, 30 * kMillisecond);
  EXPECT_EQ(a.digest, b.digest);
  EXPECT_GT(a.tx_conn_while_held.rnr_probes_sent, 10u);
  EXPECT_NE(a.digest.find("rnr_probes_sent="), std::string::npos);
  const Outcome c = RunFlood(42, 1500, 8, 30 * kMillisecond);
  EXPECT_NE(a.digest, c.digest);
}

// Engine 0 floods engine 1 (capacity 8, never polls) with `rnr_timeout`
// set on the sender, until `until`. Returns when the sender saw its first
// NO_BUFFER and when its kConnectionError came (kTimeInfinite: none),
// with its completions and stats.
struct Stall {
  Time first_nack = kTimeInfinite;
  Time failed_at = kTimeInfinite;
  size_t posted = 0;
  std::vector<Completion> cq;
  ConnectionStats st;
};

Stall RunStall(Time rnr_timeout, Time until) {
  Stall out;
  EngineOptions eo;
  eo.seed = 17;
  eo.mtu_payload = 1024;
  LoopbackHarness h(2, eo, Link(), {}, [&](int i, EngineOptions* o) {
    if (i == 1) o->cq_capacity = 8;
  });
  ConnectionOptions tx = Opts();
  tx.rnr_timeout = rnr_timeout;
  const auto [c0, c1] = h.Connect(0, 1, tx, Opts());
  EXPECT_NE(c0, kInvalidConn);
  std::vector<uint8_t> src(4096, 7), dst(4096, 0);
  const MemoryRegion smr =
      *h.engine(0).RegisterMemory(src.data(), src.size(), kAccessLocal);
  const MemoryRegion dmr =
      *h.engine(1).RegisterMemory(dst.data(), dst.size(), kAccessRemoteWrite);
  h.SetPolling(1, kTimeInfinite);
  // 1000 messages of 3 packets: well beyond the receiver's 256-message
  // ring past the held one.
  for (; out.posted < 1000; ++out.posted) {
    WriteRequest w;
    w.wr_id = out.posted;
    w.local_addr = src.data();
    w.length = 3000;
    w.lkey = smr.lkey;
    w.remote_addr = dmr.addr;
    w.rkey = dmr.rkey;
    w.has_immediate = true;
    w.immediate = static_cast<uint32_t>(out.posted);
    EXPECT_TRUE(h.engine(0).PostWrite(h.now(), c0, w).ok());
  }
  h.RunUntil(
      [&]() {
        if (out.first_nack == kTimeInfinite &&
            h.engine(0).connection_stats(c0)->rnr_nacks_received > 0) {
          out.first_nack = h.now();
        }
        for (const Completion& c : h.completions(0)) {
          if (c.type == CompletionType::kConnectionError &&
              out.failed_at == kTimeInfinite) {
            out.failed_at = h.now();
          }
        }
        return false;
      },
      until);
  out.cq = h.completions(0);
  out.st = *h.engine(0).connection_stats(c0);
  return out;
}

// rnr_timeout: a receiver that never polls fails the sender's connection
// rnr_timeout after the first NO_BUFFER (not before, although the probes
// are refused all along), as an RC QP whose rnr_retry ran out: the oldest
// outstanding WRITE (the one the peer never acknowledged) completes with
// kResourceExhausted (IBV_WC_RNR_RETRY_EXC_ERR), every later one with
// kAborted (flushed), and the kConnectionError carries kResourceExhausted;
// connection_timeout (30 s) could not have caught it (the receiver answers
// every probe).
TEST(CqCapacity, RnrTimeoutFailsTheConnectionAfterTheStall) {
  constexpr Time kTimeout = 20 * kMillisecond;
  const Stall s = RunStall(kTimeout, 100 * kMillisecond);
  ASSERT_NE(s.first_nack, kTimeInfinite);
  ASSERT_NE(s.failed_at, kTimeInfinite) << s.st.ToString();
  EXPECT_GE(s.failed_at, s.first_nack + kTimeout);
  EXPECT_LE(s.failed_at, s.first_nack + kTimeout + 100 * kMicrosecond);
  EXPECT_EQ(s.st.rnr_timeouts, 1u);
  EXPECT_GT(s.st.rnr_probes_sent, 10u);
  size_t writes = 0, failed = 0, errors = 0;
  uint64_t next_wr_id = 0;
  Completion culprit;
  for (const Completion& c : s.cq) {
    if (c.type == CompletionType::kWrite) {
      EXPECT_EQ(c.wr_id, next_wr_id++);  // in posting order
      ++writes;
      if (c.status != absl::StatusCode::kOk) {
        // OK ones first, then the stuck one, then the flushed ones.
        EXPECT_EQ(c.status, failed == 0 ? absl::StatusCode::kResourceExhausted
                                        : absl::StatusCode::kAborted)
            << c.wr_id;
        if (failed == 0) culprit = c;
        ++failed;
      } else {
        EXPECT_EQ(failed, 0u) << c.wr_id;
      }
    } else if (c.type == CompletionType::kConnectionError) {
      ++errors;
      EXPECT_EQ(c.status, absl::StatusCode::kResourceExhausted);
      EXPECT_EQ(writes, s.posted);  // after every WRITE's completion
      // It names the stuck WRITE (the one that got the cause).
      EXPECT_EQ(c.wr_id, culprit.wr_id);
      EXPECT_EQ(c.msn, culprit.msn);
      EXPECT_EQ(c.byte_len, culprit.byte_len);
    }
  }
  EXPECT_EQ(writes, s.posted);  // every WRITE completed, OK or failed
  EXPECT_GT(failed, 1u);        // one stuck, the others flushed
  EXPECT_EQ(errors, 1u);
  // Those acked before the queue filled completed OK first.
  EXPECT_EQ(s.cq.front().type, CompletionType::kWrite);
  EXPECT_EQ(s.cq.front().status, absl::StatusCode::kOk);
}

// 0 (the default): the sender keeps probing; the connection never fails.
TEST(CqCapacity, RnrTimeoutZeroNeverFires) {
  const Stall s = RunStall(0, 200 * kMillisecond);
  ASSERT_NE(s.first_nack, kTimeInfinite);
  EXPECT_EQ(s.failed_at, kTimeInfinite);
  EXPECT_EQ(s.st.rnr_timeouts, 0u);
  EXPECT_GT(s.st.rnr_probes_sent, 100u);
  for (const Completion& c : s.cq) {
    EXPECT_EQ(c.status, absl::StatusCode::kOk);
  }
}

TEST(CqCapacity, RnrTimeoutValidated) {
  Engine e{EngineOptions{}};
  ConnectionOptions o;
  o.rnr_timeout = -1;
  auto c = e.CreateConnection(o);
  EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
  EXPECT_NE(c.status().message().find("rnr_timeout"), std::string::npos);
  EXPECT_EQ(e.stats().config_errors, 1u);
  o.rnr_timeout = 0;
  EXPECT_TRUE(e.CreateConnection(o).ok());
  o.rnr_timeout = kSecond;
  EXPECT_TRUE(e.CreateConnection(o).ok());
}

TEST(CqCapacity, CapacityOneStillDeliversEverythingInOrder) {
  RunFlood(9, 500, 1, 1 * kMillisecond);
}

TEST(CqCapacity, SameSeedSameResult) {
  const Outcome a = RunFlood(21, 800, 4, 2 * kMillisecond);
  const Outcome b = RunFlood(21, 800, 4, 2 * kMillisecond);
  EXPECT_EQ(a.digest, b.digest);
  const Outcome c = RunFlood(22, 800, 4, 2 * kMillisecond);
  EXPECT_NE(a.digest, c.digest);
}

TEST(CqCapacity, PostWriteRefusedAtCapacityAcceptedAfterPolling) {
  EngineOptions eo;
  eo.seed = 5;
  eo.cq_capacity = 4;
  LoopbackHarness h(2, eo, Link());
  const auto [c0, c1] = h.Connect(0, 1, Opts(), Opts());
  ASSERT_NE(c0, kInvalidConn);
  std::vector<uint8_t> src(4096, 7), dst(4096, 0);
  const MemoryRegion smr =
      *h.engine(0).RegisterMemory(src.data(), src.size(), kAccessLocal);
  const MemoryRegion dmr =
      *h.engine(1).RegisterMemory(dst.data(), dst.size(), kAccessRemoteWrite);
  h.SetPolling(0, kTimeInfinite);
  auto post = [&](uint64_t id) {
    WriteRequest w;
    w.wr_id = id;
    w.local_addr = src.data();
    w.length = 100;
    w.lkey = smr.lkey;
    w.remote_addr = dmr.addr;
    w.rkey = dmr.rkey;
    return h.engine(0).PostWrite(h.now(), c0, w);
  };
  // Four outstanding WRITEs reserve the four slots.
  EXPECT_FALSE(h.engine(0).CompletionQueueFull());
  for (uint64_t id = 1; id <= 4; ++id) ASSERT_TRUE(post(id).ok()) << id;
  // The direct signal (prism::Endpoint parks WRITEs by it): full with
  // nothing queued, all four slots reserved.
  EXPECT_TRUE(h.engine(0).CompletionQueueFull());
  EXPECT_EQ(h.engine(0).CompletionsQueued(), 0u);
  absl::Status st = post(5);
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_NE(st.message().find("cq_capacity"), std::string::npos) << st;
  EXPECT_EQ(h.engine(0).stats().writes_refused_cq_full, 1u);
  EXPECT_EQ(h.engine(0).connection_stats(c0)->writes_refused_cq_full, 1u);
  // They complete; their completions fill the queue: still refused.
  ASSERT_TRUE(h.RunUntil(
      [&]() {
        return h.engine(0).connection_stats(c0)->messages_completed == 4;
      },
      10 * kMillisecond));
  EXPECT_TRUE(absl::IsResourceExhausted(post(5)));
  EXPECT_EQ(h.engine(0).stats().writes_refused_cq_full, 2u);
  EXPECT_EQ(h.engine(0).stats().cq_peak, 4u);
  EXPECT_TRUE(h.engine(0).CompletionQueueFull());
  EXPECT_EQ(h.engine(0).CompletionsQueued(), 4u);
  // Polling one frees one slot: one more WRITE, then refused again.
  EXPECT_EQ(h.PollNow(0, 1), 1u);
  EXPECT_FALSE(h.engine(0).CompletionQueueFull());
  EXPECT_EQ(h.engine(0).CompletionsQueued(), 3u);
  EXPECT_TRUE(post(5).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(post(6)));
  // Polling the rest frees the rest.
  EXPECT_EQ(h.PollNow(0), 3u);
  EXPECT_TRUE(post(6).ok());
  EXPECT_TRUE(post(7).ok());
  EXPECT_TRUE(post(8).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(post(9)));
  h.SetPolling(0, 0);
  ASSERT_TRUE(h.RunUntil([&]() { return h.completions(0).size() == 8; },
                         20 * kMillisecond));
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(h.completions(0)[i].type, CompletionType::kWrite);
    EXPECT_EQ(h.completions(0)[i].wr_id, i + 1);
    EXPECT_EQ(h.completions(0)[i].status, absl::StatusCode::kOk);
  }
  EXPECT_LE(h.engine(0).stats().cq_peak, 4u);
}

// Engine 0 (capacity 4) posts a WRITE to a bad rkey while its packets are
// blackholed, then receives six WRITE-with-immediate messages from engine
// 1 without polling: three fit (one slot is reserved for its WRITE), three
// are held. The WRITE then gets NACK BAD_KEY and the connection fails: its
// kWrite completion (reserved) and its kConnectionError (the one
// completion allowed beyond the capacity) are queued at once; polling
// returns everything, the held messages after the error.
TEST(CqCapacity, FailureWhileFullStillReportsItsCompletions) {
  EngineOptions eo;
  eo.seed = 3;
  loopback::FaultPlan f;
  loopback::Blackhole b;
  b.src = 0;
  b.path_lo = 0;
  b.path_hi = 0xFFFF;
  b.start = 0;
  b.end = 300 * kMicrosecond;
  f.blackholes.push_back(b);
  LoopbackHarness h(2, eo, Link(), f, [](int i, EngineOptions* o) {
    if (i == 0) o->cq_capacity = 4;
  });
  const auto [c0, c1] = h.Connect(0, 1, Opts(), Opts());
  ASSERT_NE(c0, kInvalidConn);
  std::vector<uint8_t> src(8192, 9), dst0(8192, 0), dst1(8192, 0);
  const MemoryRegion s0 =
      *h.engine(0).RegisterMemory(src.data(), src.size(), kAccessLocal);
  const MemoryRegion s1 =
      *h.engine(1).RegisterMemory(src.data(), src.size(), kAccessLocal);
  const MemoryRegion d0 =
      *h.engine(0).RegisterMemory(dst0.data(), dst0.size(), kAccessRemoteWrite);
  const MemoryRegion d1 =
      *h.engine(1).RegisterMemory(dst1.data(), dst1.size(), kAccessRemoteWrite);
  h.SetPolling(0, kTimeInfinite);
  WriteRequest bad;
  bad.wr_id = 77;
  bad.local_addr = src.data();
  bad.length = 512;
  bad.lkey = s0.lkey;
  bad.remote_addr = d1.addr;
  bad.rkey = d1.rkey ^ 0x5a5a5a5a;  // not a key of engine 1
  ASSERT_TRUE(h.engine(0).PostWrite(h.now(), c0, bad).ok());
  for (uint32_t i = 0; i < 6; ++i) {
    WriteRequest w;
    w.wr_id = i;
    w.local_addr = src.data() + 100 * i;
    w.length = 100;
    w.lkey = s1.lkey;
    w.remote_addr = d0.addr + 100 * i;
    w.rkey = d0.rkey;
    w.has_immediate = true;
    w.immediate = 1000 + i;
    ASSERT_TRUE(h.engine(1).PostWrite(h.now(), c1, w).ok());
  }
  // All six arrive during the blackhole (only engine 0's packets vanish).
  h.RunTo(100 * kMicrosecond);
  EXPECT_EQ(h.engine(0).connection_stats(c0)->messages_received, 3u);
  EXPECT_EQ(h.engine(0).stats().cq_delivery_holds, 1u);
  EXPECT_EQ(h.engine(0).stats().cq_peak, 3u);
  EXPECT_TRUE(
      absl::IsResourceExhausted(h.engine(0).PostWrite(h.now(), c0, bad)));
  // The blackhole ends; the bad WRITE is resent, NACKed BAD_KEY.
  ASSERT_TRUE(h.RunUntil(
      [&]() {
        return !absl::IsResourceExhausted(
            h.engine(0).PostWrite(h.now(), c0, bad));
      },
      50 * kMillisecond))
      << h.engine(0).connection_stats(c0)->ToString();
  // A WRITE posted to the failed connection is refused with the flush
  // code (before 2026-12-06: FailedPrecondition, as before Connect).
  EXPECT_TRUE(absl::IsAborted(h.engine(0).PostWrite(h.now(), c0, bad)));
  EXPECT_EQ(h.engine(0).stats().cq_peak, 5u);  // capacity + the error
  EXPECT_EQ(h.PollNow(0), 8u);
  const auto& cq = h.completions(0);
  ASSERT_EQ(cq.size(), 8u);
  std::vector<uint32_t> imms;
  int errors = 0, writes = 0;
  size_t error_at = 0;
  for (size_t i = 0; i < cq.size(); ++i) {
    const Completion& c = cq[i];
    switch (c.type) {
      case CompletionType::kRecvImmediate:
        EXPECT_EQ(c.msn, imms.size());
        imms.push_back(c.immediate);
        break;
      case CompletionType::kWrite:
        ++writes;
        EXPECT_EQ(c.wr_id, 77u);
        EXPECT_EQ(c.status, absl::StatusCode::kPermissionDenied);
        break;
      case CompletionType::kConnectionError:
        ++errors;
        error_at = i;
        EXPECT_EQ(c.status, absl::StatusCode::kPermissionDenied);
        EXPECT_EQ(c.wr_id, 77u) << "names the WRITE that failed";
        break;
    }
  }
  EXPECT_EQ(writes, 1);
  EXPECT_EQ(errors, 1);
  EXPECT_EQ(error_at, 4u);  // three immediates, the WRITE, the error
  EXPECT_EQ(imms, (std::vector<uint32_t>{1000, 1001, 1002, 1003, 1004, 1005}));
  EXPECT_EQ(h.PollNow(0), 0u);
}

// Two connections held by one full queue resume in the order they were
// held, and a poll returns what it resumed in the same call.
TEST(CqCapacity, HeldConnectionsResumeOldestFirst) {
  EngineOptions eo;
  eo.seed = 8;
  LoopbackHarness h(2, eo, Link(), {}, [](int i, EngineOptions* o) {
    if (i == 1) o->cq_capacity = 2;
  });
  const auto [a0, a1] = h.Connect(0, 1, Opts(), Opts());
  const auto [b0, b1] = h.Connect(0, 1, Opts(), Opts());
  ASSERT_NE(a0, kInvalidConn);
  ASSERT_NE(b0, kInvalidConn);
  std::vector<uint8_t> src(1024, 1), dst(1024, 0);
  const MemoryRegion smr =
      *h.engine(0).RegisterMemory(src.data(), src.size(), kAccessLocal);
  const MemoryRegion dmr =
      *h.engine(1).RegisterMemory(dst.data(), dst.size(), kAccessRemoteWrite);
  h.SetPolling(1, kTimeInfinite);
  auto post = [&](ConnId c, uint32_t imm) {
    WriteRequest w;
    w.wr_id = imm;
    w.local_addr = src.data();
    w.length = 64;
    w.lkey = smr.lkey;
    w.remote_addr = dmr.addr + 64 * (imm % 16);
    w.rkey = dmr.rkey;
    w.has_immediate = true;
    w.immediate = imm;
    ASSERT_TRUE(h.engine(0).PostWrite(h.now(), c, w).ok());
  };
  post(a0, 1);
  post(a0, 2);
  post(a0, 3);
  h.RunTo(200 * kMicrosecond);  // A: two queued, the third held
  post(b0, 11);
  post(b0, 12);
  h.RunTo(400 * kMicrosecond);  // B: held behind A
  EXPECT_EQ(h.engine(1).stats().cq_delivery_holds, 2u);
  EXPECT_EQ(h.engine(0).connection_stats(a0)->messages_completed, 3u);
  EXPECT_EQ(h.engine(0).connection_stats(b0)->messages_completed, 2u);
  Completion c[8];
  // One taken: A's held message gets the slot, not B's.
  ASSERT_EQ(h.engine(1).PollCompletions(c, 1), 1u);
  EXPECT_EQ(c[0].immediate, 1u);
  // The rest, in one call: what the poll frees is delivered and returned.
  const size_t n = h.engine(1).PollCompletions(c, 8);
  std::vector<uint32_t> got;
  for (size_t i = 0; i < n; ++i) {
    got.push_back(c[i].immediate);
    EXPECT_EQ(c[i].conn, c[i].immediate < 10 ? a1 : b1);
  }
  EXPECT_EQ(got, (std::vector<uint32_t>{2, 3, 11, 12}));
  EXPECT_EQ(h.engine(1).PollCompletions(c, 8), 0u);
  EXPECT_LE(h.engine(1).stats().cq_peak, 2u);
}

TEST(CqCapacity, CapacityValidated) {
  for (uint32_t cap : {0u, (1u << 24) + 1}) {
    EngineOptions eo;
    eo.cq_capacity = cap;
    Engine e(eo);
    auto c = e.CreateConnection(ConnectionOptions{});
    EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << cap;
    EXPECT_NE(c.status().message().find("cq_capacity"), std::string::npos);
    EXPECT_EQ(e.stats().config_errors, 1u);
  }
  for (uint32_t cap : {1u, 1u << 24}) {
    EngineOptions eo;
    eo.cq_capacity = cap;
    Engine e(eo);
    EXPECT_TRUE(e.CreateConnection(ConnectionOptions{}).ok()) << cap;
  }
}

}  // namespace
}  // namespace prism
