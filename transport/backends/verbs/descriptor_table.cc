#include "transport/backends/verbs/descriptor_table.h"

#include <algorithm>
#include <cstring>

#include "transport/base/bytes.h"

namespace prism::verbs {
namespace {
constexpr uint16_t kKnownFlags = kDescHasImmediate | kDescPayloadCrc;
}  // namespace

MessageDescriptor DescriptorFromHeader(const wire::DataHeader& h,
                                       uint32_t mtu) {
  MessageDescriptor d;
  d.msn = h.msn;
  d.first_psn = h.psn - h.msg_offset / mtu;
  d.msg_len = h.msg_len;
  d.dst_conn = h.dst_conn;
  d.rkey = h.rkey;
  d.immediate = h.immediate;
  d.base_addr = h.remote_addr - h.msg_offset;
  d.mtu = mtu;
  if (h.flags & wire::kFlagHasImmediate) d.flags |= kDescHasImmediate;
  if (h.flags & wire::kFlagPayloadCrc) d.flags |= kDescPayloadCrc;
  return d;
}

void EncodeDescriptor(const MessageDescriptor& d,
                      uint8_t out[kDescriptorBytes]) {
  Put32(out + 0, d.msn);
  Put32(out + 4, d.first_psn);
  Put32(out + 8, d.msg_len);
  Put32(out + 12, d.dst_conn);
  Put32(out + 16, d.rkey);
  Put32(out + 20, d.immediate);
  Put64(out + 24, d.base_addr);
  Put32(out + 32, d.mtu);
  Put16(out + 36, d.flags);
  Put16(out + 38, 0);
}

bool DecodeDescriptor(const uint8_t in[kDescriptorBytes],
                      MessageDescriptor* d) {
  d->msn = Get32(in + 0);
  d->first_psn = Get32(in + 4);
  d->msg_len = Get32(in + 8);
  d->dst_conn = Get32(in + 12);
  d->rkey = Get32(in + 16);
  d->immediate = Get32(in + 20);
  d->base_addr = Get64(in + 24);
  d->mtu = Get32(in + 32);
  d->flags = Get16(in + 36);
  return d->mtu >= 1 && d->mtu <= wire::kMaxPayloadLen &&
         (d->flags & ~kKnownFlags) == 0 && Get16(in + 38) == 0;
}

bool RebuildDataHeader(const MessageDescriptor& d, uint32_t psn,
                       uint32_t byte_len, uint16_t path, wire::DataHeader* h) {
  if (d.mtu == 0 || d.mtu > wire::kMaxPayloadLen || !d.Contains(psn))
    return false;
  const uint32_t idx = psn - d.first_psn;
  const uint64_t off = uint64_t{idx} * d.mtu;
  if (off > d.msg_len) return false;
  const uint64_t expect = std::min<uint64_t>(d.mtu, d.msg_len - off);
  if (byte_len != expect) return false;
  *h = wire::DataHeader{};
  h->dst_conn = d.dst_conn;
  h->psn = psn;
  h->msn = d.msn;
  h->msg_offset = static_cast<uint32_t>(off);
  h->msg_len = d.msg_len;
  h->remote_addr = d.base_addr + off;
  h->rkey = d.rkey;
  h->payload_len = byte_len;
  h->path_id = path;
  if (idx == 0) h->flags |= wire::kFlagFirstOfMessage;
  if (idx + 1 == d.npkts()) h->flags |= wire::kFlagLastOfMessage;
  if (d.flags & kDescHasImmediate) {
    h->flags |= wire::kFlagHasImmediate;
    h->immediate = d.immediate;
  }
  if (d.flags & kDescPayloadCrc) h->flags |= wire::kFlagPayloadCrc;
  return true;
}

DescriptorTable::DescriptorTable(uint32_t size)
    : slots_(size), mask_(size - 1) {}

void DescriptorTable::Insert(const MessageDescriptor& d) {
  Slot& s = slots_[d.msn & mask_];
  s.valid = true;
  s.d = d;
  if (!any_) {
    any_ = true;
    first_msn_ = newest_msn_ = hint_msn_ = d.msn;
  } else if (static_cast<int32_t>(d.msn - newest_msn_) > 0) {
    newest_msn_ = d.msn;
  } else if (static_cast<int32_t>(d.msn - first_msn_) < 0) {
    first_msn_ = d.msn;
  }
}

const MessageDescriptor* DescriptorTable::At(uint32_t msn, uint32_t psn) const {
  const Slot& s = slots_[msn & mask_];
  if (s.valid && s.d.msn == msn && s.d.Contains(psn)) return &s.d;
  return nullptr;
}

const MessageDescriptor* DescriptorTable::Find(uint32_t psn) {
  if (!any_) return nullptr;
  if (const MessageDescriptor* d = At(hint_msn_, psn)) return d;
  if (const MessageDescriptor* d = At(hint_msn_ + 1, psn)) {
    hint_msn_ = d->msn;
    return d;
  }
  // Binary search over the described MSNs: first_psn grows with the MSN.
  const uint64_t described = uint64_t{newest_msn_ - first_msn_} + 1;
  const uint32_t span =
      static_cast<uint32_t>(std::min<uint64_t>(described, slots_.size()));
  uint32_t lo = newest_msn_ - span + 1;  // inclusive, as offsets below
  uint32_t n = span;
  bool hole = false;
  while (n > 0) {
    const uint32_t half = n / 2;
    const uint32_t mid = lo + half;
    const Slot& s = slots_[mid & mask_];
    if (!s.valid || s.d.msn != mid) {
      hole = true;
      break;
    }
    const int32_t diff = static_cast<int32_t>(psn - s.d.first_psn);
    if (diff < 0) {
      n = half;
    } else if (static_cast<uint32_t>(diff) >= s.d.npkts()) {
      lo = mid + 1;
      n -= half + 1;
    } else {
      hint_msn_ = mid;
      return &s.d;
    }
  }
  if (!hole) return nullptr;
  // A gap in the MSNs (a message never described): scan the newest ones.
  const uint32_t scan = std::min<uint32_t>(span, 256);
  for (uint32_t k = 0; k < scan; ++k) {
    if (const MessageDescriptor* d = At(newest_msn_ - k, psn)) {
      hint_msn_ = d->msn;
      return d;
    }
  }
  return nullptr;
}

}  // namespace prism::verbs
