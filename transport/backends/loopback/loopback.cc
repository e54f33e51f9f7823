#include "transport/backends/loopback/loopback.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace prism::loopback {

std::string LoopbackStats::ToString() const {
  return absl::StrCat("tx_packets=", tx_packets, " delivered=", delivered,
                      " lost_random=", lost_random, " lost_burst=", lost_burst,
                      " lost_blackhole=", lost_blackhole, " refused=", refused,
                      " trimmed=", trimmed, " corrupted=", corrupted,
                      " ecn_marked=", ecn_marked, " duplicated=", duplicated,
                      " reordered=", reordered);
}

// ------------------------------------------------------------------ port
size_t LoopbackPort::mtu() const { return net_->link_.max_packet_bytes; }

size_t LoopbackPort::TxBurst(Time now, const TxPacket* pkts, size_t n) {
  for (size_t i = 0; i < n; ++i) net_->Send(this, now, pkts[i]);
  return n;
}

size_t LoopbackPort::RxBurst(Time now, RxPacket* pkts, size_t n) {
  for (uint32_t b : held_) net_->FreeBuf(b);
  held_.clear();
  size_t k = 0;
  while (k < n && !heap_.empty() && heap_.front().arrival <= now) {
    std::pop_heap(heap_.begin(), heap_.end(), Later());
    const InFlight f = heap_.back();
    heap_.pop_back();
    RxPacket& r = pkts[k++];
    r = RxPacket{};
    r.data = net_->Buf(f.buf);
    r.len = f.len;
    r.trimmed = f.trimmed;
    r.ecn_ce = f.ecn;
    held_.push_back(f.buf);
    ++net_->stats_.delivered;
  }
  return k;
}

Time LoopbackPort::NextArrivalTime() const {
  return heap_.empty() ? kTimeInfinite : heap_.front().arrival;
}

// --------------------------------------------------------------- network
LoopbackNetwork::LoopbackNetwork(const LinkConfig& link,
                                 const FaultPlan& faults)
    : link_(link), faults_(faults), rng_(faults.seed) {
  buf_size_ = (link_.max_packet_bytes + 63) & ~63u;
}

LoopbackNetwork::~LoopbackNetwork() = default;

LoopbackPort* LoopbackNetwork::AddPort() {
  const int id = static_cast<int>(ports_.size());
  ports_.push_back(std::unique_ptr<LoopbackPort>(new LoopbackPort(this, id)));
  LoopbackPort* p = ports_.back().get();
  p->heap_.reserve(4096);
  p->held_.reserve(256);
  return p;
}

void LoopbackNetwork::SetFaultPlan(const FaultPlan& faults) {
  faults_ = faults;
  rng_.Seed(faults.seed);
}

Time LoopbackNetwork::NextArrivalTime() const {
  Time t = kTimeInfinite;
  for (const auto& p : ports_) t = std::min(t, p->NextArrivalTime());
  return t;
}

size_t LoopbackNetwork::in_flight() const {
  size_t n = 0;
  for (const auto& p : ports_) n += p->heap_.size();
  return n;
}

uint32_t LoopbackNetwork::AllocBuf() {
  if (free_.empty()) {
    const uint32_t first = static_cast<uint32_t>(slabs_.size()) * kSlab;
    slabs_.push_back(std::make_unique<uint8_t[]>(size_t{kSlab} * buf_size_));
    free_.reserve(free_.size() + kSlab);
    for (uint32_t i = kSlab; i > 0; --i) free_.push_back(first + i - 1);
  }
  const uint32_t b = free_.back();
  free_.pop_back();
  return b;
}

bool LoopbackNetwork::Blackholed(int src, int dst, uint32_t path,
                                 Time now) const {
  for (const Blackhole& b : faults_.blackholes) {
    if ((b.src < 0 || b.src == src) && (b.dst < 0 || b.dst == dst) &&
        path >= b.path_lo && path <= b.path_hi && now >= b.start &&
        now < b.end) {
      return true;
    }
  }
  return false;
}

void LoopbackNetwork::Enqueue(LoopbackPort* dst, Time arrival, uint32_t buf,
                              uint32_t len, bool trimmed, bool ecn) {
  dst->heap_.push_back({arrival, seq_++, buf, len, trimmed, ecn});
  std::push_heap(dst->heap_.begin(), dst->heap_.end(), LoopbackPort::Later());
}

