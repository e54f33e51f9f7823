#include "sim/event_queue.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace prism::sim {

EventQueue::EventQueue()
    : head_(kBuckets, kNil),
      tail_(kBuckets, kNil),
      tail_n_(kBuckets, 0),
      bits_(kBuckets / 64, 0) {}

uint64_t EventQueue::Push(Time time, uint16_t kind, uint32_t arg, void* ptr) {
  if (time < now_) time = now_;  // never into the past
  const uint64_t seq = next_seq_++;
  ++size_;
  const int64_t b = time >> kShift;
  if (b > cur_ && b < cur_ + static_cast<int64_t>(kBuckets)) {
    const uint32_t slot = static_cast<uint32_t>(b) & (kBuckets - 1);
    // Only stores touch the chunk (its fill count lives in tail_n_), so a
    // push does not wait for the chunk's cache line.
    uint32_t t = tail_[slot];
    uint32_t n = tail_n_[slot];
    if (t == kNil) {
      t = NewChunk();
      head_[slot] = tail_[slot] = t;
      n = 0;
      bits_[slot >> 6] |= uint64_t{1} << (slot & 63);
    } else if (n == kChunkEvents) {
      const uint32_t c = NewChunk();
      chunks_[t].next = c;
      tail_[slot] = t = c;
      n = 0;
    }
    // Written field by field in place: an Event built on the stack and
    // copied was read back with wider loads than it was stored with, which
    // stalls store forwarding.
    Event& d = chunks_[t].ev[n];
    d.time = time;
    d.seq = seq;
    d.ptr = ptr;
    d.arg = arg;
    d.kind = kind;
    tail_n_[slot] = n + 1;
    ++in_calendar_;
    return seq;
  }
  Event e;
  e.time = time;
  e.seq = seq;
  e.kind = kind;
  e.arg = arg;
  e.ptr = ptr;
  HeapPush(b <= cur_ ? late_ : far_, e);
  return seq;
}

uint32_t EventQueue::NewChunk() {
  uint32_t c = free_;
  if (c == kNil) {
    c = static_cast<uint32_t>(chunks_.size());
    chunks_.emplace_back();
  } else {
    free_ = chunks_[c].next;
  }
  chunks_[c].next = kNil;
  return c;
}

void EventQueue::Advance() {
  // The next non-empty calendar bucket (buckets hold abs buckets
  // (cur_, cur_ + kBuckets), so the first set bit after cur_ is the
  // earliest), compared with the earliest far event's bucket.
  int64_t next = INT64_MAX;
  if (in_calendar_ > 0) {
    const uint32_t start = static_cast<uint32_t>(cur_ + 1) & (kBuckets - 1);
    uint32_t w = start >> 6;
    uint64_t word = bits_[w] & (~uint64_t{0} << (start & 63));
    while (word == 0) {
      w = (w + 1) & (kBuckets / 64 - 1);
      word = bits_[w];
    }
    const uint32_t slot =
        (w << 6) | static_cast<uint32_t>(__builtin_ctzll(word));
    const uint32_t dist = (slot - start) & (kBuckets - 1);
    next = cur_ + 1 + dist;
  }
  if (!far_.empty()) next = std::min(next, far_[0].time >> kShift);
  cur_ = next;
  ready_.clear();
  ready_pos_ = 0;
  // Far events first: every one of them was pushed before any event went
  // into this bucket's chunks (a bucket takes pushes once it is within the
  // horizon, and the horizon only moves forward), and the chunks hold
  // events in push order, so ready_ is in increasing seq and a stable sort
  // by time alone gives (time, seq) order.
  while (!far_.empty() && (far_[0].time >> kShift) <= cur_) {
    ready_.push_back(HeapPop(far_));
  }
  const uint32_t slot = static_cast<uint32_t>(cur_) & (kBuckets - 1);
  if (head_[slot] != kNil) {
    const size_t before = ready_.size();
    uint32_t c = head_[slot];
    while (c != kNil) {
      Chunk& ch = chunks_[c];
      const uint32_t nx = ch.next;
      const uint32_t n = nx == kNil ? tail_n_[slot] : kChunkEvents;
      ready_.insert(ready_.end(), ch.ev, ch.ev + n);
      ch.next = free_;
      free_ = c;
      c = nx;
    }
    head_[slot] = tail_[slot] = kNil;
    bits_[slot >> 6] &= ~(uint64_t{1} << (slot & 63));
    in_calendar_ -= ready_.size() - before;
  }
  SortReady();
}

