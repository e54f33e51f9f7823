// SRv6 and entropy encodings on the wire: IPv6 addresses, micro-SID carriers
// (RFC 9800 NEXT-C-SID, format F3216), the Segment Routing Header (RFC 8754),
// entropy-only fields (UDP source port + IPv6 flow label) and the UDP/IPv6
// checksum. docs/routing.md has byte diagrams.
//
// Contract:
// - Pure functions on caller-owned memory; no allocation, no global state
//   (except Ipv6Address::ToString/Parse, which are control-path helpers).
//   Thread-compatible.
// - Decoders never read outside the span they are given, never write outside
//   the output struct, and return a status enum per malformed input (never
//   crash). Encoders validate their input the same way and write nothing
//   past the output span.
// - uSID carrier F3216: bits 0..31 of the address are the locator block
//   (default fcbb:bbbb::/32), then up to six 16-bit uSIDs, the rest zero. A
//   zero uSID ends the list; nothing non-zero may follow it.
// - A shifting switch (End with NEXT-C-SID flavour) owning uSID `u` sees
//   block:u:rest: if `rest` is non-zero it shifts it left by 16 bits into
//   the uSID slots and zero-fills the last 16 bits; if `rest` is zero the
//   carrier is exhausted (the switch would fall back to SRH processing).
// - SRH: segments are stored in wire order: segments[0] is the LAST segment
//   of the path (the final destination), segments[last_entry] the first.
//   Segments Left indexes the active segment; the IPv6 destination equals
//   segments[segments_left] while in flight.
// - The UDP checksum covers the pseudo-header with the FINAL destination
//   (the address the receiver sees after every shift / the last segment),
//   as RFC 8200 section 8.1 requires for routing headers.
#ifndef PRISM_ROUTING_SRV6_H_
#define PRISM_ROUTING_SRV6_H_

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace prism::routing {

// ---------------------------------------------------------------- addresses
struct Ipv6Address {
  std::array<uint8_t, 16> bytes{};

  // 16-bit word i (0..7) in host order; word 0 is the most significant.
  uint16_t word(int i) const {
    return static_cast<uint16_t>((bytes[2 * i] << 8) | bytes[2 * i + 1]);
  }
  void set_word(int i, uint16_t v) {
    bytes[2 * i] = static_cast<uint8_t>(v >> 8);
    bytes[2 * i + 1] = static_cast<uint8_t>(v);
  }
  static Ipv6Address FromWords(const std::array<uint16_t, 8>& w) {
    Ipv6Address a;
    for (int i = 0; i < 8; ++i) a.set_word(i, w[i]);
    return a;
  }
  bool is_zero() const {
    for (uint8_t b : bytes)
      if (b != 0) return false;
    return true;
  }
  // RFC 5952 text form ("fcbb:bbbb:2001:1000::"). Control path only.
  std::string ToString() const;
  // Accepts RFC 4291 text forms (no zone, no embedded IPv4).
  static absl::StatusOr<Ipv6Address> Parse(std::string_view text);

  friend bool operator==(const Ipv6Address&, const Ipv6Address&) = default;
  friend auto operator<=>(const Ipv6Address&, const Ipv6Address&) = default;
};

// ---------------------------------------------------------- uSID carrier
inline constexpr uint32_t kDefaultLocatorBlock = 0xfcbbbbbb;  // fcbb:bbbb::/32
inline constexpr int kMaxUsids = 6;

struct UsidCarrier {
  uint32_t block = kDefaultLocatorBlock;
  uint8_t num_usids = 0;                    // 0..6
  std::array<uint16_t, kMaxUsids> usids{};  // [0] is the active uSID
};

enum class UsidStatus : uint8_t {
  kOk,
  kTooMany,     // encode: more than six uSIDs
  kZeroUsid,    // encode: a uSID of value 0 (reserved: end of carrier)
  kWrongBlock,  // decode: locator block differs from the expected one
  kGap,         // decode: non-zero bits after the first zero uSID
  kEmpty,       // decode: no uSID at all (block only)
};
const char* UsidStatusName(UsidStatus s);

UsidStatus EncodeUsidCarrier(const UsidCarrier& c, Ipv6Address* out);
UsidStatus DecodeUsidCarrier(const Ipv6Address& a, UsidCarrier* out,
                             uint32_t expected_block = kDefaultLocatorBlock);

enum class UsidAction : uint8_t {
  kShifted,       // active uSID matched; rest shifted left 16 bits
  kEndOfCarrier,  // active uSID matched but nothing follows (no shift)
  kNotLocal,      // active uSID is someone else's: forward by route lookup
  kNotCarrier,    // locator block differs: not a uSID carrier
};
const char* UsidActionName(UsidAction a);

// What a switch owning `local_usid` does to the destination address.
UsidAction UsidShift(Ipv6Address* dst, uint16_t local_usid,
                     uint32_t block = kDefaultLocatorBlock);
// The address after `n` unconditional shifts (n >= 6 leaves the block only).
Ipv6Address UsidShifted(const Ipv6Address& a, int n);

// ---------------------------------------------------------------- SRH
inline constexpr uint8_t kIpProtoRouting = 43;
inline constexpr uint8_t kIpProtoUdp = 17;
inline constexpr uint8_t kSrhRoutingType = 4;
inline constexpr int kMaxSrhSegments = 16;  // Prism's bound (RFC allows 128)
inline constexpr int kMaxHmacBytes = 32;
inline constexpr int kMaxOtherTlvBytes = 32;
inline constexpr uint8_t kTlvPad1 = 0;
inline constexpr uint8_t kTlvPadN = 4;
inline constexpr uint8_t kTlvHmac = 5;
// Largest SRH Prism encodes or decodes into struct Srh.
inline constexpr size_t kMaxSrhBytes = 8 + 16 * kMaxSrhSegments +
                                       (8 + kMaxHmacBytes) +
                                       (2 + kMaxOtherTlvBytes) + 8;

struct SrhHmac {
  bool present = false;
  bool d_flag = false;  // "destination address verification disabled"
  uint32_t key_id = 0;
  uint8_t len = 0;  // HMAC bytes: 0, 8, 16, 24 or 32
  std::array<uint8_t, kMaxHmacBytes> hmac{};
};

// One TLV of another type, carried opaquely (e.g. a future Prism TLV).
struct SrhOtherTlv {
  bool present = false;
  uint8_t type = 0;
  uint8_t len = 0;
  std::array<uint8_t, kMaxOtherTlvBytes> value{};
};

struct Srh {
  uint8_t next_header = kIpProtoUdp;
  uint8_t segments_left = 0;
  uint8_t last_entry = 0;  // index of the first segment = num_segments - 1
  uint8_t flags = 0;
  uint16_t tag = 0;
  uint8_t num_segments = 0;                             // 1..kMaxSrhSegments
  std::array<Ipv6Address, kMaxSrhSegments> segments{};  // wire order
  SrhHmac hmac;
  SrhOtherTlv other;
  // Decode only: bytes of Pad1/PadN TLVs seen, and TLVs beyond the first
  // "other" one that were skipped.
  uint16_t padding_bytes = 0;
  uint8_t skipped_tlvs = 0;

  // Bytes Encode() writes (a multiple of 8).
  size_t encoded_size() const;
  // The segment the packet is steered to now (segments[segments_left]).
  // REQUIRES: segments_left < num_segments (segments_left == last_entry + 1,
  // which RFC 8754 permits, has no active segment in the list; segments[0]
  // is returned then so the call stays in bounds).
  const Ipv6Address& active() const {
    return segments[segments_left < num_segments ? segments_left : 0];
  }
};

enum class SrhStatus : uint8_t {
  kOk,
  kTruncated,        // span shorter than 8 bytes or than hdr ext len says
  kWrongType,        // routing type != 4
  kBadLength,        // hdr ext len too small for last_entry + 1 segments
  kBadSegmentsLeft,  // segments_left > last_entry + 1 (RFC 8754 4.3.1.1)
  kTooManySegments,  // more than kMaxSrhSegments (Prism's bound)
  kBadTlv,           // a TLV runs past the header
  kBadHmac,          // HMAC TLV with a bad length, or a second one
  kBadPadding,       // PadN longer than 5 value bytes
  kTooManyTlvBytes,  // an "other" TLV larger than kMaxOtherTlvBytes
  kBufferTooSmall,   // encode: output span too small
  kInvalid,          // encode: inconsistent struct (counts, lengths)
};
const char* SrhStatusName(SrhStatus s);

// Builds an SRH from the path in travel order (first segment first): wire
// order reversed, segments_left = last_entry = n - 1. The IPv6 destination
// to send to is travel[0]. REQUIRES-free: returns kInvalid for n == 0 or
// n > kMaxSrhSegments.
SrhStatus MakeSrh(std::span<const Ipv6Address> travel, uint8_t next_header,
                  Srh* out);
// Writes the SRH; *written = bytes. Pads TLVs to a multiple of 8 with Pad1 /
// PadN as RFC 8754 section 2.1.1 says.
SrhStatus EncodeSrh(const Srh& srh, std::span<uint8_t> out, size_t* written);
// Parses one SRH at the start of `in`; *consumed = 8 * (hdr ext len + 1).
SrhStatus DecodeSrh(std::span<const uint8_t> in, Srh* out, size_t* consumed);
// The classic End behaviour: segments_left--, destination = new active
// segment. Returns false (no change) when segments_left is already 0.
bool SrhAdvance(Srh* srh, Ipv6Address* dst);

// ----------------------------------------------------- entropy-only mode
// The 32-bit entropy value (EV) of MRC: 16-bit UDP source port (high half)
// and the low 16 bits of the IPv6 flow label (low half).
struct EntropyFields {
  uint16_t udp_src_port = 0;
  uint32_t flow_label = 0;  // 20 bits
};
// Bit 19 of the flow label is always set so it is never 0 ("no label").
inline constexpr uint32_t kFlowLabelMarker = 1u << 19;
EntropyFields EntropyToFields(uint32_t ev);
uint32_t FieldsToEntropy(const EntropyFields& f);

// ------------------------------------------------------- IPv6 + UDP
inline constexpr size_t kIpv6HeaderBytes = 40;
inline constexpr size_t kUdpHeaderBytes = 8;

struct Ipv6Header {
  uint8_t traffic_class = 0;
  uint32_t flow_label = 0;  // 20 bits
  uint16_t payload_length = 0;
  uint8_t next_header = kIpProtoUdp;
  uint8_t hop_limit = 64;
  Ipv6Address src;
  Ipv6Address dst;
};
// Returns false when out is shorter than 40 bytes or flow_label > 20 bits.
bool EncodeIpv6Header(const Ipv6Header& h, std::span<uint8_t> out);
// Returns false when in is shorter than 40 bytes or the version is not 6.
bool DecodeIpv6Header(std::span<const uint8_t> in, Ipv6Header* out);

// RFC 768/8200 checksum of `udp` (header + payload, checksum field included
// as it is) over the pseudo-header (src, final_dst, length, 17).
// ChecksumUdp6 computes the value to store (treating the field as zero;
// 0 is sent as 0xffff). VerifyUdp6 is true when a received datagram's sum
// checks out.
uint16_t ChecksumUdp6(const Ipv6Address& src, const Ipv6Address& final_dst,
                      std::span<const uint8_t> udp);
bool VerifyUdp6(const Ipv6Address& src, const Ipv6Address& final_dst,
                std::span<const uint8_t> udp);

// A complete IPv6 [+ SRH] + UDP datagram. `ip.next_header` and
// `ip.payload_length` are filled in; ip.dst must be the first destination
// (carrier, or srh->active()); `final_dst` is what the checksum covers.
struct Udp6Packet {
  Ipv6Header ip;
  const Srh* srh = nullptr;  // optional
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  Ipv6Address final_dst;
  std::span<const uint8_t> payload;
};
enum class PacketStatus : uint8_t { kOk, kBufferTooSmall, kTooLong, kBadSrh };
// Writes the datagram; *written = total bytes.
PacketStatus EncodeUdp6Packet(const Udp6Packet& p, std::span<uint8_t> out,
                              size_t* written);

}  // namespace prism::routing

#endif  // PRISM_ROUTING_SRV6_H_
