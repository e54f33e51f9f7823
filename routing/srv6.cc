// SRv6 encodings. See srv6.h for the contract.
#include "routing/srv6.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace prism::routing {

// ---------------------------------------------------------------- addresses

std::string Ipv6Address::ToString() const {
  // RFC 5952: longest run (>= 2) of zero words becomes "::", first on ties.
  int best = -1, best_len = 0;
  for (int i = 0; i < 8;) {
    if (word(i) != 0) {
      ++i;
      continue;
    }
    int j = i;
    while (j < 8 && word(j) == 0) ++j;
    if (j - i > best_len && j - i >= 2) {
      best = i;
      best_len = j - i;
    }
    i = j;
  }
  std::string out;
  char buf[8];
  for (int i = 0; i < 8; ++i) {
    if (i == best) {
      out += "::";
      i += best_len - 1;
      continue;
    }
    if (!out.empty() && out.back() != ':') out += ':';
    snprintf(buf, sizeof(buf), "%x", word(i));
    out += buf;
  }
  return out;
}

absl::StatusOr<Ipv6Address> Ipv6Address::Parse(std::string_view text) {
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("bad IPv6 address \"", std::string(text), "\""));
  };
  std::array<uint16_t, 8> head{}, tail{};
  int nhead = 0, ntail = 0;
  bool gap = false;
  size_t i = 0;
  if (text.substr(0, 2) == "::") {
    gap = true;
    i = 2;
  } else if (!text.empty() && text[0] == ':') {
    return bad();
  }
  while (i < text.size()) {
    int digits = 0;
    uint32_t v = 0;
    while (i < text.size() && digits < 5) {
      char c = text[i];
      int h = (c >= '0' && c <= '9')   ? c - '0'
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                       : -1;
      if (h < 0) break;
      v = (v << 4) | static_cast<uint32_t>(h);
      ++digits;
      ++i;
    }
    if (digits == 0 || digits > 4) return bad();
    if (nhead + ntail >= 8) return bad();
    if (gap) {
      tail[ntail++] = static_cast<uint16_t>(v);
    } else {
      head[nhead++] = static_cast<uint16_t>(v);
    }
    if (i == text.size()) break;
    if (text[i] != ':') return bad();
    ++i;
    if (i < text.size() && text[i] == ':') {
      if (gap) return bad();
      gap = true;
      ++i;
    } else if (i == text.size()) {
      return bad();  // trailing single ':'
    }
  }
  if (gap ? nhead + ntail > 7 : nhead != 8) return bad();
  std::array<uint16_t, 8> w{};
  for (int k = 0; k < nhead; ++k) w[k] = head[k];
  for (int k = 0; k < ntail; ++k) w[8 - ntail + k] = tail[k];
  return FromWords(w);
}

// ---------------------------------------------------------- uSID carrier

const char* UsidStatusName(UsidStatus s) {
  switch (s) {
    case UsidStatus::kOk:
      return "ok";
    case UsidStatus::kTooMany:
      return "too_many_usids";
    case UsidStatus::kZeroUsid:
      return "zero_usid";
    case UsidStatus::kWrongBlock:
      return "wrong_locator_block";
    case UsidStatus::kGap:
      return "data_after_end_of_carrier";
    case UsidStatus::kEmpty:
      return "empty_carrier";
  }
  return "?";
}

const char* UsidActionName(UsidAction a) {
  switch (a) {
    case UsidAction::kShifted:
      return "shifted";
    case UsidAction::kEndOfCarrier:
      return "end_of_carrier";
    case UsidAction::kNotLocal:
      return "not_local";
    case UsidAction::kNotCarrier:
      return "not_carrier";
  }
  return "?";
}

UsidStatus EncodeUsidCarrier(const UsidCarrier& c, Ipv6Address* out) {
  if (c.num_usids > kMaxUsids) return UsidStatus::kTooMany;
  for (int i = 0; i < c.num_usids; ++i) {
    if (c.usids[i] == 0) return UsidStatus::kZeroUsid;
  }
  Ipv6Address a;
  a.set_word(0, static_cast<uint16_t>(c.block >> 16));
  a.set_word(1, static_cast<uint16_t>(c.block));
  for (int i = 0; i < c.num_usids; ++i) a.set_word(2 + i, c.usids[i]);
  *out = a;
  return UsidStatus::kOk;
}

