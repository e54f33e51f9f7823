// Discrete-event core of the simulator: a (time, sequence)-ordered event
// queue and cancellable timers.
//
// Contract:
// - Events pop in non-decreasing time; events with the same time pop in the
//   order they were pushed (the sequence number breaks ties), so a run is a
//   pure function of its inputs and seed.
// - An event is plain data {time, seq, kind, arg, ptr}; the owner of the
//   queue (the Simulator) dispatches on `kind`. Kind kTimerKind is reserved
//   for Timer and is dispatched with Timer::Fire; its arg is the timer's node.
// - Timers are cancelled lazily: re-arming or cancelling leaves the old heap
//   entry in place and it is ignored when it pops (its seq no longer
//   matches). Re-arming a timer later than its queued entry pushes nothing
//   until that entry pops, so frequently re-armed timers do not grow the heap.
// - Batches (the Simulator's "batched" scheduler, docs/simulator.md): while
//   a batch [start, end) is open (BeginBatch), the caller pops the batch's
//   events itself (PopUntil(end - 1)) and dispatches them in its own order,
//   moving the clock with SetClock (it may go back between nodes); an event
//   pushed meanwhile with time < end goes to a side heap, taken with
//   PopBatch in (time, seq) order, and later ones to the calendar as usual.
//   A timer records the node it belongs to (Timer::node) so that the caller
//   can tell whose batch its events are part of.
// - No globals: any number of queues can live in one process.
//
// Thread safety: none; one queue per single-threaded simulation.
#ifndef PRISM_SIM_EVENT_QUEUE_H_
#define PRISM_SIM_EVENT_QUEUE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "prism/types.h"
#include "sim/huge_alloc.h"

namespace prism::sim {

struct Event {
  Time time = 0;
  uint64_t seq = 0;
  void* ptr = nullptr;
  uint32_t arg = 0;
  uint16_t kind = 0;
};

// Implementation: a calendar of kBuckets buckets, each 2^kShift ps wide,
// covers the near future; an event is appended to its bucket (O(1)). A
// bucket is a list of fixed-size chunks of events from one pool (free list),
// so pushes and the drain walk memory mostly in order instead of chasing one
// pointer per event, and memory follows the peak number of pending events
// (plus at most one partly filled chunk per bucket) however unevenly they
// spread over the buckets. When the clock reaches a bucket its events are
// copied out once, by a counting sort on time's high bits within the
// bucket, and an insertion sort finishes the order (a fallback sort bounds
// its cost); pops then walk them. Events pushed into the bucket being
// drained go to a small heap merged with it. Events beyond the calendar's
// horizon wait in a 4-ary heap and join the calendar when their bucket
// comes up. Pop order is exactly (time, seq), as with a single heap. Chunks
// are reused and vectors keep their capacity, so a run in steady state
// allocates nothing. The common cases of Push (a bucket within the horizon
// whose last chunk has room) and Pop (no event pushed into the bucket being
// drained) are inline; the rest is out of line.
class EventQueue {
 public:
  static constexpr uint16_t kTimerKind = 0;
  static constexpr int kShift = 12;               // 4.1 ns per bucket
  static constexpr uint32_t kBuckets = 1u << 10;  // horizon ~4.2 us

