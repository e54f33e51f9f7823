// Prism wire format: packet types, their fields, encoders and the decoder.
// The byte layout of every type is documented in docs/wire-format.md next to
// the constants below; sizes are pinned with static_assert in packet.cc.
//
// Contract:
// - One byte-order rule: every multi-byte field is little-endian on the wire.
// - Every packet starts with the common header: magic, version, type, a
//   header checksum (CRC32C over the header with the checksum field zeroed)
//   and the destination connection id.
// - DATA carries the full RDMA target (remote address + rkey + message offset
//   and length) so a receiver can place every packet on its own, in any order.
//   An optional CRC32C of the payload is carried when kFlagPayloadCrc is set.
// - A trimmed DATA packet is its header with the payload removed by a switch:
//   the header checksum still verifies, payload bytes are absent.
// - Decode() never reads outside [data, data+len) and returns a DecodeError
//   for every malformed input; it allocates nothing.
// - Encoders write the header only (the payload is gathered by the datapath)
//   and return the header length, or 0 if `cap` is too small.
#ifndef PRISM_WIRE_PACKET_H_
#define PRISM_WIRE_PACKET_H_

#include <cstddef>
#include <cstdint>

namespace prism::wire {

// On the wire (LE): bytes 0x52 0x50, "RP".
inline constexpr uint16_t kMagic = 0x5052;
inline constexpr uint8_t kVersion = 1;

// UDP destination port Prism listens on by default (not IANA-assigned; the
// number mirrors the magic 0x5052 = 20562). Configurable per datapath. Not
// 4791 (RoCEv2), 4789 (VXLAN) or 4793 (Ultra Ethernet).
inline constexpr uint16_t kDefaultUdpPort = 20562;

// Header sizes on the wire (bytes). Layouts: docs/wire-format.md.
//   Common header (every type):
//     0 magic u16 | 2 version u8 | 3 type u8 | 4 header_crc u32 |
//     8 dst_conn u32
inline constexpr size_t kCommonHeaderSize = 12;
inline constexpr size_t kHeaderCrcOffset = 4;
//   DATA: 12 psn u32 | 16 msn u32 | 20 msg_offset u32 | 24 msg_len u32 |
//     28 rkey u32 | 32 remote_addr u64 | 40 send_ts u64 |
//     48 payload_len u16 (bits 0-15) | 50 path_id u16 | 52 flags u16 |
//     54 payload_len_hi u16 (bits 16-31; 0 below 64 KiB) | 56 immediate u32 |
//     60 payload_crc u32 | 64 payload...
inline constexpr size_t kDataHeaderSize = 64;
// Largest DATA payload (and CONNECT mtu_payload) a decoder accepts: 1 MiB.
// Payloads of 64 KiB and more set payload_len_hi, which a peer accepts only
// after agreeing to an mtu_payload above 0xFFFF in CONNECT (older version-1
// decoders refuse both; docs/wire-format.md, "Versioning").
inline constexpr uint32_t kMaxPayloadLen = 1u << 20;
//   SACK: 12 cum_psn u32 | 16 echo_ts u64 | 24 bytes_received u64 |
//     32 bitmap u64[4] | 64 bitmap_base u32 | 68 trigger_psn u32 |
//     72 ooo_count u32 | 76 echo_path u16 | 78 rx_window_penalty u16 |
//     80 coalesced u16 | 82 ecn_seen u8 | 83 reserved u8 (0)
inline constexpr size_t kSackHeaderSize = 84;
//   NACK: 12 psn u32 | 16 cum_psn u32 | 20 reason u8 | 21 ecn_seen u8 |
//     22 echo_path u16 | 24 echo_ts u64
inline constexpr size_t kNackHeaderSize = 32;
//   PROBE / PROBE_ACK: 12 probe_seq u32 | 16 send_ts u64 | 24 path_id u16 |
//     26 reserved u16 (0)
inline constexpr size_t kProbeHeaderSize = 28;
//   CONNECT / CONNECT_ACK: 12 src_conn u32 | 16 nonce u64 |
//     24 mtu_payload u32 | 28 flags u32 | 32 num_paths u16 | 34 num_planes u16
inline constexpr size_t kConnectHeaderSize = 36;
//   PLANE_STATUS: 12 planes_down u32 | 16 seq u32
inline constexpr size_t kPlaneStatusHeaderSize = 20;
inline constexpr size_t kMaxHeaderSize = kSackHeaderSize;

enum class PacketType : uint8_t {
  kData = 1,
  kSack = 2,
  kNack = 3,
  kProbe = 4,
  kProbeAck = 5,
  kConnect = 6,
  kConnectAck = 7,
  kPlaneStatus = 8,  // "my NIC port for plane X is down/up"
};

// DATA flags.
enum DataFlags : uint16_t {
  kFlagRetransmit = 1u << 0,
  kFlagLastOfMessage = 1u << 1,
  kFlagHasImmediate = 1u << 2,
  kFlagTrimmed = 1u << 3,     // set by a trimming switch / the simulator
  kFlagPayloadCrc = 1u << 4,  // payload_crc is valid
  kFlagFirstOfMessage = 1u << 5,
};

// DATA flag bits a version-1 decoder accepts; any other bit is kBadField.
inline constexpr uint16_t kKnownDataFlags = 0x3F;

// CONNECT / CONNECT_ACK flags.
enum ConnectFlags : uint32_t {
  kConnectPayloadCrc = 1u << 0,  // payload checksum requested / agreed
};
inline constexpr uint32_t kKnownConnectFlags = 0x1;

enum class NackReason : uint8_t {
  kTrimmed = 1,      // payload was trimmed by the network: retransmit now
  kOutOfWindow = 2,  // PSN outside the receiver's window
  kNoBuffer = 3,     // receiver cannot take it now
  kBadKey = 4,       // rkey unknown or region lacks remote-write access
  kBadRange = 5,     // target range outside the region
  kCorrupt = 6,      // payload checksum mismatch
};

inline constexpr size_t kSackBitmapWords = 4;  // 256-bit SACK bitmap
inline constexpr size_t kSackBitmapBits = kSackBitmapWords * 64;

struct DataHeader {
  uint32_t dst_conn = 0;     // receiver's connection id
  uint32_t psn = 0;          // packet sequence number (low 32 bits)
  uint32_t msn = 0;          // message sequence number
  uint32_t msg_offset = 0;   // offset of this payload within the message
  uint32_t msg_len = 0;      // total message length
  uint64_t remote_addr = 0;  // final address of this packet's first byte
  uint32_t rkey = 0;
  uint32_t payload_len = 0;  // payload bytes after the header (<= 1 MiB)
  uint16_t path_id = 0;      // path (entropy value slot) it was sent on
  uint16_t flags = 0;        // DataFlags
  uint64_t send_ts = 0;      // sender's timestamp, echoed back in SACK/NACK
  uint32_t immediate = 0;    // valid with kFlagHasImmediate
  uint32_t payload_crc = 0;  // CRC32C of the payload, with kFlagPayloadCrc

