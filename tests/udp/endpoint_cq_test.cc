// The Endpoint's bounded completion queue (EndpointOptions::cq_capacity,
// contract in prism/endpoint.h), over UDP on [::1]: a receiver that does
// not poll keeps at most cq_capacity completions in its endpoint queue, the
// engine's backpressure (delivery hold, NO_BUFFER) engages behind it and
// the sender is refused; once the receiver polls, everything arrives
// exactly once, in order, byte-exact. A connection error raised while the
// queue is full is reported, not dropped. Bad capacities fail Create.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "prism/endpoint.h"
#include "transport/base/random.h"
#include "transport/runtime/endpoint_testing.h"

namespace prism {
namespace {

EndpointOptions Udp(uint32_t cq_capacity) {
  EndpointOptions o;
  o.tx_mode = "sockets";
  o.link_mtu = 9000;
  o.cq_capacity = cq_capacity;
  return o;
}

ConnectionOptions Conn() {
  ConnectionOptions co;
  co.num_paths = 4;
  co.base_rtt = 50 * kMicrosecond;
  co.rto_min = 1 * kMillisecond;
  co.rto_max = 8 * kMillisecond;
  co.link_rate_bps = 10'000'000'000ull;
  // The smallest receive message ring: a receiver that does not poll
  // answers NO_BUFFER after 256 messages past the held one.
  co.max_inflight_packets = 256;
  return co;
}

// Connects a fresh connection of `a` to one of `b`; returns {on a, on b}.
std::pair<ConnId, ConnId> Link(Endpoint& a, Endpoint& b,
                               const ConnectionOptions& coa,
                               const ConnectionOptions& cob) {
  auto ca = a.CreateConnection(coa);
  auto cb = b.CreateConnection(cob);
  EXPECT_TRUE(ca.ok() && cb.ok());
  if (!ca.ok() || !cb.ok()) return {0, 0};
  auto ia = a.LocalInfo(*ca);
  auto ib = b.LocalInfo(*cb);
  EXPECT_TRUE(ia.ok() && ib.ok());
  EXPECT_TRUE(a.Connect(*ca, *ib).ok());
  EXPECT_TRUE(b.Connect(*cb, *ia).ok());
  return {*ca, *cb};
}

TEST(EndpointCq, CapacityIsValidatedAtCreate) {
  for (uint32_t bad : {0u, EndpointOptions::kMaxCqCapacity + 1}) {
    auto ep = Endpoint::Create(Udp(bad));
    ASSERT_FALSE(ep.ok()) << bad;
    EXPECT_EQ(ep.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(ep.status().message().find("cq_capacity"), std::string::npos)
        << ep.status();
  }
  for (uint32_t good : {1u, EndpointOptions::kMaxCqCapacity}) {
    auto ep = Endpoint::Create(Udp(good));
    ASSERT_TRUE(ep.ok()) << good << ": " << ep.status();
    // The engine takes the same capacity (it would refuse a bad one here).
    EXPECT_TRUE((*ep)->CreateConnection(Conn()).ok()) << good;
  }
}

// The sender floods WRITE-with-immediate messages at a receiver whose queue
// holds 8 and which does not poll: the receiver's endpoint queue stops at 8,
// its engine holds and answers NO_BUFFER, the sender's writes stop
// completing and its PostWrite is refused. Then the receiver polls: every
// immediate arrives exactly once, in order, with its bytes, and every write
// completes.
TEST(EndpointCq, ReceiverThatDoesNotPollStaysBoundedAndLosesNothing) {
  constexpr uint32_t kRxCapacity = 8, kTxCapacity = 64;
  constexpr int kMessages = 3000;
  auto rx = *Endpoint::Create(Udp(kRxCapacity));
  auto tx = *Endpoint::Create(Udp(kTxCapacity));
  const auto [ct, cr] = Link(*tx, *rx, Conn(), Conn());
  ASSERT_NE(ct, 0u);

  std::vector<uint64_t> off(kMessages), len(kMessages);
  uint64_t total = 0;
  for (int i = 0; i < kMessages; ++i) {
    off[i] = total;
    len[i] = 1 + (static_cast<uint64_t>(i) * 977) % 3000;
    total += len[i];
  }
  std::vector<uint8_t> src(total), dst(total, 0);
  Rng rng(14);
  for (auto& x : src) x = rng.Next32();
  auto ms = tx->RegisterMemory(src.data(), src.size(), kAccessLocal);
  auto md = rx->RegisterMemory(dst.data(), dst.size(), kAccessRemoteWrite);
  ASSERT_TRUE(ms.ok() && md.ok());
  auto imm = [](int i) { return 0x5a000000u ^ static_cast<uint32_t>(i); };

  int posted = 0, sender_done = 0;
  bool refused = false;
  std::string refusal;
  Completion c[32];
  // Posts what the sender accepts and takes its completions (kWrite in
  // posting order, all OK); true when anything moved.
  auto pump_sender = [&]() -> bool {
    bool moved = false;
    while (posted < kMessages) {
      WriteRequest r;
      r.wr_id = posted;
      r.local_addr = src.data() + off[posted];
      r.length = len[posted];
      r.lkey = ms->lkey;
      r.remote_addr = md->addr + off[posted];
      r.rkey = md->rkey;
      r.has_immediate = true;
      r.immediate = imm(posted);
      absl::Status s = tx->PostWrite(ct, r);
      if (!s.ok()) {
        EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
        if (!refused) refusal = std::string(s.message());
        refused = true;
        break;
      }
      ++posted;
      moved = true;
    }
    const size_t n = tx->PollCompletions(c, 32);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(c[i].type, CompletionType::kWrite);
      EXPECT_EQ(c[i].status, absl::StatusCode::kOk);
      EXPECT_EQ(c[i].wr_id, static_cast<uint64_t>(sender_done));
      ++sender_done;
    }
    return moved || n > 0;
  };

  // Phase 1: the receiver does not poll. Run until the sender has been
  // stuck (nothing accepted, nothing completed) for 500 ms.
  Time last_progress = Endpoint::Now();
  const Time deadline1 = last_progress + 60 * kSecond;
  while (Endpoint::Now() < deadline1) {
    if (pump_sender()) {
      last_progress = Endpoint::Now();
    } else if (Endpoint::Now() - last_progress > 500 * kMillisecond) {
      break;
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  EXPECT_LT(posted, kMessages) << "the sender never felt the full queue";
  EXPECT_LT(sender_done, posted) << "writes stay pending";
  ASSERT_TRUE(refused);
  EXPECT_NE(refusal.find("poll completions"), std::string::npos) << refusal;
  EXPECT_GT(tx->datapath_stats().writes_refused_cq_full, 0u);
  const DatapathStats held = rx->datapath_stats();
  EXPECT_EQ(held.cq_depth, kRxCapacity);
  EXPECT_LE(held.cq_peak, kRxCapacity);
  EXPECT_GT(held.cq_full_stalls, 0u);
  // The engine's backpressure engaged behind the endpoint's queue.
  const EngineStats es = rx->stats();
  EXPECT_GT(es.cq_delivery_holds, 0u);
  EXPECT_GT(es.rx_drop_no_buffer, 0u);
  EXPECT_LE(es.cq_peak, kRxCapacity);
  auto tcs = tx->connection_stats(ct);
  ASSERT_TRUE(tcs.ok());
  EXPECT_GT(tcs->rnr_nacks_received, 0u);

  // Phase 2: the receiver polls (blocking waits included) while the sender
  // goes on.
  int received = 0;
  const Time deadline2 = Endpoint::Now() + 120 * kSecond;
  while ((received < kMessages || sender_done < kMessages) &&
         Endpoint::Now() < deadline2) {
    pump_sender();
    const size_t n = (received % 3 == 0)
                         ? rx->WaitCompletions(c, 5, 1 * kMillisecond)
                         : rx->PollCompletions(c, 7);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(c[i].type, CompletionType::kRecvImmediate);
      ASSERT_EQ(c[i].status, absl::StatusCode::kOk);
      ASSERT_LT(received, kMessages) << "more immediates than messages";
      ASSERT_EQ(c[i].immediate, imm(received)) << "out of order or repeated";
      EXPECT_EQ(c[i].byte_len, len[received]);
      EXPECT_EQ(c[i].remote_addr, md->addr + off[received]);
      ++received;
    }
  }
  EXPECT_EQ(posted, kMessages);
  EXPECT_EQ(received, kMessages);
  EXPECT_EQ(sender_done, kMessages);
  EXPECT_EQ(rx->PollCompletions(c, 32), 0u) << "nothing extra";
  EXPECT_EQ(memcmp(src.data(), dst.data(), total), 0) << "not byte-exact";
  const DatapathStats after = rx->datapath_stats();
  EXPECT_LE(after.cq_peak, kRxCapacity);
  EXPECT_LE(tx->datapath_stats().cq_peak, kTxCapacity);
}

// Room made by polling wakes the loop and resumes the engine's held
// deliveries with no I/O at all: the sender has finished (every message
// acknowledged), the receiver's queue (8) and engine queue (8) are full and
// 4 messages are held in its engine; the receiver's loop sleeps. Polling
// alone must bring all 20 out, in order, through eventfd wake-ups of the
// sleeping loop (nothing else writes its eventfd here).
TEST(EndpointCq, PollingWakesTheLoopAndResumesHeldDeliveries) {
  constexpr uint32_t kCapacity = 8;
  constexpr int kPerRound = 20, kRounds = 3;
  auto rx = *Endpoint::Create(Udp(kCapacity));
  auto tx = *Endpoint::Create(Udp(65536));
  const auto [ct, cr] = Link(*tx, *rx, Conn(), Conn());
  ASSERT_NE(ct, 0u);
  (void)cr;
  std::vector<uint8_t> src(4096, 7), dst(4096);
  auto ms = *tx->RegisterMemory(src.data(), src.size(), kAccessLocal);
  auto md = *rx->RegisterMemory(dst.data(), dst.size(), kAccessRemoteWrite);
  Completion c[kCapacity];
  uint32_t next_imm = 0;
  uint64_t wakeups = 0;
  for (int round = 0; round < kRounds; ++round) {
    for (int i = 0; i < kPerRound; ++i) {
      WriteRequest r;
      r.wr_id = i;
      r.local_addr = src.data();
      r.length = 64;
      r.lkey = ms.lkey;
      r.remote_addr = md.addr;
      r.rkey = md.rkey;
      r.has_immediate = true;
      r.immediate = next_imm + i;
      ASSERT_TRUE(tx->PostWrite(ct, r).ok());
    }
    int acked = 0;
    const Time deadline = Endpoint::Now() + 10 * kSecond;
    while (acked < kPerRound && Endpoint::Now() < deadline)
      acked += tx->WaitCompletions(c, kCapacity, 10 * kMillisecond);
    ASSERT_EQ(acked, kPerRound) << "held messages are still acknowledged";
    // Let the receiver's loop go to sleep (UDP: no idle spin).
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(rx->datapath_stats().cq_depth, kCapacity);
    const uint64_t w0 = rx->datapath_stats().loop_wakeups;
    int got = 0;
    while (got < kPerRound && Endpoint::Now() < deadline) {
      const size_t n = rx->WaitCompletions(c, kCapacity, 10 * kMillisecond);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(c[i].type, CompletionType::kRecvImmediate);
        ASSERT_EQ(c[i].immediate, next_imm) << "out of order or repeated";
        ++next_imm;
        ++got;
      }
    }
    ASSERT_EQ(got, kPerRound);
    wakeups += rx->datapath_stats().loop_wakeups - w0;
  }
  // A poll can race with an iteration that was awake anyway (then the
  // loop sees the room itself), so not every one wakes it; but without
  // the wake-up none would.
  EXPECT_GT(wakeups, 0u);
  EXPECT_GT(rx->stats().cq_delivery_holds, 0u);
  EXPECT_LE(rx->datapath_stats().cq_peak, kCapacity);
}

// A WRITE the Endpoint admitted but its engine refuses (the engine's queue
// is full of deliveries waiting behind the Endpoint's full queue) is parked
// until completions leave the engine, not offered again on every loop
// iteration: EngineStats::writes_refused_cq_full counts refusals, and does
// not grow while the application does not poll (before 2026-12-05 it grew
// by one per iteration, about one per millisecond of sleep). Once the
// application polls, the WRITE goes out and completes.
TEST(EndpointCq, WriteRefusedByTheEngineWaitsForRoomInsteadOfRetrying) {
  constexpr uint32_t kCapacity = 8;
  constexpr int kMessages = 40;  // 8 in A's queue, 8 in its engine, 24 held
  auto a = *Endpoint::Create(Udp(kCapacity));
  auto b = *Endpoint::Create(Udp(65536));
  const auto [cb, ca] = Link(*b, *a, Conn(), Conn());
  ASSERT_NE(cb, 0u);
  std::vector<uint8_t> bsrc(4096, 7), bdst(4096, 0), asrc(4096, 9),
      adst(4096, 0);
  auto mbs = *b->RegisterMemory(bsrc.data(), bsrc.size(), kAccessLocal);
  auto mbd = *b->RegisterMemory(bdst.data(), bdst.size(), kAccessRemoteWrite);
  auto mas = *a->RegisterMemory(asrc.data(), asrc.size(), kAccessLocal);
  auto mad = *a->RegisterMemory(adst.data(), adst.size(), kAccessRemoteWrite);
  for (int i = 0; i < kMessages; ++i) {
    WriteRequest r;
    r.wr_id = i;
    r.local_addr = bsrc.data();
    r.length = 64;
    r.lkey = mbs.lkey;
    r.remote_addr = mad.addr;
    r.rkey = mad.rkey;
    r.has_immediate = true;
    r.immediate = i;
    ASSERT_TRUE(b->PostWrite(cb, r).ok());
  }
  Completion c[16];
  int acked = 0;
  const Time deadline = Endpoint::Now() + 10 * kSecond;
  while (acked < kMessages && Endpoint::Now() < deadline)
    acked += b->WaitCompletions(c, 16, 10 * kMillisecond);
  ASSERT_EQ(acked, kMessages) << "held messages are still acknowledged";
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(a->datapath_stats().cq_depth, kCapacity);
  ASSERT_GT(a->stats().cq_delivery_holds, 0u);

  // A takes one immediate and posts a WRITE to B, on A's loop thread
  // between two iterations (a test hook): the loop cannot refill the slot
  // the poll freed before the PostWrite takes it, so the Endpoint admits
  // the WRITE, and the loop then hands it to an engine whose queue is full.
  // (Before 2026-12-06 the test did this from its own thread and skipped
  // when the loop won that race, as it did under parallel ctest load.)
  WriteRequest w;
  w.wr_id = 4242;
  w.local_addr = asrc.data();
  w.length = 512;
  w.lkey = mas.lkey;
  w.remote_addr = mbd.addr;
  w.rkey = mbd.rkey;
  size_t polled = 0;
  Completion first;
  absl::Status post = absl::UnknownError("not run");
  ASSERT_TRUE(runtime::RunOnLoopThreadForTesting(*a, [&] {
                polled = a->PollCompletions(&first, 1);
                post = a->PostWrite(ca, w);
              }).ok());
  ASSERT_EQ(polled, 1u);
  ASSERT_EQ(first.type, CompletionType::kRecvImmediate);
  ASSERT_EQ(first.immediate, 0u);
  ASSERT_TRUE(post.ok()) << post;
  uint32_t next_imm = 1;
  // The engine's held deliveries take every slot freed (they come first),
  // so it refuses the WRITE; the loop then sleeps and wakes (timers, at
  // least every max_sleep) without trying it again.
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const uint64_t refused = a->stats().writes_refused_cq_full;
  EXPECT_GE(refused, 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(a->stats().writes_refused_cq_full, refused)
      << "the loop retried a refused WRITE without new room";
  EXPECT_EQ(b->datapath_stats().writes_refused_cq_full, 0u);

  // A polls: every immediate in order, then its WRITE completes OK.
  bool written = false;
  const Time end = Endpoint::Now() + 10 * kSecond;
  while ((next_imm < static_cast<uint32_t>(kMessages) || !written) &&
         Endpoint::Now() < end) {
    const size_t n = a->WaitCompletions(c, 16, 10 * kMillisecond);
    for (size_t i = 0; i < n; ++i) {
      if (c[i].type == CompletionType::kWrite) {
        EXPECT_EQ(c[i].wr_id, 4242u);
        EXPECT_EQ(c[i].status, absl::StatusCode::kOk);
        written = true;
      } else {
        ASSERT_EQ(c[i].type, CompletionType::kRecvImmediate);
        EXPECT_EQ(c[i].immediate, next_imm);
        ++next_imm;
      }
    }
  }
  EXPECT_EQ(next_imm, static_cast<uint32_t>(kMessages));
  EXPECT_TRUE(written);
  EXPECT_EQ(std::memcmp(bdst.data(), asrc.data(), 512), 0);
  // Each refusal followed room that the held deliveries took first: at
  // most one per completion the loop moved out of A's engine.
  EXPECT_LE(a->stats().writes_refused_cq_full, uint64_t{kMessages});
}

// Endpoint A (queue of 8) has a WRITE outstanding to B when B vanishes;
// D then fills A's queue with immediates and A does not poll. When A's
// connection to B times out, its failure (the WRITE's error and the
// kConnectionError) queue in A's engine beyond its capacity; A's endpoint
// queue still holds at most 8, and when A polls it gets every immediate in
// order and the failure exactly once.
TEST(EndpointCq, ConnectionErrorWhileFullIsReported) {
  constexpr uint32_t kCapacity = 8;
  constexpr int kMessages = 100;
  auto a = *Endpoint::Create(Udp(kCapacity));
  auto b = *Endpoint::Create(Udp(65536));
  auto d = *Endpoint::Create(Udp(65536));
  ConnectionOptions quick = Conn();
  quick.connection_timeout = 300 * kMillisecond;
  const auto [cab, cba] = Link(*a, *b, quick, Conn());
  const auto [cad, cda] = Link(*a, *d, Conn(), Conn());
  ASSERT_NE(cab, 0u);
  ASSERT_NE(cad, 0u);
  (void)cba;

  std::vector<uint8_t> abuf(1 << 20, 0), bbuf(4096), dbuf(1 << 20);
  for (size_t i = 0; i < dbuf.size(); ++i) dbuf[i] = static_cast<uint8_t>(i);
  auto ma = *a->RegisterMemory(abuf.data(), abuf.size(),
                               kAccessLocal | kAccessRemoteWrite);
  auto mb = *b->RegisterMemory(bbuf.data(), bbuf.size(), kAccessRemoteWrite);
  auto md = *d->RegisterMemory(dbuf.data(), dbuf.size(), kAccessLocal);
  b.reset();  // B vanishes: A's WRITE to it is never acknowledged.

  WriteRequest w;
  w.wr_id = 777;
  w.local_addr = abuf.data();
  w.length = 1000;
  w.lkey = ma.lkey;
  w.remote_addr = mb.addr;
  w.rkey = mb.rkey;
  ASSERT_TRUE(a->PostWrite(cab, w).ok());

  constexpr uint64_t kLen = 1000;
  for (int i = 0; i < kMessages; ++i) {
    WriteRequest r;
    r.wr_id = i;
    r.local_addr = dbuf.data() + i * kLen;
    r.length = kLen;
    r.lkey = md.lkey;
    r.remote_addr = ma.addr + i * kLen;
    r.rkey = ma.rkey;
    r.has_immediate = true;
    r.immediate = 1000 + i;
    ASSERT_TRUE(d->PostWrite(cda, r).ok());
  }

  // Wait (A not polling) until the failure reached A's engine queue: one
  // more completion than its capacity (the kConnectionError).
  const Time wait_end = Endpoint::Now() + 10 * kSecond;
  while (a->stats().cq_peak <= kCapacity && Endpoint::Now() < wait_end)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GT(a->stats().cq_peak, kCapacity) << "the failure did not queue";
  const DatapathStats full = a->datapath_stats();
  EXPECT_EQ(full.cq_depth, kCapacity);
  EXPECT_LE(full.cq_peak, kCapacity);

  int received = 0, write_errors = 0, conn_errors = 0;
  Completion c[16];
  const Time deadline = Endpoint::Now() + 30 * kSecond;
  while ((received < kMessages || conn_errors == 0) &&
         Endpoint::Now() < deadline) {
    const size_t n = a->WaitCompletions(c, 16, 10 * kMillisecond);
    for (size_t i = 0; i < n; ++i) {
      switch (c[i].type) {
        case CompletionType::kRecvImmediate:
          EXPECT_EQ(c[i].conn, cad);
          EXPECT_EQ(c[i].immediate, 1000u + received);
          ++received;
          break;
        case CompletionType::kWrite:
          EXPECT_EQ(c[i].conn, cab);
          EXPECT_EQ(c[i].wr_id, 777u);
          EXPECT_NE(c[i].status, absl::StatusCode::kOk);
          EXPECT_EQ(conn_errors, 0) << "the WRITE's error comes first";
          ++write_errors;
          break;
        case CompletionType::kConnectionError:
          EXPECT_EQ(c[i].conn, cab);
          EXPECT_NE(c[i].status, absl::StatusCode::kOk);
          EXPECT_EQ(c[i].wr_id, 777u) << "names the WRITE that failed";
          ++conn_errors;
          break;
      }
    }
  }
  // Anything left over would be a duplicate.
  EXPECT_EQ(a->WaitCompletions(c, 16, 50 * kMillisecond), 0u);
  EXPECT_EQ(received, kMessages);
  EXPECT_EQ(write_errors, 1);
  EXPECT_EQ(conn_errors, 1);
  EXPECT_EQ(memcmp(abuf.data(), dbuf.data(), kMessages * kLen), 0);
  EXPECT_LE(a->datapath_stats().cq_peak, kCapacity);
}

// WRITEs the Endpoint still holds (parked by the connection's
// max_outstanding_messages, never handed to the engine) when the connection
// fails complete as the engine's outstanding ones do: the engine's first
// (the oldest with the cause, the other kAborted), its kConnectionError
// naming the culprit, then the Endpoint's, kAborted, in posting order, each
// exactly once. A WRITE posted after the failure was reported is flushed
// too (kAborted); one posted after CloseConnection is for an unknown
// connection (kNotFound). Before 2026-12-06 the parked ones completed with
// kFailedPrecondition and the kConnectionError carried wr_id 0.
TEST(EndpointFlush, WritesStillInTheEndpointAreAbortedAfterAFailure) {
  // Buffers first: the endpoints (which may still read them) go first.
  std::vector<uint8_t> src(4096, 3), dst(4096);
  auto a = *Endpoint::Create(Udp(64));
  auto b = *Endpoint::Create(Udp(64));
  ConnectionOptions co = Conn();
  co.max_outstanding_messages = 2;
  co.connection_timeout = 300 * kMillisecond;
  const auto [cab, cba] = Link(*a, *b, co, Conn());
  ASSERT_NE(cab, 0u);
  (void)cba;
  auto ms = *a->RegisterMemory(src.data(), src.size(), kAccessLocal);
  auto md = *b->RegisterMemory(dst.data(), dst.size(), kAccessRemoteWrite);
  b.reset();  // nothing is ever acknowledged: the connection times out
  auto write = [&](uint64_t wr_id) {
    WriteRequest w;
    w.wr_id = wr_id;
    w.local_addr = src.data();
    w.length = 100 + wr_id;
    w.lkey = ms.lkey;
    w.remote_addr = md.addr + wr_id;
    w.rkey = md.rkey;
    return w;
  };
  constexpr uint64_t kFirst = 100, kCount = 6;  // 2 in the engine, 4 parked
  for (uint64_t i = 0; i < kCount; ++i)
    ASSERT_TRUE(a->PostWrite(cab, write(kFirst + i)).ok());

  std::vector<Completion> got;
  Completion c[16];
  const Time deadline = Endpoint::Now() + 10 * kSecond;
  while (got.size() < kCount + 1 && Endpoint::Now() < deadline) {
    const size_t n = a->WaitCompletions(c, 16, 10 * kMillisecond);
    got.insert(got.end(), c, c + n);
  }
  ASSERT_EQ(got.size(), kCount + 1);
  // The engine's: the timed-out WRITE, the flushed one, the error.
  EXPECT_EQ(got[0].type, CompletionType::kWrite);
  EXPECT_EQ(got[0].wr_id, kFirst);
  EXPECT_EQ(got[0].status, absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(got[1].type, CompletionType::kWrite);
  EXPECT_EQ(got[1].wr_id, kFirst + 1);
  EXPECT_EQ(got[1].status, absl::StatusCode::kAborted);
  EXPECT_EQ(got[2].type, CompletionType::kConnectionError);
  EXPECT_EQ(got[2].conn, cab);
  EXPECT_EQ(got[2].status, absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(got[2].wr_id, kFirst) << "names the WRITE that failed";
  EXPECT_EQ(got[2].msn, got[0].msn);
  EXPECT_EQ(got[2].byte_len, 100 + kFirst);
  // The Endpoint's: flushed, in posting order, after the engine's.
  for (uint64_t i = 2; i < kCount; ++i) {
    const Completion& x = got[i + 1];
    EXPECT_EQ(x.type, CompletionType::kWrite) << i;
    EXPECT_EQ(x.conn, cab) << i;
    EXPECT_EQ(x.wr_id, kFirst + i);
    EXPECT_EQ(x.status, absl::StatusCode::kAborted) << x.wr_id;
    EXPECT_EQ(x.byte_len, 100 + kFirst + i);
  }
  // Posted after the failure was reported: flushed as well.
  ASSERT_TRUE(a->PostWrite(cab, write(200)).ok());
  ASSERT_EQ(a->WaitCompletions(c, 16, 5 * kSecond), 1u);
  EXPECT_EQ(c[0].type, CompletionType::kWrite);
  EXPECT_EQ(c[0].wr_id, 200u);
  EXPECT_EQ(c[0].status, absl::StatusCode::kAborted);
  // Closing a failed connection adds nothing; a WRITE posted after the
  // close is for an unknown connection.
  ASSERT_TRUE(a->CloseConnection(cab).ok());
  ASSERT_TRUE(a->PostWrite(cab, write(300)).ok());
  ASSERT_EQ(a->WaitCompletions(c, 16, 5 * kSecond), 1u);
  EXPECT_EQ(c[0].wr_id, 300u);
  EXPECT_EQ(c[0].status, absl::StatusCode::kNotFound);
  EXPECT_EQ(a->WaitCompletions(c, 16, 50 * kMillisecond), 0u)
      << "each exactly once";
  EXPECT_EQ(a->datapath_stats().cq_depth, 0u);
}

// CloseConnection while WRITEs are outstanding in the engine and parked in
// the Endpoint: every one completes with kCancelled, in posting order (the
// engine's, then the Endpoint's), no kConnectionError, each exactly once;
// and the completion queue's accounting lets as many WRITEs in afterwards
// as before. Before 2026-12-06 the parked ones completed with kNotFound.
TEST(EndpointFlush, WritesStillInTheEndpointAreCancelledByClose) {
  constexpr uint32_t kCapacity = 8;
  // Buffers first: the endpoints (which may still read them) go first.
  std::vector<uint8_t> src(4096, 3), dst(4096);
  auto a = *Endpoint::Create(Udp(kCapacity));
  auto b = *Endpoint::Create(Udp(64));
  ConnectionOptions co = Conn();
  co.max_outstanding_messages = 2;
  const auto [cab, cba] = Link(*a, *b, co, Conn());
  const auto [cab2, cba2] = Link(*a, *b, Conn(), Conn());
  ASSERT_NE(cab, 0u);
  ASSERT_NE(cab2, 0u);
  (void)cba;
  (void)cba2;
  auto ms = *a->RegisterMemory(src.data(), src.size(), kAccessLocal);
  auto md = *b->RegisterMemory(dst.data(), dst.size(), kAccessRemoteWrite);
  // B stops answering: nothing of cab is acknowledged, so 2 WRITEs stay in
  // A's engine and the rest in A's Endpoint.
  b.reset();
  WriteRequest w;
  w.local_addr = src.data();
  w.length = 64;
  w.lkey = ms.lkey;
  w.remote_addr = md.addr;
  w.rkey = md.rkey;
  constexpr uint64_t kCount = kCapacity;  // fills A's queue accounting
  for (uint64_t i = 0; i < kCount; ++i) {
    w.wr_id = 500 + i;
    ASSERT_TRUE(a->PostWrite(cab, w).ok()) << i;
  }
  w.wr_id = 999;
  EXPECT_TRUE(absl::IsResourceExhausted(a->PostWrite(cab2, w)));
  // Let the loop hand the first two to the engine (they are sent).
  const Time until = Endpoint::Now() + 5 * kSecond;
  while (a->connection_stats(cab)->tx_data_packets == 0 &&
         Endpoint::Now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(a->CloseConnection(cab).ok());
  Completion c[16];
  std::vector<Completion> got;
  const Time deadline = Endpoint::Now() + 5 * kSecond;
  while (got.size() < kCount && Endpoint::Now() < deadline) {
    const size_t n = a->WaitCompletions(c, 16, 10 * kMillisecond);
    got.insert(got.end(), c, c + n);
  }
  ASSERT_EQ(got.size(), kCount);
  for (uint64_t i = 0; i < kCount; ++i) {
    EXPECT_EQ(got[i].type, CompletionType::kWrite) << i;
    EXPECT_EQ(got[i].conn, cab) << i;
    EXPECT_EQ(got[i].wr_id, 500 + i);
    EXPECT_EQ(got[i].status, absl::StatusCode::kCancelled) << got[i].wr_id;
  }
  EXPECT_EQ(a->WaitCompletions(c, 16, 50 * kMillisecond), 0u)
      << "no kConnectionError, nothing twice";
  // Every slot came back: kCapacity WRITEs are admitted again.
  for (uint64_t i = 0; i < kCount; ++i) {
    w.wr_id = 600 + i;
    EXPECT_TRUE(a->PostWrite(cab2, w).ok()) << i;
  }
}

// The connection fails while A's queue is full (its flushed WRITE and its
// kConnectionError wait in A's engine) and A closes it before polling: the
// WRITEs A's Endpoint still held were flushed by the failure, not
// cancelled by the close, so they complete kAborted, after the engine's
// completions of the connection, which the close does not discard.
TEST(EndpointFlush, CloseAfterAnUnreportedFailureStillFlushesWithAborted) {
  constexpr uint32_t kCapacity = 8;
  constexpr int kMessages = 40;
  // Buffers first: the endpoints (which may still read them) go first.
  std::vector<uint8_t> abuf(1 << 16, 0), bbuf(4096), dbuf(1 << 16, 5);
  auto a = *Endpoint::Create(Udp(kCapacity));
  auto b = *Endpoint::Create(Udp(65536));
  auto d = *Endpoint::Create(Udp(65536));
  ConnectionOptions quick = Conn();
  quick.connection_timeout = 300 * kMillisecond;
  quick.max_outstanding_messages = 1;
  const auto [cab, cba] = Link(*a, *b, quick, Conn());
  const auto [cad, cda] = Link(*a, *d, Conn(), Conn());
  ASSERT_NE(cab, 0u);
  ASSERT_NE(cad, 0u);
  (void)cba;
  auto ma = *a->RegisterMemory(abuf.data(), abuf.size(),
                               kAccessLocal | kAccessRemoteWrite);
  auto mb = *b->RegisterMemory(bbuf.data(), bbuf.size(), kAccessRemoteWrite);
  auto md = *d->RegisterMemory(dbuf.data(), dbuf.size(), kAccessLocal);
  b.reset();  // A's WRITEs to B are never acknowledged
  WriteRequest w;
  w.local_addr = abuf.data();
  w.length = 100;
  w.lkey = ma.lkey;
  w.remote_addr = mb.addr;
  w.rkey = mb.rkey;
  for (uint64_t id = 777; id <= 779; ++id) {  // 1 in the engine, 2 held
    w.wr_id = id;
    ASSERT_TRUE(a->PostWrite(cab, w).ok());
  }
  for (int i = 0; i < kMessages; ++i) {
    WriteRequest r;
    r.wr_id = i;
    r.local_addr = dbuf.data();
    r.length = 64;
    r.lkey = md.lkey;
    r.remote_addr = ma.addr + 4096;
    r.rkey = ma.rkey;
    r.has_immediate = true;
    r.immediate = i;
    ASSERT_TRUE(d->PostWrite(cda, r).ok());
  }
  // The failure reached A's engine queue (one beyond its capacity), not
  // A's Endpoint queue (full).
  const Time wait_end = Endpoint::Now() + 10 * kSecond;
  while (a->stats().cq_peak <= kCapacity && Endpoint::Now() < wait_end)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_GT(a->stats().cq_peak, kCapacity) << "the failure did not queue";
  ASSERT_TRUE(a->CloseConnection(cab).ok());

  std::vector<Completion> ab;  // A's completions of cab, in order
  int received = 0;
  Completion c[16];
  const Time deadline = Endpoint::Now() + 10 * kSecond;
  while ((received < kMessages || ab.size() < 4) &&
         Endpoint::Now() < deadline) {
    const size_t n = a->WaitCompletions(c, 16, 10 * kMillisecond);
    for (size_t i = 0; i < n; ++i) {
      if (c[i].conn == cab) {
        ab.push_back(c[i]);
      } else {
        EXPECT_EQ(c[i].type, CompletionType::kRecvImmediate);
        EXPECT_EQ(c[i].immediate, static_cast<uint32_t>(received));
        ++received;
      }
    }
  }
  EXPECT_EQ(received, kMessages);
  ASSERT_EQ(ab.size(), 4u);
  EXPECT_EQ(ab[0].type, CompletionType::kWrite);
  EXPECT_EQ(ab[0].wr_id, 777u);
  EXPECT_EQ(ab[0].status, absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(ab[1].type, CompletionType::kConnectionError);
  EXPECT_EQ(ab[1].wr_id, 777u);
  for (size_t i = 2; i < 4; ++i) {
    EXPECT_EQ(ab[i].type, CompletionType::kWrite);
    EXPECT_EQ(ab[i].wr_id, 776u + i);
    EXPECT_EQ(ab[i].status, absl::StatusCode::kAborted) << ab[i].wr_id;
  }
  EXPECT_EQ(a->WaitCompletions(c, 16, 50 * kMillisecond), 0u)
      << "each exactly once";
}

// A WRITE the engine rejects (here an unknown lkey) on a connection with
// earlier WRITEs outstanding completes after them, in posting order, as a
// verbs work request with a bad key does; the WRITE posted after it
// completes after it. (Before 2026-12-06 the error was queued at once,
// ahead of the earlier WRITEs' completions.) All three are posted from the
// loop thread, so the loop takes them in one iteration: the first is
// surely still outstanding when the second is rejected.
struct OrderRig {
  // Buffers first: the endpoints (which may still read them) go first.
  std::vector<uint8_t> src = std::vector<uint8_t>(4 << 20, 9);
  std::vector<uint8_t> dst = std::vector<uint8_t>(4 << 20);
  std::unique_ptr<Endpoint> a, b;
  ConnId cab = 0;
  MemoryRegion ms, md;

  explicit OrderRig(const ConnectionOptions& co) {
    a = *Endpoint::Create(Udp(64));
    b = *Endpoint::Create(Udp(64));
    cab = Link(*a, *b, co, Conn()).first;
    ms = *a->RegisterMemory(src.data(), src.size(), kAccessLocal);
    md = *b->RegisterMemory(dst.data(), dst.size(), kAccessRemoteWrite);
  }
  WriteRequest Write(uint64_t wr_id, uint64_t off, uint64_t len) const {
    WriteRequest w;
    w.wr_id = wr_id;
    w.local_addr = src.data() + off;
    w.length = len;
    w.lkey = ms.lkey;
    w.remote_addr = md.addr + off;
    w.rkey = md.rkey;
    return w;
  }
  // Posts a 3 MiB WRITE (1), one with an unknown lkey (2) and a small one
  // (3) from the loop thread.
  void PostThree() {
    WriteRequest bad = Write(2, 0, 4096);
    bad.lkey = ms.lkey ^ 0x5a5a5a5a;
    ASSERT_TRUE(runtime::RunOnLoopThreadForTesting(*a, [&] {
                  EXPECT_TRUE(a->PostWrite(cab, Write(1, 0, 3 << 20)).ok());
                  EXPECT_TRUE(a->PostWrite(cab, bad).ok());
                  EXPECT_TRUE(a->PostWrite(cab, Write(3, 3 << 20, 4096)).ok());
                }).ok());
  }
  std::vector<Completion> Collect(size_t want, Time limit) {
    std::vector<Completion> got;
    Completion c[16];
    const Time deadline = Endpoint::Now() + limit;
    while (got.size() < want && Endpoint::Now() < deadline) {
      const size_t n = a->WaitCompletions(c, 16, 10 * kMillisecond);
      got.insert(got.end(), c, c + n);
    }
    // Nothing more: each exactly once.
    EXPECT_EQ(a->WaitCompletions(c, 16, 50 * kMillisecond), 0u);
    return got;
  }
};

TEST(EndpointOrder, RejectedWriteCompletesAfterEarlierWrites) {
  OrderRig r(Conn());
  ASSERT_NE(r.cab, 0u);
  for (int round = 0; round < 3; ++round) {
    r.PostThree();
    const std::vector<Completion> got = r.Collect(3, 20 * kSecond);
    ASSERT_EQ(got.size(), 3u) << "round " << round;
    for (uint64_t i = 0; i < 3; ++i) {
      EXPECT_EQ(got[i].type, CompletionType::kWrite) << round;
      EXPECT_EQ(got[i].conn, r.cab) << round;
      EXPECT_EQ(got[i].wr_id, i + 1) << "round " << round << ": out of order";
    }
    EXPECT_EQ(got[0].status, absl::StatusCode::kOk);
    EXPECT_EQ(got[1].status, absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(got[1].byte_len, 4096u);
    EXPECT_EQ(got[2].status, absl::StatusCode::kOk);
  }
  EXPECT_EQ(memcmp(r.src.data(), r.dst.data(), (3 << 20) + 4096), 0);
  EXPECT_EQ(r.a->datapath_stats().cq_depth, 0u);
}

// The same while the receiver is gone: the first WRITE never completes by
// itself. Closing the connection cancels it; the rejected one's error
// follows it, then the one behind, cancelled: nothing hangs, nothing is
// lost, the order holds.
TEST(EndpointOrder, RejectedWriteWaitingBehindAnotherIsReleasedByClose) {
  OrderRig r(Conn());
  ASSERT_NE(r.cab, 0u);
  r.b.reset();
  r.PostThree();
  // Still held: nothing completes while the first WRITE is outstanding.
  Completion c[4];
  EXPECT_EQ(r.a->WaitCompletions(c, 4, 200 * kMillisecond), 0u);
  ASSERT_TRUE(r.a->CloseConnection(r.cab).ok());
  const std::vector<Completion> got = r.Collect(3, 10 * kSecond);
  ASSERT_EQ(got.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(got[i].wr_id, i + 1);
  EXPECT_EQ(got[0].status, absl::StatusCode::kCancelled);
  EXPECT_EQ(got[1].status, absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(got[2].status, absl::StatusCode::kCancelled);
}

// And when the connection fails instead (no acknowledgement within
// connection_timeout): the engine's completions (the timed-out WRITE, its
// kConnectionError), then the rejected WRITE's error, then the one behind
// it, flushed (kAborted).
TEST(EndpointOrder, RejectedWriteWaitingBehindAnotherIsReleasedByFailure) {
  ConnectionOptions co = Conn();
  co.connection_timeout = 300 * kMillisecond;
  OrderRig r(co);
  ASSERT_NE(r.cab, 0u);
  r.b.reset();
  r.PostThree();
  const std::vector<Completion> got = r.Collect(4, 10 * kSecond);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].type, CompletionType::kWrite);
  EXPECT_EQ(got[0].wr_id, 1u);
  EXPECT_EQ(got[0].status, absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(got[1].type, CompletionType::kConnectionError);
  EXPECT_EQ(got[2].type, CompletionType::kWrite);
  EXPECT_EQ(got[2].wr_id, 2u);
  EXPECT_EQ(got[2].status, absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(got[3].type, CompletionType::kWrite);
  EXPECT_EQ(got[3].wr_id, 3u);
  EXPECT_EQ(got[3].status, absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace prism