  EventQueue();
  // Schedules an event; returns its sequence number. REQUIRES: time >= the
  // clock (the time of the last popped event, or SetClock's); an earlier
  // time is taken as the clock's.
  uint64_t Push(Time time, uint16_t kind, uint32_t arg, void* ptr) {
    if (time < batch_end_) [[unlikely]]
      return PushBatch(time, kind, arg, ptr);
    if (time < now_) time = now_;  // never into the past
    const int64_t b = time >> kShift;
    // cur_ < b < cur_ + kBuckets, in one unsigned comparison.
    if (static_cast<uint64_t>(b - cur_ - 1) < kBuckets - 1) {
      Bucket& k = buckets_[static_cast<uint32_t>(b) & (kBuckets - 1)];
      // n == kChunkEvents also when the bucket has no chunk (see Bucket).
      const uint32_t n = k.n;
      if (n < kChunkEvents) [[likely]] {
        const uint64_t seq = next_seq_++;
        // Written field by field in place: an Event built on the stack and
        // copied was read back with wider loads than it was stored with,
        // which stalls store forwarding. Only stores touch the chunk (its
        // fill count lives in the bucket), so a push does not wait for the
        // chunk's cache line.
        Event& d = chunks_[k.tail].ev[n];
        d.time = time;
        d.seq = seq;
        d.ptr = ptr;
        d.arg = arg;
        d.kind = kind;
        k.n = n + 1;
        return seq;
      }
    }
    return PushSlow(time, kind, arg, ptr);
  }
  bool empty() const { return next_seq_ == popped_; }
  size_t size() const { return static_cast<size_t>(next_seq_ - popped_); }
  // Time of the earliest event. REQUIRES: !empty().
  Time next_time() {
    if (ready_pos_ == ready_n_ && late_.empty()) Advance();
    const bool from_late =
        !late_.empty() &&
        (ready_pos_ == ready_n_ || Less(late_[0], ready_[ready_pos_]));
    return from_late ? late_[0].time : ready_[ready_pos_].time;
  }
  // Removes and returns the earliest event. REQUIRES: !empty().
  Event Pop() {
    if (ready_pos_ < ready_fast_) [[likely]] {
      const Event& e = ready_[ready_pos_++];
      now_ = e.time;
      ++popped_;
      return e;
    }
    return *PopSlow();
  }
  // When the queue is not empty and its earliest event's time is <= limit:
  // removes that event and returns it; otherwise returns nullptr and changes
  // nothing (as !empty() && next_time() <= limit, then Pop()). The event
  // stays valid until the next Pop or PopUntil.
  const Event* PopUntil(Time limit) {
    if (ready_pos_ < ready_fast_) [[likely]] {
      const Event* e = &ready_[ready_pos_];
      if (e->time > limit) return nullptr;
      ++ready_pos_;
      now_ = e->time;
      ++popped_;
      return e;
    }
    if (empty() || next_time() > limit) return nullptr;
    return PopSlow();
  }
  // The events already known to come next, in order, after the one last
  // popped (the rest of the bucket being drained; an event pushed later may
  // still come before them): *n of them, from the returned pointer, valid
  // until the next push or pop. For prefetching only: no effect on results.
  const Event* Upcoming(size_t* n) const {
    *n = ready_n_ - ready_pos_;
    return ready_.data() + ready_pos_;
  }
  // Time of the last popped event (the simulation clock).
  Time now() const { return now_; }
  // Batches (see the contract). BeginBatch: events pushed with time < end
  // go to the batch heap until EndBatch. REQUIRES: no batch open, start <=
  // end (equal: nothing goes to the heap), and the clock never below start
  // while the batch is open (the batch's events are all at start or later).
  void BeginBatch(Time start, Time end) {
    batch_start_ = start;
    batch_end_ = end;
    batch_shift_ = 0;
    while (((end - start - 1) >> batch_shift_) >= kBatchBuckets) ++batch_shift_;
  }
  // The clock for the event about to be dispatched (may go back).
  void SetClock(Time t) { now_ = t; }
  bool batch_heap_empty() const { return batch_mask_ == 0; }
  // The batch heap's earliest event. REQUIRES: !batch_heap_empty().
  const Event& batch_top() const {
    const int b = __builtin_ctzll(batch_mask_);
    return batch_bucket_[b][batch_head_[b]];
  }
  Event PopBatch() {
    ++popped_;
    const int b = __builtin_ctzll(batch_mask_);
    std::vector<Event>& v = batch_bucket_[b];
    const Event e = v[batch_head_[b]++];
    if (batch_head_[b] == v.size()) {
      v.clear();
      batch_head_[b] = 0;
      batch_mask_ &= batch_mask_ - 1;
    }
    return e;
  }
  // Closes the batch; the clock becomes `clock`. REQUIRES:
  // batch_heap_empty(), clock >= every time popped in the batch.
  void EndBatch(Time clock) {
    batch_end_ = kNoBatch;
    now_ = clock;
  }
  // (time, seq) order: whether a pops before b.
  __attribute__((always_inline)) static bool Less(const Event& a,
                                                  const Event& b) {
    return a.time < b.time || (a.time == b.time && a.seq < b.seq);
  }
  uint64_t pushed() const { return next_seq_; }
  uint64_t popped() const { return popped_; }
  // Bytes held by the calendar, the heaps and their spare capacity.
  size_t memory_bytes() const;

 private:
  // Push when the inline case does not apply: the bucket needs a chunk, or
  // the event goes to late_ or far_. `time` is already >= now_.
  uint64_t PushSlow(Time time, uint16_t kind, uint32_t arg, void* ptr);
  // Pop when the inline case does not apply (late_ not empty, or the bucket
  // is drained); the event stays valid until the next pop.
  const Event* PopSlow();
  static void HeapPush(std::vector<Event>& h, const Event& e);
  static Event HeapPop(std::vector<Event>& h);
  // Makes the next non-empty bucket current (moves it into ready_, in
  // (time, seq) order). REQUIRES: ready_ drained, late_ empty, !empty().
  void Advance();

