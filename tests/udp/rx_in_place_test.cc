// Engine::RxDestination, the engine half of receive in place: a DATA
// header resolves to the payload's final address only when OnReceive would
// accept and place the packet; within one batch (calls since the last
// OnReceive) a second copy of a PSN, a packet whose message fields disagree
// with another of the batch, or more bytes than the message holds resolve
// to nullptr; a packet handed to OnReceive with its payload already at the
// resolved address is accepted without being copied again.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "prism/engine.h"
#include "transport/wire/packet.h"

namespace prism {
namespace {

constexpr uint32_t kMtu = 1000;
constexpr size_t kHdr = wire::kDataHeaderSize;

struct Wire {
  std::vector<uint8_t> hdr;  // the DATA header
  std::vector<uint8_t> payload;
};

class InPlace : public ::testing::Test {
 protected:
  void SetUp() override { Make(EngineOptions{}, false); }

  void Make(EngineOptions eo, bool crc) {
    eo.mtu_payload = kMtu;
    tx_ = std::make_unique<Engine>(eo);
    eo.seed = 2;
    rx_ = std::make_unique<Engine>(eo);
    ConnectionOptions co;
    co.num_paths = 4;
    co.payload_checksum = crc;
    ct_ = *tx_->CreateConnection(co);
    cr_ = *rx_->CreateConnection(co);
    ASSERT_TRUE(tx_->Connect(ct_, rx_->LocalInfo(cr_)).ok());
    ASSERT_TRUE(rx_->Connect(cr_, tx_->LocalInfo(ct_)).ok());
    src_.assign(64 << 10, 0);
    for (size_t i = 0; i < src_.size(); ++i) src_[i] = uint8_t(i * 7 + 3);
    dst_.assign(64 << 10, 0xEE);
    ms_ = *tx_->RegisterMemory(src_.data(), src_.size(), kAccessLocal);
    md_ = *rx_->RegisterMemory(dst_.data(), dst_.size(), kAccessRemoteWrite);
  }

  // Posts a WRITE of `len` bytes from src+off to dst+off; returns its DATA
  // packets as they would travel.
  std::vector<Wire> Write(uint64_t off, uint64_t len) {
    WriteRequest w;
    w.local_addr = src_.data() + off;
    w.length = len;
    w.lkey = ms_.lkey;
    w.remote_addr = md_.addr + off;
    w.rkey = md_.rkey;
    EXPECT_TRUE(tx_->PostWrite(now_, ct_, w).ok());
    std::vector<Wire> out;
    TxPacket tx[64];
    const size_t n = tx_->PollTransmit(now_, tx, 64);
    for (size_t i = 0; i < n; ++i) {
      if (tx[i].header_len != kHdr) continue;
      Wire p;
      p.hdr.assign(tx[i].header, tx[i].header + kHdr);
      p.payload.assign(tx[i].payload, tx[i].payload + tx[i].payload_len);
      out.push_back(std::move(p));
    }
    return out;
  }

  uint8_t* Resolve(const Wire& p) {
    return rx_->RxDestination(p.hdr.data(), kHdr, p.payload.size());
  }
  // Hands a packet over split; its payload at `where` (copied there first
  // when it is the resolved address, as the datapath's read would).
  void Deliver(const Wire& p, uint8_t* where) {
    RxPacket r;
    r.data = p.hdr.data();
    r.len = kHdr;
    if (where != nullptr) {
      memcpy(where, p.payload.data(), p.payload.size());
      r.payload = where;
    } else {
      r.payload = p.payload.data();
    }
    r.payload_len = static_cast<uint32_t>(p.payload.size());
    rx_->OnReceive(now_, &r, 1);
  }

