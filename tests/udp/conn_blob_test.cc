// Connection blob encoding (version 2): round trips, sizes, malformed input.
#include "transport/runtime/conn_blob.h"

#include "gtest/gtest.h"
#include "transport/backends/udp/udp_datapath.h"
#include "transport/base/random.h"

namespace prism::runtime {
namespace {

ConnInfoWire Sample(int planes, bool distinct_ports = false) {
  ConnInfoWire w;
  w.info.conn_id = 0x01020304;
  w.info.initial_psn = 0xdeadbeef;
  w.info.mtu_payload = 8936;
  w.info.num_paths = 256;
  w.info.num_planes = planes;
  w.info.payload_checksum = true;
  for (int p = 0; p < planes; ++p) {
    BlobAddress a;
    a.addr = *udp::ParseIp6("fd77:0:0:" + std::to_string(p + 1) + "::2");
    a.port = 20562 + (distinct_ports ? p : 0);
    w.planes.push_back(a);
  }
  return w;
}

void ExpectSame(const ConnInfoWire& a, const ConnInfoWire& b) {
  EXPECT_EQ(a.datapath, b.datapath);
  EXPECT_EQ(a.info.conn_id, b.info.conn_id);
  EXPECT_EQ(a.info.initial_psn, b.info.initial_psn);
  EXPECT_EQ(a.info.mtu_payload, b.info.mtu_payload);
  EXPECT_EQ(a.info.num_paths, b.info.num_paths);
  EXPECT_EQ(a.info.num_planes, b.info.num_planes);
  EXPECT_EQ(a.info.payload_checksum, b.info.payload_checksum);
  ASSERT_EQ(a.planes.size(), b.planes.size());
  for (size_t i = 0; i < a.planes.size(); ++i) {
    EXPECT_EQ(a.planes[i].addr, b.planes[i].addr);
    EXPECT_EQ(a.planes[i].port, b.planes[i].port);
  }
  EXPECT_EQ(a.node, b.node);
  EXPECT_EQ(a.verbs, b.verbs);
}

TEST(ConnBlob, RoundTripUdpUpTo8PlanesUnder64Bytes) {
  for (int planes = 1; planes <= 8; ++planes) {
    auto w = Sample(planes);
    auto b = EncodeBlob(w);
    ASSERT_TRUE(b.ok()) << planes << ": " << b.status();
    EXPECT_LT(b->size, 64);
    auto d = DecodeBlob(*b);
    ASSERT_TRUE(d.ok()) << d.status();
    ExpectSame(w, *d);
    // Hex form round trips too.
    auto h = ConnectionBlob::FromHex(b->ToHex());
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(h->view(), b->view());
  }
}

TEST(ConnBlob, RoundTripDistinctPortsUpTo6Planes) {
  for (int planes = 1; planes <= 6; ++planes) {
    auto w = Sample(planes, true);
    auto b = EncodeBlob(w);
    ASSERT_TRUE(b.ok()) << planes << ": " << b.status();
    auto d = DecodeBlob(*b);
    ASSERT_TRUE(d.ok()) << d.status();
    ExpectSame(w, *d);
  }
}

TEST(ConnBlob, RoundTripLoopback) {
  ConnInfoWire w = Sample(1);
  w.planes.clear();
  w.datapath = BlobDatapath::kLoopback;
  w.node = 7;
  auto b = EncodeBlob(w);
  ASSERT_TRUE(b.ok());
  auto d = DecodeBlob(*b);
  ASSERT_TRUE(d.ok()) << d.status();
  ExpectSame(w, *d);
}

TEST(ConnBlob, OnePlaneIs36BytesAndCarriesItsLength) {
  auto b = EncodeBlob(Sample(1));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->size, 36);
  EXPECT_EQ(b->bytes[1], 2);  // version
  EXPECT_EQ(b->bytes[2], b->size);
}

TEST(ConnBlob, RoundTripVerbsPeerInfoOf8And49Qps) {
  for (int qps : {1, 8, 49}) {
    ConnInfoWire w = Sample(1);
    w.planes.clear();
    w.datapath = BlobDatapath::kVerbs;
    w.verbs.assign(40 + 4 * qps, '\0');
    for (size_t i = 0; i < w.verbs.size(); ++i) w.verbs[i] = char(i * 7 + 1);
    auto b = EncodeBlob(w);
    ASSERT_TRUE(b.ok()) << qps << ": " << b.status();
    EXPECT_EQ(b->size, 18 + w.verbs.size());
    auto d = DecodeBlob(*b);
    ASSERT_TRUE(d.ok()) << d.status();
    ExpectSame(w, *d);
    EXPECT_EQ(d->verbs, w.verbs);
  }
  ConnInfoWire big = Sample(1);
  big.planes.clear();
  big.datapath = BlobDatapath::kVerbs;
  big.verbs.assign(40 + 4 * 50, 'x');
  auto b = EncodeBlob(big);
  EXPECT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("does not fit"), std::string::npos);
  big.verbs.clear();
  EXPECT_FALSE(EncodeBlob(big).ok());
}