void EventQueue::SortReady() {
  // All events share the bucket, so time's low kShift bits order them.
  static_assert(kShift == 12, "two 6-bit radix passes");
  const size_t n = ready_.size();
  if (n < 32) {  // stable insertion sort by time
    for (size_t i = 1; i < n; ++i) {
      const Event e = ready_[i];
      size_t j = i;
      while (j > 0 && ready_[j - 1].time > e.time) {
        ready_[j] = ready_[j - 1];
        --j;
      }
      ready_[j] = e;
    }
    return;
  }
  if (n > 16384) {
    // A burst (e.g. every flow starting at once): sort in place rather
    // than hold a radix buffer as large as the burst.
    std::sort(ready_.begin(), ready_.end(),
              [](const Event& a, const Event& b) { return Less(a, b); });
    return;
  }
  // LSD radix sort (stable): low 6 bits, then the next 6.
  scratch_.resize(n);
  uint32_t lo[64] = {}, hi[64] = {};
  for (const Event& e : ready_) {
    ++lo[e.time & 63];
    ++hi[(e.time >> 6) & 63];
  }
  uint32_t a = 0, b = 0;
  for (int i = 0; i < 64; ++i) {
    const uint32_t x = lo[i], y = hi[i];
    lo[i] = a;
    hi[i] = b;
    a += x;
    b += y;
  }
  for (const Event& e : ready_) scratch_[lo[e.time & 63]++] = e;
  for (const Event& e : scratch_) ready_[hi[(e.time >> 6) & 63]++] = e;
}

Event EventQueue::Pop() {
  if (ready_pos_ == ready_.size() && late_.empty()) Advance();
  Event top;
  if (!late_.empty() &&
      (ready_pos_ == ready_.size() || Less(late_[0], ready_[ready_pos_]))) {
    top = HeapPop(late_);
  } else {
    top = ready_[ready_pos_++];
  }
  --size_;
  now_ = top.time;
  ++popped_;
  return top;
}

size_t EventQueue::memory_bytes() const {
  const size_t n = ready_.capacity() + scratch_.capacity() + late_.capacity() +
                   far_.capacity();
  return n * sizeof(Event) + chunks_.capacity() * sizeof(Chunk) +
         (head_.size() + tail_.size() + tail_n_.size()) * sizeof(uint32_t) +
         bits_.size() * sizeof(uint64_t);
}

void EventQueue::HeapPush(std::vector<Event>& h, const Event& e) {
  size_t i = h.size();
  h.push_back(e);
  while (i > 0) {
    size_t parent = (i - 1) / 4;
    if (!Less(e, h[parent])) break;
    h[i] = h[parent];
    i = parent;
  }
  h[i] = e;
}

Event EventQueue::HeapPop(std::vector<Event>& h) {
  Event top = h[0];
  Event e = h.back();
  h.pop_back();
  const size_t n = h.size();
  if (n == 0) return top;
  size_t i = 0;
  while (true) {
    size_t first = 4 * i + 1;
    if (first >= n) break;
    size_t best = first;
    size_t end = first + 4 < n ? first + 4 : n;
    for (size_t c = first + 1; c < end; ++c) {
      if (Less(h[c], h[best])) best = c;
    }
    if (!Less(h[best], e)) break;
    h[i] = h[best];
    i = best;
  }
  h[i] = e;
  return top;
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
