#include "sim/event_queue.h"

#include <utility>

namespace prism::sim {

uint64_t EventQueue::Push(Time time, uint16_t kind, uint32_t arg, void* ptr) {
  if (time < now_) time = now_;  // never into the past
  Event e;
  e.time = time;
  e.seq = next_seq_++;
  e.kind = kind;
  e.arg = arg;
  e.ptr = ptr;
  heap_.push_back(e);
  SiftUp(heap_.size() - 1);
  return e.seq;
}

Event EventQueue::Pop() {
  Event top = heap_[0];
  Event last = heap_.back();
  heap_.pop_back();
  if (!heap_.empty()) {
    heap_[0] = last;
    SiftDown(0);
  }
  now_ = top.time;
  ++popped_;
  return top;
}

void EventQueue::SiftUp(size_t i) {
  Event e = heap_[i];
  while (i > 0) {
    size_t parent = (i - 1) / 4;
    if (!Less(e, heap_[parent])) break;
    heap_[i] = heap_[parent];
    i = parent;
  }
  heap_[i] = e;
}

void EventQueue::SiftDown(size_t i) {
  const size_t n = heap_.size();
  Event e = heap_[i];
  while (true) {
    size_t first = 4 * i + 1;
    if (first >= n) break;
    size_t best = first;
    size_t end = first + 4 < n ? first + 4 : n;
    for (size_t c = first + 1; c < end; ++c) {
      if (Less(heap_[c], heap_[best])) best = c;
    }
    if (!Less(heap_[best], e)) break;
    heap_[i] = heap_[best];
    i = best;
  }
  heap_[i] = e;
}

void Timer::Arm(EventQueue& q, Time when) {
  if (when < q.now()) when = q.now();
  when_ = when;
  if (queued_ && queued_at_ <= when) return;  // fires early, re-pushes
  queued_seq_ = q.Push(when, EventQueue::kTimerKind, 0, this);
  queued_at_ = when;
  queued_ = true;
}

void Timer::Fire(EventQueue& q, const Event& e) {
  if (!queued_ || e.seq != queued_seq_) return;  // stale entry
  queued_ = false;
  if (when_ == kTimeInfinite) return;  // cancelled
  if (e.time < when_) {                // re-armed later: wait again
    queued_seq_ = q.Push(when_, EventQueue::kTimerKind, 0, this);
    queued_at_ = when_;
    queued_ = true;
    return;
  }
  when_ = kTimeInfinite;
  client_->OnTimer(e.time, tag_);
}

}  // namespace prism::sim
