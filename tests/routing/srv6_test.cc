// Tests for routing/srv6: address text forms, uSID carrier encode/decode and
// the switch shift, SRH (RFC 8754) round trips with TLVs and every malformed
// case, entropy fields, IPv6 header and UDP checksums over the final
// destination.
#include "routing/srv6.h"

#include <vector>

#include "gtest/gtest.h"

namespace prism::routing {
namespace {

Ipv6Address A(std::string_view s) {
  absl::StatusOr<Ipv6Address> a = Ipv6Address::Parse(s);
  EXPECT_TRUE(a.ok()) << s;
  return a.ok() ? *a : Ipv6Address{};
}

TEST(Ipv6AddressTest, TextForms) {
  EXPECT_EQ(A("::").ToString(), "::");
  EXPECT_EQ(A("::1").ToString(), "::1");
  EXPECT_EQ(A("fcbb:bbbb:2001:1000::").ToString(), "fcbb:bbbb:2001:1000::");
  EXPECT_EQ(A("2001:db8:0:0:1:0:0:1").ToString(), "2001:db8::1:0:0:1");
  EXPECT_EQ(A("2001:0db8:0000:0000:0000:0000:0000:0001").ToString(),
            "2001:db8::1");
  EXPECT_EQ(A("1:0:2:3:4:5:6:7").ToString(), "1:0:2:3:4:5:6:7");  // no ::
  EXPECT_EQ(A("FC00:1::").word(0), 0xfc00);
  EXPECT_EQ(A("fc00:1::").word(1), 1);
  for (const char* bad :
       {"", ":", ":::", "1::2::3", "12345::", "1:2:3:4:5:6:7",
        "1:2:3:4:5:6:7:8:9", "g::", "1:", ":1", "1::2:", "1:2:3:4:5:6:7::8"}) {
    EXPECT_FALSE(Ipv6Address::Parse(bad).ok()) << bad;
  }
}

TEST(UsidTest, EncodeDecodeRoundTrip) {
  for (int n = 1; n <= 6; ++n) {
    UsidCarrier c;
    c.num_usids = static_cast<uint8_t>(n);
    for (int i = 0; i < n; ++i) c.usids[i] = static_cast<uint16_t>(0x1000 + i);
    Ipv6Address a;
    ASSERT_EQ(EncodeUsidCarrier(c, &a), UsidStatus::kOk);
    EXPECT_EQ(a.word(0), 0xfcbb);
    EXPECT_EQ(a.word(1), 0xbbbb);
    for (int i = n; i < 6; ++i) EXPECT_EQ(a.word(2 + i), 0);
    UsidCarrier d;
    ASSERT_EQ(DecodeUsidCarrier(a, &d), UsidStatus::kOk);
    EXPECT_EQ(d.num_usids, n);
    for (int i = 0; i < n; ++i) EXPECT_EQ(d.usids[i], c.usids[i]);
  }
  UsidCarrier c;
  c.num_usids = 3;
  c.usids = {0xa1, 0xa3, 0xa4};
  Ipv6Address a;
  ASSERT_EQ(EncodeUsidCarrier(c, &a), UsidStatus::kOk);
  EXPECT_EQ(a.ToString(), "fcbb:bbbb:a1:a3:a4::");
}

TEST(UsidTest, EncodeRejects) {
  UsidCarrier c;
  c.num_usids = 7;
  Ipv6Address a = A("::1");
  EXPECT_EQ(EncodeUsidCarrier(c, &a), UsidStatus::kTooMany);
  c.num_usids = 2;
  c.usids = {5, 0};
  EXPECT_EQ(EncodeUsidCarrier(c, &a), UsidStatus::kZeroUsid);
  EXPECT_EQ(a, A("::1"));  // untouched on error
}

TEST(UsidTest, DecodeRejects) {
  UsidCarrier c;
  EXPECT_EQ(DecodeUsidCarrier(A("fcbb:bbbc:1::"), &c), UsidStatus::kWrongBlock);
  EXPECT_EQ(DecodeUsidCarrier(A("fcbb:bbbb::"), &c), UsidStatus::kEmpty);
  EXPECT_EQ(DecodeUsidCarrier(A("fcbb:bbbb:1:0:2::"), &c), UsidStatus::kGap);
  EXPECT_EQ(DecodeUsidCarrier(A("fcbb:bbbb:0:0:0:0:0:1"), &c),
            UsidStatus::kGap);
  EXPECT_EQ(DecodeUsidCarrier(A("fd00:1:1::"), &c, 0xfd000001),
            UsidStatus::kOk);
  EXPECT_EQ(c.num_usids, 1);
  EXPECT_STREQ(UsidStatusName(UsidStatus::kGap), "data_after_end_of_carrier");
}

TEST(UsidTest, SwitchShift) {
  // The kernel rig's carrier: fcbb:bbbb:a1:a3:a4:2:: through a1, a3, a4.
  Ipv6Address d = A("fcbb:bbbb:a1:a3:a4:2::");
  EXPECT_EQ(UsidShift(&d, 0xa3), UsidAction::kNotLocal);
  EXPECT_EQ(d, A("fcbb:bbbb:a1:a3:a4:2::"));
  EXPECT_EQ(UsidShift(&d, 0xa1), UsidAction::kShifted);
  EXPECT_EQ(d.ToString(), "fcbb:bbbb:a3:a4:2::");
  EXPECT_EQ(UsidShift(&d, 0xa3), UsidAction::kShifted);
  EXPECT_EQ(UsidShift(&d, 0xa4), UsidAction::kShifted);
  EXPECT_EQ(d.ToString(), "fcbb:bbbb:2::");
  EXPECT_EQ(UsidShift(&d, 0x2), UsidAction::kEndOfCarrier);
  EXPECT_EQ(d.ToString(), "fcbb:bbbb:2::");
  Ipv6Address full = A("fcbb:bbbb:1:2:3:4:5:6");
  EXPECT_EQ(UsidShift(&full, 1), UsidAction::kShifted);
  EXPECT_EQ(full.ToString(), "fcbb:bbbb:2:3:4:5:6:0");
  Ipv6Address other = A("2001:db8:1::");
  EXPECT_EQ(UsidShift(&other, 1), UsidAction::kNotCarrier);
  EXPECT_EQ(UsidShifted(A("fcbb:bbbb:1:2:3::"), 2), A("fcbb:bbbb:3::"));
  EXPECT_EQ(UsidShifted(A("fcbb:bbbb:1:2:3:4:5:6"), 9), A("fcbb:bbbb::"));
}

Srh ThreeHop() {
  std::vector<Ipv6Address> travel = {A("fc00:0:2000::"), A("fc00:0:1001::"),
                                     A("fcbb:bbbb:8000:5::")};
  Srh s;
  EXPECT_EQ(MakeSrh(travel, kIpProtoUdp, &s), SrhStatus::kOk);
  return s;
}

TEST(SrhTest, MakeSrhReversesAndSetsCounters) {
  Srh s = ThreeHop();
  EXPECT_EQ(s.num_segments, 3);
  EXPECT_EQ(s.last_entry, 2);
  EXPECT_EQ(s.segments_left, 2);
  EXPECT_EQ(s.segments[0], A("fcbb:bbbb:8000:5::"));  // final destination
  EXPECT_EQ(s.segments[2], A("fc00:0:2000::"));       // first segment
  EXPECT_EQ(s.active(), A("fc00:0:2000::"));
  Ipv6Address dst = s.active();
  EXPECT_TRUE(SrhAdvance(&s, &dst));
  EXPECT_EQ(dst, A("fc00:0:1001::"));
  EXPECT_TRUE(SrhAdvance(&s, &dst));
  EXPECT_EQ(dst, A("fcbb:bbbb:8000:5::"));
  EXPECT_EQ(s.segments_left, 0);
  EXPECT_FALSE(SrhAdvance(&s, &dst));
  Srh bad;
  EXPECT_EQ(MakeSrh({}, kIpProtoUdp, &bad), SrhStatus::kInvalid);
  std::vector<Ipv6Address> many(17);
  EXPECT_EQ(MakeSrh(many, kIpProtoUdp, &bad), SrhStatus::kInvalid);
}

TEST(SrhTest, WireLayout) {
  Srh s = ThreeHop();
  s.flags = 0x5a;
  s.tag = 0xbeef;
  uint8_t buf[kMaxSrhBytes];
  size_t n = 0;
  ASSERT_EQ(EncodeSrh(s, buf, &n), SrhStatus::kOk);
  ASSERT_EQ(n, 8u + 48);
  EXPECT_EQ(buf[0], 17);  // next header
  EXPECT_EQ(buf[1], 6);   // hdr ext len: (56 - 8) / 8
  EXPECT_EQ(buf[2], 4);   // routing type
  EXPECT_EQ(buf[3], 2);   // segments left
  EXPECT_EQ(buf[4], 2);   // last entry
  EXPECT_EQ(buf[5], 0x5a);
  EXPECT_EQ(buf[6], 0xbe);
  EXPECT_EQ(buf[7], 0xef);
  EXPECT_EQ(buf[8], 0xfc);  // segments[0] = fcbb:bbbb:8000:5::
  EXPECT_EQ(buf[9], 0xbb);
  EXPECT_EQ(buf[12], 0x80);
  EXPECT_EQ(buf[8 + 32], 0xfc);  // segments[2] = fc00:0:2000::
  EXPECT_EQ(buf[8 + 32 + 1], 0x00);
  EXPECT_EQ(buf[8 + 32 + 4], 0x20);
  EXPECT_EQ(s.encoded_size(), n);
}

TEST(SrhTest, RoundTripWithTlvs) {
  for (int hmac_len : {-1, 0, 8, 32}) {
    for (int other_len : {-1, 0, 1, 3, 6, 7, 32}) {
      Srh s = ThreeHop();
      s.segments_left = 1;
      if (hmac_len >= 0) {
        s.hmac.present = true;
        s.hmac.d_flag = hmac_len == 8;
        s.hmac.key_id = 0xdeadbeef;
        s.hmac.len = static_cast<uint8_t>(hmac_len);
        for (int i = 0; i < hmac_len; ++i) s.hmac.hmac[i] = uint8_t(i * 7 + 1);
      }
      if (other_len >= 0) {
        s.other.present = true;
        s.other.type = 0x80;
        s.other.len = static_cast<uint8_t>(other_len);
        for (int i = 0; i < other_len; ++i)
          s.other.value[i] = uint8_t(0xa0 + i);
      }
      uint8_t buf[kMaxSrhBytes + 8];
      size_t n = 0;
      ASSERT_EQ(EncodeSrh(s, buf, &n), SrhStatus::kOk);
      EXPECT_EQ(n % 8, 0u);
      EXPECT_EQ(n, s.encoded_size());
      Srh d;
      size_t used = 0;
      ASSERT_EQ(DecodeSrh(std::span<const uint8_t>(buf, n), &d, &used),
                SrhStatus::kOk)
          << hmac_len << " " << other_len;
      EXPECT_EQ(used, n);
      EXPECT_EQ(d.num_segments, 3);
      EXPECT_EQ(d.segments_left, 1);
      for (int i = 0; i < 3; ++i) EXPECT_EQ(d.segments[i], s.segments[i]);
      EXPECT_EQ(d.hmac.present, s.hmac.present);
      if (s.hmac.present) {
        EXPECT_EQ(d.hmac.d_flag, s.hmac.d_flag);
        EXPECT_EQ(d.hmac.key_id, 0xdeadbeefu);
        EXPECT_EQ(d.hmac.len, s.hmac.len);
        EXPECT_EQ(d.hmac.hmac, s.hmac.hmac);
      }
      EXPECT_EQ(d.other.present, s.other.present);
      if (s.other.present) {
        EXPECT_EQ(d.other.len, s.other.len);
        EXPECT_EQ(d.other.value, s.other.value);
      }
      // The padding that was needed is there as Pad1 / PadN.
      const size_t tlv = (s.hmac.present ? 8 + s.hmac.len : 0) +
                         (s.other.present ? 2 + s.other.len : 0);
      EXPECT_EQ(d.padding_bytes, (8 - tlv % 8) % 8);
      // Re-encoding the decoded header gives the same bytes.
      uint8_t again[kMaxSrhBytes + 8];
      size_t n2 = 0;
      ASSERT_EQ(EncodeSrh(d, again, &n2), SrhStatus::kOk);
      ASSERT_EQ(n2, n);
      EXPECT_EQ(0, memcmp(buf, again, n));
    }
  }
}

TEST(SrhTest, EncodeRejects) {
  Srh s = ThreeHop();
  uint8_t buf[kMaxSrhBytes];
  size_t n = 12345;
  EXPECT_EQ(EncodeSrh(s, std::span<uint8_t>(buf, 55), &n),
            SrhStatus::kBufferTooSmall);
  EXPECT_EQ(n, 12345u);
  Srh bad = s;
  bad.last_entry = 1;
  EXPECT_EQ(EncodeSrh(bad, buf, &n), SrhStatus::kInvalid);
  bad = s;
  bad.segments_left = 4;
  EXPECT_EQ(EncodeSrh(bad, buf, &n), SrhStatus::kInvalid);
  bad = s;
  bad.hmac.present = true;
  bad.hmac.len = 12;
  EXPECT_EQ(EncodeSrh(bad, buf, &n), SrhStatus::kInvalid);
  bad = s;
  bad.other.present = true;
  bad.other.type = kTlvHmac;
  EXPECT_EQ(EncodeSrh(bad, buf, &n), SrhStatus::kInvalid);
  bad = s;
  bad.num_segments = 0;
  EXPECT_EQ(EncodeSrh(bad, buf, &n), SrhStatus::kInvalid);
}

// A valid 1-segment SRH with room for TLV bytes appended by the test.
std::vector<uint8_t> Hdr(std::vector<uint8_t> tlvs) {
  std::vector<uint8_t> b = {17, 0, 4, 0, 0, 0, 0, 0};
  b.resize(24, 0x11);
  b.insert(b.end(), tlvs.begin(), tlvs.end());
  b[1] = static_cast<uint8_t>((b.size() - 8 + 7) / 8);
  b.resize(8 + 8 * b[1], 0);
  return b;
}

SrhStatus Dec(const std::vector<uint8_t>& b) {
  Srh s;
  size_t used = 0;
  return DecodeSrh(b, &s, &used);
}

TEST(SrhTest, DecodeRejectsMalformed) {
  EXPECT_EQ(Dec({}), SrhStatus::kTruncated);
  EXPECT_EQ(Dec({17, 0, 4, 0, 0, 0, 0}), SrhStatus::kTruncated);
  std::vector<uint8_t> b = Hdr({});
  EXPECT_EQ(Dec(b), SrhStatus::kOk);
  b.pop_back();
  EXPECT_EQ(Dec(b), SrhStatus::kTruncated);  // hdr ext len says more
  b = Hdr({});
  b[2] = 2;
  EXPECT_EQ(Dec(b), SrhStatus::kWrongType);
  b = Hdr({});
  b[4] = 1;  // two segments in a 16-byte body
  EXPECT_EQ(Dec(b), SrhStatus::kBadLength);
  b = Hdr({});
  b[3] = 1;  // SL = last_entry + 1: allowed by RFC 8754
  EXPECT_EQ(Dec(b), SrhStatus::kOk);
  b[3] = 2;
  EXPECT_EQ(Dec(b), SrhStatus::kBadSegmentsLeft);
  std::vector<uint8_t> big(8 + 17 * 16, 0);
  big[1] = 34;
  big[2] = 4;
  big[4] = 16;
  EXPECT_EQ(Dec(big), SrhStatus::kTooManySegments);
  // TLVs: PadN running past the end, a length byte missing, oversized PadN,
  // bad HMAC lengths, two HMACs, an oversized other TLV.
  b = Hdr({4, 9});
  EXPECT_EQ(Dec(b), SrhStatus::kBadTlv);
  b = Hdr({0, 0, 0, 0, 0, 0, 0, 4});
  EXPECT_EQ(Dec(b), SrhStatus::kBadTlv);
  b = Hdr({4, 6, 0, 0, 0, 0, 0, 0});
  EXPECT_EQ(Dec(b), SrhStatus::kBadPadding);
  b = Hdr({5, 5, 0, 0, 0, 0, 0, 4, 0});
  EXPECT_EQ(Dec(b), SrhStatus::kBadHmac);
  b = Hdr({5, 10, 0, 0, 1, 2, 3, 4, 9, 9, 9, 9, 4, 0, 0, 0});
  EXPECT_EQ(Dec(b), SrhStatus::kBadHmac);  // HMAC of 4 bytes
  b = Hdr({5, 6, 0, 0, 0, 0, 0, 1, 5, 6, 0, 0, 0, 0, 0, 2});
  EXPECT_EQ(Dec(b), SrhStatus::kBadHmac);  // two HMAC TLVs
  std::vector<uint8_t> t = {0x81, 38};
  t.resize(40, 0);
  b = Hdr(t);
  EXPECT_EQ(Dec(b), SrhStatus::kTooManyTlvBytes);
  // Unknown TLVs beyond the first are skipped and counted; Pad1s counted.
  b = Hdr({0x81, 0, 0x82, 1, 7, 0, 0x83, 0});
  Srh s;
  size_t used = 0;
  ASSERT_EQ(DecodeSrh(b, &s, &used), SrhStatus::kOk);
  EXPECT_TRUE(s.other.present);
  EXPECT_EQ(s.other.type, 0x81);
  EXPECT_EQ(s.skipped_tlvs, 2);
  EXPECT_EQ(s.padding_bytes, 1);
  EXPECT_STREQ(SrhStatusName(SrhStatus::kBadHmac), "bad_hmac_tlv");
}

TEST(SrhTest, DecodeNeverReadsPastSpan) {
  // Every truncation of a valid header with TLVs fails cleanly.
  Srh s = ThreeHop();
  s.hmac.present = true;
  s.hmac.len = 16;
  s.other.present = true;
  s.other.type = 0x80;
  s.other.len = 5;
  uint8_t buf[kMaxSrhBytes];
  size_t n = 0;
  ASSERT_EQ(EncodeSrh(s, buf, &n), SrhStatus::kOk);
  for (size_t len = 0; len < n; ++len) {
    std::vector<uint8_t> copy(buf, buf + len);  // exact-size heap copy
    Srh d;
    size_t used = 0;
    EXPECT_EQ(DecodeSrh(copy, &d, &used), SrhStatus::kTruncated) << len;
  }
}

TEST(EntropyTest, Fields) {
  EntropyFields f = EntropyToFields(0xC123ABCD);
  EXPECT_EQ(f.udp_src_port, 0xC123);
  EXPECT_EQ(f.flow_label, 0x8ABCDu);
  EXPECT_LE(f.flow_label, 0xFFFFFu);
  EXPECT_EQ(FieldsToEntropy(f), 0xC123ABCDu);
  EXPECT_NE(EntropyToFields(0).flow_label, 0u);  // never "no label"
}

TEST(Ipv6HeaderTest, RoundTrip) {
  Ipv6Header h;
  h.traffic_class = 0xb8;
  h.flow_label = 0xABCDE;
  h.payload_length = 1234;
  h.next_header = kIpProtoRouting;
  h.hop_limit = 7;
  h.src = A("fcbb:bbbb:8000:1::");
  h.dst = A("fc00:0:2000::");
  uint8_t b[40];
  ASSERT_TRUE(EncodeIpv6Header(h, b));
  EXPECT_EQ(b[0], 0x6b);
  EXPECT_EQ(b[1], 0x8a);
  Ipv6Header d;
  ASSERT_TRUE(DecodeIpv6Header(b, &d));
  EXPECT_EQ(d.traffic_class, h.traffic_class);
  EXPECT_EQ(d.flow_label, h.flow_label);
  EXPECT_EQ(d.payload_length, 1234);
  EXPECT_EQ(d.next_header, kIpProtoRouting);
  EXPECT_EQ(d.hop_limit, 7);
  EXPECT_EQ(d.src, h.src);
  EXPECT_EQ(d.dst, h.dst);
  EXPECT_FALSE(DecodeIpv6Header(std::span<const uint8_t>(b, 39), &d));
  b[0] = 0x4b;
  EXPECT_FALSE(DecodeIpv6Header(b, &d));
  h.flow_label = 1 << 20;
  EXPECT_FALSE(EncodeIpv6Header(h, b));
  EXPECT_FALSE(EncodeIpv6Header(h, std::span<uint8_t>(b, 39)));
}

TEST(ChecksumTest, KnownValueAndVerify) {
  // Hand-computed: src ::1, dst ::2, ports 1 -> 2, length 10, payload "ab".
  const Ipv6Address src = A("::1"), dst = A("::2");
  uint8_t udp[10] = {0, 1, 0, 2, 0, 10, 0, 0, 'a', 'b'};
  // Sum: 1 + 2 + 10 (len) + 17 + 1 + 2 + 10 + 0x6162 = 0x618d -> ~ = 0x9e72.
  EXPECT_EQ(ChecksumUdp6(src, dst, udp), 0x9e72);
  udp[6] = 0x9e;
  udp[7] = 0x72;
  EXPECT_TRUE(VerifyUdp6(src, dst, udp));
  EXPECT_FALSE(VerifyUdp6(src, A("::3"), udp));
  udp[9] ^= 1;
  EXPECT_FALSE(VerifyUdp6(src, dst, udp));
  udp[6] = udp[7] = 0;
  EXPECT_FALSE(VerifyUdp6(src, dst, udp));  // zero checksum is invalid
}

TEST(ChecksumTest, PacketCoversFinalDestination) {
  const Ipv6Address src = A("fcbb:bbbb:8000:1::");
  const Ipv6Address final_dst = A("fcbb:bbbb:8000:2::");
  const Ipv6Address carrier = A("fcbb:bbbb:2001:1001:8000:2::");
  std::vector<uint8_t> payload(333);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = uint8_t(i * 13);
  // uSID carrier: no SRH, destination rewritten on the way.
  Udp6Packet p;
  p.ip.src = src;
  p.ip.dst = carrier;
  p.ip.flow_label = EntropyToFields(0xC0010005).flow_label;
  p.src_port = 0xC001;
  p.dst_port = 4791;
  p.final_dst = final_dst;
  p.payload = payload;
  std::vector<uint8_t> buf(2000);
  size_t n = 0;
  ASSERT_EQ(EncodeUdp6Packet(p, buf, &n), PacketStatus::kOk);
  ASSERT_EQ(n, 40u + 8 + 333);
  Ipv6Header h;
  ASSERT_TRUE(DecodeIpv6Header(buf, &h));
  EXPECT_EQ(h.dst, carrier);
  EXPECT_EQ(h.next_header, kIpProtoUdp);
  EXPECT_EQ(h.payload_length, 8 + 333);
  // Two switches shift the carrier; the receiver's view verifies.
  Ipv6Address d = h.dst;
  ASSERT_EQ(UsidShift(&d, 0x2001), UsidAction::kShifted);
  ASSERT_EQ(UsidShift(&d, 0x1001), UsidAction::kShifted);
  EXPECT_EQ(d, final_dst);
  std::span<const uint8_t> udp(buf.data() + 40, 8 + 333);
  EXPECT_TRUE(VerifyUdp6(h.src, d, udp));
  EXPECT_FALSE(VerifyUdp6(h.src, carrier, udp));
  // SRH: checksum over the last segment, not the first.
  Srh srh;
  std::vector<Ipv6Address> travel = {A("fc00:0:2001::"), A("fc00:0:1001::"),
                                     final_dst};
  ASSERT_EQ(MakeSrh(travel, kIpProtoUdp, &srh), SrhStatus::kOk);
  p.srh = &srh;
  p.ip.dst = srh.active();
  ASSERT_EQ(EncodeUdp6Packet(p, buf, &n), PacketStatus::kOk);
  ASSERT_EQ(n, 40u + 56 + 8 + 333);
  ASSERT_TRUE(DecodeIpv6Header(buf, &h));
  EXPECT_EQ(h.next_header, kIpProtoRouting);
  Srh got;
  size_t used = 0;
  ASSERT_EQ(DecodeSrh(std::span<const uint8_t>(buf).subspan(40), &got, &used),
            SrhStatus::kOk);
  EXPECT_EQ(used, 56u);
  EXPECT_TRUE(VerifyUdp6(h.src, got.segments[0],
                         std::span<const uint8_t>(buf.data() + 96, 341)));
  // Errors.
  EXPECT_EQ(EncodeUdp6Packet(p, std::span<uint8_t>(buf.data(), 100), &n),
            PacketStatus::kBufferTooSmall);
  std::vector<uint8_t> huge(70000);
  p.payload = huge;
  std::vector<uint8_t> hbuf(80000);
  EXPECT_EQ(EncodeUdp6Packet(p, hbuf, &n), PacketStatus::kTooLong);
  srh.next_header = 6;
  p.payload = payload;
  EXPECT_EQ(EncodeUdp6Packet(p, buf, &n), PacketStatus::kBadSrh);
}

}  // namespace
}  // namespace prism::routing
