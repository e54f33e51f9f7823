// Wire format tests: round trips over random headers of every type, the byte
// layout pinned field by field, and every class of malformed input.
#include "transport/wire/packet.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/wire/wire_test_util.h"
#include "transport/base/random.h"
#include "transport/wire/packet_inline.h"

namespace prism::wire {
namespace {

using testing::EncodeRandom;
using testing::kAllTypes;
using testing::Reseal;

constexpr int kRoundTrips = 3000;

uint32_t Le32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 |
         uint32_t{p[3]} << 24;
}
uint64_t Le64(const uint8_t* p) {
  return uint64_t{Le32(p)} | uint64_t{Le32(p + 4)} << 32;
}
uint16_t Le16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | p[1] << 8);
}
void SetLe16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void SetLe32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

TEST(WireLayout, HeaderSizes) {
  EXPECT_EQ(HeaderSize(PacketType::kData), kDataHeaderSize);
  EXPECT_EQ(HeaderSize(PacketType::kSack), kSackHeaderSize);
  EXPECT_EQ(HeaderSize(PacketType::kNack), kNackHeaderSize);
  EXPECT_EQ(HeaderSize(PacketType::kProbe), kProbeHeaderSize);
  EXPECT_EQ(HeaderSize(PacketType::kProbeAck), kProbeHeaderSize);
  EXPECT_EQ(HeaderSize(PacketType::kConnect), kConnectHeaderSize);
  EXPECT_EQ(HeaderSize(PacketType::kConnectAck), kConnectHeaderSize);
  EXPECT_EQ(HeaderSize(PacketType::kPlaneStatus), kPlaneStatusHeaderSize);
  EXPECT_EQ(kDataHeaderSize, 64u);
  EXPECT_EQ(kDataHeaderSize % 8, 0u);
  EXPECT_NE(kDefaultUdpPort, 4791);  // RoCEv2
}

// Pins every DATA field to its documented offset (docs/wire-format.md).
TEST(WireLayout, DataFieldsAtDocumentedOffsets) {
  DataHeader h;
  h.dst_conn = 0x11223344;
  h.psn = 0x55667788;
  h.msn = 0x99AABBCC;
  h.msg_offset = 0x00001000;
  h.msg_len = 0x00100000;
  h.rkey = 0xDEADBEEF;
  h.remote_addr = 0x0102030405060708ull;
  h.send_ts = 0x1112131415161718ull;
  h.payload_len = 0x1000;
  h.path_id = 0xABCD;
  h.flags = kFlagRetransmit | kFlagHasImmediate | kFlagPayloadCrc;
  h.immediate = 0xCAFEF00D;
  h.payload_crc = 0x0BADC0DE;
  uint8_t b[kDataHeaderSize];
  ASSERT_EQ(EncodeData(h, b, sizeof(b)), kDataHeaderSize);
  EXPECT_EQ(b[0], 0x52);  // magic 0x5052, little-endian
  EXPECT_EQ(b[1], 0x50);
  EXPECT_EQ(b[2], kVersion);
  EXPECT_EQ(b[3], 1);  // type DATA
  EXPECT_EQ(Le32(b + 8), h.dst_conn);
  EXPECT_EQ(Le32(b + 12), h.psn);
  EXPECT_EQ(Le32(b + 16), h.msn);
  EXPECT_EQ(Le32(b + 20), h.msg_offset);
  EXPECT_EQ(Le32(b + 24), h.msg_len);
  EXPECT_EQ(Le32(b + 28), h.rkey);
  EXPECT_EQ(Le64(b + 32), h.remote_addr);
  EXPECT_EQ(Le64(b + 40), h.send_ts);
  EXPECT_EQ(Le16(b + 48), h.payload_len);
  EXPECT_EQ(Le16(b + 50), h.path_id);
  EXPECT_EQ(Le16(b + 52), h.flags);
  EXPECT_EQ(Le16(b + 54), 0);  // payload_len_hi: 0 below 64 KiB
  EXPECT_EQ(Le32(b + 56), h.immediate);
  EXPECT_EQ(Le32(b + 60), h.payload_crc);
  // Header checksum: CRC32C of the header with the checksum field zeroed.
  const uint32_t stored = Le32(b + 4);
  SetLe32(b + 4, 0);
  EXPECT_EQ(stored, Crc32c(b, kDataHeaderSize));
}

