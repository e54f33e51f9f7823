// EventLoop: drives one prism::Engine with a real clock over one Datapath,
// on its own thread.
//
// Each iteration takes one timestamp (CLOCK_MONOTONIC, in picoseconds) and:
//   1. runs queued control calls (Run) and hands queued WRITEs (Post) to the
//      engine, keeping those the engine has no room for (in order per
//      connection) for the next iteration;
//   2. receive bursts -> Engine::OnReceive;
//   3. Engine::PollTransmit (timers run there) -> transmit bursts; packets
//      the datapath did not accept (back-pressure) are offered again first;
//   4. engine completions -> the completion filter, if any -> the
//      completion queue.
// When an iteration finds nothing to do, the loop spins for `spin` and then
// sleeps in epoll on the datapath's descriptors and a wake-up eventfd, until
// min(NextEventTime, now + max_sleep). With busy_poll it never sleeps.
//
// Thread safety: Run, Post, Poll, Wait and counters may be called from any
// thread. The engine and the datapath are touched only by the loop thread
// while it runs (and by the caller of Run, inline, when it does not).
#ifndef PRISM_TRANSPORT_RUNTIME_EVENT_LOOP_H_
#define PRISM_TRANSPORT_RUNTIME_EVENT_LOOP_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "prism/engine.h"
#include "prism/packet.h"
#include "prism/types.h"
#include "transport/datapath.h"

namespace prism::runtime {

// CLOCK_MONOTONIC in picoseconds.
Time MonotonicNow();

// Sits between the engine's completions and the completion queue: the loop
// offers it every engine completion and queues what Poll returns (verbs:
// the message close, docs/verbs.md). Loop thread only.
class CompletionFilter {
 public:
  virtual ~CompletionFilter() = default;
  virtual void Offer(const Completion* c, size_t n) = 0;
  virtual size_t Poll(Completion* out, size_t max) = 0;
};

struct LoopOptions {
  bool busy_poll = false;
  int cpu = -1;
  size_t submit_queue_size = 1 << 16;
  std::vector<int> wait_fds;  // readable when the datapath has packets
  // Called before sleeping on wait_fds (verbs: re-arm the completion
  // channel); the loop then iterates once more and sleeps only if that
  // found nothing.
  std::function<void()> arm_wait;
  Time spin = 50 * kMicrosecond;
  Time max_sleep = 1 * kMillisecond;
  // Not owned; nullptr: engine completions go to the queue as they are.
  CompletionFilter* completion_filter = nullptr;
};

struct LoopCounters {
  uint64_t iterations = 0;
  uint64_t sleeps = 0;
  uint64_t tx_deferred = 0;      // packets offered again after back-pressure
  uint64_t writes_deferred = 0;  // PostWrite retried (engine queue full)
  // Hand-offs between application threads and the loop thread: eventfd
  // writes that woke the sleeping loop (Post, Run; at most one per sleep),
  // and condition-variable notifications of threads blocked in Wait (at
  // most one per iteration that queued completions).
  uint64_t loop_wakeups = 0;
  uint64_t app_wakeups = 0;
  // Scheduling stalls: iterations that started more than kStallGap after
  // the previous one (a planned sleep lasts at most max_sleep, 1 ms by
  // default, so such a gap is the thread not running: descheduled, or one
  // iteration that ran that long), their summed length and the longest gap.
  uint64_t stalls = 0;
  Time stall_time = 0;
  Time max_gap = 0;
};

class EventLoop {
 public:
  static constexpr size_t kBurst = 32;
  // An iteration gap longer than this counts as a stall (LoopCounters).
  static constexpr Time kStallGap = 2 * kMillisecond;
  // Receive bursts per iteration at most (before the timers run).
  static constexpr int kRxRounds = 16;
  // Packets per transmit burst (64: long runs per socket for UDP GSO), and
  // transmit bursts per iteration at most.
  static constexpr size_t kTxBurst = 64;
  static constexpr int kTxRounds = 4;

  EventLoop(Engine* engine, Datapath* datapath, const LoopOptions& options);
  ~EventLoop();  // Stop()
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  absl::Status Start();
  // Stops and joins the thread. Idempotent.
  void Stop();
  bool running() const { return running_.load(); }

  // Runs `fn(now)` on the loop thread and returns when it has run.
  void Run(const std::function<void(Time now)>& fn);
  // Queues a WRITE. ResourceExhausted when submit_queue_size are queued.
  absl::Status Post(ConnId conn, const WriteRequest& req);
  size_t Poll(Completion* out, size_t max);
  // Waits up to `timeout` for a completion.
  size_t Wait(Completion* out, size_t max, Time timeout);
  LoopCounters counters() const;

 private:
  struct Command {
    const std::function<void(Time)>* fn;
    bool done = false;
  };
  struct Submit {
    ConnId conn;
    WriteRequest req;
  };

  void ThreadMain();
  bool Iterate(Time now);
  // Queues completions; true when a thread waits in Wait (the caller
  // notifies once, after the iteration, without holding cq_mu_).
  bool PushCompletions(const Completion* c, size_t n);
  void Wake();
  void Sleep(Time now);

  Engine* engine_;
  Datapath* dp_;
  LoopOptions opt_;
  std::thread thread_;
  std::atomic<std::thread::id> loop_id_{};
  std::atomic<bool> running_{false};
  std::atomic<bool> stop_{false};
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> wake_sent_{false};  // an eventfd write since the sleep
  int epoll_fd_ = -1;
  int wake_fd_ = -1;

  // Control calls.
  std::mutex cmd_mu_;
  std::condition_variable cmd_cv_;
  std::vector<Command*> cmds_;
  std::atomic<bool> has_cmds_{false};

  // Submissions.
  std::mutex sq_mu_;
  std::vector<Submit> sq_;
  std::atomic<size_t> queued_{0};  // in sq_ + pending_
  std::vector<Submit> sq_local_;   // loop thread
  std::deque<Submit> pending_;     // loop thread: engine queue was full
  std::vector<ConnId> blocked_;    // loop thread, per iteration

  // Completions.
  std::mutex cq_mu_;
  std::condition_variable cq_cv_;
  std::deque<Completion> cq_;
  int cq_waiters_ = 0;

  // Loop-thread buffers.
  RxPacket rx_[kBurst];
  TxPacket tx_[kTxBurst];
  size_t tx_pending_ = 0;
  Completion comp_[kBurst];

  std::atomic<uint64_t> iterations_{0}, sleeps_{0}, tx_deferred_{0},
      writes_deferred_{0}, stalls_{0}, loop_wakeups_{0}, app_wakeups_{0};
  std::atomic<Time> stall_time_{0}, max_gap_{0};
};

}  // namespace prism::runtime

#endif  // PRISM_TRANSPORT_RUNTIME_EVENT_LOOP_H_
