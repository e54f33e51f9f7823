// Loopback datapath: delay, serialization, FIFO per path, and each fault
// kind, deterministic per seed.
#include "transport/backends/loopback/loopback.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace prism::loopback {
namespace {

TxPacket Make(uint32_t peer, PathId path, const uint8_t* payload, uint32_t plen,
              uint8_t tag, TrafficClass tc = TrafficClass::kData) {
  TxPacket p;
  p.header_len = 16;
  std::memset(p.header, tag, 16);
  p.payload = payload;
  p.payload_len = plen;
  p.peer = peer;
  p.path = path;
  p.tclass = tc;
  return p;
}

TEST(Loopback, DelayAndSerializationPerPathFifo) {
  LinkConfig link;
  link.delay = 5 * kMicrosecond;
  link.path_rate_bps = 8'000'000'000ull;  // 1 byte per ns
  LoopbackNetwork net(link);
  auto* a = net.AddPort();
  auto* b = net.AddPort();
  std::vector<uint8_t> pl(984, 0x77);
  TxPacket tx[3] = {Make(1, 0, pl.data(), 984, 1),
                    Make(1, 0, pl.data(), 984, 2),
                    Make(1, 1, pl.data(), 984, 3)};
  ASSERT_EQ(a->TxBurst(0, tx, 3), 3u);
  // 1000 bytes = 1000 ns each; path 0 queues its second packet.
  EXPECT_EQ(net.NextArrivalTime(), 5 * kMicrosecond + 1000 * kNanosecond);
  RxPacket rx[4];
  EXPECT_EQ(b->RxBurst(5 * kMicrosecond, rx, 4), 0u);
  ASSERT_EQ(b->RxBurst(6 * kMicrosecond, rx, 4), 2u);  // path 0 #1, path 1
  EXPECT_EQ(rx[0].data[0], 1);
  EXPECT_EQ(rx[1].data[0], 3);
  EXPECT_EQ(rx[0].len, 1000u);
  EXPECT_EQ(std::memcmp(rx[0].data + 16, pl.data(), 984), 0);
  ASSERT_EQ(b->RxBurst(7 * kMicrosecond, rx, 4), 1u);
  EXPECT_EQ(rx[0].data[0], 2);
  EXPECT_EQ(net.NextArrivalTime(), kTimeInfinite);
  EXPECT_EQ(net.stats().delivered, 3u);
}

TEST(Loopback, BlackholeDropsOnlyInsideItsWindowAndPaths) {
  LinkConfig link;
  FaultPlan f;
  Blackhole bh;
  bh.path_lo = 2;
  bh.path_hi = 3;
  bh.start = 10;
  bh.end = 20;
  f.blackholes.push_back(bh);
  LoopbackNetwork net(link, f);
  auto* a = net.AddPort();
  auto* b = net.AddPort();
  int sent = 0;
  for (Time t : {5, 10, 15, 20}) {
    for (PathId p : {1, 2, 3, 4}) {
      TxPacket x = Make(1, p, nullptr, 0, 0);
      a->TxBurst(t, &x, 1);
      ++sent;
    }
  }
  EXPECT_EQ(net.stats().lost_blackhole, 4u);  // t=10,15 x paths 2,3
  RxPacket rx[64];
  EXPECT_EQ(b->RxBurst(kSecond, rx, 64), static_cast<size_t>(sent - 4));
}

TEST(Loopback, TrimCutsPayloadAndFlagsIt) {
  FaultPlan f;
  f.trim = 1.0;
  LoopbackNetwork net(LinkConfig{}, f);
  auto* a = net.AddPort();
  auto* b = net.AddPort();
  std::vector<uint8_t> pl(500, 1);
  TxPacket d = Make(1, 0, pl.data(), 500, 9);
  TxPacket c = Make(1, 0, nullptr, 0, 8, TrafficClass::kControl);
  a->TxBurst(0, &d, 1);
  a->TxBurst(0, &c, 1);
  RxPacket rx[4];
  ASSERT_EQ(b->RxBurst(kSecond, rx, 4), 2u);
  EXPECT_TRUE(rx[0].trimmed);
  EXPECT_EQ(rx[0].len, 16u);
  EXPECT_FALSE(rx[1].trimmed);  // control class is never trimmed
}

TEST(Loopback, CorruptionFlipsExactlyOnePayloadBit) {
  FaultPlan f;
  f.corrupt = 1.0;
  LoopbackNetwork net(LinkConfig{}, f);
  auto* a = net.AddPort();
  auto* b = net.AddPort();
  std::vector<uint8_t> pl(256, 0);
  for (int i = 0; i < 50; ++i) {
    TxPacket d = Make(1, 0, pl.data(), 256, 0);
    a->TxBurst(0, &d, 1);
    RxPacket rx[1];
    ASSERT_EQ(b->RxBurst(kSecond, rx, 1), 1u);
    int bits = 0;
    for (uint32_t k = 0; k < rx[0].len; ++k)
      bits += __builtin_popcount(rx[0].data[k]);
    EXPECT_EQ(bits, 1);
    for (int k = 0; k < 16; ++k) EXPECT_EQ(rx[0].data[k], 0);  // header intact
  }
  EXPECT_EQ(pl, std::vector<uint8_t>(256, 0));  // source untouched
}

TEST(Loopback, DuplicationAndLossAreSeededAndDeterministic) {
  auto run = [](uint64_t seed) {
    FaultPlan f;
    f.seed = seed;
    f.loss = 0.2;
    f.duplicate = 0.1;
    f.reorder = 0.3;
    f.reorder_max_delay = 10 * kMicrosecond;
    f.p_enter_bad = 0.05;
    LoopbackNetwork net(LinkConfig{}, f);
    auto* a = net.AddPort();
    auto* b = net.AddPort();
    for (int i = 0; i < 2000; ++i) {
      TxPacket x = Make(1, static_cast<PathId>(i % 7), nullptr, 0,
                        static_cast<uint8_t>(i));
      a->TxBurst(i * kNanosecond, &x, 1);
    }
    std::vector<uint8_t> order;
    RxPacket rx[64];
    for (size_t n; (n = b->RxBurst(kSecond, rx, 64)) > 0;) {
      for (size_t k = 0; k < n; ++k) order.push_back(rx[k].data[0]);
    }
    return std::make_pair(order, net.stats().ToString());
  };
  const auto r1 = run(5);
  EXPECT_EQ(r1, run(5));
  EXPECT_NE(r1, run(6));
  const std::string& s = r1.second;
  EXPECT_NE(s.find("duplicated="), std::string::npos);
  EXPECT_EQ(s.find("lost_random=0 "), std::string::npos);
  EXPECT_EQ(s.find("lost_burst=0 "), std::string::npos);
  EXPECT_EQ(s.find("duplicated=0 "), std::string::npos);
}

TEST(Loopback, RefusesOversizeAndUnknownPeer) {
  LinkConfig link;
  link.max_packet_bytes = 1000;
  LoopbackNetwork net(link);
  auto* a = net.AddPort();
  std::vector<uint8_t> pl(2000, 0);
  TxPacket big = Make(0, 0, pl.data(), 2000, 0);
  TxPacket nowhere = Make(7, 0, nullptr, 0, 0);
  EXPECT_EQ(a->TxBurst(0, &big, 1), 1u);
  EXPECT_EQ(a->TxBurst(0, &nowhere, 1), 1u);
  EXPECT_EQ(net.stats().refused, 2u);
  EXPECT_EQ(a->mtu(), 1000u);
}

}  // namespace
}  // namespace prism::loopback