TEST(WireLayout, ControlFieldsAtDocumentedOffsets) {
  uint8_t b[kMaxHeaderSize];
  SackHeader s;
  s.dst_conn = 7;
  s.cum_psn = 0xA0A0A0A0;
  s.echo_ts = 0x0102030405060708ull;
  s.bytes_received = 0x1112131415161718ull;
  s.bitmap[0] = 0x2122232425262728ull;
  s.bitmap[3] = 0x3132333435363738ull;
  s.bitmap_base = 0xB0B0B0B0;
  s.trigger_psn = 0xC0C0C0C0;
  s.ooo_count = 0xD0D0D0D0;
  s.echo_path = 0xE0E1;
  s.rx_window_penalty = 0xF0F1;
  s.coalesced = 0x0A0B;
  s.ecn_seen = 1;
  ASSERT_EQ(EncodeSack(s, b, sizeof(b)), kSackHeaderSize);
  EXPECT_EQ(b[3], 2);
  EXPECT_EQ(Le32(b + 12), s.cum_psn);
  EXPECT_EQ(Le64(b + 16), s.echo_ts);
  EXPECT_EQ(Le64(b + 24), s.bytes_received);
  EXPECT_EQ(Le64(b + 32), s.bitmap[0]);
  EXPECT_EQ(Le64(b + 56), s.bitmap[3]);
  EXPECT_EQ(Le32(b + 64), s.bitmap_base);
  EXPECT_EQ(Le32(b + 68), s.trigger_psn);
  EXPECT_EQ(Le32(b + 72), s.ooo_count);
  EXPECT_EQ(Le16(b + 76), s.echo_path);
  EXPECT_EQ(Le16(b + 78), s.rx_window_penalty);
  EXPECT_EQ(Le16(b + 80), s.coalesced);
  EXPECT_EQ(b[82], 1);
  EXPECT_EQ(b[83], 0);

  NackHeader n;
  n.psn = 0x01020304;
  n.cum_psn = 0x05060708;
  n.reason = NackReason::kBadRange;
  n.ecn_seen = 1;
  n.echo_path = 0x1234;
  n.echo_ts = 0x8877665544332211ull;
  ASSERT_EQ(EncodeNack(n, b, sizeof(b)), kNackHeaderSize);
  EXPECT_EQ(b[3], 3);
  EXPECT_EQ(Le32(b + 12), n.psn);
  EXPECT_EQ(Le32(b + 16), n.cum_psn);
  EXPECT_EQ(b[20], 5);
  EXPECT_EQ(b[21], 1);
  EXPECT_EQ(Le16(b + 22), n.echo_path);
  EXPECT_EQ(Le64(b + 24), n.echo_ts);

  ProbeHeader p;
  p.probe_seq = 0x0A0B0C0D;
  p.send_ts = 0x0102030405060708ull;
  p.path_id = 0x4321;
  ASSERT_EQ(EncodeProbe(p, true, b, sizeof(b)), kProbeHeaderSize);
  EXPECT_EQ(b[3], 5);
  EXPECT_EQ(Le32(b + 12), p.probe_seq);
  EXPECT_EQ(Le64(b + 16), p.send_ts);
  EXPECT_EQ(Le16(b + 24), p.path_id);
  EXPECT_EQ(Le16(b + 26), 0);

  ConnectHeader c;
  c.src_conn = 0x01020304;
  c.nonce = 0x1122334455667788ull;
  c.mtu_payload = 4096;
  c.flags = kConnectPayloadCrc;
  c.num_paths = 256;
  c.num_planes = 4;
  ASSERT_EQ(EncodeConnect(c, false, b, sizeof(b)), kConnectHeaderSize);
  EXPECT_EQ(b[3], 6);
  EXPECT_EQ(Le32(b + 12), c.src_conn);
  EXPECT_EQ(Le64(b + 16), c.nonce);
  EXPECT_EQ(Le32(b + 24), c.mtu_payload);
  EXPECT_EQ(Le32(b + 28), c.flags);
  EXPECT_EQ(Le16(b + 32), c.num_paths);
  EXPECT_EQ(Le16(b + 34), c.num_planes);

  PlaneStatusHeader l;
  l.planes_down = 0x5;
  l.seq = 0x77;
  ASSERT_EQ(EncodePlaneStatus(l, b, sizeof(b)), kPlaneStatusHeaderSize);
  EXPECT_EQ(b[3], 8);
  EXPECT_EQ(Le32(b + 12), l.planes_down);
  EXPECT_EQ(Le32(b + 16), l.seq);
}

// ---------------------------------------------------------------- round trips

TEST(WireRoundTrip, DataWithPayload) {
  Rng rng(1);
  std::vector<uint8_t> buf;
  for (int i = 0; i < kRoundTrips; ++i) {
    DataHeader h = testing::RandomData(rng);
    // Keep the buffers small: cap the payload at 2 KiB for this sweep.
    if (h.payload_len > 2048) {
      h.payload_len = static_cast<uint16_t>(1 + rng.Uniform(2048));
      h.flags &= ~kFlagLastOfMessage;
      if (uint64_t{h.msg_offset} + h.payload_len == h.msg_len) {
        h.flags |= kFlagLastOfMessage;
      }
    }
    buf.assign(kDataHeaderSize + h.payload_len, 0);
    ASSERT_EQ(EncodeData(h, buf.data(), buf.size()), kDataHeaderSize);
    for (size_t j = kDataHeaderSize; j < buf.size(); ++j) {
      buf[j] = static_cast<uint8_t>(rng.Next());
    }
    Packet p;
    ASSERT_EQ(Decode(buf.data(), buf.size(), &p), DecodeError::kOk)
        << "iteration " << i;
    EXPECT_EQ(p.type, PacketType::kData);
    EXPECT_EQ(p.data, h);
    EXPECT_EQ(p.payload_len, h.payload_len);
    EXPECT_FALSE(p.trimmed);
    if (h.payload_len > 0) {
      EXPECT_EQ(p.payload, buf.data() + kDataHeaderSize);
    } else {
      EXPECT_EQ(p.payload, nullptr);
    }
  }
}

TEST(WireRoundTrip, DataTrimmedByTruncation) {
  Rng rng(2);
  uint8_t b[kDataHeaderSize];
  int trimmed = 0;
  for (int i = 0; i < kRoundTrips; ++i) {
    const DataHeader h = testing::RandomData(rng);
    ASSERT_EQ(EncodeData(h, b, sizeof(b)), kDataHeaderSize);
    Packet p;
    ASSERT_EQ(Decode(b, sizeof(b), &p), DecodeError::kOk);
    EXPECT_EQ(p.data, h);
    EXPECT_EQ(p.payload, nullptr);
    EXPECT_EQ(p.payload_len, 0u);
    EXPECT_EQ(p.trimmed, h.payload_len > 0);
    trimmed += p.trimmed;
  }
  EXPECT_GT(trimmed, kRoundTrips / 2);
}

