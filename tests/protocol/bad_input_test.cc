// Bad input: forged keys, out-of-range and wrapping addresses, truncated and
// garbled headers, unknown connections, wrong magic/version, oversize
// payloads, bad payload checksums. Every such packet is dropped with the
// right EngineStats counter and memory is never written (canary bytes
// around the target region, the region itself stays zero).
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "prism/engine.h"
#include "transport/base/random.h"
#include "transport/wire/packet.h"

namespace prism {
namespace {

constexpr size_t kCanary = 4096;
constexpr size_t kRegion = 64 * 1024;

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions ea;
    ea.seed = 1;
    EngineOptions eb;
    eb.seed = 2;
    a_ = std::make_unique<Engine>(ea);
    b_ = std::make_unique<Engine>(eb);
    ConnectionOptions o;
    o.congestion = "fixed";
    o.num_paths = 16;
    o.payload_checksum = false;
    ca_ = *a_->CreateConnection(o);
    cb_ = *b_->CreateConnection(o);
    ASSERT_TRUE(a_->Connect(ca_, b_->LocalInfo(cb_)).ok());
    ASSERT_TRUE(b_->Connect(cb_, a_->LocalInfo(ca_)).ok());
    mem_.assign(kCanary + kRegion + kCanary, 0xCC);
    std::memset(mem_.data() + kCanary, 0, kRegion);
    mr_ =
        *b_->RegisterMemory(mem_.data() + kCanary, kRegion, kAccessRemoteWrite);
    ro_ = *b_->RegisterMemory(ro_mem_, sizeof(ro_mem_), kAccessLocal);
    payload_.assign(65536, 0xEE);
    psn_ = a_->LocalInfo(ca_).initial_psn;
  }

  void ExpectMemoryUntouched() {
    for (size_t i = 0; i < kCanary; ++i) {
      ASSERT_EQ(mem_[i], 0xCC) << "canary before region, byte " << i;
      ASSERT_EQ(mem_[kCanary + kRegion + i], 0xCC) << "canary after, " << i;
    }
    for (size_t i = 0; i < kRegion; ++i) {
      ASSERT_EQ(mem_[kCanary + i], 0) << "region byte " << i;
    }
    for (uint8_t x : ro_mem_) ASSERT_EQ(x, 0);
  }

  // A well-formed DATA header aimed at b's region.
  wire::DataHeader Good(uint32_t len = 1024) {
    wire::DataHeader h;
    h.dst_conn = cb_;
    h.psn = psn_;
    h.msn = 0;
    h.msg_offset = 0;
    h.msg_len = len;
    h.remote_addr = mr_.addr;
    h.rkey = mr_.rkey;
    h.payload_len = static_cast<uint16_t>(len);
    h.path_id = 1;
    h.flags = wire::kFlagFirstOfMessage | wire::kFlagLastOfMessage;
    h.send_ts = 1;
    return h;
  }

  std::vector<uint8_t> Build(const wire::DataHeader& h) {
    std::vector<uint8_t> pkt(wire::kDataHeaderSize + h.payload_len);
    EXPECT_EQ(wire::EncodeData(h, pkt.data(), pkt.size()),
              wire::kDataHeaderSize);
    std::memcpy(pkt.data() + wire::kDataHeaderSize, payload_.data(),
                h.payload_len);
    return pkt;
  }

  void Inject(const std::vector<uint8_t>& pkt) {
    RxPacket rx;
    rx.data = pkt.data();
    rx.len = static_cast<uint32_t>(pkt.size());
    b_->OnReceive(now_++, &rx, 1);
  }

  uint64_t Drops(const EngineStats& s) {
    return s.rx_drop_malformed + s.rx_drop_bad_magic + s.rx_drop_bad_version +
           s.rx_drop_bad_checksum + s.rx_drop_payload_corrupt +
           s.rx_drop_unknown_conn + s.rx_drop_bad_key + s.rx_drop_bad_range +
           s.rx_drop_out_of_window + s.rx_drop_placement +
           s.rx_drop_inband_setup;
  }

