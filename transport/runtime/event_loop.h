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
//      completion queue, only while the queue has room (see below).
// When an iteration finds nothing to do, the loop spins for `spin` and then
// sleeps in epoll on the datapath's descriptors and a wake-up eventfd, until
// min(NextEventTime, now + max_sleep). With busy_poll it never sleeps.
//
// The completion queue is bounded (LoopOptions::cq_capacity = C, a ring
// that grows by doubling up to the power of two at or above C and never
// shrinks: no allocation per completion). The loop takes completions out of
// the engine only while the queue plus the completions the filter holds
// stay within C (one exception: when the filter holds all of C and the
// queue is empty, polling cannot free room, so a burst goes through to the
// filter lest a held completion wait for one behind it, e.g. verbs'
// kConnectionError), so when the application stops polling the engine's own
// bounded queue fills and its backpressure engages (delivery holds, NACK
// NO_BUFFER, PostWrite refusals; prism/engine.h "Completion queue"). Nothing
// is dropped: what does not fit waits in the engine (kConnectionError
// included: the engine queues it beyond its capacity, in order, and the
// loop moves it like any other completion) or, for a WRITE the engine
// rejected, in the loop's pending list. Poll / Wait wake the loop when they
// free room it was waiting for, so the rest moves (and the engine resumes
// held deliveries, in its PollCompletions) without waiting for I/O.
// Post applies the engine's rule at this level: it refuses (ResourceExhausted,
// LoopCounters::writes_refused_cq_full) while unpolled completions plus
// WRITEs accepted and not yet completed into the queue reach C.
//
// A WRITE the engine rejects on a live connection (bad lkey, local range)
// completes in posting order: its error completion waits in the loop until
// the connection's WRITEs handed to the engine before it have completed and
// left the filter (CompletionFilter::HoldsWrites), and the connection's
// later WRITEs wait behind it (Submit::held).
//
// WRITEs still in the loop (queued by Post, or parked: not yet handed to
// the engine) when their connection fails or is closed complete as the
// engine's own outstanding WRITEs do, after them, in posting order:
// kAborted once the connection's kConnectionError has left the engine
// (the engine refuses a WRITE for a failed connection with kAborted; the
// loop keeps it until then), kCancelled once everything the engine had
// queued when ConnectionClosed was called has left it (kAborted instead if
// the connection had failed first). These error completions enter the
// queue the way engine completions do (through the filter, if any), so
// they never overtake one produced before them.
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

#include "absl/container/flat_hash_map.h"
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
  // True while a kWrite completion of `conn` offered to the filter has not
  // left it through Poll yet (held or ready). The loop queues the error
  // completion of a WRITE the engine rejected only after the connection's
  // earlier WRITEs' completions have left the filter.
  virtual bool HoldsWrites(ConnId conn) const = 0;
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
  // Completion queue capacity (see above); at least 1. prism::Endpoint
  // validates it (EndpointOptions::cq_capacity) and gives the engine the
  // same value.
  uint32_t cq_capacity = 65536;
};