TEST(WireRoundTrip, ControlTypes) {
  Rng rng(3);
  uint8_t b[kMaxHeaderSize];
  Packet p;
  for (int i = 0; i < kRoundTrips; ++i) {
    const SackHeader s = testing::RandomSack(rng);
    ASSERT_EQ(EncodeSack(s, b, sizeof(b)), kSackHeaderSize);
    ASSERT_EQ(Decode(b, kSackHeaderSize, &p), DecodeError::kOk);
    EXPECT_EQ(p.type, PacketType::kSack);
    EXPECT_EQ(p.sack, s);

    const NackHeader n = testing::RandomNack(rng);
    ASSERT_EQ(EncodeNack(n, b, sizeof(b)), kNackHeaderSize);
    ASSERT_EQ(Decode(b, kNackHeaderSize, &p), DecodeError::kOk);
    EXPECT_EQ(p.type, PacketType::kNack);
    EXPECT_EQ(p.nack, n);

    const bool ack = rng.Bernoulli(0.5);
    const ProbeHeader pr = testing::RandomProbe(rng);
    ASSERT_EQ(EncodeProbe(pr, ack, b, sizeof(b)), kProbeHeaderSize);
    ASSERT_EQ(Decode(b, kProbeHeaderSize, &p), DecodeError::kOk);
    EXPECT_EQ(p.type, ack ? PacketType::kProbeAck : PacketType::kProbe);
    EXPECT_EQ(p.probe, pr);

    const ConnectHeader c = testing::RandomConnect(rng);
    ASSERT_EQ(EncodeConnect(c, ack, b, sizeof(b)), kConnectHeaderSize);
    ASSERT_EQ(Decode(b, kConnectHeaderSize, &p), DecodeError::kOk);
    EXPECT_EQ(p.type, ack ? PacketType::kConnectAck : PacketType::kConnect);
    EXPECT_EQ(p.connect, c);

    const PlaneStatusHeader l = testing::RandomPlane(rng);
    ASSERT_EQ(EncodePlaneStatus(l, b, sizeof(b)), kPlaneStatusHeaderSize);
    ASSERT_EQ(Decode(b, kPlaneStatusHeaderSize, &p), DecodeError::kOk);
    EXPECT_EQ(p.type, PacketType::kPlaneStatus);
    EXPECT_EQ(p.plane, l);
    EXPECT_EQ(p.payload, nullptr);
    EXPECT_FALSE(p.trimmed);
  }
}

TEST(WireRoundTrip, NackEveryReason) {
  uint8_t b[kNackHeaderSize];
  for (uint8_t r = 1; r <= 6; ++r) {
    NackHeader n;
    n.reason = static_cast<NackReason>(r);
    ASSERT_EQ(EncodeNack(n, b, sizeof(b)), kNackHeaderSize);
    Packet p;
    ASSERT_EQ(Decode(b, sizeof(b), &p), DecodeError::kOk);
    EXPECT_EQ(p.nack.reason, n.reason);
  }
}

TEST(WireRoundTrip, ZeroLengthMessage) {
  DataHeader h;
  h.dst_conn = 3;
  h.flags = kFlagFirstOfMessage | kFlagLastOfMessage | kFlagHasImmediate;
  h.immediate = 42;
  uint8_t b[kDataHeaderSize];
  ASSERT_EQ(EncodeData(h, b, sizeof(b)), kDataHeaderSize);
  Packet p;
  ASSERT_EQ(Decode(b, sizeof(b), &p), DecodeError::kOk);
  EXPECT_EQ(p.data, h);
  EXPECT_FALSE(p.trimmed);
  EXPECT_EQ(p.payload, nullptr);
}

TEST(WireRoundTrip, DecodedPacketIsReusable) {
  // A Packet reused across decodes must not keep a stale payload/trim state.
  uint8_t b[kDataHeaderSize + 8] = {};
  DataHeader h;
  h.payload_len = 8;
  h.msg_len = 8;
  ASSERT_EQ(EncodeData(h, b, sizeof(b)), kDataHeaderSize);
  Packet p;
  ASSERT_EQ(Decode(b, kDataHeaderSize, &p), DecodeError::kOk);
  EXPECT_TRUE(p.trimmed);
  ASSERT_EQ(Decode(b, sizeof(b), &p), DecodeError::kOk);
  EXPECT_FALSE(p.trimmed);
  EXPECT_EQ(p.payload_len, 8u);
  uint8_t s[kSackHeaderSize];
  ASSERT_EQ(EncodeSack(SackHeader{}, s, sizeof(s)), kSackHeaderSize);
  ASSERT_EQ(Decode(s, sizeof(s), &p), DecodeError::kOk);
  EXPECT_EQ(p.payload, nullptr);
  EXPECT_EQ(p.payload_len, 0u);
  EXPECT_FALSE(p.trimmed);
}

// ---------------------------------------------------------------- encoders

TEST(WireEncode, ReturnsZeroWhenCapTooSmall) {
  uint8_t b[kMaxHeaderSize];
  std::memset(b, 0xEE, sizeof(b));
  EXPECT_EQ(EncodeData({}, b, kDataHeaderSize - 1), 0u);
  EXPECT_EQ(EncodeSack({}, b, kSackHeaderSize - 1), 0u);
  EXPECT_EQ(EncodeNack({}, b, kNackHeaderSize - 1), 0u);
  EXPECT_EQ(EncodeProbe({}, false, b, kProbeHeaderSize - 1), 0u);
  EXPECT_EQ(EncodeConnect({}, true, b, kConnectHeaderSize - 1), 0u);
  EXPECT_EQ(EncodePlaneStatus({}, b, kPlaneStatusHeaderSize - 1), 0u);
  EXPECT_EQ(EncodeData({}, nullptr, 1000), 0u);
  for (uint8_t c : b) {
    EXPECT_EQ(c, 0xEE) << "encoder wrote despite cap";
  }
}

// ---------------------------------------------------------------- malformed

TEST(WireMalformed, NullAndEmpty) {
  Packet p;
  EXPECT_EQ(Decode(nullptr, 0, &p), DecodeError::kTooShort);
  EXPECT_EQ(Decode(nullptr, 100, &p), DecodeError::kTooShort);
  uint8_t b[kDataHeaderSize] = {};
  EXPECT_EQ(Decode(b, 0, &p), DecodeError::kTooShort);
  ASSERT_EQ(EncodeData({}, b, sizeof(b)), kDataHeaderSize);
  EXPECT_EQ(Decode(b, sizeof(b), nullptr), DecodeError::kTooShort);
}

