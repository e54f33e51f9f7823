#include "sim/verifier.h"

#include <algorithm>
#include <cstring>

namespace prism::sim {

Verifier::Verifier(const std::vector<Flow>* flows, uint32_t mtu,
                   bool check_bytes)
    : flows_(flows),
      mtu_(mtu),
      mtu_shift_(mtu != 0 && (mtu & (mtu - 1)) == 0 ? __builtin_ctz(mtu) : -1),
      check_bytes_(check_bytes) {
  uint64_t max_msg = mtu;
  const size_t n = flows->size();
  packets_.resize(n);
  per_msg_.resize(n);
  bitmap_base_.resize(n + 1);
  delivered_.assign(n, 0);
  uint64_t words = 0;
  for (size_t i = 0; i < n; ++i) {
    const Flow& f = (*flows)[i];
    const uint64_t msg = std::min<uint64_t>(f.message_bytes, f.bytes);
    max_msg = std::max(max_msg, msg);
    per_msg_[i] = static_cast<uint32_t>((f.message_bytes + mtu - 1) / mtu);
    const uint64_t full = f.bytes / f.message_bytes;
    const uint64_t rest = f.bytes % f.message_bytes;
    packets_[i] =
        static_cast<uint32_t>(full * per_msg_[i] + (rest + mtu - 1) / mtu);
    bitmap_base_[i] = words;
    words += (static_cast<uint64_t>(per_msg_[i]) * (full + 1) + 63) / 64;
  }
  bitmap_base_[n] = words;
  bitmap_.assign(words, 0);
  pattern_.resize(max_msg + 65536 + 8);
  uint64_t x = 0x243f6a8885a308d3ull;
  for (size_t i = 0; i + 8 <= pattern_.size(); i += 8) {
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    std::memcpy(&pattern_[i], &z, 8);
  }
}

void Verifier::PacketRange(uint32_t flow, uint32_t k, uint64_t* offset,
                           uint32_t* len) const {
  const Flow& f = (*flows_)[flow];
  const uint64_t m = k / per_msg_[flow];
  const uint64_t in = static_cast<uint64_t>(k % per_msg_[flow]) * mtu_;
  const uint64_t msg_start = m * f.message_bytes;
  const uint64_t msg_len =
      std::min<uint64_t>(f.message_bytes, f.bytes - msg_start);
  *offset = msg_start + in;
  *len = static_cast<uint32_t>(std::min<uint64_t>(mtu_, msg_len - in));
}

bool Verifier::Place(uint32_t flow, uint64_t offset, const uint8_t* src,
                     uint32_t len) {
  if (flow >= flows_->size()) {
    ++mismatches_;
    return false;
  }
  const Flow& f = (*flows_)[flow];
  if (offset >= f.bytes || len > f.bytes - offset || len == 0) {
    ++mismatches_;
    return false;
  }
  // Message and piece of the offset: shifts where the sizes are powers of
  // two (the usual case), divisions otherwise -- the same numbers.
  const uint64_t mb = f.message_bytes;
  uint64_t m, in;
  if (mb != 0 && (mb & (mb - 1)) == 0) {
    m = offset >> __builtin_ctzll(mb);
    in = offset & (mb - 1);
  } else {
    m = offset / mb;
    in = offset % mb;
  }
  uint64_t piece;
  if (mtu_shift_ >= 0) {
    piece = in >> mtu_shift_;
    if ((in & (uint64_t{mtu_} - 1)) != 0 || len > mtu_) {
      ++mismatches_;
      return false;
    }
  } else {
    piece = in / mtu_;
    if (in % mtu_ != 0 || len > mtu_) {
      ++mismatches_;
      return false;
    }
  }
  // Senders read from this very pattern, so a correct placement hands back
  // a pointer into it: the same bytes, nothing to compare. Any other source
  // (a wrong offset, a copy) is compared byte for byte.
  const uint8_t* expect = pattern_.data() + Shift(flow) + in;
  if (check_bytes_ && src != expect && std::memcmp(src, expect, len) != 0) {
    ++mismatches_;
    return false;
  }
  const uint64_t bit = m * per_msg_[flow] + piece;
  uint64_t& w = bitmap_[bitmap_base_[flow] + bit / 64];
  const uint64_t mask = 1ull << (bit % 64);
  if (w & mask) {
    ++duplicates_;
    return true;
  }
  w |= mask;
  delivered_[flow] += len;
  total_delivered_ += len;
  return true;
}

bool Verifier::PlaceAt(uint64_t addr, const uint8_t* src, uint32_t len) {
  if (addr < kDestBase) {
    ++mismatches_;
    return false;
  }
  const uint64_t rel = addr - kDestBase;
  return Place(static_cast<uint32_t>(rel >> kDestShift),
               rel & ((1ull << kDestShift) - 1), src, len);
}

bool VerifyingPlacer::Place(uint8_t* dst, const uint8_t* src, uint32_t len,
                            const MemoryRegion& /*region*/) {
  return v_->PlaceAt(reinterpret_cast<uint64_t>(dst), src, len);
}

}  // namespace prism::sim
