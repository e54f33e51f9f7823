// fuzz-libs: prism_wire
// Fuzzes prism::wire::Decode with arbitrary bytes. Properties checked:
// - Decode never reads outside the input (ASan) and never crashes.
// - Whatever decodes re-encodes to exactly the same header bytes (the format
//   has one encoding per value: reserved bits must be zero), and re-decoding
//   the re-encoded packet gives the same fields, payload length and trim state.
// - DecodeSplit on the same bytes split at the header agrees with Decode.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "transport/wire/packet.h"

namespace {

using namespace prism::wire;

void Fail(const char* what) {
  std::fprintf(stderr, "wire_decode_fuzz: %s\n", what);
  std::abort();
}

size_t Reencode(const Packet& p, uint8_t* out, size_t cap) {
  switch (p.type) {
    case PacketType::kData:
      return EncodeData(p.data, out, cap);
    case PacketType::kSack:
      return EncodeSack(p.sack, out, cap);
    case PacketType::kNack:
      return EncodeNack(p.nack, out, cap);
    case PacketType::kProbe:
    case PacketType::kProbeAck:
      return EncodeProbe(p.probe, p.type == PacketType::kProbeAck, out, cap);
    case PacketType::kConnect:
    case PacketType::kConnectAck:
      return EncodeConnect(p.connect, p.type == PacketType::kConnectAck, out,
                           cap);
    case PacketType::kPlaneStatus:
      return EncodePlaneStatus(p.plane, out, cap);
  }
  return 0;
}

bool SameFields(const Packet& a, const Packet& b) {
  if (a.type != b.type || a.trimmed != b.trimmed ||
      a.payload_len != b.payload_len) {
    return false;
  }
  switch (a.type) {
    case PacketType::kData:
      return a.data == b.data;
    case PacketType::kSack:
      return a.sack == b.sack;
    case PacketType::kNack:
      return a.nack == b.nack;
    case PacketType::kProbe:
    case PacketType::kProbeAck:
      return a.probe == b.probe;
    case PacketType::kConnect:
    case PacketType::kConnectAck:
      return a.connect == b.connect;
    case PacketType::kPlaneStatus:
      return a.plane == b.plane;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Packet p;
  const DecodeError e = Decode(data, size, &p);
  if (DecodeErrorName(e) == nullptr) Fail("no error name");
  if (e != DecodeError::kOk) return 0;

  const size_t hdr = HeaderSize(p.type);
  if (hdr == 0 || hdr > size) Fail("header size");
  if (p.type == PacketType::kData) {
    if (p.payload_len != 0 &&
        (p.payload != data + hdr || hdr + p.payload_len != size)) {
      Fail("payload not where it belongs");
    }
    if (p.payload_len == 0 && (p.payload != nullptr || size != hdr)) {
      Fail("empty payload");
    }
    if (p.trimmed != (p.payload_len == 0 && p.data.payload_len > 0)) {
      Fail("trimmed state");
    }
  } else if (size != hdr || p.payload != nullptr || p.trimmed) {
    Fail("control packet with payload");
  }

  // Re-encode: header bytes must be identical; payload (if any) copied.
  static uint8_t buf[kMaxHeaderSize + 65536];
  const size_t n = Reencode(p, buf, sizeof(buf));
  if (n != hdr) Fail("re-encode length");
  if (std::memcmp(buf, data, hdr) != 0) Fail("re-encoded header differs");
  if (p.payload_len) std::memcpy(buf + hdr, p.payload, p.payload_len);
  Packet q;
  if (Decode(buf, hdr + p.payload_len, &q) != DecodeError::kOk) {
    Fail("re-encoded packet does not decode");
  }
  if (!SameFields(p, q)) Fail("round trip changed fields");

  Packet s;
  if (DecodeSplit(data, hdr, p.payload_len ? data + hdr : nullptr, size - hdr,
                  &s) != DecodeError::kOk ||
      !SameFields(p, s) || s.payload != p.payload) {
    Fail("DecodeSplit disagrees");
  }
  return 0;
}