// Truncation at every length shorter than the header, for every type; the
// decoder must look only at [data, data+len): the bytes are copied into an
// exactly sized heap buffer so ASan catches any read past the end.
TEST(WireMalformed, TruncatedAtEveryLength) {
  Rng rng(4);
  std::vector<uint8_t> full;
  for (PacketType t : kAllTypes) {
    for (int rep = 0; rep < 20; ++rep) {
      EncodeRandom(rng, t, &full);
      ASSERT_EQ(full.size(), HeaderSize(t));
      for (size_t len = 0; len < full.size(); ++len) {
        std::vector<uint8_t> cut(full.begin(), full.begin() + len);
        Packet p;
        EXPECT_EQ(Decode(len ? cut.data() : nullptr, len, &p),
                  DecodeError::kTooShort)
            << "type " << int(t) << " len " << len;
      }
      Packet p;
      EXPECT_EQ(Decode(full.data(), full.size(), &p), DecodeError::kOk);
    }
  }
}

TEST(WireMalformed, DataPayloadOfWrongLength) {
  Rng rng(5);
  DataHeader h;
  h.msg_len = 300;
  h.payload_len = 300;
  std::vector<uint8_t> b(kDataHeaderSize + 300 + 10);
  ASSERT_EQ(EncodeData(h, b.data(), b.size()), kDataHeaderSize);
  for (size_t extra = 1; extra <= 310; ++extra) {
    std::vector<uint8_t> cut(b.begin(), b.begin() + kDataHeaderSize + extra);
    Packet p;
    const DecodeError want =
        extra == 300 ? DecodeError::kOk : DecodeError::kBadLength;
    EXPECT_EQ(Decode(cut.data(), cut.size(), &p), want) << extra;
  }
}

TEST(WireMalformed, ControlWithTrailingBytes) {
  Rng rng(6);
  std::vector<uint8_t> b;
  for (PacketType t : kAllTypes) {
    if (t == PacketType::kData) continue;
    EncodeRandom(rng, t, &b);
    b.push_back(0);
    Packet p;
    EXPECT_EQ(Decode(b.data(), b.size(), &p), DecodeError::kBadLength)
        << int(t);
  }
}

TEST(WireMalformed, BadMagicVersionType) {
  Rng rng(7);
  std::vector<uint8_t> b;
  Packet p;
  for (PacketType t : kAllTypes) {
    EncodeRandom(rng, t, &b);
    auto bad = b;
    bad[0] ^= 0x01;
    EXPECT_EQ(Decode(bad.data(), bad.size(), &p), DecodeError::kBadMagic);
    bad = b;
    bad[1] = 0x00;
    EXPECT_EQ(Decode(bad.data(), bad.size(), &p), DecodeError::kBadMagic);
    // Magic byte-swapped (a big-endian writer) is rejected too.
    bad = b;
    std::swap(bad[0], bad[1]);
    EXPECT_EQ(Decode(bad.data(), bad.size(), &p), DecodeError::kBadMagic);
    for (uint8_t v : {0, 2, 3, 0x81, 0xFF}) {
      bad = b;
      bad[2] = v;
      Reseal(bad.data(), bad.size());
      EXPECT_EQ(Decode(bad.data(), bad.size(), &p), DecodeError::kBadVersion)
          << int(v);
    }
  }
  for (int v : {0, 9, 10, 0x7F, 0xFF}) {
    std::vector<uint8_t> bad(kMaxHeaderSize, 0);
    ASSERT_EQ(EncodeSack({}, bad.data(), bad.size()), kSackHeaderSize);
    bad[3] = static_cast<uint8_t>(v);
    Reseal(bad.data(), kSackHeaderSize);
    EXPECT_EQ(Decode(bad.data(), bad.size(), &p), DecodeError::kBadType) << v;
  }
}

// Every single-bit flip anywhere in the header of every type is caught.
// Flips in bytes 4.. are checksum failures (CRC32C detects every 1-bit error).
TEST(WireMalformed, EverySingleBitFlipIsCaught) {
  Rng rng(8);
  std::vector<uint8_t> b;
  for (PacketType t : kAllTypes) {
    for (int rep = 0; rep < 5; ++rep) {
      EncodeRandom(rng, t, &b);
      for (size_t bit = 0; bit < 8 * b.size(); ++bit) {
        auto bad = b;
        bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
        Packet p;
        const DecodeError e = Decode(bad.data(), bad.size(), &p);
        ASSERT_NE(e, DecodeError::kOk) << "type " << int(t) << " bit " << bit;
        if (bit / 8 >= 4) {
          EXPECT_EQ(e, DecodeError::kBadChecksum) << bit;
        }
      }
    }
  }
}

TEST(WireMalformed, RandomMultiBitCorruptionIsCaught) {
  Rng rng(9);
  std::vector<uint8_t> b;
  for (int i = 0; i < 20000; ++i) {
    const PacketType t = kAllTypes[rng.Uniform(std::size(kAllTypes))];
    EncodeRandom(rng, t, &b);
    auto bad = b;
    const int flips = 2 + static_cast<int>(rng.Uniform(3));  // 2..4 bits
    for (int f = 0; f < flips; ++f) {
      const size_t bit = 32 + rng.Uniform(8 * (bad.size() - 4));
      bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    }
    if (bad == b) continue;  // flips cancelled out
    Packet p;
    ASSERT_EQ(Decode(bad.data(), bad.size(), &p), DecodeError::kBadChecksum);
  }
}

TEST(WireMalformed, PayloadCorruptionIsNotDecodersJob) {
  // Decode does not verify payload_crc; the engine does, with Crc32c().
  std::vector<uint8_t> b(kDataHeaderSize + 64);
  for (size_t i = 0; i < 64; ++i) b[kDataHeaderSize + i] = uint8_t(i);
  DataHeader h;
  h.msg_len = 64;
  h.payload_len = 64;
  h.flags = kFlagPayloadCrc;
  h.payload_crc = Crc32c(b.data() + kDataHeaderSize, 64);
  ASSERT_EQ(EncodeData(h, b.data(), b.size()), kDataHeaderSize);
  b[kDataHeaderSize + 10] ^= 0x40;
  Packet p;
  ASSERT_EQ(Decode(b.data(), b.size(), &p), DecodeError::kOk);
  EXPECT_NE(Crc32c(p.payload, p.payload_len), p.data.payload_crc);
}

