// Host-side (no RDMA) tests of the verbs datapath's descriptors and of the
// DATA header rebuilt from a WRITE-with-immediate: offsets, flags, lengths,
// PSN and MSN wrap-around, ring overwrite, malformed descriptors.
#include "transport/backends/verbs/descriptor_table.h"

#include <vector>

#include "gtest/gtest.h"

namespace prism::verbs {
namespace {

MessageDescriptor Msg(uint32_t msn, uint32_t first_psn, uint32_t len,
                      uint32_t mtu = 4096) {
  MessageDescriptor d;
  d.msn = msn;
  d.first_psn = first_psn;
  d.msg_len = len;
  d.dst_conn = 7;
  d.rkey = 0xABCD1234;
  d.immediate = 0x55AA0000u + msn;
  d.base_addr = 0x7f0000000000ull + uint64_t{msn} * 0x100000;
  d.mtu = mtu;
  d.flags = kDescHasImmediate;
  return d;
}

TEST(DescriptorTest, EncodeDecodeRoundTripAndRejects) {
  MessageDescriptor d = Msg(3, 0xFFFFFFF0u, 123457);
  d.flags |= kDescPayloadCrc;
  uint8_t b[kDescriptorBytes];
  EncodeDescriptor(d, b);
  MessageDescriptor x;
  ASSERT_TRUE(DecodeDescriptor(b, &x));
  EXPECT_EQ(x, d);
  uint8_t bad[kDescriptorBytes];
  memcpy(bad, b, sizeof(b));
  bad[32] = bad[33] = bad[34] = bad[35] = 0;  // mtu 0
  EXPECT_FALSE(DecodeDescriptor(bad, &x));
  memcpy(bad, b, sizeof(b));
  bad[34] = 1;  // mtu 65536 + 4096: a chunk above 64 KiB is fine
  EXPECT_TRUE(DecodeDescriptor(bad, &x));
  EXPECT_EQ(x.mtu, 65536u + 4096u);
  bad[34] = 0x10;  // mtu 1 MiB + 4096: above wire::kMaxPayloadLen
  EXPECT_FALSE(DecodeDescriptor(bad, &x));
  memcpy(bad, b, sizeof(b));
  bad[36] |= 0x80;  // unknown flag
  EXPECT_FALSE(DecodeDescriptor(bad, &x));
  memcpy(bad, b, sizeof(b));
  bad[39] = 1;  // reserved
  EXPECT_FALSE(DecodeDescriptor(bad, &x));
}

TEST(DescriptorTest, FromHeaderInvertsRebuild) {
  wire::DataHeader h;
  h.dst_conn = 9;
  h.psn = 1000 + 3;
  h.msn = 42;
  h.msg_offset = 3 * 4096;
  h.msg_len = 5 * 4096 - 10;
  h.remote_addr = 0x1000000 + 3 * 4096;
  h.rkey = 77;
  h.payload_len = 4096;
  h.path_id = 2;
  h.flags = wire::kFlagHasImmediate;
  h.immediate = 99;
  const MessageDescriptor d = DescriptorFromHeader(h, 4096);
  EXPECT_EQ(d.first_psn, 1000u);
  EXPECT_EQ(d.base_addr, 0x1000000u);
  EXPECT_EQ(d.npkts(), 5u);
  wire::DataHeader r;
  ASSERT_TRUE(RebuildDataHeader(d, h.psn, 4096, 2, &r));
  EXPECT_EQ(r, h);  // send_ts 0 and payload_crc 0 on both sides
}

// 64 KiB chunks (the datapath's default): the rebuilt header's 32-bit
// payload length is the completion's byte_len.
TEST(DescriptorTest, RebuildsChunksOf64KiB) {
  const MessageDescriptor d = Msg(1, 500, 2 * 65536 + 7, 65536);
  ASSERT_EQ(d.npkts(), 3u);
  wire::DataHeader h;
  const uint32_t lens[3] = {65536, 65536, 7};
  for (uint32_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(RebuildDataHeader(d, 500 + i, lens[i], 1, &h)) << i;
    EXPECT_EQ(h.payload_len, lens[i]);
    EXPECT_EQ(h.msg_offset, i * 65536u);
    uint8_t b[wire::kDataHeaderSize];
    ASSERT_EQ(wire::EncodeData(h, b, sizeof(b)), wire::kDataHeaderSize);
    wire::Packet p;
    ASSERT_EQ(wire::DecodeSplit(b, sizeof(b), b, lens[i], &p),
              wire::DecodeError::kOk);
    EXPECT_EQ(p.data.payload_len, lens[i]);
  }
  EXPECT_FALSE(RebuildDataHeader(d, 500, 65535, 1, &h));
  EXPECT_FALSE(RebuildDataHeader(d, 501, 65537, 1, &h));
}

TEST(DescriptorTest, RebuildOffsetsFlagsAndLengths) {
  const MessageDescriptor d = Msg(1, 0xFFFFFFFEu, 3 * 4096 + 5);  // wraps
  ASSERT_EQ(d.npkts(), 4u);
  wire::DataHeader h;
  const uint32_t lens[4] = {4096, 4096, 4096, 5};
  for (uint32_t i = 0; i < 4; ++i) {
    const uint32_t psn = d.first_psn + i;
    ASSERT_TRUE(RebuildDataHeader(d, psn, lens[i], 5, &h)) << i;
    EXPECT_EQ(h.psn, psn);
    EXPECT_EQ(h.msg_offset, i * 4096);
    EXPECT_EQ(h.remote_addr, d.base_addr + i * 4096);
    EXPECT_EQ(h.payload_len, lens[i]);
    EXPECT_EQ(h.path_id, 5);
    EXPECT_EQ((h.flags & wire::kFlagFirstOfMessage) != 0, i == 0);
    EXPECT_EQ((h.flags & wire::kFlagLastOfMessage) != 0, i == 3);
    EXPECT_TRUE(h.flags & wire::kFlagHasImmediate);
    EXPECT_EQ(h.immediate, d.immediate);
    // Any other length for this packet is rejected.
    EXPECT_FALSE(RebuildDataHeader(d, psn, lens[i] + 1, 5, &h));
    EXPECT_FALSE(RebuildDataHeader(d, psn, lens[i] - 1, 5, &h));
  }
  EXPECT_FALSE(RebuildDataHeader(d, d.first_psn + 4, 5, 0, &h));
  EXPECT_FALSE(RebuildDataHeader(d, d.first_psn - 1, 4096, 0, &h));
  // A zero-length message has one packet of zero bytes.
  const MessageDescriptor z = Msg(2, 10, 0);
  EXPECT_EQ(z.npkts(), 1u);
  ASSERT_TRUE(RebuildDataHeader(z, 10, 0, 0, &h));
  EXPECT_EQ(h.flags & (wire::kFlagFirstOfMessage | wire::kFlagLastOfMessage),
            wire::kFlagFirstOfMessage | wire::kFlagLastOfMessage);
  EXPECT_FALSE(RebuildDataHeader(z, 10, 1, 0, &h));
}

TEST(DescriptorTableTest, FindsEveryPacketAcrossPsnAndMsnWrap) {
  DescriptorTable t(1024);
  // 600 messages of varying sizes; MSNs and PSNs both wrap around 2^32.
  std::vector<MessageDescriptor> msgs;
  uint32_t psn = 0xFFFFF000u, msn = 0xFFFFFF00u;
  for (int i = 0; i < 600; ++i) {
    const uint32_t len = static_cast<uint32_t>((i * 7919) % 50000);
    msgs.push_back(Msg(msn++, psn, len));
    psn += msgs.back().npkts();
  }
  for (const auto& m : msgs) t.Insert(m);
  // In order, backwards and in a scattered order: always the right one.
  for (const auto& m : msgs) {
    for (uint32_t i = 0; i < m.npkts(); ++i) {
      const MessageDescriptor* d = t.Find(m.first_psn + i);
      ASSERT_NE(d, nullptr);
      EXPECT_EQ(d->msn, m.msn);
    }
  }
  for (size_t k = 0; k < msgs.size(); ++k) {
    const auto& m = msgs[(k * 389) % msgs.size()];
    const MessageDescriptor* d = t.Find(m.first_psn + m.npkts() - 1);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->msn, m.msn);
  }
  // PSNs beyond the newest message, or before the oldest: not found.
  EXPECT_EQ(t.Find(psn), nullptr);
  EXPECT_EQ(t.Find(psn + 1000), nullptr);
  EXPECT_EQ(t.Find(msgs.front().first_psn - 1), nullptr);
}

TEST(DescriptorTableTest, RingKeepsTheNewestAndToleratesGaps) {
  DescriptorTable t(16);
  EXPECT_EQ(t.Find(5), nullptr);
  uint32_t psn = 100;
  std::vector<MessageDescriptor> msgs;
  for (uint32_t m = 0; m < 40; ++m) {
    if (m == 35) {  // never described
      psn += 1;
      continue;
    }
    msgs.push_back(Msg(m, psn, 4096));
    psn += 1;
    t.Insert(msgs.back());
  }
  // Overwritten (older than the ring) are gone; the newest are found even
  // with the gap at msn 35.
  EXPECT_EQ(t.Find(msgs[0].first_psn), nullptr);
  for (const auto& m : msgs) {
    if (m.msn + 16 <= 39) continue;
    const MessageDescriptor* d = t.Find(m.first_psn);
    ASSERT_NE(d, nullptr) << m.msn;
    EXPECT_EQ(d->msn, m.msn);
  }
  EXPECT_EQ(t.Find(100 + 35), nullptr);
}

}  // namespace
}  // namespace prism::verbs
