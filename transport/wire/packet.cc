#include "transport/wire/packet.h"

#include <cstring>

#include "transport/base/bytes.h"
#include "transport/wire/crc32c.h"
#include "transport/wire/packet_inline.h"

namespace prism::wire {
namespace off = internal::off;
using internal::DecodeImpl;
using internal::HeaderCrc;
using internal::PutCommon;
using internal::Seal;

const char* DecodeErrorName(DecodeError e) {
  switch (e) {
    case DecodeError::kOk:
      return "ok";
    case DecodeError::kTooShort:
      return "too_short";
    case DecodeError::kBadMagic:
      return "bad_magic";
    case DecodeError::kBadVersion:
      return "bad_version";
    case DecodeError::kBadType:
      return "bad_type";
    case DecodeError::kBadChecksum:
      return "bad_checksum";
    case DecodeError::kBadLength:
      return "bad_length";
    case DecodeError::kBadField:
      return "bad_field";
  }
  return "unknown";
}

size_t HeaderSize(PacketType type) {
  switch (type) {
    case PacketType::kData:
      return kDataHeaderSize;
    case PacketType::kSack:
      return kSackHeaderSize;
    case PacketType::kNack:
      return kNackHeaderSize;
    case PacketType::kProbe:
    case PacketType::kProbeAck:
      return kProbeHeaderSize;
    case PacketType::kConnect:
    case PacketType::kConnectAck:
      return kConnectHeaderSize;
    case PacketType::kPlaneStatus:
      return kPlaneStatusHeaderSize;
  }
  return 0;
}

DecodeError Decode(const uint8_t* data, size_t len, Packet* out) {
  return DecodeImpl(data, len, nullptr, 0, /*split=*/false, nullptr, out);
}

DecodeError DecodeWithCrc(const uint8_t* data, size_t len, uint32_t hdr_crc,
                          Packet* out) {
  return DecodeImpl(data, len, nullptr, 0, /*split=*/false, &hdr_crc, out);
}

DecodeError DecodeSplit(const uint8_t* hdr, size_t hdr_len,
                        const uint8_t* payload, size_t payload_len,
                        Packet* out) {
  if (payload == nullptr && payload_len != 0) return DecodeError::kBadLength;
  return DecodeImpl(hdr, hdr_len, payload, payload_len, /*split=*/true, nullptr,
                    out);
}

DecodeError DecodeSplitWithCrc(const uint8_t* hdr, size_t hdr_len,
                               const uint8_t* payload, size_t payload_len,
                               uint32_t hdr_crc, Packet* out) {
  return internal::DecodeSplitWithCrcImpl(hdr, hdr_len, payload, payload_len,
                                          hdr_crc, out);
}

void SealHeaders(uint8_t* const* hdrs, const size_t* lens, size_t n) {
  constexpr size_t kChunk = 16;
  const uint8_t* p[kChunk];
  size_t l[kChunk];
  uint8_t* dst[kChunk];
  uint32_t crc[kChunk];
  size_t i = 0;
  while (i < n) {
    // Common case (an engine burst): every entry of the chunk is a header,
    // checksummed in place without gathering.
    const size_t m = n - i < kChunk ? n - i : kChunk;
    bool all = true;
    for (size_t j = 0; j < m; ++j) {
      all &= hdrs[i + j] != nullptr && lens[i + j] >= kCommonHeaderSize;
    }
    if (all) {
      Crc32cZero4At4Multi(hdrs + i, lens + i, m, crc);
      for (size_t j = 0; j < m; ++j) Put32(hdrs[i + j] + off::kCrc, crc[j]);
      i += m;
      continue;
    }
    size_t k = 0;
    for (; i < n && k < kChunk; ++i) {
      if (hdrs[i] == nullptr || lens[i] < kCommonHeaderSize) continue;
      p[k] = dst[k] = hdrs[i];
      l[k++] = lens[i];
    }
    Crc32cZero4At4Multi(p, l, k, crc);
    for (size_t j = 0; j < k; ++j) Put32(dst[j] + off::kCrc, crc[j]);
  }
}

void SealEncodedHeaders(uint8_t* const* hdrs, const size_t* lens, size_t n) {
  if (n < 4) {  // too few for the interleaved chains: one at a time
    for (size_t i = 0; i < n; ++i) internal::Seal(hdrs[i], lens[i]);
    return;
  }
  constexpr size_t kChunk = 16;
  uint32_t crc[kChunk];
  for (size_t i = 0; i < n; i += kChunk) {
    const size_t m = n - i < kChunk ? n - i : kChunk;
    Crc32cZero4At4Multi(hdrs + i, lens + i, m, crc);
    for (size_t j = 0; j < m; ++j) Put32(hdrs[i + j] + off::kCrc, crc[j]);
  }
}

void SealEncodedHeadersStrided(uint8_t* first, size_t stride, size_t len_off,
                               size_t n) {
  static_assert(off::kCrc == 4, "Crc32cZero4At4StoreStrided's field");
  Crc32cZero4At4StoreStrided(first, stride, len_off, n);
}

size_t HeaderCrcSpan(const uint8_t* p, size_t avail) {
  return internal::HeaderCrcSpanImpl(p, avail);
}

void HeaderCrcs(const uint8_t* const* hdrs, const size_t* spans, size_t n,
                uint32_t* out) {
  Crc32cZero4At4Multi(hdrs, spans, n, out);
}

size_t EncodeData(const DataHeader& h, uint8_t* p, size_t cap, bool seal) {
  return internal::EncodeDataImpl(h, p, cap, seal);
}

size_t EncodeSack(const SackHeader& h, uint8_t* p, size_t cap, bool seal) {
  if (p == nullptr || cap < kSackHeaderSize) return 0;
  PutCommon(p, PacketType::kSack, h.dst_conn);
  Put32(p + off::kSCumPsn, h.cum_psn);
  Put64(p + off::kSEchoTs, h.echo_ts);
  Put64(p + off::kSBytesReceived, h.bytes_received);
  for (size_t i = 0; i < kSackBitmapWords; ++i) {
    Put64(p + off::kSBitmap + 8 * i, h.bitmap[i]);
  }
  Put32(p + off::kSBitmapBase, h.bitmap_base);
  Put32(p + off::kSTriggerPsn, h.trigger_psn);
  Put32(p + off::kSOooCount, h.ooo_count);
  Put16(p + off::kSEchoPath, h.echo_path);
  Put16(p + off::kSRxWindowPenalty, h.rx_window_penalty);
  Put16(p + off::kSCoalesced, h.coalesced);
  p[off::kSEcnSeen] = h.ecn_seen;
  p[off::kSReserved] = h.reserved;
  return Seal(p, kSackHeaderSize, seal);
}

size_t EncodeNack(const NackHeader& h, uint8_t* p, size_t cap, bool seal) {
  if (p == nullptr || cap < kNackHeaderSize) return 0;
  PutCommon(p, PacketType::kNack, h.dst_conn);
  Put32(p + off::kNPsn, h.psn);
  Put32(p + off::kNCumPsn, h.cum_psn);
  p[off::kNReason] = static_cast<uint8_t>(h.reason);
  p[off::kNEcnSeen] = h.ecn_seen;
  Put16(p + off::kNEchoPath, h.echo_path);
  Put64(p + off::kNEchoTs, h.echo_ts);
  return Seal(p, kNackHeaderSize, seal);
}

size_t EncodeProbe(const ProbeHeader& h, bool ack, uint8_t* p, size_t cap,
                   bool seal) {
  if (p == nullptr || cap < kProbeHeaderSize) return 0;
  PutCommon(p, ack ? PacketType::kProbeAck : PacketType::kProbe, h.dst_conn);
  Put32(p + off::kPProbeSeq, h.probe_seq);
  Put64(p + off::kPSendTs, h.send_ts);
  Put16(p + off::kPPathId, h.path_id);
  Put16(p + off::kPReserved, h.reserved);
  return Seal(p, kProbeHeaderSize, seal);
}

size_t EncodeConnect(const ConnectHeader& h, bool ack, uint8_t* p, size_t cap) {
  if (p == nullptr || cap < kConnectHeaderSize) return 0;
  PutCommon(p, ack ? PacketType::kConnectAck : PacketType::kConnect,
            h.dst_conn);
  Put32(p + off::kCSrcConn, h.src_conn);
  Put64(p + off::kCNonce, h.nonce);
  Put32(p + off::kCMtuPayload, h.mtu_payload);
  Put32(p + off::kCFlags, h.flags);
  Put16(p + off::kCNumPaths, h.num_paths);
  Put16(p + off::kCNumPlanes, h.num_planes);
  return Seal(p, kConnectHeaderSize);
}

size_t EncodePlaneStatus(const PlaneStatusHeader& h, uint8_t* p, size_t cap,
                         bool seal) {
  if (p == nullptr || cap < kPlaneStatusHeaderSize) return 0;
  PutCommon(p, PacketType::kPlaneStatus, h.dst_conn);
  Put32(p + off::kLPlanesDown, h.planes_down);
  Put32(p + off::kLSeq, h.seq);
  return Seal(p, kPlaneStatusHeaderSize, seal);
}

size_t TrimData(uint8_t* pkt, size_t len) {
  Packet parsed;
  if (Decode(pkt, len, &parsed) != DecodeError::kOk ||
      parsed.type != PacketType::kData || parsed.data.payload_len == 0) {
    return 0;
  }
  const uint16_t flags = Get16(pkt + off::kDFlags);
  Put16(pkt + off::kDFlags, static_cast<uint16_t>(flags | kFlagTrimmed));
  return Seal(pkt, kDataHeaderSize);
}

}  // namespace prism::wire