static uint32_t BlockOf(const Ipv6Address& a) {
  return (uint32_t{a.word(0)} << 16) | a.word(1);
}

UsidStatus DecodeUsidCarrier(const Ipv6Address& a, UsidCarrier* out,
                             uint32_t expected_block) {
  if (BlockOf(a) != expected_block) return UsidStatus::kWrongBlock;
  UsidCarrier c;
  c.block = expected_block;
  bool ended = false;
  for (int i = 0; i < kMaxUsids; ++i) {
    uint16_t u = a.word(2 + i);
    if (u == 0) {
      ended = true;
    } else if (ended) {
      return UsidStatus::kGap;
    } else {
      c.usids[c.num_usids++] = u;
    }
  }
  if (c.num_usids == 0) return UsidStatus::kEmpty;
  *out = c;
  return UsidStatus::kOk;
}

UsidAction UsidShift(Ipv6Address* dst, uint16_t local_usid, uint32_t block) {
  if (BlockOf(*dst) != block) return UsidAction::kNotCarrier;
  // uSID 0 is reserved (end of carrier): never a switch's own.
  if (local_usid == 0 || dst->word(2) != local_usid) {
    return UsidAction::kNotLocal;
  }
  bool rest = false;
  for (int i = 6; i < 16; ++i) rest = rest || dst->bytes[i] != 0;
  if (!rest) return UsidAction::kEndOfCarrier;
  std::memmove(&dst->bytes[4], &dst->bytes[6], 10);
  dst->bytes[14] = 0;
  dst->bytes[15] = 0;
  return UsidAction::kShifted;
}

Ipv6Address UsidShifted(const Ipv6Address& a, int n) {
  Ipv6Address r = a;
  for (int k = 0; k < n && k < kMaxUsids; ++k) {
    std::memmove(&r.bytes[4], &r.bytes[6], 10);
    r.bytes[14] = 0;
    r.bytes[15] = 0;
  }
  return r;
}

// ---------------------------------------------------------------- SRH

const char* SrhStatusName(SrhStatus s) {
  switch (s) {
    case SrhStatus::kOk:
      return "ok";
    case SrhStatus::kTruncated:
      return "truncated";
    case SrhStatus::kWrongType:
      return "wrong_routing_type";
    case SrhStatus::kBadLength:
      return "bad_hdr_ext_len";
    case SrhStatus::kBadSegmentsLeft:
      return "bad_segments_left";
    case SrhStatus::kTooManySegments:
      return "too_many_segments";
    case SrhStatus::kBadTlv:
      return "bad_tlv";
    case SrhStatus::kBadHmac:
      return "bad_hmac_tlv";
    case SrhStatus::kBadPadding:
      return "bad_padding";
    case SrhStatus::kTooManyTlvBytes:
      return "tlv_too_long";
    case SrhStatus::kBufferTooSmall:
      return "buffer_too_small";
    case SrhStatus::kInvalid:
      return "invalid";
  }
  return "?";
}

namespace {

size_t TlvBytes(const Srh& s) {
  size_t t = 0;
  if (s.hmac.present) t += 8 + s.hmac.len;
  if (s.other.present) t += 2 + s.other.len;
  return t;
}

}  // namespace

size_t Srh::encoded_size() const {
  size_t t = TlvBytes(*this);
  t += (8 - t % 8) % 8;
  return 8 + 16 * size_t{num_segments} + t;
}

SrhStatus MakeSrh(std::span<const Ipv6Address> travel, uint8_t next_header,
                  Srh* out) {
  if (travel.empty() || travel.size() > kMaxSrhSegments) {
    return SrhStatus::kInvalid;
  }
  Srh s;
  s.next_header = next_header;
  s.num_segments = static_cast<uint8_t>(travel.size());
  s.last_entry = static_cast<uint8_t>(travel.size() - 1);
  s.segments_left = s.last_entry;
  for (size_t i = 0; i < travel.size(); ++i) {
    s.segments[travel.size() - 1 - i] = travel[i];
  }
  *out = s;
  return SrhStatus::kOk;
}

