// The receive-side acceptance rules are one function used by both OnReceive
// and RxDestination (receive in place). These tests hold the two to the same
// answer and check the batch hazards of receive in place:
// - on random header mutations, RxDestination resolves a packet exactly when
//   OnReceive accepts it, to the address OnReceive places it at;
// - a BAD_KEY NACK earlier in a batch that fails the connection does not
//   drop a later packet already read in place (its failure waits for the
//   end of the batch): no stray write, no lost byte;
// - a header-only DATA packet of the batch is seen by RxDestination, so a
//   forged packet with its PSN is never read in place;
// - a packet handed over with header bytes other than those resolved is
//   decoded (and checked) again, not matched to the claim;
// - random batches received in place and through buffers by two identical
//   receivers leave the same counters, SACKs and region bytes.
#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "prism/engine.h"
#include "transport/wire/packet.h"

namespace prism {
namespace {

constexpr uint32_t kMtu = 1000;
constexpr size_t kHdr = wire::kDataHeaderSize;

struct Wire {
  std::vector<uint8_t> hdr;
  std::vector<uint8_t> payload;
};

class RxAccept : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions eo;
    eo.mtu_payload = kMtu;
    a_ = std::make_unique<Engine>(eo);
    eo.seed = 2;
    b_ = std::make_unique<Engine>(eo);
    ConnectionOptions co;
    co.num_paths = 4;
    ca_ = *a_->CreateConnection(co);
    cb_ = *b_->CreateConnection(co);
    ASSERT_TRUE(a_->Connect(ca_, b_->LocalInfo(cb_)).ok());
    ASSERT_TRUE(b_->Connect(cb_, a_->LocalInfo(ca_)).ok());
    src_.assign(64 << 10, 0);
    for (size_t i = 0; i < src_.size(); ++i) src_[i] = uint8_t(i * 7 + 3);
    dst_.assign(64 << 10, 0xEE);
    ms_ = *a_->RegisterMemory(src_.data(), src_.size(), kAccessLocal);
    md_ = *b_->RegisterMemory(dst_.data(), dst_.size(), kAccessRemoteWrite);
    bsrc_ = *b_->RegisterMemory(src_.data(), src_.size(), kAccessLocal);
  }

  // A's WRITE of `len` bytes from src+off to B's dst+off, as it travels;
  // a NACK of the same burst goes to `nack`.
  std::vector<Wire> Write(uint64_t off, uint64_t len,
                          std::vector<uint8_t>* nack = nullptr) {
    WriteRequest w;
    w.local_addr = src_.data() + off;
    w.length = len;
    w.lkey = ms_.lkey;
    w.remote_addr = md_.addr + off;
    w.rkey = md_.rkey;
    EXPECT_TRUE(a_->PostWrite(now_, ca_, w).ok());
    std::vector<Wire> out;
    TxPacket tx[64];
    const size_t n = a_->PollTransmit(now_, tx, 64);
    for (size_t i = 0; i < n; ++i) {
      if (nack != nullptr && tx[i].header_len == wire::kNackHeaderSize)
        nack->assign(tx[i].header, tx[i].header + tx[i].header_len);
      if (tx[i].header_len != kHdr) continue;
      Wire p;
      p.hdr.assign(tx[i].header, tx[i].header + kHdr);
      if (tx[i].payload_len > 0)
        p.payload.assign(tx[i].payload, tx[i].payload + tx[i].payload_len);
      out.push_back(std::move(p));
    }
    return out;
  }

  static wire::DataHeader Decoded(const Wire& p) {
    wire::Packet d;
    EXPECT_EQ(wire::DecodeSplit(p.hdr.data(), kHdr, p.payload.data(),
                                p.payload.size(), &d),
              wire::DecodeError::kOk);
    return d.data;
  }
  static Wire Forge(const wire::DataHeader& h, uint8_t fill) {
    Wire p;
    p.hdr.resize(kHdr);
    EXPECT_EQ(wire::EncodeData(h, p.hdr.data(), kHdr), kHdr);
    p.payload.assign(h.payload_len, fill);
    return p;
  }

  uint8_t* Resolve(const Wire& p) {
    return b_->RxDestination(p.hdr.data(), kHdr, p.payload.size());
  }
  // The datapath's part: read the payload to `d` when resolved, else keep
  // it in a receive buffer; hand the packet over split.
  static RxPacket Read(const Wire& p, uint8_t* d) {
    RxPacket r;
    r.data = p.hdr.data();
    r.len = kHdr;
    if (!p.payload.empty()) {
      if (d != nullptr) memcpy(d, p.payload.data(), p.payload.size());
      r.payload = d != nullptr ? d : p.payload.data();
      r.payload_len = static_cast<uint32_t>(p.payload.size());
    }
    return r;
  }

