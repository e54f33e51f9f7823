#include "transport/wire/packet.h"

#include <cstring>

#include "transport/base/bytes.h"
#include "transport/wire/crc32c.h"

namespace prism::wire {
namespace {

// Every field is little-endian (Put*/Get* from transport/base/bytes.h).

// Field offsets (see packet.h and docs/wire-format.md).
namespace off {
constexpr size_t kMagic = 0, kVersion = 2, kType = 3, kCrc = 4, kDstConn = 8;
// DATA
constexpr size_t kDPsn = 12, kDMsn = 16, kDMsgOffset = 20, kDMsgLen = 24,
                 kDRkey = 28, kDRemoteAddr = 32, kDSendTs = 40,
                 kDPayloadLen = 48, kDPathId = 50, kDFlags = 52,
                 kDReserved = 54, kDImmediate = 56, kDPayloadCrc = 60;
// SACK
constexpr size_t kSCumPsn = 12, kSEchoTs = 16, kSBytesReceived = 24,
                 kSBitmap = 32, kSBitmapBase = 64, kSTriggerPsn = 68,
                 kSOooCount = 72, kSEchoPath = 76, kSRxWindowPenalty = 78,
                 kSCoalesced = 80, kSEcnSeen = 82, kSReserved = 83;
// NACK
constexpr size_t kNPsn = 12, kNCumPsn = 16, kNReason = 20, kNEcnSeen = 21,
                 kNEchoPath = 22, kNEchoTs = 24;
// PROBE / PROBE_ACK
constexpr size_t kPProbeSeq = 12, kPSendTs = 16, kPPathId = 24, kPReserved = 26;
// CONNECT / CONNECT_ACK
constexpr size_t kCSrcConn = 12, kCNonce = 16, kCMtuPayload = 24, kCFlags = 28,
                 kCNumPaths = 32, kCNumPlanes = 34;
// PLANE_STATUS
constexpr size_t kLPlanesDown = 12, kLSeq = 16;
}  // namespace off

static_assert(off::kDstConn + 4 == kCommonHeaderSize);
static_assert(off::kCrc == kHeaderCrcOffset);
static_assert(off::kDPayloadCrc + 4 == kDataHeaderSize);
static_assert(kDataHeaderSize % 8 == 0, "DATA header must stay 8-byte sized");
static_assert(off::kDRemoteAddr % 8 == 0 && off::kDSendTs % 8 == 0);
static_assert(off::kSBitmap + 8 * kSackBitmapWords == off::kSBitmapBase);
static_assert(off::kSReserved + 1 == kSackHeaderSize);
static_assert(off::kNEchoTs + 8 == kNackHeaderSize);
static_assert(off::kPReserved + 2 == kProbeHeaderSize);
static_assert(off::kCNumPlanes + 2 == kConnectHeaderSize);
static_assert(off::kLSeq + 4 == kPlaneStatusHeaderSize);
static_assert(kMaxHeaderSize >= kDataHeaderSize &&
              kMaxHeaderSize >= kSackHeaderSize &&
              kMaxHeaderSize >= kNackHeaderSize &&
              kMaxHeaderSize >= kProbeHeaderSize &&
              kMaxHeaderSize >= kConnectHeaderSize &&
              kMaxHeaderSize >= kPlaneStatusHeaderSize);
static_assert(kMaxHeaderSize <= 128, "must fit TxPacket::kMaxHeaderBytes");
static_assert((kKnownDataFlags &
               ~(kFlagRetransmit | kFlagLastOfMessage | kFlagHasImmediate |
                 kFlagTrimmed | kFlagPayloadCrc | kFlagFirstOfMessage)) == 0);

constexpr uint8_t kMaxNackReason = static_cast<uint8_t>(NackReason::kCorrupt);

// CRC32C of `hdr_len` header bytes with the checksum field taken as zero.
// One pass (Crc32cZero4At4 treats bytes [4, 8) as zero).
static_assert(kHeaderCrcOffset == 4);
uint32_t HeaderCrc(const uint8_t* p, size_t hdr_len) {
  return Crc32cZero4At4(p, hdr_len);
}

void PutCommon(uint8_t* p, PacketType type, uint32_t dst_conn) {
  Put16(p + off::kMagic, kMagic);
  p[off::kVersion] = kVersion;
  p[off::kType] = static_cast<uint8_t>(type);
  Put32(p + off::kCrc, 0);
  Put32(p + off::kDstConn, dst_conn);
}

// Writes the checksum of a fully written header (unless the caller seals a
// burst later) and returns its size.
size_t Seal(uint8_t* p, size_t hdr_len, bool seal = true) {
  if (seal) Put32(p + off::kCrc, HeaderCrc(p, hdr_len));
  return hdr_len;
}

bool KnownType(uint8_t t) {
  return t >= static_cast<uint8_t>(PacketType::kData) &&
         t <= static_cast<uint8_t>(PacketType::kPlaneStatus);
}

// Header size by type byte (0: unknown type); HeaderSize() without the call.
constexpr uint8_t kHeaderSizeByType[] = {0,
                                         kDataHeaderSize,
                                         kSackHeaderSize,
                                         kNackHeaderSize,
                                         kProbeHeaderSize,
                                         kProbeHeaderSize,
                                         kConnectHeaderSize,
                                         kConnectHeaderSize,
                                         kPlaneStatusHeaderSize};
static_assert(sizeof(kHeaderSizeByType) ==
              static_cast<size_t>(PacketType::kPlaneStatus) + 1);

inline size_t HeaderSizeOf(uint8_t t) {
  return t < sizeof(kHeaderSizeByType) ? kHeaderSizeByType[t] : 0;
}

// The decoders below are inlined into each public entry point, so `split`
// and the precomputed checksum are constants there (the receive hot path).
[[gnu::always_inline]] inline DecodeError DecodeDataFields(
    const uint8_t* p, const uint8_t* payload, size_t payload_bytes,
    Packet* out) {
  DataHeader& h = out->data;
  h.dst_conn = Get32(p + off::kDstConn);
  h.psn = Get32(p + off::kDPsn);
  h.msn = Get32(p + off::kDMsn);
  h.msg_offset = Get32(p + off::kDMsgOffset);
  h.msg_len = Get32(p + off::kDMsgLen);
  h.rkey = Get32(p + off::kDRkey);
  h.remote_addr = Get64(p + off::kDRemoteAddr);
  h.send_ts = Get64(p + off::kDSendTs);
  h.payload_len = Get16(p + off::kDPayloadLen);
  h.path_id = Get16(p + off::kDPathId);
  h.flags = Get16(p + off::kDFlags);
  h.immediate = Get32(p + off::kDImmediate);
  h.payload_crc = Get32(p + off::kDPayloadCrc);

  if ((h.flags & ~kKnownDataFlags) != 0) return DecodeError::kBadField;
  if (Get16(p + off::kDReserved) != 0) return DecodeError::kBadField;
  const uint64_t end = uint64_t{h.msg_offset} + h.payload_len;
  if (end > h.msg_len) return DecodeError::kBadField;
  if (h.payload_len == 0) {
    // Only a zero-length message has a zero-length packet; it cannot be
    // trimmed (there is nothing to cut).
    if (h.msg_len != 0 || (h.flags & kFlagTrimmed)) {
      return DecodeError::kBadField;
    }
  }
  if ((h.flags & kFlagFirstOfMessage) && h.msg_offset != 0) {
    return DecodeError::kBadField;
  }
  if ((h.flags & kFlagLastOfMessage) && end != h.msg_len) {
    return DecodeError::kBadField;
  }

  if (payload_bytes == 0) {
    out->payload = nullptr;
    out->payload_len = 0;
    out->trimmed = h.payload_len > 0;
    return DecodeError::kOk;
  }
  if (payload_bytes != h.payload_len) return DecodeError::kBadLength;
  // Payload present: the trimmed flag would be a lie.
  if (h.flags & kFlagTrimmed) return DecodeError::kBadField;
  out->payload = payload;
  out->payload_len = h.payload_len;
  out->trimmed = false;
  return DecodeError::kOk;
}

DecodeError DecodeSackFields(const uint8_t* p, Packet* out) {
  SackHeader& h = out->sack;
  h.dst_conn = Get32(p + off::kDstConn);
  h.cum_psn = Get32(p + off::kSCumPsn);
  h.echo_ts = Get64(p + off::kSEchoTs);
  h.bytes_received = Get64(p + off::kSBytesReceived);
  for (size_t i = 0; i < kSackBitmapWords; ++i) {
    h.bitmap[i] = Get64(p + off::kSBitmap + 8 * i);
  }
  h.bitmap_base = Get32(p + off::kSBitmapBase);
  h.trigger_psn = Get32(p + off::kSTriggerPsn);
  h.ooo_count = Get32(p + off::kSOooCount);
  h.echo_path = Get16(p + off::kSEchoPath);
  h.rx_window_penalty = Get16(p + off::kSRxWindowPenalty);
  h.coalesced = Get16(p + off::kSCoalesced);
  h.ecn_seen = p[off::kSEcnSeen];
  h.reserved = p[off::kSReserved];
  if (h.ecn_seen > 1 || h.reserved != 0) return DecodeError::kBadField;
  return DecodeError::kOk;
}

DecodeError DecodeNackFields(const uint8_t* p, Packet* out) {
  NackHeader& h = out->nack;
  h.dst_conn = Get32(p + off::kDstConn);
  h.psn = Get32(p + off::kNPsn);
  h.cum_psn = Get32(p + off::kNCumPsn);
  const uint8_t reason = p[off::kNReason];
  h.ecn_seen = p[off::kNEcnSeen];
  h.echo_path = Get16(p + off::kNEchoPath);
  h.echo_ts = Get64(p + off::kNEchoTs);
  if (reason < 1 || reason > kMaxNackReason) return DecodeError::kBadField;
  h.reason = static_cast<NackReason>(reason);
  if (h.ecn_seen > 1) return DecodeError::kBadField;
  return DecodeError::kOk;
}

DecodeError DecodeProbeFields(const uint8_t* p, Packet* out) {
  ProbeHeader& h = out->probe;
  h.dst_conn = Get32(p + off::kDstConn);
  h.probe_seq = Get32(p + off::kPProbeSeq);
  h.send_ts = Get64(p + off::kPSendTs);
  h.path_id = Get16(p + off::kPPathId);
  h.reserved = Get16(p + off::kPReserved);
  if (h.reserved != 0) return DecodeError::kBadField;
  return DecodeError::kOk;
}

DecodeError DecodeConnectFields(const uint8_t* p, Packet* out) {
  ConnectHeader& h = out->connect;
  h.dst_conn = Get32(p + off::kDstConn);
  h.src_conn = Get32(p + off::kCSrcConn);
  h.nonce = Get64(p + off::kCNonce);
  h.mtu_payload = Get32(p + off::kCMtuPayload);
  h.flags = Get32(p + off::kCFlags);
  h.num_paths = Get16(p + off::kCNumPaths);
  h.num_planes = Get16(p + off::kCNumPlanes);
  if ((h.flags & ~kKnownConnectFlags) != 0) return DecodeError::kBadField;
  // A sender always names itself; a DATA payload_len is 16 bits.
  if (h.src_conn == 0) return DecodeError::kBadField;
  if (h.mtu_payload == 0 || h.mtu_payload > 0xFFFF) {
    return DecodeError::kBadField;
  }
  if (h.num_paths == 0 || h.num_planes == 0 || h.num_planes > 32) {
    return DecodeError::kBadField;  // planes_down is a 32-bit mask
  }
  return DecodeError::kOk;
}

DecodeError DecodePlaneFields(const uint8_t* p, Packet* out) {
  PlaneStatusHeader& h = out->plane;
  h.dst_conn = Get32(p + off::kDstConn);
  h.planes_down = Get32(p + off::kLPlanesDown);
  h.seq = Get32(p + off::kLSeq);
  return DecodeError::kOk;
}

// Shared by Decode and DecodeSplit. `hdr` has at least `hdr_avail` bytes;
// `payload`/`payload_bytes` are what follows the header.
// `crc` is the precomputed header checksum (HeaderCrcs), or nullptr.
[[gnu::always_inline]] inline DecodeError DecodeImpl(
    const uint8_t* hdr, size_t hdr_avail, const uint8_t* payload,
    size_t payload_bytes, bool split, const uint32_t* crc, Packet* out) {
  if (out == nullptr) return DecodeError::kTooShort;
  out->payload = nullptr;
  out->payload_len = 0;
  out->trimmed = false;
  if (hdr == nullptr || hdr_avail < kCommonHeaderSize) {
    return DecodeError::kTooShort;
  }
  if (Get16(hdr + off::kMagic) != kMagic) return DecodeError::kBadMagic;
  if (hdr[off::kVersion] != kVersion) return DecodeError::kBadVersion;
  const uint8_t t = hdr[off::kType];
  if (!KnownType(t)) return DecodeError::kBadType;
  const PacketType type = static_cast<PacketType>(t);
  const size_t need = HeaderSizeOf(t);
  if (hdr_avail < need) return DecodeError::kTooShort;
  if (split && hdr_avail != need) return DecodeError::kBadLength;
  if (Get32(hdr + off::kCrc) !=
      (crc != nullptr ? *crc : HeaderCrc(hdr, need))) {
    return DecodeError::kBadChecksum;
  }
  if (!split) {
    payload = hdr + need;
    payload_bytes = hdr_avail - need;
  }
  out->type = type;
  if (type != PacketType::kData && payload_bytes != 0) {
    return DecodeError::kBadLength;  // control packets carry no payload
  }
  switch (type) {
    case PacketType::kData:
      return DecodeDataFields(hdr, payload, payload_bytes, out);
    case PacketType::kSack:
      return DecodeSackFields(hdr, out);
    case PacketType::kNack:
      return DecodeNackFields(hdr, out);
    case PacketType::kProbe:
    case PacketType::kProbeAck:
      return DecodeProbeFields(hdr, out);
    case PacketType::kConnect:
    case PacketType::kConnectAck:
      return DecodeConnectFields(hdr, out);
    case PacketType::kPlaneStatus:
      return DecodePlaneFields(hdr, out);
  }
  return DecodeError::kBadType;
}

}  // namespace

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
  if (payload == nullptr && payload_len != 0) return DecodeError::kBadLength;
  return DecodeImpl(hdr, hdr_len, payload, payload_len, /*split=*/true,
                    &hdr_crc, out);
}