// Builds a valid DATA packet, lets `mutate` change the header, re-seals the
// checksum and returns what Decode says.
template <typename F>
DecodeError DecodeMutatedData(const DataHeader& h, size_t payload_bytes,
                              F mutate) {
  std::vector<uint8_t> b(kDataHeaderSize + payload_bytes, 0x5A);
  EXPECT_EQ(EncodeData(h, b.data(), b.size()), kDataHeaderSize);
  mutate(b.data());
  Reseal(b.data(), kDataHeaderSize);
  Packet p;
  return Decode(b.data(), b.size(), &p);
}

// Payloads of 64 KiB and more (the verbs datapath's chunk): the length's
// high 16 bits at offset 54, up to kMaxPayloadLen; one more is refused.
TEST(WireLayout, DataPayloadOf64KiBAndMore) {
  for (uint32_t len : {65535u, 65536u, 65537u, 200000u, kMaxPayloadLen}) {
    DataHeader h;
    h.dst_conn = 7;
    h.msg_len = 3 * kMaxPayloadLen;
    h.msg_offset = kMaxPayloadLen;
    h.payload_len = len;
    std::vector<uint8_t> b(kDataHeaderSize + len, 0x33);
    ASSERT_EQ(EncodeData(h, b.data(), kDataHeaderSize), kDataHeaderSize);
    EXPECT_EQ(Le16(b.data() + 48), len & 0xFFFF) << len;
    EXPECT_EQ(Le16(b.data() + 54), len >> 16) << len;
    Packet p;
    ASSERT_EQ(Decode(b.data(), b.size(), &p), DecodeError::kOk) << len;
    EXPECT_EQ(p.data, h);
    EXPECT_EQ(p.payload_len, len);
    ASSERT_EQ(DecodeSplit(b.data(), kDataHeaderSize, b.data() + kDataHeaderSize,
                          len, &p),
              DecodeError::kOk);
    EXPECT_EQ(p.data.payload_len, len);
  }
  DataHeader h;
  h.msg_len = 3 * kMaxPayloadLen;
  h.payload_len = kMaxPayloadLen;
  EXPECT_EQ(
      DecodeMutatedData(h, kMaxPayloadLen + 1, [](uint8_t* b) { b[48] = 1; }),
      DecodeError::kBadField);
}

TEST(WireMalformed, DataForbiddenFields) {
  DataHeader h;
  h.msg_len = 1000;
  h.msg_offset = 500;
  h.payload_len = 100;
  auto same = [](uint8_t*) {};
  ASSERT_EQ(DecodeMutatedData(h, 100, same), DecodeError::kOk);
  // Unknown flag bits.
  for (int bit = 6; bit < 16; ++bit) {
    EXPECT_EQ(DecodeMutatedData(
                  h, 100,
                  [&](uint8_t* b) {
                    SetLe16(b + 52,
                            static_cast<uint16_t>(Le16(b + 52) | 1u << bit));
                  }),
              DecodeError::kBadField)
        << bit;
  }
  // payload_len_hi: the length then passes msg_len, or kMaxPayloadLen.
  EXPECT_EQ(DecodeMutatedData(h, 100, [](uint8_t* b) { b[54] = 1; }),
            DecodeError::kBadField);
  EXPECT_EQ(DecodeMutatedData(h, 100, [](uint8_t* b) { b[55] = 0x80; }),
            DecodeError::kBadField);
  // offset + payload beyond msg_len, including 32-bit overflow.
  DataHeader over = h;
  over.msg_offset = 901;
  EXPECT_EQ(DecodeMutatedData(over, 100, same), DecodeError::kBadField);
  EXPECT_EQ(DecodeMutatedData(over, 0, same), DecodeError::kBadField);
  over.msg_offset = 0xFFFFFFF0u;
  over.msg_len = 0xFFFFFFFFu;
  EXPECT_EQ(DecodeMutatedData(over, 100, same), DecodeError::kBadField);
  // Zero payload_len is only a zero-length message, and never trimmed.
  DataHeader empty;
  empty.msg_len = 10;
  EXPECT_EQ(DecodeMutatedData(empty, 0, same), DecodeError::kBadField);
  empty.msg_len = 0;
  ASSERT_EQ(DecodeMutatedData(empty, 0, same), DecodeError::kOk);
  empty.flags = kFlagTrimmed;
  EXPECT_EQ(DecodeMutatedData(empty, 0, same), DecodeError::kBadField);
  // First-of-message must start at 0; last-of-message must end at msg_len.
  DataHeader first = h;
  first.flags = kFlagFirstOfMessage;
  EXPECT_EQ(DecodeMutatedData(first, 100, same), DecodeError::kBadField);
  DataHeader last = h;
  last.flags = kFlagLastOfMessage;
  EXPECT_EQ(DecodeMutatedData(last, 100, same), DecodeError::kBadField);
  last.msg_offset = 900;
  EXPECT_EQ(DecodeMutatedData(last, 100, same), DecodeError::kOk);
  // The trimmed flag on a packet that still has its payload is a lie.
  DataHeader lie = h;
  lie.flags = kFlagTrimmed;
  EXPECT_EQ(DecodeMutatedData(lie, 100, same), DecodeError::kBadField);
  EXPECT_EQ(DecodeMutatedData(lie, 0, same), DecodeError::kOk);
}

template <typename Enc, typename F>
DecodeError DecodeMutated(size_t hdr, Enc encode, F mutate) {
  std::vector<uint8_t> b(hdr);
  EXPECT_EQ(encode(b.data(), b.size()), hdr);
  mutate(b.data());
  Reseal(b.data(), hdr);
  Packet p;
  return Decode(b.data(), b.size(), &p);
}