  // B writes 100 bytes to A with a key A does not know; A drops it and
  // queues a NACK BAD_KEY, which fails B's connection when it arrives (as
  // an RC QP's remote access error).
  void ForgedKeyWriteFromB() {
    WriteRequest w;
    w.local_addr = src_.data();
    w.length = 100;
    w.lkey = bsrc_.lkey;
    w.remote_addr = 0x1000;
    w.rkey = md_.rkey ^ 0x5555;
    ASSERT_TRUE(b_->PostWrite(now_, cb_, w).ok());
    TxPacket tx[16];
    ASSERT_EQ(b_->PollTransmit(now_, tx, 16), 1u);
    std::vector<uint8_t> bdata(tx[0].header, tx[0].header + tx[0].header_len);
    bdata.insert(bdata.end(), tx[0].payload, tx[0].payload + tx[0].payload_len);
    RxPacket r;
    r.data = bdata.data();
    r.len = static_cast<uint32_t>(bdata.size());
    a_->OnReceive(now_, &r, 1);
  }

  uint64_t Accepted() { return b_->connection_stats(cb_)->rx_data_packets; }

  Time now_ = kMillisecond;
  std::unique_ptr<Engine> a_, b_;
  ConnId ca_ = 0, cb_ = 0;
  std::vector<uint8_t> src_, dst_;
  MemoryRegion ms_, md_, bsrc_;
};

TEST_F(RxAccept, RxDestinationResolvesExactlyWhatOnReceiveAccepts) {
  std::mt19937_64 rng(7);
  std::vector<Wire> pool;
  for (int m = 0; m < 8; ++m) {
    auto pk = Write(m * 6000, 1 + rng() % 5000);
    pool.insert(pool.end(), pk.begin(), pk.end());
  }
  ASSERT_GT(pool.size(), 16u);
  size_t resolved = 0, refused = 0;
  for (int it = 0; it < 3000; ++it) {
    const Wire& g = pool[rng() % pool.size()];
    wire::DataHeader h = Decoded(g);
    // Zero, one or two fields perturbed.
    for (int k = rng() % 3; k > 0; --k) {
      switch (rng() % 9) {
        case 0:
          h.rkey ^= 1u << (rng() % 32);
          break;
        case 1:
          h.remote_addr += int64_t(rng() % 4001) - 2000;
          break;
        case 2: {
          const int64_t v =
              int64_t{h.msg_len} + static_cast<int64_t>(rng() % 3000) - 1000;
          h.msg_len = static_cast<uint32_t>(
              std::max<int64_t>(v, int64_t{h.msg_offset} + h.payload_len));
          break;
        }
        case 3:
          h.psn += int32_t(rng() % 41) - 20;
          break;
        case 4:
          h.msn += int32_t(rng() % 5) - 2;
          break;
        case 5:
          h.path_id = rng() % 6;
          break;
        case 6:
          h.flags ^= wire::kFlagHasImmediate;
          break;
        case 7:
          h.immediate ^= 1;
          h.flags |= wire::kFlagHasImmediate;
          break;
        case 8:
          h.dst_conn ^= rng() % 2;
          break;
      }
    }
    if (h.msg_offset + h.payload_len > h.msg_len) continue;  // not encodable
    const Wire p = Forge(h, static_cast<uint8_t>(it));
    uint8_t* d = Resolve(p);
    const uint64_t before = Accepted();
    // Where OnReceive alone would place it (for a comparison of bytes).
    const RxPacket r = Read(p, d);
    b_->OnReceive(now_, &r, 1);
    const bool accepted = Accepted() == before + 1;
    ASSERT_EQ(d != nullptr, accepted) << "iteration " << it;
    if (d != nullptr) {
      ++resolved;
      EXPECT_EQ(d, dst_.data() + (h.remote_addr - md_.addr));
      EXPECT_EQ(memcmp(d, p.payload.data(), p.payload.size()), 0);
    } else {
      ++refused;
    }
    // Keep acks flowing so A's window and B's rings move on.
    TxPacket tx[64];
    while (b_->PollTransmit(now_, tx, 64) == 64) {
    }
    now_ += kMicrosecond;
  }
  EXPECT_GT(resolved, 20u);
  EXPECT_GT(refused, 200u);
}

