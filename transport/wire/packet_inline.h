// Inline definitions behind packet.h's encoders and decoders: the field
// offsets, the per-type decoders, EncodeData and the split decoder with a
// precomputed header checksum. packet.cc defines the public functions with
// these; the engine's per-packet path includes this header to inline them
// (same code, so the same bytes and verdicts). Not a public API.
#ifndef PRISM_WIRE_PACKET_INLINE_H_
#define PRISM_WIRE_PACKET_INLINE_H_

#include <cstddef>
#include <cstdint>

#include "transport/base/bytes.h"
#include "transport/wire/crc32c.h"
#include "transport/wire/packet.h"

namespace prism::wire::internal {

// Every field is little-endian (Put*/Get* from transport/base/bytes.h).

// Field offsets (see packet.h and docs/wire-format.md).
namespace off {
inline constexpr size_t kMagic = 0, kVersion = 2, kType = 3, kCrc = 4,
                        kDstConn = 8;
// DATA
inline constexpr size_t kDPsn = 12, kDMsn = 16, kDMsgOffset = 20, kDMsgLen = 24,
                        kDRkey = 28, kDRemoteAddr = 32, kDSendTs = 40,
                        kDPayloadLen = 48, kDPathId = 50, kDFlags = 52,
                        kDPayloadLenHi = 54, kDImmediate = 56,
                        kDPayloadCrc = 60;
// SACK
inline constexpr size_t kSCumPsn = 12, kSEchoTs = 16, kSBytesReceived = 24,
                        kSBitmap = 32, kSBitmapBase = 64, kSTriggerPsn = 68,
                        kSOooCount = 72, kSEchoPath = 76,
                        kSRxWindowPenalty = 78, kSCoalesced = 80,
                        kSEcnSeen = 82, kSReserved = 83;
// NACK
inline constexpr size_t kNPsn = 12, kNCumPsn = 16, kNReason = 20,
                        kNEcnSeen = 21, kNEchoPath = 22, kNEchoTs = 24;
// PROBE / PROBE_ACK
inline constexpr size_t kPProbeSeq = 12, kPSendTs = 16, kPPathId = 24,
                        kPReserved = 26;
// CONNECT / CONNECT_ACK
inline constexpr size_t kCSrcConn = 12, kCNonce = 16, kCMtuPayload = 24,
                        kCFlags = 28, kCNumPaths = 32, kCNumPlanes = 34;
// PLANE_STATUS
inline constexpr size_t kLPlanesDown = 12, kLSeq = 16;
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

inline constexpr uint8_t kMaxNackReason =
    static_cast<uint8_t>(NackReason::kCorrupt);

// CRC32C of `hdr_len` header bytes with the checksum field taken as zero.
// One pass (Crc32cZero4At4 treats bytes [4, 8) as zero).
static_assert(kHeaderCrcOffset == 4);
inline uint32_t HeaderCrc(const uint8_t* p, size_t hdr_len) {
  return Crc32cZero4At4(p, hdr_len);
}

inline void PutCommon(uint8_t* p, PacketType type, uint32_t dst_conn) {
  Put16(p + off::kMagic, kMagic);
  p[off::kVersion] = kVersion;
  p[off::kType] = static_cast<uint8_t>(type);
  Put32(p + off::kCrc, 0);
  Put32(p + off::kDstConn, dst_conn);
}

// Writes the checksum of a fully written header (unless the caller seals a
// burst later) and returns its size.
inline size_t Seal(uint8_t* p, size_t hdr_len, bool seal = true) {
  if (seal) Put32(p + off::kCrc, HeaderCrc(p, hdr_len));
  return hdr_len;
}

inline bool KnownType(uint8_t t) {
  return t >= static_cast<uint8_t>(PacketType::kData) &&
         t <= static_cast<uint8_t>(PacketType::kPlaneStatus);
}

// Header size by type byte (0: unknown type); HeaderSize() without the call.
inline constexpr uint8_t kHeaderSizeByType[] = {0,
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

// kHeaderSizeByType for every byte value (0 past the known types): the
// lookup without the bound check.
struct HeaderSizeTable {
  uint8_t size[256];
};
inline constexpr HeaderSizeTable kHeaderSizeByByte = [] {
  HeaderSizeTable t{};
  for (size_t i = 0; i < sizeof(kHeaderSizeByType); ++i)
    t.size[i] = kHeaderSizeByType[i];
  return t;
}();

// The DATA header fields that can differ between the packets of one
// message (psn, offset, address, timestamp, length, path, flags),
// unchecked. Shared by DecodeDataFields and the engine's receive run
// (DataRun), which decodes only these for a run's last packet.
[[gnu::always_inline]] inline void DecodeDataPacketFields(const uint8_t* p,
                                                          DataHeader* h) {
  h->psn = Get32(p + off::kDPsn);
  h->msg_offset = Get32(p + off::kDMsgOffset);
  h->remote_addr = Get64(p + off::kDRemoteAddr);
  h->send_ts = Get64(p + off::kDSendTs);
  h->payload_len = Get16(p + off::kDPayloadLen) |
                   uint32_t{Get16(p + off::kDPayloadLenHi)} << 16;
  h->path_id = Get16(p + off::kDPathId);
  h->flags = Get16(p + off::kDFlags);
}

// The decoders below are inlined into each public entry point, so `split`
// and the precomputed checksum are constants there (the receive hot path).
[[gnu::always_inline]] inline DecodeError DecodeDataFields(
    const uint8_t* p, const uint8_t* payload, size_t payload_bytes,
    Packet* out) {
  DataHeader& h = out->data;
  h.dst_conn = Get32(p + off::kDstConn);
  h.msn = Get32(p + off::kDMsn);
  h.msg_len = Get32(p + off::kDMsgLen);
  h.rkey = Get32(p + off::kDRkey);
  h.immediate = Get32(p + off::kDImmediate);
  h.payload_crc = Get32(p + off::kDPayloadCrc);
  DecodeDataPacketFields(p, &h);

  if ((h.flags & ~kKnownDataFlags) != 0) return DecodeError::kBadField;
  if (h.payload_len > kMaxPayloadLen) return DecodeError::kBadField;
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

inline DecodeError DecodeSackFields(const uint8_t* p, Packet* out) {
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

inline DecodeError DecodeNackFields(const uint8_t* p, Packet* out) {
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

inline DecodeError DecodeProbeFields(const uint8_t* p, Packet* out) {
  ProbeHeader& h = out->probe;
  h.dst_conn = Get32(p + off::kDstConn);
  h.probe_seq = Get32(p + off::kPProbeSeq);
  h.send_ts = Get64(p + off::kPSendTs);
  h.path_id = Get16(p + off::kPPathId);
  h.reserved = Get16(p + off::kPReserved);
  if (h.reserved != 0) return DecodeError::kBadField;
  return DecodeError::kOk;
}

inline DecodeError DecodeConnectFields(const uint8_t* p, Packet* out) {
  ConnectHeader& h = out->connect;
  h.dst_conn = Get32(p + off::kDstConn);
  h.src_conn = Get32(p + off::kCSrcConn);
  h.nonce = Get64(p + off::kCNonce);
  h.mtu_payload = Get32(p + off::kCMtuPayload);
  h.flags = Get32(p + off::kCFlags);
  h.num_paths = Get16(p + off::kCNumPaths);
  h.num_planes = Get16(p + off::kCNumPlanes);
  if ((h.flags & ~kKnownConnectFlags) != 0) return DecodeError::kBadField;
  // A sender always names itself; a DATA payload is at most
  // kMaxPayloadLen bytes.
  if (h.src_conn == 0) return DecodeError::kBadField;
  if (h.mtu_payload == 0 || h.mtu_payload > kMaxPayloadLen) {
    return DecodeError::kBadField;
  }
  if (h.num_paths == 0 || h.num_planes == 0 || h.num_planes > 32) {
    return DecodeError::kBadField;  // planes_down is a 32-bit mask
  }
  return DecodeError::kOk;
}

inline DecodeError DecodePlaneFields(const uint8_t* p, Packet* out) {
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
  // A split DATA header (the receive hot path): magic, version and type in
  // one compare, then what the general path below does for it.
  constexpr uint32_t kDataLead =
      uint32_t{kMagic} | uint32_t{kVersion} << 16 |
      uint32_t{static_cast<uint8_t>(PacketType::kData)} << 24;
  if (split && hdr != nullptr && hdr_avail == kDataHeaderSize &&
      Get32(hdr) == kDataLead) {
    if (Get32(hdr + off::kCrc) !=
        (crc != nullptr ? *crc : HeaderCrc(hdr, kDataHeaderSize))) {
      return DecodeError::kBadChecksum;
    }
    out->type = PacketType::kData;
    return DecodeDataFields(hdr, payload, payload_bytes, out);
  }
  // A whole SACK (the other packet of every flow): the same, then what
  // the general path below does for it (no payload follows).
  constexpr uint32_t kSackLead =
      uint32_t{kMagic} | uint32_t{kVersion} << 16 |
      uint32_t{static_cast<uint8_t>(PacketType::kSack)} << 24;
  if (!split && hdr != nullptr && hdr_avail == kSackHeaderSize &&
      Get32(hdr) == kSackLead) {
    if (Get32(hdr + off::kCrc) !=
        (crc != nullptr ? *crc : HeaderCrc(hdr, kSackHeaderSize))) {
      return DecodeError::kBadChecksum;
    }
    out->type = PacketType::kSack;
    return DecodeSackFields(hdr, out);
  }
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

[[gnu::always_inline]] inline size_t EncodeDataImpl(const DataHeader& h,
                                                    uint8_t* p, size_t cap,
                                                    bool seal) {
  if (p == nullptr || cap < kDataHeaderSize) return 0;
  PutCommon(p, PacketType::kData, h.dst_conn);
  Put32(p + off::kDPsn, h.psn);
  Put32(p + off::kDMsn, h.msn);
  Put32(p + off::kDMsgOffset, h.msg_offset);
  Put32(p + off::kDMsgLen, h.msg_len);
  Put32(p + off::kDRkey, h.rkey);
  Put64(p + off::kDRemoteAddr, h.remote_addr);
  Put64(p + off::kDSendTs, h.send_ts);
  Put16(p + off::kDPayloadLen, static_cast<uint16_t>(h.payload_len));
  Put16(p + off::kDPathId, h.path_id);
  Put16(p + off::kDFlags, h.flags);
  Put16(p + off::kDPayloadLenHi, static_cast<uint16_t>(h.payload_len >> 16));
  Put32(p + off::kDImmediate, h.immediate);
  Put32(p + off::kDPayloadCrc, h.payload_crc);
  return Seal(p, kDataHeaderSize, seal);
}

// The fields in which the DATA headers of one message's packets sent at the
// same time differ (no payload checksum): written over a copy of the first
// one's header, the bytes are EncodeDataImpl's for that packet.
[[gnu::always_inline]] inline void PatchDataHeader(
    uint8_t* p, uint32_t psn, uint32_t msg_offset, uint64_t remote_addr,
    uint32_t payload_len, uint16_t path_id, uint16_t flags) {
  static_assert(off::kDPathId == off::kDPayloadLen + 2 &&
                off::kDFlags == off::kDPayloadLen + 4 &&
                off::kDPayloadLenHi == off::kDPayloadLen + 6);
  Put32(p + off::kDPsn, psn);
  Put32(p + off::kDMsgOffset, msg_offset);
  Put64(p + off::kDRemoteAddr, remote_addr);
  // payload_len, path_id, flags, payload_len_hi: four adjacent little-endian
  // 16-bit fields, one 64-bit store (the same bytes).
  Put64(p + off::kDPayloadLen, uint64_t{payload_len & 0xFFFFu} |
                                   uint64_t{path_id} << 16 |
                                   uint64_t{flags} << 32 |
                                   uint64_t{payload_len >> 16 & 0xFFFFu} << 48);
}

// True when two DATA headers agree in every byte except the per-packet
// fields (checksum, PSN, msg_offset, remote_addr, send_ts, payload_len and
// payload_len_hi, path_id, and the first/last-of-message flag bits): same
// lead (magic, version, type), connection, message (msn, msg_len, rkey), the
// other flags, immediate and payload checksum. Three 16-byte masked
// compares (bytes 32..47, address and timestamp, are all per packet).
// Host-endianness independent: the mask is bytes.
[[gnu::always_inline]] inline bool SameDataMessage(const uint8_t* a,
                                                   const uint8_t* b) {
  using V = uint64_t __attribute__((vector_size(16)));
  static constexpr uint8_t kFF = 0xFF;
  static constexpr uint8_t kFlagsLo =
      static_cast<uint8_t>(~(kFlagFirstOfMessage | kFlagLastOfMessage));
  static_assert(((kFlagFirstOfMessage | kFlagLastOfMessage) & 0xFF00) == 0);
  static_assert(off::kDstConn == 8 && off::kDMsn == 16 && off::kDMsgLen == 24 &&
                off::kDRkey == 28 && off::kDRemoteAddr == 32 &&
                off::kDSendTs == 40 && off::kDFlags == 52 &&
                off::kDPayloadLenHi == 54 && off::kDImmediate == 56 &&
                off::kDPayloadCrc == 60 && kDataHeaderSize == 64);
  alignas(16) static constexpr uint8_t kMask[48] = {
      // bytes 0..15: lead, [crc], dst_conn, [psn]
      kFF, kFF, kFF, kFF, 0, 0, 0, 0, kFF, kFF, kFF, kFF, 0, 0, 0, 0,
      // bytes 16..31: msn, [msg_offset], msg_len, rkey
      kFF, kFF, kFF, kFF, 0, 0, 0, 0, kFF, kFF, kFF, kFF, kFF, kFF, kFF, kFF,
      // bytes 48..63: [payload_len], [path_id], flags (but first/last),
      // [payload_len_hi], immediate, payload_crc
      0, 0, 0, 0, kFlagsLo, kFF, 0, 0, kFF, kFF, kFF, kFF, kFF, kFF, kFF, kFF};
  V a0, a1, a3, b0, b1, b3, m0, m1, m3;
  __builtin_memcpy(&a0, a, 16);
  __builtin_memcpy(&a1, a + 16, 16);
  __builtin_memcpy(&a3, a + 48, 16);
  __builtin_memcpy(&b0, b, 16);
  __builtin_memcpy(&b1, b + 16, 16);
  __builtin_memcpy(&b3, b + 48, 16);
  __builtin_memcpy(&m0, kMask, 16);
  __builtin_memcpy(&m1, kMask + 16, 16);
  __builtin_memcpy(&m3, kMask + 32, 16);
  const V x = ((a0 ^ b0) & m0) | ((a1 ^ b1) & m1) | ((a3 ^ b3) & m3);
  return (x[0] | x[1]) == 0;
}

[[gnu::always_inline]] inline DecodeError DecodeSplitWithCrcImpl(
    const uint8_t* hdr, size_t hdr_len, const uint8_t* payload,
    size_t payload_len, uint32_t hdr_crc, Packet* out) {
  if (payload == nullptr && payload_len != 0) return DecodeError::kBadLength;
  return DecodeImpl(hdr, hdr_len, payload, payload_len, /*split=*/true,
                    &hdr_crc, out);
}

// (A header shorter than the common header is never long enough for its
// type: every known header is longer, an unknown type's size is 0.)
[[gnu::always_inline]] inline size_t HeaderCrcSpanImpl(const uint8_t* p,
                                                       size_t avail) {
  static_assert(off::kType < kCommonHeaderSize);
  static_assert([] {
    for (uint8_t n : kHeaderSizeByType)
      if (n != 0 && n < kCommonHeaderSize) return false;
    return true;
  }());
  if (p == nullptr || avail <= off::kType) return 0;
  const size_t need = kHeaderSizeByByte.size[p[off::kType]];
  return avail >= need ? need : 0;
}

}  // namespace prism::wire::internal

#endif  // PRISM_WIRE_PACKET_INLINE_H_
