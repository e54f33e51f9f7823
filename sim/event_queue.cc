#include "sim/event_queue.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace prism::sim {

EventQueue::EventQueue() : buckets_(kBuckets), bits_(kBuckets / 64, 0) {}

uint64_t EventQueue::PushSlow(Time time, uint16_t kind, uint32_t arg,
                              void* ptr) {
  const uint64_t seq = next_seq_++;
  const int64_t b = time >> kShift;
  if (b > cur_ && b < cur_ + static_cast<int64_t>(kBuckets)) {
    const uint32_t slot = static_cast<uint32_t>(b) & (kBuckets - 1);
    Bucket& k = buckets_[slot];
    const uint32_t c = NewChunk();
    if (k.tail == kNil) {
      k.head = c;
      bits_[slot >> 6] |= uint64_t{1} << (slot & 63);
    } else {  // the last chunk is full
      chunks_[k.tail].next = c;
    }
    k.tail = c;
    Event& d = chunks_[c].ev[0];
    d.time = time;
    d.seq = seq;
    d.ptr = ptr;
    d.arg = arg;
    d.kind = kind;
    k.n = 1;
    return seq;
  }
  Event e;
  e.time = time;
  e.seq = seq;
  e.kind = kind;
  e.arg = arg;
  e.ptr = ptr;
  if (b <= cur_) {
    HeapPush(late_, e);
    ready_fast_ = 0;
  } else {
    HeapPush(far_, e);
  }
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
  // (ready_ is drained and late_ empty: the events not in far_ are in the
  // buckets.)
  int64_t next = INT64_MAX;
  if (size() > far_.size()) {
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
  Bucket& k = buckets_[slot];
  if (k.head != kNil) {
    uint32_t c = k.head;
    while (c != kNil) {
      Chunk& ch = chunks_[c];
      const uint32_t nx = ch.next;
      const uint32_t n = nx == kNil ? k.n : kChunkEvents;
      ready_.insert(ready_.end(), ch.ev, ch.ev + n);
      ch.next = free_;
      free_ = c;
      c = nx;
    }
    k = Bucket{};
    bits_[slot >> 6] &= ~(uint64_t{1} << (slot & 63));
  }
  ready_n_ = ready_.size();
  ready_fast_ = ready_n_;
  SortReady();
}

void EventQueue::SortReady() {
  const size_t n = ready_n_;
  if (order_.size() < n) {
    order_.resize(n);
    sort_tmp_.resize(n);
  }
  uint32_t* ord = order_.data();
  if (n > size_t{kIdxMask} + 1) {
    // A burst too large for the keys' index bits: sort the events in place.
    std::sort(ready_.begin(), ready_.end(),
              [](const Event& a, const Event& b) { return Less(a, b); });
    for (size_t i = 0; i < n; ++i) ord[i] = static_cast<uint32_t>(i);
    idx_mask_ = ~0u;
    return;
  }
  idx_mask_ = kIdxMask;
  // All events share the bucket, so time's low kShift bits order them; a
  // key is those bits above the event's index, so keys order by
  // (time, index) = (time, seq) and are distinct.
  static_assert(kShift + kIdxBits == 32, "a key is 32 bits");
  const Event* const ev = ready_.data();
  auto key_of = [ev](size_t i) {
    return ((static_cast<uint32_t>(ev[i].time) & ((1u << kShift) - 1))
            << kIdxBits) |
           static_cast<uint32_t>(i);
  };
  if (n < 32) {  // insertion sort
    for (size_t i = 0; i < n; ++i) {
      const uint32_t key = key_of(i);
      size_t j = i;
      while (j > 0 && ord[j - 1] > key) {
        ord[j] = ord[j - 1];
        --j;
      }
      ord[j] = key;
    }
    return;
  }
  // A counting sort (stable) by time's high 6 bits (64 ps steps), then an
  // insertion sort, which only has to order keys within a step. Should
  // that take more than kMoves moves per key (many distinct times in one
  // step, out of order), the keys are radix sorted instead (LSD: low 6
  // bits, then high 6).
  static_assert(kShift == 12, "6-bit counting passes over 12 bits");
  constexpr size_t kMoves = 2;
  constexpr int kHi = kIdxBits + 6;
  uint32_t* tmp = sort_tmp_.data();
  uint32_t hi[64] = {};
  for (size_t i = 0; i < n; ++i) {
    const uint32_t key = key_of(i);
    ++hi[key >> kHi];
    tmp[i] = key;
  }
  uint32_t start[64];
  uint32_t a = 0;
  for (int i = 0; i < 64; ++i) {
    start[i] = a;
    a += hi[i];
  }
  std::copy(start, start + 64, hi);
  for (size_t i = 0; i < n; ++i) ord[hi[tmp[i] >> kHi]++] = tmp[i];
  size_t budget = kMoves * n;
  for (size_t i = 1; i < n; ++i) {
    const uint32_t key = ord[i];
    size_t j = i;
    while (j > 0 && ord[j - 1] > key) {
      ord[j] = ord[j - 1];
      --j;
      if (--budget == 0) break;
    }
    ord[j] = key;
    if (budget == 0) break;
  }
  if (budget == 0) {  // tmp still holds the keys in index order
    uint32_t lo[64] = {};
    for (size_t i = 0; i < n; ++i) ++lo[(tmp[i] >> kIdxBits) & 63];
    a = 0;
    for (int i = 0; i < 64; ++i) {
      const uint32_t x = lo[i];
      lo[i] = a;
      a += x;
    }
    for (size_t i = 0; i < n; ++i)
      ord[lo[(tmp[i] >> kIdxBits) & 63]++] = tmp[i];
    std::copy(start, start + 64, hi);
    for (size_t i = 0; i < n; ++i) tmp[hi[ord[i] >> kHi]++] = ord[i];
    order_.swap(sort_tmp_);
  }
}

const Event* EventQueue::PopSlow() {
  if (ready_pos_ == ready_n_ && late_.empty()) Advance();
  const Event* top;
  if (!late_.empty() &&
      (ready_pos_ == ready_n_ ||
       Less(late_[0], ready_[order_[ready_pos_] & idx_mask_]))) {
    late_top_ = HeapPop(late_);
    top = &late_top_;
    if (late_.empty()) ready_fast_ = ready_n_;
  } else {
    top = &ready_[order_[ready_pos_++] & idx_mask_];
  }
  now_ = top->time;
  ++popped_;
  return top;
}

size_t EventQueue::memory_bytes() const {
  const size_t n = ready_.capacity() + late_.capacity() + far_.capacity();
  return n * sizeof(Event) + chunks_.capacity() * sizeof(Chunk) +
         (order_.capacity() + sort_tmp_.capacity()) * sizeof(uint32_t) +
         buckets_.size() * sizeof(Bucket) + bits_.size() * sizeof(uint64_t);
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