TEST_F(RxAccept, ConnectionFailureWaitsForPacketsReadInPlace) {
  // A answers B's forged-key WRITE with a NACK BAD_KEY.
  ASSERT_NO_FATAL_FAILURE(ForgedKeyWriteFromB());
  EXPECT_EQ(a_->stats().rx_drop_bad_key, 1u);
  // A's WRITE to B; A's next burst carries the NACK first, then the DATA.
  std::vector<uint8_t> nack;
  auto pk = Write(0, 2500, &nack);
  ASSERT_EQ(pk.size(), 3u);
  ASSERT_FALSE(nack.empty());
  // B's datapath reads the batch [NACK, DATA x3]: the DATA in place.
  std::vector<RxPacket> batch(4);
  batch[0].data = nack.data();
  batch[0].len = static_cast<uint32_t>(nack.size());
  for (size_t i = 0; i < 3; ++i) {
    uint8_t* d = Resolve(pk[i]);
    ASSERT_NE(d, nullptr);
    batch[i + 1] = Read(pk[i], d);
  }
  b_->OnReceive(now_, batch.data(), batch.size());
  // Every byte read in place was accepted and counted, none dropped...
  const auto cs = *b_->connection_stats(cb_);
  EXPECT_EQ(cs.rx_data_packets, 3u);
  EXPECT_EQ(cs.rx_data_bytes, 2500u);
  EXPECT_EQ(b_->stats().rx_drop_unknown_conn, 0u);
  EXPECT_EQ(memcmp(dst_.data(), src_.data(), 2500), 0);
  EXPECT_EQ(dst_[2500], 0xEE);
  // ...and then the connection failed, with the culprit's status.
  Completion cq[8];
  const size_t k = b_->PollCompletions(cq, 8);
  ASSERT_EQ(k, 2u);
  EXPECT_EQ(cq[0].type, CompletionType::kWrite);
  EXPECT_EQ(cq[0].status, absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(cq[1].type, CompletionType::kConnectionError);
  // From now on the connection takes nothing.
  auto more = Write(3000, 500);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(Resolve(more[0]), nullptr);
}

TEST_F(RxAccept, FailureWithNothingReadInPlaceIsImmediate) {
  // The same NACK without in-place packets behind it fails the connection
  // at once: a DATA packet after it in the batch is dropped, not written.
  ASSERT_NO_FATAL_FAILURE(ForgedKeyWriteFromB());
  std::vector<uint8_t> nack;
  auto pk = Write(0, 500, &nack);
  ASSERT_EQ(pk.size(), 1u);
  ASSERT_FALSE(nack.empty());
  RxPacket batch[2];
  batch[0].data = nack.data();
  batch[0].len = static_cast<uint32_t>(nack.size());
  batch[1] = Read(pk[0], nullptr);
  b_->OnReceive(now_, batch, 2);
  EXPECT_EQ(b_->connection_stats(cb_)->rx_data_packets, 0u);
  EXPECT_EQ(b_->stats().rx_drop_unknown_conn, 1u);
  EXPECT_TRUE(std::all_of(dst_.begin(), dst_.end(),
                          [](uint8_t x) { return x == 0xEE; }));
}

TEST_F(RxAccept, HeaderOnlyDataOfTheBatchIsSeenBeforeAPacketReadInPlace) {
  // A zero-length WRITE: one header-only DATA packet.
  auto z = Write(0, 0);
  ASSERT_EQ(z.size(), 1u);
  ASSERT_TRUE(z[0].payload.empty());
  // A forged packet with its PSN and MSN, claiming 500 bytes of a 500-byte
  // message: alone it would be accepted...
  wire::DataHeader h = Decoded(z[0]);
  h.msg_len = 500;
  h.payload_len = 500;
  const Wire forged = Forge(h, 0x5A);
  // ...but after the header-only packet of the same batch it is a
  // duplicate: RxDestination, shown the header-only packet first, refuses.
  EXPECT_EQ(Resolve(z[0]), nullptr);  // never in place (no payload)
  uint8_t* d = Resolve(forged);
  EXPECT_EQ(d, nullptr);
  RxPacket batch[2] = {Read(z[0], nullptr), Read(forged, d)};
  b_->OnReceive(now_, batch, 2);
  EXPECT_EQ(b_->connection_stats(cb_)->rx_data_packets, 1u);
  EXPECT_EQ(b_->stats().rx_duplicates, 1u);
  EXPECT_TRUE(std::all_of(dst_.begin(), dst_.end(),
                          [](uint8_t x) { return x == 0xEE; }));
}

TEST_F(RxAccept, OtherHeaderBytesThanResolvedAreDecodedAgain) {
  auto pk = Write(0, 800);
  ASSERT_EQ(pk.size(), 1u);
  uint8_t* d = Resolve(pk[0]);
  ASSERT_NE(d, nullptr);
  Wire changed = pk[0];
  changed.hdr[20] ^= 1;  // no longer the header resolved (nor a valid one)
  const RxPacket r = Read(changed, d);
  b_->OnReceive(now_, &r, 1);
  EXPECT_EQ(b_->stats().rx_drop_bad_checksum, 1u);
  EXPECT_EQ(b_->connection_stats(cb_)->rx_data_packets, 0u);
  // The genuine packet in the next batch is accepted.
  d = Resolve(pk[0]);
  ASSERT_NE(d, nullptr);
  const RxPacket g = Read(pk[0], d);
  b_->OnReceive(now_, &g, 1);
  EXPECT_EQ(b_->connection_stats(cb_)->rx_data_packets, 1u);
  EXPECT_EQ(memcmp(dst_.data(), src_.data(), 800), 0);
}

// Batches received in place give the same result as the same batches
// received through buffers: two identical receivers (same seed, same calls)
// get the same random batches (genuine packets, duplicates, forged fields,
// header-only packets); one resolves every packet first and reads the
// resolved ones in place, the other never does. Counters, SACKs and the
// bytes of the regions must agree after every batch, and every packet read
// in place must have been accepted.
TEST(RxAcceptTwin, InPlaceBatchesMatchBufferedBatches) {
  EngineOptions eo;
  eo.mtu_payload = kMtu;
  Engine a(eo);
  eo.seed = 2;
  Engine b1(eo), b2(eo);
  ConnectionOptions co;
  co.num_paths = 4;
  const ConnId ca = *a.CreateConnection(co);
  const ConnId c1 = *b1.CreateConnection(co);
  const ConnId c2 = *b2.CreateConnection(co);
  ASSERT_EQ(c1, c2);
  ASSERT_TRUE(a.Connect(ca, b1.LocalInfo(c1)).ok());
  ASSERT_TRUE(b1.Connect(c1, a.LocalInfo(ca)).ok());
  ASSERT_TRUE(b2.Connect(c2, a.LocalInfo(ca)).ok());
  std::vector<uint8_t> src(64 << 10);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 13 + 1);
  std::vector<uint8_t> d1(64 << 10, 0xEE), d2(64 << 10, 0xEE);
  const MemoryRegion ms =
      *a.RegisterMemory(src.data(), src.size(), kAccessLocal);
  const MemoryRegion m1 =
      *b1.RegisterMemory(d1.data(), d1.size(), kAccessRemoteWrite);
  const MemoryRegion m2 =
      *b2.RegisterMemory(d2.data(), d2.size(), kAccessRemoteWrite);
  ASSERT_EQ(m1.rkey, m2.rkey);
  const uint64_t shift = m2.addr - m1.addr;  // b2's copy of a packet
  std::mt19937_64 rng(11);
  Time now = kMillisecond;
  std::vector<wire::DataHeader> pool;
  TxPacket tx[64];
  auto post = [&](uint64_t off, uint64_t len) {
    WriteRequest w;
    w.local_addr = src.data() + off;
    w.length = len;
    w.lkey = ms.lkey;
    w.remote_addr = m1.addr + off;
    w.rkey = m1.rkey;
    ASSERT_TRUE(a.PostWrite(now, ca, w).ok());
  };
  // a's next burst (new packets and retransmissions) joins the pool.
  auto drain = [&]() {
    const size_t n = a.PollTransmit(now, tx, 64);
    for (size_t i = 0; i < n; ++i) {
      if (tx[i].header_len != kHdr) continue;
      wire::Packet d;
      ASSERT_EQ(wire::DecodeSplit(tx[i].header, kHdr, tx[i].payload,
                                  tx[i].payload_len, &d),
                wire::DecodeError::kOk);
      pool.push_back(d.data);
    }
  };
  for (int m = 0; m < 6; ++m) post(m * 8000, 1 + rng() % 6000);
  post(60000, 0);  // a header-only packet
  for (int m = 0; m < 3; ++m) post(50000 + m * 3000, 1 + rng() % 2500);
  drain();
  size_t placed = 0;
  for (int round = 0; round < 400; ++round) {
    if (round % 2 == 0) {
      post(rng() % 56000, rng() % 5 == 0 ? 0 : 1 + rng() % 8000);
      drain();
    }
    const size_t k = 1 + rng() % 24;
    std::vector<wire::DataHeader> hs;
    for (size_t i = 0; i < k; ++i) {
      // Mostly recent packets (new to the receiver), some old ones.
      const size_t recent = std::min<size_t>(pool.size(), 24);
      wire::DataHeader h = rng() % 4 != 0
                               ? pool[pool.size() - 1 - rng() % recent]
                               : pool[rng() % pool.size()];
      if (rng() % 4 == 0) {  // forged
        switch (rng() % 5) {
          case 0:
            h.msg_offset = 0;
            h.remote_addr -= rng() % 1000;
            break;
          case 1:
            h.msg_len += 1 + rng() % 500;
            break;
          case 2:
            h.psn += 1;
            break;
          case 3:
            h.flags ^= wire::kFlagHasImmediate;
            break;
          case 4:
            h.rkey ^= 2;
            break;
        }
        if (h.remote_addr < h.msg_offset) continue;
      }
      if (h.msg_offset + h.payload_len > h.msg_len) continue;
      hs.push_back(h);
    }
    // Bytes on the wire: the payload a's source holds at that offset, or
    // a pattern for forged offsets.
    std::vector<std::vector<uint8_t>> h1(hs.size()), h2(hs.size()),
        pay(hs.size());
    std::vector<RxPacket> r1(hs.size()), r2(hs.size());
    size_t in_place = 0;
    for (size_t i = 0; i < hs.size(); ++i) {
      wire::DataHeader h = hs[i];
      const uint64_t off = h.remote_addr - m1.addr;
      pay[i].resize(h.payload_len);
      for (size_t j = 0; j < pay[i].size(); ++j)
        pay[i][j] = off + j < src.size() ? src[off + j] : uint8_t(j);
      h1[i].resize(kHdr);
      ASSERT_EQ(wire::EncodeData(h, h1[i].data(), kHdr), kHdr);
      h.remote_addr += shift;
      h2[i].resize(kHdr);
      ASSERT_EQ(wire::EncodeData(h, h2[i].data(), kHdr), kHdr);
    }
    // b1: the datapath resolves each datagram, reads the resolved ones in
    // place, then hands the batch over; b2 gets it through buffers.
    for (size_t i = 0; i < hs.size(); ++i) {
      uint8_t* d = b1.RxDestination(h1[i].data(), kHdr, pay[i].size());
      r1[i].data = h1[i].data();
      r1[i].len = kHdr;
      r2[i].data = h2[i].data();
      r2[i].len = kHdr;
      if (pay[i].empty()) continue;
      if (d != nullptr) {
        memcpy(d, pay[i].data(), pay[i].size());
        ++in_place;
      }
      r1[i].payload = d != nullptr ? d : pay[i].data();
      r1[i].payload_len = static_cast<uint32_t>(pay[i].size());
      r2[i].payload = pay[i].data();
      r2[i].payload_len = static_cast<uint32_t>(pay[i].size());
    }
    const uint64_t before = b1.connection_stats(c1)->rx_data_packets;
    b1.OnReceive(now, r1.data(), r1.size());
    b2.OnReceive(now, r2.data(), r2.size());
    placed += in_place;
    ASSERT_GE(b1.connection_stats(c1)->rx_data_packets, before + in_place);
    ASSERT_EQ(b1.stats().ToString(), b2.stats().ToString()) << round;
    ASSERT_EQ(b1.connection_stats(c1)->ToString(),
              b2.connection_stats(c2)->ToString())
        << round;
    ASSERT_EQ(d1, d2) << round;
    // Their SACKs and NACKs are the same bytes; a hears them.
    TxPacket t1[64], t2[64];
    const size_t n1 = b1.PollTransmit(now, t1, 64);
    const size_t n2 = b2.PollTransmit(now, t2, 64);
    ASSERT_EQ(n1, n2);
    std::vector<RxPacket> back;
    for (size_t i = 0; i < n1; ++i) {
      ASSERT_EQ(t1[i].header_len, t2[i].header_len);
      ASSERT_EQ(memcmp(t1[i].header, t2[i].header, t1[i].header_len), 0);
      // SACKs only: a NACK BAD_KEY / BAD_RANGE of a forged packet would
      // fail a's connection (the forgery is not a's).
      if (t1[i].header_len != wire::kSackHeaderSize) continue;
      RxPacket r;
      r.data = t1[i].header;
      r.len = t1[i].header_len;
      back.push_back(r);
    }
    a.OnReceive(now, back.data(), back.size());
    drain();
    now += 3 * kMicrosecond;
  }
  EXPECT_GT(placed, 50u);
}

}  // namespace
}  // namespace prism