  bool operator==(const DataHeader&) const = default;
};

struct SackHeader {
  uint32_t dst_conn = 0;
  uint32_t cum_psn = 0;                    // every PSN below this was received
  uint32_t bitmap_base = 0;                // PSN of bit 0 of the bitmap
  uint64_t bitmap[kSackBitmapWords] = {};  // bit i: PSN bitmap_base+i received
  uint32_t trigger_psn = 0;  // PSN of the packet that triggered this SACK
  uint16_t echo_path = 0;    // its path id
  uint8_t ecn_seen = 0;      // 1 if it (or a coalesced one) carried ECN CE
  uint8_t reserved = 0;
  uint64_t echo_ts = 0;         // its send timestamp
  uint64_t bytes_received = 0;  // receiver's total payload bytes (CC state)
  uint32_t ooo_count = 0;       // receiver's out-of-order packet count
  uint16_t rx_window_penalty = 0;
  uint16_t coalesced = 0;  // number of DATA packets this SACK covers

  bool operator==(const SackHeader&) const = default;
};

struct NackHeader {
  uint32_t dst_conn = 0;
  uint32_t psn = 0;      // the packet being NACKed
  uint32_t cum_psn = 0;  // receiver's cumulative PSN
  NackReason reason = NackReason::kTrimmed;
  uint8_t ecn_seen = 0;
  uint16_t echo_path = 0;
  uint64_t echo_ts = 0;