// A payload MTU of 64 KiB and more (the verbs datapath's chunk): flag bit 3
// and one byte of bits 16-23 after the fixed part; below 64 KiB the blob is
// unchanged.
TEST(ConnBlob, MtuOf64KiBAndMoreRoundTrips) {
  for (uint32_t mtu : {65535u, 65536u, 65537u, 1u << 20}) {
    for (BlobDatapath dp : {BlobDatapath::kUdp, BlobDatapath::kVerbs}) {
      ConnInfoWire w = Sample(2);
      w.info.mtu_payload = mtu;
      if (dp == BlobDatapath::kVerbs) {
        w.planes.clear();
        w.datapath = dp;
        w.verbs.assign(40 + 4 * 8, 'v');
      }
      auto b = EncodeBlob(w);
      ASSERT_TRUE(b.ok()) << mtu << ": " << b.status();
      EXPECT_EQ((b->bytes[3] & 0x08) != 0, mtu > 0xFFFF) << mtu;
      auto d = DecodeBlob(*b);
      ASSERT_TRUE(d.ok()) << mtu << ": " << d.status();
      ExpectSame(w, *d);
    }
  }
  // 49 QPs still fit: 18 + 1 + 40 + 4 x 49 = 255 bytes.
  ConnInfoWire v = Sample(1);
  v.planes.clear();
  v.datapath = BlobDatapath::kVerbs;
  v.info.mtu_payload = 65536;
  v.verbs.assign(40 + 4 * 49, 'q');
  auto vb = EncodeBlob(v);
  ASSERT_TRUE(vb.ok()) << vb.status();
  EXPECT_EQ(vb->size, 255);
  ConnInfoWire w = Sample(1);
  w.info.mtu_payload = 1u << 24;
  EXPECT_FALSE(EncodeBlob(w).ok());
  // The flag with a zero high byte is not canonical: rejected.
  w.info.mtu_payload = 1u << 16;
  auto b = EncodeBlob(w);
  ASSERT_TRUE(b.ok());
  b->bytes[18] = 0;
  EXPECT_FALSE(DecodeBlob(*b).ok());
}

TEST(ConnBlob, RejectsVersion1AndWrongLength) {
  auto good = *EncodeBlob(Sample(1));
  ConnectionBlob v1 = good;
  v1.bytes[1] = 1;
  auto d = DecodeBlob(v1);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("version 1"), std::string::npos);
  ConnectionBlob len = good;
  len.bytes[2] = good.size - 1;
  EXPECT_FALSE(DecodeBlob(len).ok());
}

TEST(ConnBlob, TooManyDistinctAddressesIsAClearError) {
  ConnInfoWire w = Sample(15);
  Rng rng(1);
  for (auto& p : w.planes)
    for (auto& x : p.addr) x = rng.Next32();
  auto b = EncodeBlob(w);
  EXPECT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("does not fit"), std::string::npos);
}

TEST(ConnBlob, RejectsMalformedWithoutCrashing) {
  auto good = *EncodeBlob(Sample(2, true));
  // Every truncation fails.
  for (size_t n = 0; n < good.size; ++n) {
    ConnectionBlob t = good;
    t.size = n;
    EXPECT_FALSE(DecodeBlob(t).ok()) << n;
  }
  // Trailing byte fails.
  ConnectionBlob t = good;
  t.bytes[t.size++] = 0;
  EXPECT_FALSE(DecodeBlob(t).ok());
  // Bad magic / version / length / flags / zero fields.
  for (int field : {0, 1, 2, 3}) {
    ConnectionBlob c = good;
    c.bytes[field] ^= 0x40;
    EXPECT_FALSE(DecodeBlob(c).ok()) << field;
  }
  ConnectionBlob z = good;
  z.bytes[5] = z.bytes[6] = z.bytes[7] = z.bytes[8] = 0;
  EXPECT_FALSE(DecodeBlob(z).ok()) << "conn id 0";
  // Random garbage never crashes; anything accepted re-encodes identically.
  Rng rng(5);
  for (int i = 0; i < 20000; ++i) {
    ConnectionBlob r = good;
    const int flips = 1 + rng.Uniform(4);
    for (int f = 0; f < flips; ++f)
      r.bytes[rng.Uniform(good.size)] = rng.Next32();
    auto d = DecodeBlob(r);
    if (d.ok()) {
      auto re = EncodeBlob(*d);
      ASSERT_TRUE(re.ok());
      auto d2 = DecodeBlob(*re);
      ASSERT_TRUE(d2.ok());
      ExpectSame(*d, *d2);
    }
  }
  EXPECT_FALSE(ConnectionBlob::FromBytes(std::string(256, 'x')).ok());
  EXPECT_FALSE(ConnectionBlob::FromHex("abc").ok());
  EXPECT_FALSE(ConnectionBlob::FromHex("zz").ok());
}

}  // namespace
}  // namespace prism::runtime