  Time now_ = kMillisecond;
  std::unique_ptr<Engine> tx_, rx_;
  ConnId ct_ = 0, cr_ = 0;
  std::vector<uint8_t> src_, dst_;
  MemoryRegion ms_, md_;
};

TEST_F(InPlace, ResolvesToTheFinalAddressAndIsNotCopiedTwice) {
  auto pk = Write(100, 2500);  // 3 packets
  ASSERT_EQ(pk.size(), 3u);
  std::vector<uint8_t*> d;
  for (const auto& p : pk) d.push_back(Resolve(p));
  EXPECT_EQ(d[0], dst_.data() + 100);
  EXPECT_EQ(d[1], dst_.data() + 100 + kMtu);
  EXPECT_EQ(d[2], dst_.data() + 100 + 2 * kMtu);
  // One batch: the datapath read all three in place, then OnReceive.
  std::vector<RxPacket> batch(3);
  for (size_t i = 0; i < 3; ++i) {
    memcpy(d[i], pk[i].payload.data(), pk[i].payload.size());
    batch[i].data = pk[i].hdr.data();
    batch[i].len = kHdr;
    batch[i].payload = d[i];
    batch[i].payload_len = static_cast<uint32_t>(pk[i].payload.size());
  }
  rx_->OnReceive(now_, batch.data(), 3);
  const auto cs = *rx_->connection_stats(cr_);
  EXPECT_EQ(cs.rx_data_packets, 3u);
  EXPECT_EQ(cs.rx_data_bytes, 2500u);
  EXPECT_EQ(memcmp(dst_.data() + 100, src_.data() + 100, 2500), 0);
  EXPECT_EQ(dst_[99], 0xEE);
  EXPECT_EQ(dst_[2600], 0xEE);
  // Received now: every copy of them is a duplicate, never resolved.
  for (const auto& p : pk) EXPECT_EQ(Resolve(p), nullptr);
}

TEST_F(InPlace, SecondCopyInOneBatchIsRefused) {
  auto pk = Write(0, 500);
  ASSERT_EQ(pk.size(), 1u);
  uint8_t* d = Resolve(pk[0]);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(Resolve(pk[0]), nullptr) << "same PSN twice in one batch";
  // A forged copy with other bytes goes through a receive buffer and is
  // suppressed as a duplicate; the region keeps the first copy.
  Wire forged = pk[0];
  std::fill(forged.payload.begin(), forged.payload.end(), 0x5A);
  memcpy(d, pk[0].payload.data(), pk[0].payload.size());
  RxPacket r[2];
  r[0].data = pk[0].hdr.data();
  r[0].len = kHdr;
  r[0].payload = d;
  r[0].payload_len = 500;
  r[1].data = forged.hdr.data();
  r[1].len = kHdr;
  r[1].payload = forged.payload.data();
  r[1].payload_len = 500;
  const uint64_t dups = rx_->stats().rx_duplicates;
  rx_->OnReceive(now_, r, 2);
  EXPECT_EQ(rx_->stats().rx_duplicates, dups + 1);
  EXPECT_EQ(memcmp(dst_.data(), src_.data(), 500), 0);
}

TEST_F(InPlace, FullClaimsRefuseUntilTheBatchEnds) {
  // Beyond 256 headers in one batch the engine cannot tell what it has
  // promised: everything goes through a buffer until the next OnReceive.
  auto pk = Write(0, 300);
  ASSERT_EQ(pk.size(), 1u);
  Wire other = pk[0];
  // Fill the batch's claims with headers of unrelated PSNs.
  wire::Packet dec;
  ASSERT_EQ(wire::DecodeSplit(pk[0].hdr.data(), kHdr, pk[0].payload.data(), 300,
                              &dec),
            wire::DecodeError::kOk);
  for (int i = 0; i < 256; ++i) {
    wire::DataHeader h = dec.data;
    h.psn += 1000 + i;
    h.msn += 1000 + i;
    ASSERT_EQ(wire::EncodeData(h, other.hdr.data(), kHdr), kHdr);
    rx_->RxDestination(other.hdr.data(), kHdr, 300);
  }
  EXPECT_EQ(Resolve(pk[0]), nullptr) << "claims full";
  EXPECT_EQ(Resolve(pk[0]), nullptr);
  rx_->OnReceive(now_, nullptr, 0);  // the batch ends: claims forgotten
  EXPECT_EQ(Resolve(pk[0]), dst_.data());
}

TEST_F(InPlace, DisagreeingMessageFieldsAndOverfullMessagesAreRefused) {
  auto pk = Write(0, 1500);  // 2 packets of one message
  ASSERT_EQ(pk.size(), 2u);
  wire::Packet dec;
  ASSERT_EQ(wire::DecodeSplit(pk[1].hdr.data(), kHdr, pk[1].payload.data(),
                              pk[1].payload.size(), &dec),
            wire::DecodeError::kOk);
  ASSERT_NE(Resolve(pk[0]), nullptr);
  // Same message, other PSN, another length: refused (OnData would find
  // the message slot inconsistent after the first packet).
  Wire bad = pk[1];
  wire::DataHeader h = dec.data;
  h.msg_len = 1400;
  h.payload_len = 400;
  ASSERT_EQ(wire::EncodeData(h, bad.hdr.data(), kHdr), kHdr);
  EXPECT_EQ(rx_->RxDestination(bad.hdr.data(), kHdr, 400), nullptr);
  // The genuine second packet: the bad one's claim already conflicts on
  // its message, so it is refused too (it will be copied instead).
  EXPECT_EQ(Resolve(pk[1]), nullptr);
  rx_->OnReceive(now_, nullptr, 0);
  // Alone in a batch, a packet claiming more of a message than it holds
  // (other PSN, same offset: 1000 + 1000 > 1500) after the first landed.
  Deliver(pk[0], Resolve(pk[0]));
  Wire again = pk[1];
  h = dec.data;
  h.msg_offset = 0;
  h.remote_addr = md_.addr;
  h.payload_len = 1000;
  ASSERT_EQ(wire::EncodeData(h, again.hdr.data(), kHdr), kHdr);
  EXPECT_EQ(rx_->RxDestination(again.hdr.data(), kHdr, 1000), nullptr);
  rx_->OnReceive(now_, nullptr, 0);
  EXPECT_EQ(Resolve(pk[1]), dst_.data() + 1000);
}

TEST_F(InPlace, BadHeadersResolveToNothing) {
  auto pk = Write(0, 800);
  ASSERT_EQ(pk.size(), 1u);
  wire::Packet dec;
  ASSERT_EQ(wire::DecodeSplit(pk[0].hdr.data(), kHdr, pk[0].payload.data(), 800,
                              &dec),
            wire::DecodeError::kOk);
  auto with = [&](auto mutate, size_t plen = 800) {
    wire::DataHeader h = dec.data;
    mutate(h);
    std::vector<uint8_t> b(kHdr);
    EXPECT_EQ(wire::EncodeData(h, b.data(), kHdr), kHdr);
    const uint8_t* r = rx_->RxDestination(b.data(), kHdr, plen);
    rx_->OnReceive(now_, nullptr, 0);
    return r;
  };
  EXPECT_EQ(with([](wire::DataHeader&) {}, 799), nullptr) << "length";
  EXPECT_EQ(with([](wire::DataHeader&) {}, 0), nullptr) << "trimmed";
  EXPECT_EQ(with([](wire::DataHeader& h) { h.rkey ^= 1; }), nullptr);
  EXPECT_EQ(with([](wire::DataHeader& h) { h.dst_conn += 7; }), nullptr);
  EXPECT_EQ(with([&](wire::DataHeader& h) {
              h.remote_addr = md_.addr + md_.length - 100;
            }),
            nullptr)
      << "past the end";
  EXPECT_EQ(with([&](wire::DataHeader& h) { h.remote_addr = md_.addr - 800; }),
            nullptr)
      << "before the start";
  EXPECT_EQ(with([](wire::DataHeader& h) { h.psn += 1 << 20; }), nullptr)
      << "beyond the window";
  EXPECT_EQ(with([](wire::DataHeader& h) { h.psn -= 5; }), nullptr)
      << "below the window";
  EXPECT_EQ(with([](wire::DataHeader& h) { h.path_id = 99; }), nullptr);
  EXPECT_EQ(with([](wire::DataHeader& h) { h.flags |= wire::kFlagTrimmed; }),
            nullptr);
  std::vector<uint8_t> corrupt = pk[0].hdr;
  corrupt[20] ^= 1;  // header CRC no longer matches
  EXPECT_EQ(rx_->RxDestination(corrupt.data(), kHdr, 800), nullptr);
  EXPECT_EQ(rx_->RxDestination(pk[0].hdr.data(), kHdr - 1, 800), nullptr);
  rx_->OnReceive(now_, nullptr, 0);
  // None of that wrote anything; the genuine header still resolves.
  EXPECT_EQ(Resolve(pk[0]), dst_.data());
  EXPECT_TRUE(std::all_of(dst_.begin(), dst_.end(),
                          [](uint8_t x) { return x == 0xEE; }));
}

class CountingPlacer : public Placer {
 public:
  bool Place(uint8_t* dst, const uint8_t* src, uint32_t len,
             const MemoryRegion&) override {
    memcpy(dst, src, len);
    ++calls;
    return true;
  }
  int calls = 0;
};

TEST_F(InPlace, NotWithPayloadChecksumsOrAnotherPlacer) {
  Make(EngineOptions{}, /*crc=*/true);
  auto pk = Write(0, 800);
  ASSERT_EQ(pk.size(), 1u);
  EXPECT_EQ(Resolve(pk[0]), nullptr) << "checksum must be verified first";
  CountingPlacer placer;
  EngineOptions eo;
  eo.placer = &placer;
  Make(eo, false);
  pk = Write(0, 800);
  ASSERT_EQ(pk.size(), 1u);
  EXPECT_EQ(Resolve(pk[0]), nullptr) << "the placer must move the bytes";
  Deliver(pk[0], nullptr);
  EXPECT_EQ(placer.calls, 1);
  EXPECT_EQ(memcmp(dst_.data(), src_.data(), 800), 0);
}

}  // namespace
}  // namespace prism
