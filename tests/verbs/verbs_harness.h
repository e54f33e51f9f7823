// Test harness: one prism::Engine driven over one VerbsDatapath, the way the
// runtime's loop drives it (one timestamp per iteration, packets the
// datapath refused are offered again first). Used by verbs_datapath_test and
// verbs_perf. Single-threaded; no allocation in Pump().
#ifndef PRISM_TESTS_VERBS_VERBS_HARNESS_H_
#define PRISM_TESTS_VERBS_VERBS_HARNESS_H_

#include <poll.h>
#include <time.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "prism/engine.h"
#include "transport/backends/verbs/verbs_datapath.h"

namespace prism::verbs::testing {

inline Time NowPs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<Time>(ts.tv_sec) * kSecond +
         static_cast<Time>(ts.tv_nsec) * kNanosecond;
}

// Environment of the rxe VM (tests/rxe/guest-run.sh).
inline std::string EnvOr(const char* name, const char* dflt) {
  const char* v = getenv(name);
  return v && *v ? v : dflt;
}

// Connection options that suit soft-RoCE under TCG (RTTs of milliseconds).
inline ConnectionOptions SlowLinkOptions(uint16_t paths) {
  ConnectionOptions c;
  c.num_paths = paths;
  c.link_rate_bps = 10'000'000'000ull;
  c.base_rtt = 500 * kMicrosecond;
  c.rto_min = 20 * kMillisecond;
  c.rto_max = 500 * kMillisecond;
  c.probe_interval = 20 * kMillisecond;
  c.connection_timeout = 60 * kSecond;
  return c;
}

struct Side {
  std::unique_ptr<VerbsDatapath> dp;
  std::unique_ptr<Engine> engine;
  uint32_t peer = 0;
  ConnId conn = kInvalidConn;
  std::vector<TxPacket> backlog;  // accepted by the engine, refused by dp
  size_t backlog_head = 0;
  std::vector<Completion> completions;
  // VerbsOptions::message_close: completions go through the datapath's
  // fence, as in the Endpoint's loop.
  bool fenced = false;
  int idle_ = 0;
  TxPacket tx[64];
  RxPacket rx[64];

  static absl::StatusOr<std::unique_ptr<Side>> Create(const VerbsOptions& vo,
                                                      uint64_t seed) {
    auto s = std::make_unique<Side>();
    auto dp = VerbsDatapath::Create(vo);
    if (!dp.ok()) return dp.status();
    s->dp = std::move(*dp);
    s->fenced = vo.message_close;
    EngineOptions eo;
    eo.seed = seed;
    eo.mtu_payload = vo.mtu_payload;
    eo.placer = s->dp->placer();
    s->engine = std::make_unique<Engine>(eo);
    s->backlog.reserve(4096);
    return s;
  }

  absl::Status Open(ConnectionOptions co) {
    auto p = dp->AddPeer();
    if (!p.ok()) return p.status();
    peer = *p;
    co.peer = peer;
    auto c = engine->CreateConnection(co);
    if (!c.ok()) return c.status();
    conn = *c;
    if (fenced) return dp->BindConnection(peer, conn);
    return absl::OkStatus();
  }

  absl::StatusOr<MemoryRegion> Register(void* addr, uint64_t len,
                                        uint32_t access) {
    auto mr = engine->RegisterMemory(addr, len, access);
    if (!mr.ok()) return mr.status();
    absl::Status s = dp->RegisterMemory(*mr, addr);
    if (!s.ok()) return s;
    return *mr;
  }

  // Sleeps on the datapath's completion channel when `idle` iterations in
  // a row moved nothing (at most until the engine's next timer or 1 ms), so
  // the loop leaves the CPU to the (soft) NIC.
  size_t PumpOrSleep(int idle_spins = 64) {
    const size_t moved = Pump();
    if (moved > 0 || !backlog.empty()) {
      idle_ = 0;
      return moved;
    }
    if (++idle_ < idle_spins) return 0;
    dp->ArmWait();
    const size_t again = Pump();
    if (again > 0) {
      idle_ = 0;
      return again;
    }
    const Time next = engine->NextEventTime();
    const Time now = NowPs();
    int ms = 1;
    if (next != kTimeInfinite && next <= now) ms = 0;
    pollfd pfd{dp->wait_fd(), POLLIN, 0};
    if (ms > 0) poll(&pfd, 1, ms);
    return 0;
  }

  // One loop iteration. Returns packets moved (rx + tx).
  size_t Pump() {
    const Time now = NowPs();
    const size_t n = dp->RxBurst(now, rx, 64);
    if (n) engine->OnReceive(now, rx, n);
    size_t moved = n;
    // Offer the backlog first (in order), then new packets.
    while (backlog_head < backlog.size()) {
      const size_t want = std::min<size_t>(64, backlog.size() - backlog_head);
      const size_t k = dp->TxBurst(now, &backlog[backlog_head], want);
      backlog_head += k;
      moved += k;
      if (k < want) break;
    }
    if (backlog_head == backlog.size()) {
      backlog.clear();
      backlog_head = 0;
      const size_t m = engine->PollTransmit(now, tx, 64);
      const size_t k = dp->TxBurst(now, tx, m);
      for (size_t i = k; i < m; ++i) backlog.push_back(tx[i]);
      moved += m;
    }
    Completion c[32];
    size_t k = engine->PollCompletions(c, 32);
    if (fenced) {
      dp->OfferCompletions(c, k);
      k = dp->PollCompletions(c, 32);
    }
    for (size_t i = 0; i < k; ++i) completions.push_back(c[i]);
    return moved;
  }
};

// Connects a's and b's peer slots and engine connections to each other.
inline absl::Status Connect(Side& a, Side& b) {
  auto ia = a.dp->LocalInfo(a.peer);
  auto ib = b.dp->LocalInfo(b.peer);
  if (!ia.ok()) return ia.status();
  if (!ib.ok()) return ib.status();
  // Through the byte encoding, as a real exchange would.
  auto ra = DecodePeerInfo(EncodePeerInfo(*ia));
  auto rb = DecodePeerInfo(EncodePeerInfo(*ib));
  if (!ra.ok()) return ra.status();
  if (!rb.ok()) return rb.status();
  absl::Status s = a.dp->ConnectPeer(a.peer, *rb);
  if (!s.ok()) return s;
  s = b.dp->ConnectPeer(b.peer, *ra);
  if (!s.ok()) return s;
  s = a.engine->Connect(a.conn, b.engine->LocalInfo(b.conn));
  if (!s.ok()) return s;
  return b.engine->Connect(b.conn, a.engine->LocalInfo(a.conn));
}

}  // namespace prism::verbs::testing

#endif  // PRISM_TESTS_VERBS_VERBS_HARNESS_H_