SrhStatus EncodeSrh(const Srh& s, std::span<uint8_t> out, size_t* written) {
  if (s.num_segments == 0 || s.num_segments > kMaxSrhSegments ||
      s.last_entry != s.num_segments - 1 ||
      s.segments_left > s.last_entry + 1) {
    return SrhStatus::kInvalid;
  }
  if (s.hmac.present && (s.hmac.len % 8 != 0 || s.hmac.len > kMaxHmacBytes)) {
    return SrhStatus::kInvalid;
  }
  if (s.other.present &&
      (s.other.len > kMaxOtherTlvBytes || s.other.type == kTlvPad1 ||
       s.other.type == kTlvPadN || s.other.type == kTlvHmac)) {
    return SrhStatus::kInvalid;
  }
  const size_t total = s.encoded_size();
  if (out.size() < total) return SrhStatus::kBufferTooSmall;
  uint8_t* p = out.data();
  std::memset(p, 0, total);
  p[0] = s.next_header;
  p[1] = static_cast<uint8_t>((total - 8) / 8);
  p[2] = kSrhRoutingType;
  p[3] = s.segments_left;
  p[4] = s.last_entry;
  p[5] = s.flags;
  p[6] = static_cast<uint8_t>(s.tag >> 8);
  p[7] = static_cast<uint8_t>(s.tag);
  size_t off = 8;
  for (int i = 0; i < s.num_segments; ++i) {
    std::memcpy(p + off, s.segments[i].bytes.data(), 16);
    off += 16;
  }
  if (s.hmac.present) {
    p[off] = kTlvHmac;
    p[off + 1] = static_cast<uint8_t>(6 + s.hmac.len);
    p[off + 2] = s.hmac.d_flag ? 0x80 : 0;
    p[off + 3] = 0;
    p[off + 4] = static_cast<uint8_t>(s.hmac.key_id >> 24);
    p[off + 5] = static_cast<uint8_t>(s.hmac.key_id >> 16);
    p[off + 6] = static_cast<uint8_t>(s.hmac.key_id >> 8);
    p[off + 7] = static_cast<uint8_t>(s.hmac.key_id);
    std::memcpy(p + off + 8, s.hmac.hmac.data(), s.hmac.len);
    off += 8 + s.hmac.len;
  }
  if (s.other.present) {
    p[off] = s.other.type;
    p[off + 1] = s.other.len;
    std::memcpy(p + off + 2, s.other.value.data(), s.other.len);
    off += 2 + s.other.len;
  }
  const size_t pad = total - off;
  if (pad == 1) {
    p[off] = kTlvPad1;
  } else if (pad >= 2) {
    p[off] = kTlvPadN;
    p[off + 1] = static_cast<uint8_t>(pad - 2);  // value bytes already zero
  }
  *written = total;
  return SrhStatus::kOk;
}

