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
  ready_pos_ = 0;
  // The bucket's events in increasing seq: far events first (every one of
  // them was pushed before any event went into this bucket's chunks: a
  // bucket takes pushes once it is within the horizon, and the horizon only
  // moves forward), then the chunks, which hold events in push order.
  far_join_.clear();
  while (!far_.empty() && (far_[0].time >> kShift) <= cur_) {
    far_join_.push_back(HeapPop(far_));
  }
  const uint32_t slot = static_cast<uint32_t>(cur_) & (kBuckets - 1);
  Bucket& k = buckets_[slot];
  size_t n = far_join_.size();
  for (uint32_t c = k.head; c != kNil; c = chunks_[c].next) {
    n += c == k.tail ? k.n : kChunkEvents;
  }
  if (ready_.size() < n) ready_.resize(std::max(n, 2 * ready_.size()));
  Event* const out = ready_.data();
  // A counting sort by time's high 6 bits within the bucket (64 ps steps;
  // stable, so events of one time stay in seq order), where there are
  // enough events to pay for it, else a plain copy.
  static_assert(kShift == 12, "steps of 64 ps: bits 6-11");
  const bool counting = n >= 32;
  uint32_t pos[64] = {};
  if (counting) {
    for (const Event& e : far_join_) ++pos[(e.time >> 6) & 63];
    for (uint32_t c = k.head; c != kNil; c = chunks_[c].next) {
      const Event* ev = chunks_[c].ev;
      const uint32_t m = c == k.tail ? k.n : kChunkEvents;
      for (uint32_t i = 0; i < m; ++i) ++pos[(ev[i].time >> 6) & 63];
    }
    uint32_t sum = 0;
    for (uint32_t& x : pos) {
      const uint32_t cnt = x;
      x = sum;
      sum += cnt;
    }
  }
  size_t w = 0;
  auto put = [&](const Event* ev, uint32_t m) {
    if (counting) {
      for (uint32_t i = 0; i < m; ++i)
        out[pos[(ev[i].time >> 6) & 63]++] = ev[i];
    } else {
      std::copy(ev, ev + m, out + w);
      w += m;
    }
  };
  put(far_join_.data(), static_cast<uint32_t>(far_join_.size()));
  uint32_t c = k.head;
  while (c != kNil) {
    Chunk& ch = chunks_[c];
    put(ch.ev, c == k.tail ? k.n : kChunkEvents);
    const uint32_t nx = ch.next;
    ch.next = free_;
    free_ = c;
    c = nx;
  }
  if (k.head != kNil) {
    k = Bucket{};
    bits_[slot >> 6] &= ~(uint64_t{1} << (slot & 63));
  }
  ready_n_ = n;
  ready_fast_ = n;
  // Insertion sort by time (stable): after the counting sort only events
  // within a step can be out of order. Should that take more than kMoves
  // moves per event, a full sort by (time, seq) takes over.
  constexpr size_t kMoves = 2;
  size_t budget = counting ? kMoves * n : n * n;
  Time last = out[0].time;  // the latest time so far
  for (size_t i = 1; i < n; ++i) {
    if (out[i].time >= last) {
      last = out[i].time;
      continue;
    }
    const Event e = out[i];
    size_t j = i;
    while (j > 0 && out[j - 1].time > e.time && budget > 0) {
      out[j] = out[j - 1];
      --j;
      --budget;
    }
    out[j] = e;
    if (budget == 0) {
      std::sort(out, out + n,
                [](const Event& a, const Event& b) { return Less(a, b); });
      break;
    }
  }
}

const Event* EventQueue::PopSlow() {
  if (ready_pos_ == ready_n_ && late_.empty()) Advance();
  const Event* top;
  if (!late_.empty() &&
      (ready_pos_ == ready_n_ || Less(late_[0], ready_[ready_pos_]))) {
    late_top_ = HeapPop(late_);
    top = &late_top_;
    if (late_.empty()) ready_fast_ = ready_n_;
  } else {
    top = &ready_[ready_pos_++];
  }
  now_ = top->time;
  ++popped_;
  return top;
}

size_t EventQueue::memory_bytes() const {
  size_t n = ready_.capacity() + far_join_.capacity() + late_.capacity() +
             far_.capacity();
  for (const std::vector<Event>& v : batch_bucket_) n += v.capacity();
  return n * sizeof(Event) + chunks_.capacity() * sizeof(Chunk) +
         buckets_.size() * sizeof(Bucket) + bits_.size() * sizeof(uint64_t);
}

uint64_t EventQueue::PushBatch(Time time, uint16_t kind, uint32_t arg,
                               void* ptr) {
  Event e;
  e.time = time < now_ ? now_ : time;
  e.seq = next_seq_++;
  e.ptr = ptr;
  e.arg = arg;
  e.kind = kind;
  const int k = static_cast<int>((e.time - batch_start_) >> batch_shift_);
  std::vector<Event>& v = batch_bucket_[k];
  batch_mask_ |= uint64_t{1} << k;
  // Insertion from the back (the new seq is the largest: ties go after).
  size_t i = v.size();
  v.push_back(e);
  while (i > batch_head_[k] && e.time < v[i - 1].time) {
    v[i] = v[i - 1];
    --i;
  }
  v[i] = e;
  return e.seq;
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
  queued_seq_ = q.Push(when, EventQueue::kTimerKind, node_, this);
  queued_at_ = when;
  queued_ = true;
}

void Timer::Fire(EventQueue& q, const Event& e) {
  if (!queued_ || e.seq != queued_seq_) return;  // stale entry
  queued_ = false;
  if (when_ == kTimeInfinite) return;  // cancelled
  if (e.time < when_) {                // re-armed later: wait again
    queued_seq_ = q.Push(when_, EventQueue::kTimerKind, node_, this);
    queued_at_ = when_;
    queued_ = true;
    return;
  }
  when_ = kTimeInfinite;
  client_->OnTimer(e.time, tag_);
}

}  // namespace prism::sim