  std::unique_ptr<Engine> a_, b_;
  ConnId ca_ = 0, cb_ = 0;
  std::vector<uint8_t> mem_;
  uint8_t ro_mem_[4096] = {};
  MemoryRegion mr_, ro_;
  std::vector<uint8_t> payload_;
  uint32_t psn_ = 0;
  Time now_ = 1;
};

TEST_F(BadInput, ForgedKeysAreRejected) {
  Rng r(99);
  int n = 0;
  for (int i = 0; i < 200; ++i) {
    auto h = Good();
    h.rkey = r.Next32();
    if (h.rkey == mr_.rkey || h.rkey == ro_.rkey) continue;
    h.psn = psn_ + static_cast<uint32_t>(i);
    Inject(Build(h));
    ++n;
  }
  // The lkey is not an rkey; a local-only region takes no remote writes.
  auto h = Good();
  h.rkey = mr_.lkey;
  Inject(Build(h));
  h.rkey = ro_.rkey;
  h.remote_addr = ro_.addr;
  Inject(Build(h));
  n += 2;
  const auto s = b_->stats();
  EXPECT_EQ(s.rx_drop_bad_key, static_cast<uint64_t>(n));
  EXPECT_EQ(Drops(s), static_cast<uint64_t>(n));
  EXPECT_EQ(b_->connection_stats(cb_)->rx_data_packets, 0u);
  ExpectMemoryUntouched();
}

TEST_F(BadInput, OutOfRangeAndWrappingAddressesAreRejected) {
  struct Case {
    uint64_t addr;
    uint32_t len;
    uint32_t off;
  };
  const uint64_t base = mr_.addr;
  const std::vector<Case> cases = {
      {base - 1, 16, 0},                  // starts one byte before
      {base - 4096, 4096, 0},             // entirely before
      {base + kRegion - 15, 16, 0},       // ends one byte past
      {base + kRegion, 1, 0},             // starts at the end
      {base + kRegion + 100000, 100, 0},  // far past
      {~uint64_t{0} - 10, 100, 0},        // addr + len wraps 2^64
      {~uint64_t{0}, 1, 0},               // last byte of the space
      {0, 64, 0},                         // null
      {base + 10, 64, 100},               // message base underflows region
      {50, 64, 100},                      // remote_addr < msg_offset
  };
  for (const Case& c : cases) {
    auto h = Good(c.len);
    h.remote_addr = c.addr;
    h.msg_offset = c.off;
    h.msg_len = c.off + c.len;
    h.flags =
        wire::kFlagLastOfMessage | (c.off == 0 ? wire::kFlagFirstOfMessage : 0);
    Inject(Build(h));
  }
  const auto s = b_->stats();
  EXPECT_EQ(s.rx_drop_bad_range, cases.size());
  EXPECT_EQ(Drops(s), cases.size());
  ExpectMemoryUntouched();
  // The NACKs say BAD_RANGE.
  TxPacket tx[64];
  const size_t n = b_->PollTransmit(now_, tx, 64);
  EXPECT_EQ(n, cases.size());
  for (size_t i = 0; i < n; ++i) {
    wire::Packet p;
    ASSERT_EQ(wire::Decode(tx[i].header, tx[i].header_len, &p),
              wire::DecodeError::kOk);
    EXPECT_EQ(p.type, wire::PacketType::kNack);
    EXPECT_EQ(p.nack.reason, wire::NackReason::kBadRange);
  }
}

TEST_F(BadInput, TruncatedHeadersAreMalformed) {
  const auto pkt = Build(Good(100));
  // Every prefix shorter than the header (the payload then is "absent" or
  // partial: both are rejected without a write).
  uint64_t injected = 0;
  for (size_t len = 0; len < wire::kDataHeaderSize; ++len) {
    std::vector<uint8_t> p(pkt.begin(), pkt.begin() + len);
    RxPacket rx;
    rx.data = p.empty() ? nullptr : p.data();
    rx.len = static_cast<uint32_t>(len);
    b_->OnReceive(now_++, &rx, 1);
    ++injected;
  }
  // Partial payloads.
  for (size_t len = wire::kDataHeaderSize + 1; len < pkt.size(); len += 7) {
    std::vector<uint8_t> p(pkt.begin(), pkt.begin() + len);
    Inject(p);
    ++injected;
  }
  const auto s = b_->stats();
  EXPECT_EQ(Drops(s), injected);
  EXPECT_EQ(s.rx_drop_malformed, injected);
  ExpectMemoryUntouched();
}

