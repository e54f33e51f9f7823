// Test helpers for the wire format: random valid headers of every type
// (seeded prism::Rng) and a helper that re-seals a header checksum after a
// test mutates bytes on purpose.
#ifndef PRISM_TESTS_WIRE_WIRE_TEST_UTIL_H_
#define PRISM_TESTS_WIRE_WIRE_TEST_UTIL_H_

#include <cstdint>
#include <vector>

#include "transport/base/random.h"
#include "transport/wire/packet.h"

namespace prism::wire::testing {

// A value biased towards the edges (0, 1, max) a quarter of the time.
inline uint64_t EdgyBits(Rng& rng, int bits) {
  const uint64_t max = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  switch (rng.Uniform(8)) {
    case 0:
      return 0;
    case 1:
      return max;
    case 2:
      return rng.Uniform(2);
    default:
      return rng.Next() & max;
  }
}

// A random DATA header that Decode() accepts. payload_len may be 0 only for
// a zero-length message.
inline DataHeader RandomData(Rng& rng) {
  DataHeader h;
  h.dst_conn = static_cast<uint32_t>(EdgyBits(rng, 32));
  h.psn = static_cast<uint32_t>(EdgyBits(rng, 32));
  h.msn = static_cast<uint32_t>(EdgyBits(rng, 32));
  const int shape = static_cast<int>(rng.Uniform(10));
  if (shape == 0) {
    h.msg_len = 0;  // zero-length message (e.g. WRITE with immediate only)
  } else if (shape == 1) {
    h.msg_len = 0xFFFFFFFFu;
  } else {
    h.msg_len = static_cast<uint32_t>(1 + rng.Uniform(1u << 24));
  }
  if (h.msg_len > 0) {
    const uint32_t max_pl = h.msg_len < 0xFFFF ? h.msg_len : 0xFFFF;
    h.payload_len = static_cast<uint16_t>(
        rng.Bernoulli(0.2) ? max_pl : 1 + rng.Uniform(max_pl));
    const uint32_t room = h.msg_len - h.payload_len;
    const int where = static_cast<int>(rng.Uniform(4));
    h.msg_offset = where == 0 ? 0
                   : where == 1
                       ? room
                       : static_cast<uint32_t>(rng.Uniform(uint64_t{room} + 1));
  }
  h.remote_addr = EdgyBits(rng, 64);
  h.rkey = static_cast<uint32_t>(EdgyBits(rng, 32));
  h.path_id = static_cast<uint16_t>(EdgyBits(rng, 16));
  h.send_ts = EdgyBits(rng, 64);
  uint16_t flags = static_cast<uint16_t>(
      rng.Next() & (kFlagRetransmit | kFlagHasImmediate | kFlagPayloadCrc));
  if (h.msg_offset == 0 && rng.Bernoulli(0.7)) flags |= kFlagFirstOfMessage;
  if (uint64_t{h.msg_offset} + h.payload_len == h.msg_len &&
      rng.Bernoulli(0.7)) {
    flags |= kFlagLastOfMessage;
  }
  h.flags = flags;
  h.immediate = static_cast<uint32_t>(EdgyBits(rng, 32));
  h.payload_crc = static_cast<uint32_t>(EdgyBits(rng, 32));
  return h;
}

inline SackHeader RandomSack(Rng& rng) {
  SackHeader h;
  h.dst_conn = static_cast<uint32_t>(EdgyBits(rng, 32));
  h.cum_psn = static_cast<uint32_t>(EdgyBits(rng, 32));
  h.bitmap_base = static_cast<uint32_t>(EdgyBits(rng, 32));
  for (auto& w : h.bitmap) w = EdgyBits(rng, 64);
  h.trigger_psn = static_cast<uint32_t>(EdgyBits(rng, 32));
  h.echo_path = static_cast<uint16_t>(EdgyBits(rng, 16));
  h.ecn_seen = static_cast<uint8_t>(rng.Uniform(2));
  h.echo_ts = EdgyBits(rng, 64);
  h.bytes_received = EdgyBits(rng, 64);
  h.ooo_count = static_cast<uint32_t>(EdgyBits(rng, 32));
  h.rx_window_penalty = static_cast<uint16_t>(EdgyBits(rng, 16));
  h.coalesced = static_cast<uint16_t>(EdgyBits(rng, 16));
  return h;
}

inline NackHeader RandomNack(Rng& rng) {
  NackHeader h;
  h.dst_conn = static_cast<uint32_t>(EdgyBits(rng, 32));
  h.psn = static_cast<uint32_t>(EdgyBits(rng, 32));
  h.cum_psn = static_cast<uint32_t>(EdgyBits(rng, 32));
  h.reason = static_cast<NackReason>(1 + rng.Uniform(6));
  h.ecn_seen = static_cast<uint8_t>(rng.Uniform(2));
  h.echo_path = static_cast<uint16_t>(EdgyBits(rng, 16));
  h.echo_ts = EdgyBits(rng, 64);
  return h;
}

inline ProbeHeader RandomProbe(Rng& rng) {
  ProbeHeader h;
  h.dst_conn = static_cast<uint32_t>(EdgyBits(rng, 32));
  h.path_id = static_cast<uint16_t>(EdgyBits(rng, 16));
  h.probe_seq = static_cast<uint32_t>(EdgyBits(rng, 32));
  h.send_ts = EdgyBits(rng, 64);
  return h;
}

inline ConnectHeader RandomConnect(Rng& rng) {
  ConnectHeader h;
  h.dst_conn = static_cast<uint32_t>(EdgyBits(rng, 32));
  h.src_conn = static_cast<uint32_t>(1 + rng.Uniform(0xFFFFFFFFu));
  h.num_paths = static_cast<uint16_t>(1 + rng.Uniform(0xFFFF));
  h.num_planes = static_cast<uint16_t>(1 + rng.Uniform(32));
  h.mtu_payload = static_cast<uint32_t>(1 + rng.Uniform(0xFFFF));
  h.flags = static_cast<uint32_t>(rng.Uniform(2));
  h.nonce = EdgyBits(rng, 64);
  return h;
}

inline PlaneStatusHeader RandomPlane(Rng& rng) {
  PlaneStatusHeader h;
  h.dst_conn = static_cast<uint32_t>(EdgyBits(rng, 32));
  h.planes_down = static_cast<uint32_t>(EdgyBits(rng, 32));
  h.seq = static_cast<uint32_t>(EdgyBits(rng, 32));
  return h;
}

inline constexpr PacketType kAllTypes[] = {
    PacketType::kData,       PacketType::kSack,       PacketType::kNack,
    PacketType::kProbe,      PacketType::kProbeAck,   PacketType::kConnect,
    PacketType::kConnectAck, PacketType::kPlaneStatus};

// Encodes a random valid header of `type` into `out` (resized to the header
// length). DATA gets no payload appended.
inline void EncodeRandom(Rng& rng, PacketType type, std::vector<uint8_t>* out) {
  out->assign(kMaxHeaderSize, 0);
  size_t n = 0;
  switch (type) {
    case PacketType::kData:
      n = EncodeData(RandomData(rng), out->data(), out->size());
      break;
    case PacketType::kSack:
      n = EncodeSack(RandomSack(rng), out->data(), out->size());
      break;
    case PacketType::kNack:
      n = EncodeNack(RandomNack(rng), out->data(), out->size());
      break;
    case PacketType::kProbe:
    case PacketType::kProbeAck:
      n = EncodeProbe(RandomProbe(rng), type == PacketType::kProbeAck,
                      out->data(), out->size());
      break;
    case PacketType::kConnect:
    case PacketType::kConnectAck:
      n = EncodeConnect(RandomConnect(rng), type == PacketType::kConnectAck,
                        out->data(), out->size());
      break;
    case PacketType::kPlaneStatus:
      n = EncodePlaneStatus(RandomPlane(rng), out->data(), out->size());
      break;
  }
  out->resize(n);
}

// Recomputes the header checksum of the header at `p` (of length hdr_len),
// so tests can build packets that pass the checksum but break a field rule.
inline void Reseal(uint8_t* p, size_t hdr_len) {
  for (size_t i = 0; i < 4; ++i) p[kHeaderCrcOffset + i] = 0;
  const uint32_t c = Crc32c(p, hdr_len);
  for (size_t i = 0; i < 4; ++i) {
    p[kHeaderCrcOffset + i] = static_cast<uint8_t>(c >> (8 * i));
  }
}

}  // namespace prism::wire::testing

#endif  // PRISM_TESTS_WIRE_WIRE_TEST_UTIL_H_
