// Discrete-event core of the simulator: a (time, sequence)-ordered event
// queue and cancellable timers.
//
// Contract:
// - Events pop in non-decreasing time; events with the same time pop in the
//   order they were pushed (the sequence number breaks ties), so a run is a
//   pure function of its inputs and seed.
// - An event is plain data {time, seq, kind, arg, ptr}; the owner of the
//   queue (the Simulator) dispatches on `kind`. Kind kTimerKind is reserved
//   for Timer and is dispatched with Timer::Fire.
// - Timers are cancelled lazily: re-arming or cancelling leaves the old heap
//   entry in place and it is ignored when it pops (its seq no longer
//   matches). Re-arming a timer later than its queued entry pushes nothing
//   until that entry pops, so frequently re-armed timers do not grow the heap.
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
// copied out, sorted by (time, seq) once and popped in order; events pushed
// into the bucket being drained go to a small heap merged with it. Events
// beyond the calendar's horizon wait in a 4-ary heap and join the calendar
// when their bucket comes up. Pop order is exactly (time, seq), as with a
// single heap. Chunks are reused and vectors keep their capacity, so a run
// in steady state allocates nothing.
class EventQueue {
 public:
  static constexpr uint16_t kTimerKind = 0;
  static constexpr int kShift = 12;               // 4.1 ns per bucket
  static constexpr uint32_t kBuckets = 1u << 10;  // horizon ~4.2 us

  EventQueue();
  // Schedules an event; returns its sequence number. REQUIRES: time >= the
  // time of the last popped event (no scheduling into the past).
  uint64_t Push(Time time, uint16_t kind, uint32_t arg, void* ptr);
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  // Time of the earliest event. REQUIRES: !empty().
  Time next_time() {
    if (ready_pos_ == ready_.size() && late_.empty()) Advance();
    const bool from_late =
        !late_.empty() &&
        (ready_pos_ == ready_.size() || Less(late_[0], ready_[ready_pos_]));
    return from_late ? late_[0].time : ready_[ready_pos_].time;
  }
  // Removes and returns the earliest event. REQUIRES: !empty().
  Event Pop();
  // The i-th event after the one last popped, if it is already known to be
  // next (in the bucket being drained; an event pushed later may still come
  // before it), else nullptr. For prefetching only: no effect on results.
  const Event* PeekReady(size_t i) const {
    return ready_pos_ + i < ready_.size() ? &ready_[ready_pos_ + i] : nullptr;
  }
  // Time of the last popped event (the simulation clock).
  Time now() const { return now_; }
  uint64_t pushed() const { return next_seq_; }
  uint64_t popped() const { return popped_; }
  // Bytes held by the calendar, the heaps and their spare capacity.
  size_t memory_bytes() const;

 private:
  __attribute__((always_inline)) static bool Less(const Event& a,
                                                  const Event& b) {
    return a.time < b.time || (a.time == b.time && a.seq < b.seq);
  }
  static void HeapPush(std::vector<Event>& h, const Event& e);
  static Event HeapPop(std::vector<Event>& h);
  // Makes the next non-empty bucket current (moves it into ready_).
  // REQUIRES: ready_ drained, late_ empty, size_ > 0.
  void Advance();
  // Sorts ready_ (one bucket, in increasing seq) by (time, seq).
  void SortReady();

  // A calendar bucket is a singly linked list of chunks from chunks_
  // (indices; free list through `next`). Events fill a chunk in push order;
  // every chunk but a bucket's last is full, and the last holds
  // tail_n_[slot] events.
  static constexpr uint32_t kChunkEvents = 31;
  struct alignas(64) Chunk {
    uint32_t next;
    Event ev[kChunkEvents];
  };
  static constexpr uint32_t kNil = 0xffffffffu;
  uint32_t NewChunk();
  std::vector<Chunk, HugeAllocator<Chunk>> chunks_;
  uint32_t free_ = kNil;
  std::vector<uint32_t> head_;  // kBuckets, by abs bucket % kBuckets
  std::vector<uint32_t> tail_;
  std::vector<uint32_t> tail_n_;  // events in each bucket's last chunk
  std::vector<uint64_t> bits_;  // non-empty buckets
  uint64_t in_calendar_ = 0;    // events in the buckets
  int64_t cur_ = 0;             // current absolute bucket
  std::vector<Event> ready_;    // current bucket, sorted
  std::vector<Event> scratch_;  // SortReady's radix buffer (<= 16384)
  size_t ready_pos_ = 0;
  std::vector<Event> late_;  // pushed into the current bucket (4-ary heap)
  std::vector<Event> far_;   // beyond the horizon (4-ary heap)
  size_t size_ = 0;
  uint64_t next_seq_ = 0;
  uint64_t popped_ = 0;
  Time now_ = 0;
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
  Timer(TimerClient* client, uint32_t tag) : client_(client), tag_(tag) {}
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

 private:
  TimerClient* client_;
  uint32_t tag_;
  Time when_ = kTimeInfinite;  // desired fire time
  Time queued_at_ = kTimeInfinite;
  uint64_t queued_seq_ = 0;
  bool queued_ = false;
};

}  // namespace prism::sim

#endif  // PRISM_SIM_EVENT_QUEUE_H_