void LoopbackNetwork::Send(LoopbackPort* src, Time now, const TxPacket& p) {
  ++stats_.tx_packets;
  const size_t size = p.size();
  if (p.peer >= ports_.size() || size > link_.max_packet_bytes ||
      p.header_len > TxPacket::kMaxHeaderBytes) {
    ++stats_.refused;
    return;
  }
  LoopbackPort* dst = ports_[p.peer].get();
  const bool data = p.tclass == TrafficClass::kData;
  const bool faulty = data || faults_.control_faults;

  // Serialization (FIFO per port and per path), decided before the faults so
  // a lost packet still occupied the link.
  Time t = now;
  if (link_.port_rate_bps > 0) {
    t = std::max(t, src->port_busy_) +
        SerializationTime(size, link_.port_rate_bps);
    src->port_busy_ = t;
  }
  if (link_.path_rate_bps > 0) {
    if (p.path >= src->path_busy_.size()) {
      src->path_busy_.resize(size_t{p.path} + 1, 0);
    }
    t = std::max(t, src->path_busy_[p.path]) +
        SerializationTime(size, link_.path_rate_bps);
    src->path_busy_[p.path] = t;
  }
  Time arrival = t + link_.delay;

  if (!faults_.blackholes.empty() &&
      Blackholed(src->id(), dst->id(), p.path, now)) {
    ++stats_.lost_blackhole;
    return;
  }
  if (faulty && faults_.p_enter_bad > 0) {
    if (src->ge_bad_) {
      if (rng_.Bernoulli(faults_.p_leave_bad)) src->ge_bad_ = false;
    } else if (rng_.Bernoulli(faults_.p_enter_bad)) {
      src->ge_bad_ = true;
    }
    if (src->ge_bad_ && rng_.Bernoulli(faults_.loss_in_bad)) {
      ++stats_.lost_burst;
      return;
    }
  }
  if (faulty && faults_.loss > 0 && rng_.Bernoulli(faults_.loss)) {
    ++stats_.lost_random;
    return;
  }

  const uint32_t buf = AllocBuf();
  uint8_t* b = Buf(buf);
  std::memcpy(b, p.header, p.header_len);
  uint32_t len = p.header_len;
  bool trimmed = false;
  if (data && p.payload_len > 0 && faults_.trim > 0 &&
      rng_.Bernoulli(faults_.trim)) {
    trimmed = true;
    ++stats_.trimmed;
  } else if (p.payload_len > 0) {
    std::memcpy(b + len, p.payload, p.payload_len);
    len += p.payload_len;
  }
  if (faulty && faults_.corrupt > 0 && rng_.Bernoulli(faults_.corrupt)) {
    ++stats_.corrupted;
    if (len > p.header_len) {
      const uint64_t bit = rng_.Uniform(uint64_t{len - p.header_len} * 8);
      b[p.header_len + bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    } else if (len > 0) {
      const uint64_t bit = rng_.Uniform(uint64_t{len} * 8);
      b[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    }
  }
  bool ecn = false;
  if (data && faults_.ecn > 0 && rng_.Bernoulli(faults_.ecn)) {
    ecn = true;
    ++stats_.ecn_marked;
  }
  if (faulty && faults_.reorder > 0 && faults_.reorder_max_delay > 0 &&
      rng_.Bernoulli(faults_.reorder)) {
    arrival += rng_.Range(0, faults_.reorder_max_delay);
    ++stats_.reordered;
  }
  if (faulty && faults_.duplicate > 0 && rng_.Bernoulli(faults_.duplicate)) {
    const uint32_t dup = AllocBuf();
    std::memcpy(Buf(dup), b, len);
    Time dup_arrival = arrival;
    if (faults_.reorder_max_delay > 0) {
      dup_arrival += rng_.Range(0, faults_.reorder_max_delay);
    }
    Enqueue(dst, dup_arrival, dup, len, trimmed, ecn);
    ++stats_.duplicated;
  }
  Enqueue(dst, arrival, buf, len, trimmed, ecn);
}

}  // namespace prism::loopback