TEST_F(BadInput, GarbledHeadersAreDroppedByChecksumOrFieldChecks) {
  Rng r(7);
  const auto good = Build(Good(256));
  uint64_t injected = 0;
  for (int i = 0; i < 2000; ++i) {
    auto p = good;
    const int flips = 1 + static_cast<int>(r.Uniform(4));
    for (int k = 0; k < flips; ++k) {
      p[r.Uniform(wire::kDataHeaderSize)] ^=
          static_cast<uint8_t>(1u << r.Uniform(8));
    }
    if (p == good) continue;  // two flips of the same bit cancelled
    Inject(p);
    ++injected;
  }
  // Pure noise of random lengths.
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> p(r.Uniform(200));
    for (auto& x : p) x = static_cast<uint8_t>(r.Next());
    if (i % 2 == 0 && p.size() >= 4) {  // plausible magic/version
      p[0] = 0x52;
      p[1] = 0x50;
      p[2] = wire::kVersion;
      p[3] = static_cast<uint8_t>(1 + r.Uniform(8));
    }
    Inject(p);
    ++injected;
  }
  const auto s = b_->stats();
  EXPECT_EQ(Drops(s), injected);
  EXPECT_GT(s.rx_drop_bad_checksum, 0u);
  EXPECT_GT(s.rx_drop_bad_magic, 0u);
  EXPECT_EQ(b_->connection_stats(cb_)->rx_data_packets, 0u);
  ExpectMemoryUntouched();
}

TEST_F(BadInput, WrongMagicAndVersionAreCounted) {
  auto p = Build(Good());
  auto bad_magic = p;
  bad_magic[0] ^= 0xFF;
  Inject(bad_magic);
  auto bad_version = p;
  bad_version[2] = wire::kVersion + 1;
  Inject(bad_version);
  auto bad_version0 = p;
  bad_version0[2] = 0;
  Inject(bad_version0);
  const auto s = b_->stats();
  EXPECT_EQ(s.rx_drop_bad_magic, 1u);
  EXPECT_EQ(s.rx_drop_bad_version, 2u);
  EXPECT_EQ(Drops(s), 3u);
  ExpectMemoryUntouched();
}

TEST_F(BadInput, UnknownConnectionIdsAreDropped) {
  for (uint32_t id : {0u, 2u, 99u, 0xFFFFFFFFu}) {
    auto h = Good();
    h.dst_conn = id;
    Inject(Build(h));
    // Control packets too.
    wire::SackHeader sh;
    sh.dst_conn = id;
    std::vector<uint8_t> sack(wire::kSackHeaderSize);
    ASSERT_GT(wire::EncodeSack(sh, sack.data(), sack.size()), 0u);
    Inject(sack);
  }
  // A connection that exists but is not connected yet.
  ConnectionOptions o;
  o.congestion = "fixed";
  const ConnId lone = *b_->CreateConnection(o);
  auto h = Good();
  h.dst_conn = lone;
  Inject(Build(h));
  const auto s = b_->stats();
  EXPECT_EQ(s.rx_drop_unknown_conn, 9u);
  EXPECT_EQ(Drops(s), 9u);
  ExpectMemoryUntouched();
}

TEST_F(BadInput, InbandConnectIsCountedAsSetupNotMalformed) {
  for (bool ack : {false, true}) {
    wire::ConnectHeader h;
    h.dst_conn = ack ? cb_ : 0;
    h.src_conn = 77;
    h.num_paths = 16;
    h.num_planes = 1;
    h.mtu_payload = 4096;
    h.nonce = 5;
    std::vector<uint8_t> p(wire::kMaxHeaderSize);
    p.resize(wire::EncodeConnect(h, ack, p.data(), p.size()));
    ASSERT_FALSE(p.empty());
    Inject(p);
  }
  const auto s = b_->stats();
  EXPECT_EQ(s.rx_drop_inband_setup, 2u);
  EXPECT_EQ(s.rx_drop_malformed, 0u);
  EXPECT_EQ(Drops(s), 2u);
  EXPECT_NE(s.ToString().find("rx_drop_inband_setup=2"), std::string::npos);
  ExpectMemoryUntouched();
}