SrhStatus DecodeSrh(std::span<const uint8_t> in, Srh* out, size_t* consumed) {
  if (in.size() < 8) return SrhStatus::kTruncated;
  const uint8_t* p = in.data();
  const size_t total = 8 * (size_t{p[1]} + 1);
  if (in.size() < total) return SrhStatus::kTruncated;
  if (p[2] != kSrhRoutingType) return SrhStatus::kWrongType;
  const size_t n = size_t{p[4]} + 1;
  if (8 + 16 * n > total) return SrhStatus::kBadLength;
  if (p[3] > n) return SrhStatus::kBadSegmentsLeft;
  if (n > kMaxSrhSegments) return SrhStatus::kTooManySegments;
  Srh s;
  s.next_header = p[0];
  s.segments_left = p[3];
  s.last_entry = p[4];
  s.flags = p[5];
  s.tag = static_cast<uint16_t>((p[6] << 8) | p[7]);
  s.num_segments = static_cast<uint8_t>(n);
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(s.segments[i].bytes.data(), p + 8 + 16 * i, 16);
  }
  size_t off = 8 + 16 * n;
  while (off < total) {
    const uint8_t type = p[off];
    if (type == kTlvPad1) {
      ++s.padding_bytes;
      ++off;
      continue;
    }
    if (off + 2 > total) return SrhStatus::kBadTlv;
    const size_t len = p[off + 1];
    if (off + 2 + len > total) return SrhStatus::kBadTlv;
    const uint8_t* v = p + off + 2;
    if (type == kTlvPadN) {
      if (len > 5) return SrhStatus::kBadPadding;
      s.padding_bytes = static_cast<uint16_t>(s.padding_bytes + 2 + len);
    } else if (type == kTlvHmac) {
      if (s.hmac.present || len < 6 || (len - 6) % 8 != 0 ||
          len - 6 > kMaxHmacBytes) {
        return SrhStatus::kBadHmac;
      }
      s.hmac.present = true;
      s.hmac.d_flag = (v[0] & 0x80) != 0;
      s.hmac.key_id = (uint32_t{v[2]} << 24) | (uint32_t{v[3]} << 16) |
                      (uint32_t{v[4]} << 8) | v[5];
      s.hmac.len = static_cast<uint8_t>(len - 6);
      std::memcpy(s.hmac.hmac.data(), v + 6, len - 6);
    } else if (!s.other.present) {
      if (len > kMaxOtherTlvBytes) return SrhStatus::kTooManyTlvBytes;
      s.other.present = true;
      s.other.type = type;
      s.other.len = static_cast<uint8_t>(len);
      std::memcpy(s.other.value.data(), v, len);
    } else if (s.skipped_tlvs < 255) {
      ++s.skipped_tlvs;
    }
    off += 2 + len;
  }
  *out = s;
  *consumed = total;
  return SrhStatus::kOk;
}

bool SrhAdvance(Srh* srh, Ipv6Address* dst) {
  if (srh->segments_left == 0 || srh->segments_left > srh->num_segments) {
    return false;
  }
  --srh->segments_left;
  *dst = srh->segments[srh->segments_left];
  return true;
}

// ----------------------------------------------------- entropy-only mode

EntropyFields EntropyToFields(uint32_t ev) {
  EntropyFields f;
  f.udp_src_port = static_cast<uint16_t>(ev >> 16);
  f.flow_label = kFlowLabelMarker | (ev & 0xFFFF);
  return f;
}

uint32_t FieldsToEntropy(const EntropyFields& f) {
  return (uint32_t{f.udp_src_port} << 16) | (f.flow_label & 0xFFFF);
}

// ------------------------------------------------------- IPv6 + UDP

bool EncodeIpv6Header(const Ipv6Header& h, std::span<uint8_t> out) {
  if (out.size() < kIpv6HeaderBytes || h.flow_label > 0xFFFFF) return false;
  uint8_t* p = out.data();
  const uint32_t w0 =
      (6u << 28) | (uint32_t{h.traffic_class} << 20) | h.flow_label;
  p[0] = static_cast<uint8_t>(w0 >> 24);
  p[1] = static_cast<uint8_t>(w0 >> 16);
  p[2] = static_cast<uint8_t>(w0 >> 8);
  p[3] = static_cast<uint8_t>(w0);
  p[4] = static_cast<uint8_t>(h.payload_length >> 8);
  p[5] = static_cast<uint8_t>(h.payload_length);
  p[6] = h.next_header;
  p[7] = h.hop_limit;
  std::memcpy(p + 8, h.src.bytes.data(), 16);
  std::memcpy(p + 24, h.dst.bytes.data(), 16);
  return true;
}

bool DecodeIpv6Header(std::span<const uint8_t> in, Ipv6Header* out) {
  if (in.size() < kIpv6HeaderBytes) return false;
  const uint8_t* p = in.data();
  const uint32_t w0 = (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
                      (uint32_t{p[2]} << 8) | p[3];
  if ((w0 >> 28) != 6) return false;
  Ipv6Header h;
  h.traffic_class = static_cast<uint8_t>(w0 >> 20);
  h.flow_label = w0 & 0xFFFFF;
  h.payload_length = static_cast<uint16_t>((p[4] << 8) | p[5]);
  h.next_header = p[6];
  h.hop_limit = p[7];
  std::memcpy(h.src.bytes.data(), p + 8, 16);
  std::memcpy(h.dst.bytes.data(), p + 24, 16);
  *out = h;
  return true;
}

namespace {

uint32_t SumWords(uint32_t sum, const uint8_t* b, size_t n) {
  for (size_t i = 0; i + 1 < n; i += 2) {
    sum += (uint32_t{b[i]} << 8) | b[i + 1];
    if (sum & 0x80000000u) sum = (sum & 0xFFFF) + (sum >> 16);
  }
  if (n & 1) sum += uint32_t{b[n - 1]} << 8;
  return sum;
}

uint16_t Fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(sum);
}

uint32_t PseudoSum(const Ipv6Address& src, const Ipv6Address& dst, size_t len) {
  uint32_t sum = 0;
  sum = SumWords(sum, src.bytes.data(), 16);
  sum = SumWords(sum, dst.bytes.data(), 16);
  sum += static_cast<uint32_t>(len >> 16) & 0xFFFF;
  sum += static_cast<uint32_t>(len) & 0xFFFF;
  sum += kIpProtoUdp;
  return sum;
}

}  // namespace