struct LoopCounters {
  uint64_t iterations = 0;
  uint64_t sleeps = 0;
  uint64_t tx_deferred = 0;  // packets offered again after back-pressure
  // Engine PostWrite refusals (ResourceExhausted: its completion queue or
  // the connection's max_outstanding_messages full). A refused WRITE is
  // parked until completions leave the engine, then tried again once, so
  // this (and EngineStats::writes_refused_cq_full) counts refusals, not
  // loop iterations.
  uint64_t writes_deferred = 0;
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
  // Completion queue: Post calls refused because unpolled completions plus
  // outstanding WRITEs reached cq_capacity; times the loop found the queue
  // full and left completions in the engine (once per episode, not per
  // iteration); completions queued now, and the most queued at once.
  uint64_t writes_refused_cq_full = 0;
  uint64_t cq_full_stalls = 0;
  uint64_t cq_depth = 0;
  uint64_t cq_peak = 0;
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
  // The engine closed `conn` (Engine::CloseConnection succeeded): the
  // connection's WRITEs still in the loop complete with kCancelled (see
  // above). WRITEs posted for it after this call get NotFound completions
  // (an unknown connection). Loop thread only (inside Run), or while the
  // loop is not running.
  void ConnectionClosed(ConnId conn);
  // Queues a WRITE. ResourceExhausted when submit_queue_size are queued,
  // or when unpolled completions plus outstanding WRITEs reach cq_capacity.
  absl::Status Post(ConnId conn, const WriteRequest& req);
  // Non-blocking; wakes the loop when it frees room the loop waits for.
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
    // Not kOk: the WRITE completes with this code (the engine rejected it,
    // or its connection failed or was closed), once the completion queue
    // has room and, for a closed connection, once engine_polled_ reached
    // release_at (the engine's own completions of the connection left it).
    absl::StatusCode error = absl::StatusCode::kOk;
    uint64_t release_at = 0;
    // The engine rejected it on a live connection (a bad lkey or local
    // range) while earlier WRITEs of the connection were outstanding: its
    // error completion waits until `after_writes` of the connection's
    // WRITEs (all those handed to the engine before it) have completed and
    // left the filter, so completions stay in posting order (as verbs
    // completes a bad WR in order). Cleared by ConnectionClosed.
    bool held = false;
    uint64_t after_writes = 0;
  };
  // Per connection: WRITEs the engine accepted, and their kWrite
  // completions taken from it (the engine completes a connection's WRITEs
  // in posting order, each exactly once). Dropped at ConnectionClosed.
  struct WriteCount {
    uint64_t accepted = 0;
    uint64_t completed = 0;
  };
  // True while `s` (held) must still wait (see Submit::held).
  bool HeldBehindEarlierWrites(const Submit& s) const;
  // Queues a completion the loop made (a WRITE's error) behind everything
  // taken from the engine so far: through the filter, if any. REQUIRES:
  // CqRoom() > 0. Returns PushCompletions' result.
  bool EmitFlushed(const Completion& c);
  // Step 4 saw these completions leave the engine: notes kConnectionErrors.
  void NoteEngineCompletions(const Completion* c, size_t n);

  void ThreadMain();
  bool Iterate(Time now);
  // Queues completions; true when a thread waits in Wait (the caller
  // notifies once, after the iteration, without holding cq_mu_).
  // REQUIRES: n <= CqRoom().
  bool PushCompletions(const Completion* c, size_t n);
  // Completions the loop may still move towards the queue: cq_capacity
  // minus those queued and those the filter holds. Loop thread.
  size_t CqRoom();
  // Completions queued now (cq_mu_ taken).
  size_t CqQueued();
  // Takes up to `max` queued completions; cq_mu_ held.
  size_t PopLocked(Completion* out, size_t max);
  // After a Poll/Wait took `n`: wakes the loop if it waits for room.
  void AfterPop(size_t n);
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
  // Loop thread: WRITEs the engine refused wait here until its
  // PollCompletions returns something (Iterate, step 4): all of them while
  // engine_cq_full_ (no completion slot: Engine::CompletionQueueFull()
  // right after the refusal), those of the connections in parked_
  // (max_outstanding_messages; or failed, their kConnectionError still in
  // the engine).
  bool engine_cq_full_ = false;
  std::vector<ConnId> parked_;
  // Loop thread: completions taken from the engine so far; connections
  // whose kConnectionError was taken (until closed); closed connections
  // whose engine completions may still be in the engine (until
  // engine_polled_ reaches the mark).
  uint64_t engine_polled_ = 0;
  std::vector<ConnId> failed_;
  struct Closed {
    ConnId conn;
    uint64_t release_at;
  };
  std::vector<Closed> closed_;
  absl::flat_hash_map<ConnId, WriteCount> writes_;  // loop thread

  // Completions: a ring of cq_buf_.size() (a power of two) entries, from
  // cq_head_, cq_size_ <= cq_capacity of them queued.
  std::mutex cq_mu_;
  std::condition_variable cq_cv_;
  std::vector<Completion> cq_buf_;
  size_t cq_head_ = 0;
  size_t cq_size_ = 0;
  int cq_waiters_ = 0;
  // Unpolled completions + WRITEs accepted by Post whose kWrite completion
  // is not queued yet (each WRITE has exactly one): Post's admission
  // count. A kWrite entering the queue leaves it unchanged.
  std::atomic<uint64_t> cq_used_{0};
  // Set by the loop when it left completions behind for want of room;
  // cleared (and the loop woken) by the Poll/Wait that frees some.
  std::atomic<bool> cq_stalled_{false};
  bool room_stalled_ = false;  // loop thread: the last iteration ran out
  size_t filter_held_ = 0;     // loop thread: offered to the filter, not
                               // yet polled from it

  // Loop-thread buffers.
  RxPacket rx_[kBurst];
  TxPacket tx_[kTxBurst];
  size_t tx_pending_ = 0;
  Completion comp_[kBurst];

  std::atomic<uint64_t> iterations_{0}, sleeps_{0}, tx_deferred_{0},
      writes_deferred_{0}, stalls_{0}, loop_wakeups_{0}, app_wakeups_{0},
      writes_refused_cq_full_{0}, cq_full_stalls_{0}, cq_depth_{0}, cq_peak_{0};
  std::atomic<Time> stall_time_{0}, max_gap_{0};
};

}  // namespace prism::runtime

#endif  // PRISM_TRANSPORT_RUNTIME_EVENT_LOOP_H_