TEST(WireMalformed, ControlForbiddenFields) {
  auto sack = [](uint8_t* b, size_t n) { return EncodeSack({}, b, n); };
  EXPECT_EQ(DecodeMutated(kSackHeaderSize, sack, [](uint8_t* b) { b[82] = 2; }),
            DecodeError::kBadField);
  EXPECT_EQ(DecodeMutated(kSackHeaderSize, sack, [](uint8_t* b) { b[83] = 1; }),
            DecodeError::kBadField);

  auto nack = [](uint8_t* b, size_t n) { return EncodeNack({}, b, n); };
  for (uint8_t r : {0, 7, 8, 0x80, 0xFF}) {
    EXPECT_EQ(
        DecodeMutated(kNackHeaderSize, nack, [r](uint8_t* b) { b[20] = r; }),
        DecodeError::kBadField)
        << int(r);
  }
  EXPECT_EQ(DecodeMutated(kNackHeaderSize, nack, [](uint8_t* b) { b[21] = 2; }),
            DecodeError::kBadField);

  auto probe = [](uint8_t* b, size_t n) {
    return EncodeProbe({}, false, b, n);
  };
  EXPECT_EQ(
      DecodeMutated(kProbeHeaderSize, probe, [](uint8_t* b) { b[26] = 1; }),
      DecodeError::kBadField);
  EXPECT_EQ(
      DecodeMutated(kProbeHeaderSize, probe, [](uint8_t* b) { b[27] = 1; }),
      DecodeError::kBadField);

  ConnectHeader good;
  good.src_conn = 9;
  good.mtu_payload = 4096;
  good.num_paths = 256;
  good.num_planes = 4;
  auto conn = [&](uint8_t* b, size_t n) {
    return EncodeConnect(good, true, b, n);
  };
  EXPECT_EQ(DecodeMutated(kConnectHeaderSize, conn, [](uint8_t*) {}),
            DecodeError::kOk);
  for (int bit = 1; bit < 32; ++bit) {
    EXPECT_EQ(DecodeMutated(kConnectHeaderSize, conn,
                            [bit](uint8_t* b) { SetLe32(b + 28, 1u << bit); }),
              DecodeError::kBadField)
        << bit;
  }
  EXPECT_EQ(DecodeMutated(kConnectHeaderSize, conn,
                          [](uint8_t* b) { SetLe32(b + 12, 0); }),
            DecodeError::kBadField);  // src_conn 0
  EXPECT_EQ(DecodeMutated(kConnectHeaderSize, conn,
                          [](uint8_t* b) { SetLe32(b + 24, 0); }),
            DecodeError::kBadField);  // mtu 0
  EXPECT_EQ(DecodeMutated(kConnectHeaderSize, conn,
                          [](uint8_t* b) { SetLe32(b + 24, 0x10000); }),
            DecodeError::kOk);  // 64 KiB: payload_len_hi in use
  EXPECT_EQ(
      DecodeMutated(kConnectHeaderSize, conn,
                    [](uint8_t* b) { SetLe32(b + 24, kMaxPayloadLen + 1); }),
      DecodeError::kBadField);  // mtu beyond kMaxPayloadLen
  EXPECT_EQ(DecodeMutated(kConnectHeaderSize, conn,
                          [](uint8_t* b) { SetLe16(b + 32, 0); }),
            DecodeError::kBadField);  // no paths
  EXPECT_EQ(DecodeMutated(kConnectHeaderSize, conn,
                          [](uint8_t* b) { SetLe16(b + 34, 0); }),
            DecodeError::kBadField);  // no planes
  EXPECT_EQ(DecodeMutated(kConnectHeaderSize, conn,
                          [](uint8_t* b) { SetLe16(b + 34, 33); }),
            DecodeError::kBadField);  // more planes than planes_down bits
}

TEST(WireMalformed, DecodeErrorNames) {
  for (int e = 0; e <= static_cast<int>(DecodeError::kBadField); ++e) {
    const std::string name = DecodeErrorName(static_cast<DecodeError>(e));
    EXPECT_FALSE(name.empty());
    EXPECT_NE(name, "unknown") << e;
  }
  EXPECT_STREQ(DecodeErrorName(DecodeError::kBadChecksum), "bad_checksum");
}

// Random garbage never crashes and is never accepted without a valid header.
TEST(WireMalformed, RandomGarbage) {
  Rng rng(10);
  int ok = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> b(rng.Uniform(200));
    for (auto& c : b) c = static_cast<uint8_t>(rng.Next());
    if (b.size() >= 4 && rng.Bernoulli(0.5)) {
      b[0] = 0x52;  // get past magic/version/type into the checksum
      b[1] = 0x50;
      b[2] = kVersion;
      b[3] = static_cast<uint8_t>(1 + rng.Uniform(8));
    }
    Packet p;
    ok += Decode(b.empty() ? nullptr : b.data(), b.size(), &p) ==
          DecodeError::kOk;
  }
  EXPECT_EQ(ok, 0);
}

// ---------------------------------------------------------------- split, trim

TEST(WireSplit, HeaderAndPayloadApart) {
  Rng rng(11);
  for (int i = 0; i < 500; ++i) {
    DataHeader h = testing::RandomData(rng);
    if (h.payload_len > 512) continue;
    uint8_t hdr[kDataHeaderSize];
    ASSERT_EQ(EncodeData(h, hdr, sizeof(hdr)), kDataHeaderSize);
    std::vector<uint8_t> payload(h.payload_len, 0x33);
    Packet p;
    ASSERT_EQ(DecodeSplit(hdr, sizeof(hdr), payload.data(), payload.size(), &p),
              DecodeError::kOk);
    EXPECT_EQ(p.data, h);
    EXPECT_EQ(p.payload, h.payload_len ? payload.data() : nullptr);
    EXPECT_EQ(p.payload_len, h.payload_len);
    EXPECT_FALSE(p.trimmed);
    ASSERT_EQ(DecodeSplit(hdr, sizeof(hdr), nullptr, 0, &p), DecodeError::kOk);
    EXPECT_EQ(p.trimmed, h.payload_len > 0);
    if (h.payload_len > 1) {
      EXPECT_EQ(
          DecodeSplit(hdr, sizeof(hdr), payload.data(), payload.size() - 1, &p),
          DecodeError::kBadLength);
    }
  }
}

