// Test harness: N engines over one LoopbackNetwork, driven in virtual time.
//
// Step() advances `now` to min(next arrival, every engine's NextEventTime())
// and then, per engine in index order: drains its port into OnReceive,
// drains PollTransmit into the port, and collects completions (every step,
// or as SetPolling says: an application that polls only now and then).
// Nothing here reads a clock, so a run is a pure function of the seeds.
#ifndef PRISM_TESTS_PROTOCOL_HARNESS_H_
#define PRISM_TESTS_PROTOCOL_HARNESS_H_

#include <algorithm>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "prism/engine.h"
#include "transport/backends/loopback/loopback.h"

namespace prism::testing {

class LoopbackHarness {
 public:
  // `tweak`, when given, adjusts engine i's options (after its seed is set).
  LoopbackHarness(
      int n, const EngineOptions& eo, const loopback::LinkConfig& link,
      const loopback::FaultPlan& faults = {},
      const std::function<void(int, EngineOptions*)>& tweak = nullptr)
      : net_(link, faults) {
    for (int i = 0; i < n; ++i) {
      EngineOptions o = eo;
      o.seed = eo.seed * 1000003ull + static_cast<uint64_t>(i);
      if (tweak) tweak(i, &o);
      eps_.push_back(Ep{std::make_unique<Engine>(o), net_.AddPort(), {}});
    }
  }

  Engine& engine(int i) { return *eps_[i].eng; }
  loopback::LoopbackNetwork& net() { return net_; }
  std::vector<Completion>& completions(int i) { return eps_[i].cq; }
  Time now() const { return now_; }

  // Engine i's completions are collected at a step only once `every` has
  // passed since the last collection (0, the default: every step;
  // kTimeInfinite: never, until PollNow), and then at most `batch` of them
  // (0: until the queue is empty). The next collection time is an event
  // (NextTime).
  void SetPolling(int i, Time every, size_t batch = 0) {
    eps_[i].poll_every = every;
    eps_[i].poll_batch = batch;
    eps_[i].next_poll = every == kTimeInfinite ? kTimeInfinite : now_ + every;
  }
  // Collects up to `max` of engine i's completions now (0: all).
  size_t PollNow(int i, size_t max = 0) {
    Ep& e = eps_[i];
    size_t got = 0;
    Completion c[64];
    for (;;) {
      const size_t want = max == 0 ? 64 : std::min<size_t>(64, max - got);
      if (want == 0) break;
      const size_t k = e.eng->PollCompletions(c, want);
      e.cq.insert(e.cq.end(), c, c + k);
      got += k;
      if (k < want) break;
    }
    return got;
  }

  // Creates and connects a connection between engines a and b. Options'
  // `peer` fields are filled in. Returns {conn on a, conn on b}.
  std::pair<ConnId, ConnId> Connect(int a, int b, ConnectionOptions oa,
                                    ConnectionOptions ob) {
    oa.peer = static_cast<uint32_t>(eps_[b].port->id());
    ob.peer = static_cast<uint32_t>(eps_[a].port->id());
    auto ca = engine(a).CreateConnection(oa);
    auto cb = engine(b).CreateConnection(ob);
    if (!ca.ok() || !cb.ok()) return {kInvalidConn, kInvalidConn};
    if (!engine(a).Connect(*ca, engine(b).LocalInfo(*cb)).ok() ||
        !engine(b).Connect(*cb, engine(a).LocalInfo(*ca)).ok()) {
      return {kInvalidConn, kInvalidConn};
    }
    return {*ca, *cb};
  }

  // Next time anything happens; kTimeInfinite when all is quiet.
  Time NextTime() const {
    Time t = net_.NextArrivalTime();
    if (wakeup_ > now_) t = std::min(t, wakeup_);
    for (const Ep& e : eps_) {
      t = std::min(t, e.eng->NextEventTime());
      if (e.poll_every != 0 && e.next_poll > now_) t = std::min(t, e.next_poll);
    }
    return t;
  }

  // One event step. Returns false when nothing is scheduled any more.
  bool Step() {
    const Time t = NextTime();
    if (t == kTimeInfinite) return false;
    if (t > now_) {
      now_ = t;
      same_time_steps_ = 0;
    } else if (++same_time_steps_ > 100000) {
      livelock_ = true;
      return false;
    }
    for (Ep& e : eps_) {
      for (;;) {
        const size_t n = e.port->RxBurst(now_, rx_, kBurst);
        if (n == 0) break;
        e.eng->OnReceive(now_, rx_, n);
      }
      for (;;) {
        const size_t m = e.eng->PollTransmit(now_, tx_, kBurst);
        if (m > 0) e.port->TxBurst(now_, tx_, m);
        if (m < kBurst) break;
      }
      if (e.poll_every == 0) {
        Completion c[64];
        for (;;) {
          const size_t k = e.eng->PollCompletions(c, 64);
          e.cq.insert(e.cq.end(), c, c + k);
          if (k < 64) break;
        }
      } else if (now_ >= e.next_poll) {
        PollNow(static_cast<int>(&e - eps_.data()), e.poll_batch);
        e.next_poll = now_ + e.poll_every;
      }
    }
    return true;
  }

  // Steps until done() or virtual time passes `deadline`. True if done().
  bool RunUntil(const std::function<bool()>& done, Time deadline) {
    while (!done()) {
      if (NextTime() > deadline) {
        now_ = std::max(now_, std::min(deadline, NextTime()));
        return false;
      }
      if (!Step()) return done();
    }
    return true;
  }
  // Runs every event up to `t` (inclusive) and sets now to t.
  void RunTo(Time t) {
    while (NextTime() <= t) {
      if (!Step()) break;
    }
    now_ = std::max(now_, t);
  }

  bool livelock() const { return livelock_; }
  // An external event (e.g. the next scheduled PostWrite) at time t: Step()
  // and RunUntil() stop there so the caller can act. kTimeInfinite: none.
  void SetWakeup(Time t) { wakeup_ = t; }

 private:
  static constexpr size_t kBurst = 64;
  struct Ep {
    std::unique_ptr<Engine> eng;
    loopback::LoopbackPort* port;
    std::vector<Completion> cq;
    Time poll_every = 0;  // SetPolling
    size_t poll_batch = 0;
    Time next_poll = 0;
  };
  loopback::LoopbackNetwork net_;
  std::vector<Ep> eps_;
  Time now_ = 0;
  Time wakeup_ = kTimeInfinite;
  int same_time_steps_ = 0;
  bool livelock_ = false;
  RxPacket rx_[kBurst];
  TxPacket tx_[kBurst];
};

}  // namespace prism::testing

#endif  // PRISM_TESTS_PROTOCOL_HARNESS_H_