TEST_F(BadInput, OversizePayloadIsMalformed) {
  // The peer's MTU is 4096: a 4097..65535-byte payload cannot be legitimate.
  for (uint32_t len : {4097u, 8192u, 65535u}) {
    auto h = Good(len);
    Inject(Build(h));
  }
  // Payload length field disagreeing with the bytes present.
  auto p = Build(Good(1000));
  p.resize(p.size() + 10);
  Inject(p);
  const auto s = b_->stats();
  EXPECT_EQ(s.rx_drop_malformed, 4u);
  EXPECT_EQ(Drops(s), 4u);
  ExpectMemoryUntouched();
}

TEST_F(BadInput, PayloadChecksumMismatchIsCorrupt) {
  auto h = Good(512);
  h.flags |= wire::kFlagPayloadCrc;
  h.payload_crc = wire::Crc32c(payload_.data(), 512) ^ 1;
  Inject(Build(h));
  const auto s = b_->stats();
  EXPECT_EQ(s.rx_drop_payload_corrupt, 1u);
  EXPECT_EQ(Drops(s), 1u);
  ExpectMemoryUntouched();
}

TEST_F(BadInput, PsnOutsideTheWindowIsDropped) {
  auto h = Good();
  h.psn = psn_ + 1000000;
  Inject(Build(h));
  const auto s = b_->stats();
  EXPECT_EQ(s.rx_drop_out_of_window, 1u);
  ExpectMemoryUntouched();
}

TEST_F(BadInput, ForgedControlPacketsDoNotDisturbTheSender) {
  // SACK/NACK/PROBE_ACK for PSNs and paths a never sent are ignored.
  wire::SackHeader sh;
  sh.dst_conn = ca_;
  sh.cum_psn = psn_ + 100000;
  sh.bitmap_base = psn_ + 5;
  for (auto& w : sh.bitmap) w = ~uint64_t{0};
  std::vector<uint8_t> sack(wire::kSackHeaderSize);
  wire::EncodeSack(sh, sack.data(), sack.size());
  wire::NackHeader nh;
  nh.dst_conn = ca_;
  nh.psn = psn_ + 3;
  nh.reason = wire::NackReason::kBadKey;
  std::vector<uint8_t> nack(wire::kNackHeaderSize);
  wire::EncodeNack(nh, nack.data(), nack.size());
  wire::ProbeHeader ph;
  ph.dst_conn = ca_;
  ph.path_id = 60000;
  std::vector<uint8_t> pa(wire::kProbeHeaderSize);
  wire::EncodeProbe(ph, true, pa.data(), pa.size());
  for (auto* p : {&sack, &nack, &pa}) {
    RxPacket rx;
    rx.data = p->data();
    rx.len = static_cast<uint32_t>(p->size());
    a_->OnReceive(1, &rx, 1);
  }
  EXPECT_EQ(a_->stats().rx_drop_malformed, 1u);  // the probe's path id
  Completion c[4];
  EXPECT_EQ(a_->PollCompletions(c, 4), 0u);
  // The connection still works afterwards.
  std::vector<uint8_t> src(1000, 0x11);
  auto smr = *a_->RegisterMemory(src.data(), src.size(), kAccessLocal);
  WriteRequest w;
  w.wr_id = 5;
  w.local_addr = src.data();
  w.length = src.size();
  w.lkey = smr.lkey;
  w.remote_addr = mr_.addr;
  w.rkey = mr_.rkey;
  ASSERT_TRUE(a_->PostWrite(2, ca_, w).ok());
  TxPacket tx[8];
  const size_t n = a_->PollTransmit(2, tx, 8);
  ASSERT_EQ(n, 1u);
  std::vector<uint8_t> bytes(tx[0].header, tx[0].header + tx[0].header_len);
  bytes.insert(bytes.end(), tx[0].payload, tx[0].payload + tx[0].payload_len);
  Inject(bytes);
  EXPECT_EQ(mem_[kCanary], 0x11);
  EXPECT_EQ(mem_[kCanary + 999], 0x11);
  EXPECT_EQ(mem_[kCanary + 1000], 0);
}

}  // namespace
}  // namespace prism