TEST(WireSplit, HeaderBufferMustBeExact) {
  uint8_t b[kMaxHeaderSize + 8] = {};
  ASSERT_EQ(EncodeNack({}, b, sizeof(b)), kNackHeaderSize);
  Packet p;
  EXPECT_EQ(DecodeSplit(b, kNackHeaderSize, nullptr, 0, &p), DecodeError::kOk);
  EXPECT_EQ(DecodeSplit(b, kNackHeaderSize + 1, nullptr, 0, &p),
            DecodeError::kBadLength);
  EXPECT_EQ(DecodeSplit(b, kNackHeaderSize - 1, nullptr, 0, &p),
            DecodeError::kTooShort);
  const uint8_t extra[4] = {};
  EXPECT_EQ(DecodeSplit(b, kNackHeaderSize, extra, 4, &p),
            DecodeError::kBadLength);  // control packets have no payload
  EXPECT_EQ(DecodeSplit(b, kNackHeaderSize, nullptr, 4, &p),
            DecodeError::kBadLength);
}

// Burst encode: unsealed encodes + SealHeaders give the bytes of sealed
// encodes, for every type and any mix in one burst.
TEST(WireBurst, SealHeadersEqualsSealedEncode) {
  Rng rng(21);
  for (int round = 0; round < 200; ++round) {
    const size_t n = 1 + rng.Uniform(40);
    std::vector<std::vector<uint8_t>> want(n), got(n);
    std::vector<uint8_t*> ptrs(n);
    std::vector<size_t> lens(n);
    for (size_t i = 0; i < n; ++i) {
      // Mostly DATA (the send burst), sometimes SACK/NACK/PROBE/PLANE; in
      // one round of four only SACKs (the receiver's burst).
      int kind = rng.Uniform(3) == 0 ? static_cast<int>(rng.Uniform(5)) : 0;
      if (round % 4 == 3) kind = 1;
      got[i].assign(kMaxHeaderSize, 0xEE);
      want[i].assign(kMaxHeaderSize, 0xEE);
      size_t a = 0, b = 0;
      switch (kind) {
        case 0: {
          const DataHeader h = testing::RandomData(rng);
          a = EncodeData(h, want[i].data(), kMaxHeaderSize);
          b = EncodeData(h, got[i].data(), kMaxHeaderSize, /*seal=*/false);
          break;
        }
        case 1: {
          const SackHeader h = testing::RandomSack(rng);
          a = EncodeSack(h, want[i].data(), kMaxHeaderSize);
          b = EncodeSack(h, got[i].data(), kMaxHeaderSize, false);
          break;
        }
        case 2: {
          const NackHeader h = testing::RandomNack(rng);
          a = EncodeNack(h, want[i].data(), kMaxHeaderSize);
          b = EncodeNack(h, got[i].data(), kMaxHeaderSize, false);
          break;
        }
        case 3: {
          const ProbeHeader h = testing::RandomProbe(rng);
          a = EncodeProbe(h, true, want[i].data(), kMaxHeaderSize);
          b = EncodeProbe(h, true, got[i].data(), kMaxHeaderSize, false);
          break;
        }
        default: {
          const PlaneStatusHeader h = testing::RandomPlane(rng);
          a = EncodePlaneStatus(h, want[i].data(), kMaxHeaderSize);
          b = EncodePlaneStatus(h, got[i].data(), kMaxHeaderSize, false);
          break;
        }
      }
      ASSERT_EQ(a, b);
      ASSERT_GT(a, 0u);
      EXPECT_EQ(Le32(got[i].data() + kHeaderCrcOffset), 0u);  // unsealed
      ptrs[i] = got[i].data();
      lens[i] = b;
    }
    std::vector<std::vector<uint8_t>> got2 = got;
    std::vector<uint8_t*> ptrs2(n);
    for (size_t i = 0; i < n; ++i) ptrs2[i] = got2[i].data();
    SealHeaders(ptrs.data(), lens.data(), n);
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(got[i], want[i]) << round << i;
    // The engine's variants (no entry skipped; from an array of records)
    // give the same bytes.
    struct Rec {
      uint8_t hdr[kMaxHeaderSize];
      uint16_t len;
    };
    std::vector<Rec> recs(n);
    for (size_t i = 0; i < n; ++i) {
      std::memcpy(recs[i].hdr, got2[i].data(), kMaxHeaderSize);
      recs[i].len = static_cast<uint16_t>(lens[i]);
    }
    SealEncodedHeaders(ptrs2.data(), lens.data(), n);
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(got2[i], want[i]) << round << i;
    SealEncodedHeadersStrided(recs[0].hdr, sizeof(Rec), offsetof(Rec, len), n);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_TRUE(std::equal(want[i].begin(), want[i].end(), recs[i].hdr))
          << round << i;
    }
  }
  // A failed encode's length 0 is skipped, not checksummed.
  uint8_t junk[4] = {1, 2, 3, 4};
  uint8_t* jp = junk;
  const size_t zero = 0;
  SealHeaders(&jp, &zero, 1);
  EXPECT_EQ(junk[0], 1);
  EXPECT_EQ(junk[3], 4);
}

// Decoding with the burst's precomputed checksums gives exactly what the
// plain decoders give, for valid packets and for corrupted ones.
TEST(WireBurst, DecodeWithCrcEqualsDecode) {
  Rng rng(22);
  for (int i = 0; i < 3000; ++i) {
    std::vector<uint8_t> b;
    EncodeRandom(rng, kAllTypes[rng.Uniform(std::size(kAllTypes))], &b);
    if (rng.Uniform(3) == 0) {  // a flipped bit anywhere, or a truncation
      if (rng.Uniform(2) == 0) {
        b[rng.Uniform(b.size())] ^= static_cast<uint8_t>(1u << rng.Uniform(8));
      } else {
        b.resize(rng.Uniform(b.size()));
      }
    }
    const size_t span = HeaderCrcSpan(b.data(), b.size());
    Packet want, got;
    const DecodeError e1 = Decode(b.data(), b.size(), &want);
    const DecodeError e3 = DecodeSplit(b.data(), b.size(), nullptr, 0, &want);
    if (span == 0) {
      EXPECT_NE(e1, DecodeError::kOk);  // nothing to checksum: rejected
      continue;
    }
    uint32_t crc = 0;
    const uint8_t* p = b.data();
    HeaderCrcs(&p, &span, 1, &crc);
    EXPECT_EQ(DecodeWithCrc(b.data(), b.size(), crc, &got), e1) << i;
    EXPECT_EQ(DecodeSplitWithCrc(b.data(), b.size(), nullptr, 0, crc, &got), e3)
        << i;
    if (e3 == DecodeError::kOk) {
      EXPECT_EQ(got.type, want.type);
      if (got.type == PacketType::kData) {
        EXPECT_EQ(got.data, want.data);
      }
    }
  }
  // A wrong precomputed checksum is a checksum error.
  std::vector<uint8_t> b;
  EncodeRandom(rng, PacketType::kSack, &b);
  Packet p;
  EXPECT_EQ(DecodeWithCrc(b.data(), b.size(),
                          Le32(b.data() + kHeaderCrcOffset) ^ 1, &p),
            DecodeError::kBadChecksum);
}