  bool operator==(const NackHeader&) const = default;
};

// PROBE and PROBE_ACK share a layout.
struct ProbeHeader {
  uint32_t dst_conn = 0;
  uint16_t path_id = 0;
  uint16_t reserved = 0;
  uint32_t probe_seq = 0;
  uint64_t send_ts = 0;  // echoed unchanged in PROBE_ACK

  bool operator==(const ProbeHeader&) const = default;
};

// CONNECT and CONNECT_ACK share a layout (in-band connection setup).
struct ConnectHeader {
  uint32_t dst_conn = 0;  // 0 in CONNECT (not yet known)
  uint32_t src_conn = 0;  // sender's connection id
  uint16_t num_paths = 0;
  uint16_t num_planes = 0;
  uint32_t mtu_payload = 0;
  uint32_t flags = 0;  // bit 0: payload checksum requested
  uint64_t nonce = 0;  // matches CONNECT_ACK to CONNECT

  bool operator==(const ConnectHeader&) const = default;
};

struct PlaneStatusHeader {
  uint32_t dst_conn = 0;
  uint32_t planes_down = 0;  // bit p set: sender's plane p is down
  uint32_t seq = 0;          // newer status wins

  bool operator==(const PlaneStatusHeader&) const = default;
};

enum class DecodeError : uint8_t {
  kOk = 0,
  kTooShort,  // shorter than the header its type needs
  kBadMagic,
  kBadVersion,
  kBadType,
  kBadChecksum,  // header checksum mismatch
  kBadLength,    // payload present but not of the declared length
  kBadField,     // a field value the format forbids
};

const char* DecodeErrorName(DecodeError e);

// A decoded packet. Exactly one header member is valid, selected by `type`.
struct Packet {
  PacketType type = PacketType::kData;
  DataHeader data;
  SackHeader sack;
  NackHeader nack;
  ProbeHeader probe;
  ConnectHeader connect;
  PlaneStatusHeader plane;
  // DATA only: the payload inside the decoded buffer (nullptr when trimmed).
  const uint8_t* payload = nullptr;
  uint32_t payload_len = 0;
  bool trimmed = false;  // DATA with payload absent, or kFlagTrimmed
};

// Header length on the wire for each type (DATA without payload).
size_t HeaderSize(PacketType type);

// Decodes one packet. For DATA, bytes after the header are the payload: none
// (trimmed) or exactly payload_len, anything else is kBadLength.
// Decode does NOT verify payload_crc: the engine checks it with Crc32c() when
// kFlagPayloadCrc is set (and NACKs kCorrupt on mismatch). On any error the
// contents of *out other than payload/payload_len/trimmed are unspecified.
DecodeError Decode(const uint8_t* data, size_t len, Packet* out);

// Same as Decode() for a packet the datapath received split: `hdr` holds
// exactly the header (hdr_len must equal HeaderSize(type), else kBadLength
// for a longer buffer or kTooShort for a shorter one) and, for DATA, the
// payload is `payload`/`payload_len` (0 bytes: trimmed, else exactly the
// header's payload_len). Non-DATA types require payload_len == 0.
DecodeError DecodeSplit(const uint8_t* hdr, size_t hdr_len,
                        const uint8_t* payload, size_t payload_len,
                        Packet* out);

// Encoders. With `seal` false the header checksum field is left zero and the
// caller must run SealHeaders() over the header before it leaves; the bytes
// are then exactly those of a sealed encode (a sender checksums a burst of
// headers at once that way).
size_t EncodeData(const DataHeader& h, uint8_t* out, size_t cap,
                  bool seal = true);
size_t EncodeSack(const SackHeader& h, uint8_t* out, size_t cap,
                  bool seal = true);
size_t EncodeNack(const NackHeader& h, uint8_t* out, size_t cap,
                  bool seal = true);
size_t EncodeProbe(const ProbeHeader& h, bool ack, uint8_t* out, size_t cap,
                   bool seal = true);
size_t EncodeConnect(const ConnectHeader& h, bool ack, uint8_t* out,
                     size_t cap);
size_t EncodePlaneStatus(const PlaneStatusHeader& h, uint8_t* out, size_t cap,
                         bool seal = true);

// --- Bursts ---------------------------------------------------------------
// Header checksums are the per-packet cost a burst can amortise: one CRC32C
// chain is latency-bound, so independent headers are checksummed as
// interleaved chains (Crc32cZero4At4Multi).
//
// Writes the header checksum of `n` headers encoded with seal == false:
// hdrs[i] holds lens[i] bytes (the encoder's return value; entries shorter
// than the common header, e.g. a failed encode's 0, are skipped).
void SealHeaders(uint8_t* const* hdrs, const size_t* lens, size_t n);
// SealHeaders for headers the caller encoded itself, none skipped.
// REQUIRES: hdrs[i] != nullptr and lens[i] >= kCommonHeaderSize for all i.
void SealEncodedHeaders(uint8_t* const* hdrs, const size_t* lens, size_t n);
// SealEncodedHeaders for headers in an array of records (e.g. the
// prism::TxPacket of a burst): header k at first + k * stride, its length
// the 16-bit host-order field len_off bytes after its start. The same bytes
// written, without gathering pointer and length arrays.
// REQUIRES: each length >= kCommonHeaderSize, each length field outside
// its own header's bytes.
void SealEncodedHeadersStrided(uint8_t* first, size_t stride, size_t len_off,
                               size_t n);
// The number of leading bytes of `p` the header checksum covers when `p`
// (avail bytes) holds a common header of a known type and at least
// HeaderSize(type) bytes; 0 otherwise (Decode rejects it without a checksum).
size_t HeaderCrcSpan(const uint8_t* p, size_t avail);
// out[i] = header checksum over the first spans[i] bytes of hdrs[i], where
// spans[i] = HeaderCrcSpan(hdrs[i], ...) != 0.
void HeaderCrcs(const uint8_t* const* hdrs, const size_t* spans, size_t n,
                uint32_t* out);
// Decode() / DecodeSplit() with the header checksum computed beforehand:
// `hdr_crc` is HeaderCrcs()' value for this header. Same results as the
// plain decoders given the same bytes.
DecodeError DecodeWithCrc(const uint8_t* data, size_t len, uint32_t hdr_crc,
                          Packet* out);
DecodeError DecodeSplitWithCrc(const uint8_t* hdr, size_t hdr_len,
                               const uint8_t* payload, size_t payload_len,
                               uint32_t hdr_crc, Packet* out);

// Trims an encoded DATA packet in place the way a trimming switch does:
// drops the payload, sets kFlagTrimmed and recomputes the header checksum.
// Returns the new length (kDataHeaderSize), or 0 if `pkt` is not a DATA
// packet that Decode() accepts (then `pkt` is unchanged).
size_t TrimData(uint8_t* pkt, size_t len);

// CRC32C (Castagnoli), hardware-accelerated where the CPU has SSE4.2.
uint32_t Crc32c(const uint8_t* data, size_t len, uint32_t crc = 0);

}  // namespace prism::wire

#endif  // PRISM_WIRE_PACKET_H_