uint16_t ChecksumUdp6(const Ipv6Address& src, const Ipv6Address& final_dst,
                      std::span<const uint8_t> udp) {
  uint32_t sum = PseudoSum(src, final_dst, udp.size());
  if (udp.size() >= 8) {
    sum = SumWords(sum, udp.data(), 6);  // ports + length
    sum = SumWords(sum, udp.data() + 8, udp.size() - 8);
  } else {
    sum = SumWords(sum, udp.data(), udp.size());
  }
  uint16_t c = static_cast<uint16_t>(~Fold(sum));
  return c == 0 ? 0xFFFF : c;
}

bool VerifyUdp6(const Ipv6Address& src, const Ipv6Address& final_dst,
                std::span<const uint8_t> udp) {
  if (udp.size() < 8) return false;
  if (udp[6] == 0 && udp[7] == 0) return false;  // zero = none: not for IPv6
  uint32_t sum = PseudoSum(src, final_dst, udp.size());
  sum = SumWords(sum, udp.data(), udp.size());
  return Fold(sum) == 0xFFFF;
}

PacketStatus EncodeUdp6Packet(const Udp6Packet& pk, std::span<uint8_t> out,
                              size_t* written) {
  size_t srh_len = 0;
  if (pk.srh != nullptr) {
    if (pk.srh->next_header != kIpProtoUdp) return PacketStatus::kBadSrh;
    srh_len = pk.srh->encoded_size();
  }
  const size_t udp_len = kUdpHeaderBytes + pk.payload.size();
  const size_t plen = srh_len + udp_len;
  if (plen > 0xFFFF) return PacketStatus::kTooLong;
  const size_t total = kIpv6HeaderBytes + plen;
  if (out.size() < total) return PacketStatus::kBufferTooSmall;
  Ipv6Header ip = pk.ip;
  ip.payload_length = static_cast<uint16_t>(plen);
  ip.next_header = pk.srh != nullptr ? kIpProtoRouting : kIpProtoUdp;
  if (!EncodeIpv6Header(ip, out)) return PacketStatus::kBufferTooSmall;
  if (pk.srh != nullptr) {
    size_t w = 0;
    if (EncodeSrh(*pk.srh, out.subspan(kIpv6HeaderBytes, srh_len), &w) !=
        SrhStatus::kOk) {
      return PacketStatus::kBadSrh;
    }
  }
  uint8_t* u = out.data() + kIpv6HeaderBytes + srh_len;
  u[0] = static_cast<uint8_t>(pk.src_port >> 8);
  u[1] = static_cast<uint8_t>(pk.src_port);
  u[2] = static_cast<uint8_t>(pk.dst_port >> 8);
  u[3] = static_cast<uint8_t>(pk.dst_port);
  u[4] = static_cast<uint8_t>(udp_len >> 8);
  u[5] = static_cast<uint8_t>(udp_len);
  u[6] = 0;
  u[7] = 0;
  if (!pk.payload.empty()) {
    std::memcpy(u + 8, pk.payload.data(), pk.payload.size());
  }
  const uint16_t c =
      ChecksumUdp6(ip.src, pk.final_dst, std::span<const uint8_t>(u, udp_len));
  u[6] = static_cast<uint8_t>(c >> 8);
  u[7] = static_cast<uint8_t>(c);
  *written = total;
  return PacketStatus::kOk;
}

}  // namespace prism::routing