void SealHeaders(uint8_t* const* hdrs, const size_t* lens, size_t n) {
  constexpr size_t kChunk = 16;
  const uint8_t* p[kChunk];
  size_t l[kChunk];
  uint8_t* dst[kChunk];
  uint32_t crc[kChunk];
  size_t i = 0;
  while (i < n) {
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

size_t HeaderCrcSpan(const uint8_t* p, size_t avail) {
  if (p == nullptr || avail < kCommonHeaderSize) return 0;
  const size_t need = HeaderSizeOf(p[off::kType]);
  return avail >= need ? need : 0;
}

void HeaderCrcs(const uint8_t* const* hdrs, const size_t* spans, size_t n,
                uint32_t* out) {
  Crc32cZero4At4Multi(hdrs, spans, n, out);
}

size_t EncodeData(const DataHeader& h, uint8_t* p, size_t cap, bool seal) {
  if (p == nullptr || cap < kDataHeaderSize) return 0;
  PutCommon(p, PacketType::kData, h.dst_conn);
  Put32(p + off::kDPsn, h.psn);
  Put32(p + off::kDMsn, h.msn);
  Put32(p + off::kDMsgOffset, h.msg_offset);
  Put32(p + off::kDMsgLen, h.msg_len);
  Put32(p + off::kDRkey, h.rkey);
  Put64(p + off::kDRemoteAddr, h.remote_addr);
  Put64(p + off::kDSendTs, h.send_ts);
  Put16(p + off::kDPayloadLen, h.payload_len);
  Put16(p + off::kDPathId, h.path_id);
  Put16(p + off::kDFlags, h.flags);
  Put16(p + off::kDReserved, 0);
  Put32(p + off::kDImmediate, h.immediate);
  Put32(p + off::kDPayloadCrc, h.payload_crc);
  return Seal(p, kDataHeaderSize, seal);
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