  // A calendar bucket is a singly linked list of chunks from chunks_
  // (indices; free list through `next`). Events fill a chunk in push order;
  // every chunk but a bucket's last is full.
  static constexpr uint32_t kChunkEvents = 31;
  struct alignas(64) Chunk {
    uint32_t next;
    Event ev[kChunkEvents];
  };
  static constexpr uint32_t kNil = 0xffffffffu;
  // A bucket's first and last chunk (kNil: none) and the events in its last
  // chunk; n is kChunkEvents when there is no chunk, so that Push's one test
  // `n < kChunkEvents` finds a chunk with room.
  struct Bucket {
    uint32_t tail = kNil;
    uint32_t n = kChunkEvents;
    uint32_t head = kNil;
  };
  uint32_t NewChunk();
  std::vector<Chunk, HugeAllocator<Chunk>> chunks_;
  uint32_t free_ = kNil;
  std::vector<Bucket> buckets_;  // kBuckets, by abs bucket % kBuckets
  std::vector<uint64_t> bits_;   // non-empty buckets
  int64_t cur_ = 0;              // current absolute bucket
  // The current bucket's events in pop order ((time, seq)): the first
  // ready_n_ (the vector keeps the largest size it reached).
  std::vector<Event> ready_;
  size_t ready_n_ = 0;
  size_t ready_pos_ = 0;         // next index into ready_
  std::vector<Event> far_join_;  // Advance's far events for the bucket
  // ready_n_ while late_ is empty, else 0: Pop's inline case is
  // ready_pos_ < ready_fast_ (no event pushed since may come first).
  size_t ready_fast_ = 0;
  Event late_top_;           // the last event PopSlow took from late_
  std::vector<Event> late_;  // pushed into the current bucket (4-ary heap)
  std::vector<Event> far_;   // beyond the horizon (4-ary heap)
  uint64_t next_seq_ = 0;
  uint64_t popped_ = 0;
  Time now_ = 0;
  // Batches: batch_end_ is kNoBatch (below every time) when none is open.
  static constexpr Time kNoBatch = -1;
  Time batch_end_ = kNoBatch;
  // Pushed into the open batch (all the running node's: port-dones, next
  // wire arrivals, timers): a small calendar of kBatchBuckets buckets over
  // [batch_start_, batch_end_), each sorted by (time, seq) from its head
  // on (insertion from the back: a bucket spans a few ns), and a mask of
  // the non-empty ones. (A heap cost a log per event; one sorted list, a
  // long insertion whenever a slow port's port-done waited ahead of a fast
  // link's next arrival.)
  static constexpr int kBatchBuckets = 64;
  Time batch_start_ = 0;
  int batch_shift_ = 0;
  uint64_t batch_mask_ = 0;
  std::vector<Event> batch_bucket_[kBatchBuckets];
  uint32_t batch_head_[kBatchBuckets] = {};
  uint64_t PushBatch(Time time, uint16_t kind, uint32_t arg, void* ptr);
};

class TimerClient {
 public:
  virtual ~TimerClient() = default;
  virtual void OnTimer(Time now, uint32_t tag) = 0;
};

// A re-armable, cancellable one-shot timer. Not copyable (the queue holds a
// pointer to it); it must outlive the queue's dispatching.
class Timer {
 public:
  static constexpr uint32_t kNoNode = 0xffffffffu;
  // `node`: the topology node (host) whose state the client's OnTimer
  // touches, for batched dispatch; kNoNode: not one node's (such a timer
  // ends a batch when it comes up).
  Timer(TimerClient* client, uint32_t tag, uint32_t node = kNoNode)
      : client_(client), tag_(tag), node_(node) {}
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  // Fires at `when` (replaces any earlier setting).
  void Arm(EventQueue& q, Time when);
  // Arms only if `when` is earlier than the current setting (or unarmed).
  void ArmEarlier(EventQueue& q, Time when) {
    if (when < when_) Arm(q, when);
  }
  void Cancel() { when_ = kTimeInfinite; }
  bool armed() const { return when_ != kTimeInfinite; }
  Time when() const { return when_; }

  // Called by the dispatcher for an event of kind kTimerKind whose ptr is
  // this timer.
  void Fire(EventQueue& q, const Event& e);
  uint32_t node() const { return node_; }

 private:
  TimerClient* client_;
  uint32_t tag_;
  Time when_ = kTimeInfinite;  // desired fire time
  Time queued_at_ = kTimeInfinite;
  uint64_t queued_seq_ = 0;
  bool queued_ = false;
  uint32_t node_;
};

}  // namespace prism::sim

#endif  // PRISM_SIM_EVENT_QUEUE_H_