TEST(WireTrim, TrimDataSetsFlagAndKeepsHeader) {
  Rng rng(12);
  for (int i = 0; i < 500; ++i) {
    DataHeader h = testing::RandomData(rng);
    if (h.payload_len == 0 || h.payload_len > 1024) continue;
    std::vector<uint8_t> b(kDataHeaderSize + h.payload_len, 0x77);
    ASSERT_EQ(EncodeData(h, b.data(), b.size()), kDataHeaderSize);
    ASSERT_EQ(TrimData(b.data(), b.size()), kDataHeaderSize);
    Packet p;
    ASSERT_EQ(Decode(b.data(), kDataHeaderSize, &p), DecodeError::kOk);
    EXPECT_TRUE(p.trimmed);
    EXPECT_EQ(p.payload, nullptr);
    EXPECT_TRUE(p.data.flags & kFlagTrimmed);
    DataHeader want = h;
    want.flags |= kFlagTrimmed;
    EXPECT_EQ(p.data, want);
    // The trimmed header with its payload re-attached is rejected.
    EXPECT_EQ(Decode(b.data(), b.size(), &p), DecodeError::kBadField);
  }
}

TEST(WireTrim, TrimDataRejectsWhatItCannotTrim) {
  uint8_t b[kMaxHeaderSize + 16] = {};
  ASSERT_EQ(EncodeSack({}, b, sizeof(b)), kSackHeaderSize);
  const std::vector<uint8_t> before(b, b + sizeof(b));
  EXPECT_EQ(TrimData(b, kSackHeaderSize), 0u);
  DataHeader empty;  // zero-length message: nothing to trim
  ASSERT_EQ(EncodeData(empty, b, sizeof(b)), kDataHeaderSize);
  EXPECT_EQ(TrimData(b, kDataHeaderSize), 0u);
  DataHeader h;
  h.msg_len = 16;
  h.payload_len = 16;
  ASSERT_EQ(EncodeData(h, b, sizeof(b)), kDataHeaderSize);
  b[20] ^= 1;  // corrupt: checksum fails, so TrimData leaves it alone
  const std::vector<uint8_t> corrupt(b, b + sizeof(b));
  EXPECT_EQ(TrimData(b, kDataHeaderSize + 16), 0u);
  EXPECT_EQ(std::vector<uint8_t>(b, b + sizeof(b)), corrupt);
  EXPECT_EQ(TrimData(nullptr, 0), 0u);
}

// The checked-in fuzz seeds are valid packets of every type (plus one with a
// broken checksum): keeps tests/fuzz/corpus/wire_decode in step with the
// format.
TEST(WireCorpus, SeedFilesDecode) {
  int files = 0;
  bool seen[9] = {};
  for (const auto& e :
       std::filesystem::directory_iterator(PRISM_WIRE_CORPUS_DIR)) {
    std::ifstream in(e.path(), std::ios::binary);
    std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)),
                           std::istreambuf_iterator<char>());
    const std::string name = e.path().filename().string();
    Packet p;
    const DecodeError err = Decode(b.data(), b.size(), &p);
    if (name.find("bad_crc") != std::string::npos) {
      EXPECT_EQ(err, DecodeError::kBadChecksum) << name;
    } else {
      EXPECT_EQ(err, DecodeError::kOk) << name;
      if (err == DecodeError::kOk) seen[static_cast<int>(p.type)] = true;
    }
    ++files;
  }
  EXPECT_GE(files, 10);
  for (PacketType t : kAllTypes) {
    EXPECT_TRUE(seen[static_cast<int>(t)]) << "no seed of type " << int(t);
  }
}

// PatchDataHeader (the engine's run of one message's packets): a copy of
// one DATA header with another packet's per-packet fields written over it
// is byte for byte EncodeData of that packet, when the two share the
// message-wide fields (conn, msn, length, rkey, send time, immediate, no
// payload checksum).
TEST(WireBurst, PatchedDataHeaderEqualsEncode) {
  Rng rng(31);
  for (int round = 0; round < 500; ++round) {
    DataHeader a;
    a.dst_conn = rng.Next32();
    a.msn = rng.Next32();
    a.msg_len = rng.Next32() | 1;
    a.rkey = rng.Next32();
    a.send_ts = rng.Next();
    a.immediate = rng.Uniform(2) != 0 ? rng.Next32() : 0;
    DataHeader b = a;
    for (DataHeader* h : {&a, &b}) {
      h->psn = rng.Next32();
      h->msg_offset = rng.Next32();
      h->remote_addr = rng.Next();
      h->payload_len = rng.Next32() % (kMaxPayloadLen + 1);
      h->path_id = static_cast<uint16_t>(rng.Next32());
      h->flags = static_cast<uint16_t>(rng.Uniform(kKnownDataFlags + 1));
    }
    uint8_t want[kDataHeaderSize];
    uint8_t got[kDataHeaderSize];
    ASSERT_EQ(EncodeData(b, want, sizeof(want), /*seal=*/false),
              kDataHeaderSize);
    ASSERT_EQ(EncodeData(a, got, sizeof(got), /*seal=*/false), kDataHeaderSize);
    internal::PatchDataHeader(got, b.psn, b.msg_offset, b.remote_addr,
                              b.payload_len, b.path_id, b.flags);
    ASSERT_EQ(std::memcmp(got, want, kDataHeaderSize), 0) << round;
  }
}

}  // namespace
}  // namespace prism::wire
