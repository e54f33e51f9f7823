// PlacementCopy (the default placer's copy) must write exactly what memcpy
// writes: every byte of [dst, dst + len) and nothing outside it, for any
// length (whole 64-byte blocks, a tail, both, neither) and any alignment
// of either side, with either copy method (CopyMethod in prism/engine.h),
// whichever this CPU picks; and an engine whose default placer uses either
// method delivers the same bytes.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "prism/engine.h"

namespace prism {
namespace {

constexpr size_t kPad = 128;  // guard bytes each side of the destination

// Copies src[s_off, s_off + len) into a guarded buffer at d_off with
// PlacementCopy and with memcpy, and expects the two buffers to be equal
// byte for byte (the guards included).
void ExpectSameAsMemcpy(CopyMethod method, const std::vector<uint8_t>& src,
                        size_t s_off, size_t d_off, uint32_t len,
                        uint8_t guard) {
  std::vector<uint8_t> got(kPad + d_off + len + kPad, guard);
  std::vector<uint8_t> want = got;
  PlacementCopyWith(method, got.data() + kPad + d_off, src.data() + s_off, len);
  std::memcpy(want.data() + kPad + d_off, src.data() + s_off, len);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], want[i])
        << "byte " << i << " (destination starts at " << kPad + d_off
        << ", len " << len << ", source offset " << s_off << ")";
  }
}

std::vector<uint8_t> RandomBytes(size_t n, std::mt19937& rng) {
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

class PlacementCopyMethods : public ::testing::TestWithParam<CopyMethod> {};

TEST_P(PlacementCopyMethods, SameAsMemcpy) {
  const CopyMethod method = GetParam();
  std::mt19937 rng(11);
  const std::vector<uint8_t> src = RandomBytes(3 * 9000, rng);
  // The edges: empty, under one block, exactly whole blocks, one byte
  // either side of a block boundary, a 4 KiB packet and around it.
  for (uint32_t len :
       {0u,   1u,   15u,  16u,  17u,  63u,   64u,   65u,   127u,  128u, 129u,
        191u, 192u, 255u, 256u, 257u, 4032u, 4095u, 4096u, 4097u, 9000u}) {
    for (size_t s_off : {0u, 1u, 8u, 15u, 16u, 63u}) {
      for (size_t d_off : {0u, 1u, 7u, 16u, 33u, 64u}) {
        SCOPED_TRACE(len);
        ExpectSameAsMemcpy(method, src, s_off, d_off, len, 0xA5);
      }
    }
  }
  // Random lengths and alignments.
  for (int round = 0; round < 2000; ++round) {
    const uint32_t len =
        static_cast<uint32_t>(round % 2 == 0 ? rng() % 300 : rng() % 9001);
    const size_t s_off = rng() % (src.size() - len + 1);
    const size_t d_off = rng() % 64;
    SCOPED_TRACE(round);
    ExpectSameAsMemcpy(method, src, s_off, d_off, len,
                       static_cast<uint8_t>(rng()));
  }
}

INSTANTIATE_TEST_SUITE_P(AllMethods, PlacementCopyMethods,
                         ::testing::Values(CopyMethod::kAuto,
                                           CopyMethod::kVector,
                                           CopyMethod::kString),
                         [](const ::testing::TestParamInfo<CopyMethod>& info) {
                           return std::string(CopyMethodName(info.param));
                         });

// The process's choice is a concrete method, stable across calls, and
// PlacementCopy (no method) writes what memcpy writes.
TEST(PlacementCopy, DefaultMethodIsConcreteAndStable) {
  const CopyMethod m = DefaultCopyMethod();
  EXPECT_NE(m, CopyMethod::kAuto);
  EXPECT_EQ(DefaultCopyMethod(), m);
  std::mt19937 rng(5);
  const std::vector<uint8_t> src = RandomBytes(5000, rng);
  std::vector<uint8_t> dst(5000, 0);
  PlacementCopy(dst.data(), src.data(), 5000);
  EXPECT_EQ(dst, src);
}

// A 300 KiB WRITE (4 KiB packets: above and below kStringCopyMinLen at its
// tail) between two engines, the receiver's default placer set to each
// method in turn, lands byte-exact and nothing around it is touched.
TEST_P(PlacementCopyMethods, EngineDeliversTheSameBytes) {
  EngineOptions ea;
  ea.seed = 3;
  ea.mtu_payload = 4096;
  EngineOptions eb = ea;
  eb.seed = 4;
  eb.copy_method = GetParam();
  Engine a(ea), b(eb);
  ConnectionOptions o;
  o.num_paths = 16;
  o.congestion = "fixed";
  const ConnId ca = *a.CreateConnection(o);
  const ConnId cb = *b.CreateConnection(o);
  ASSERT_TRUE(a.Connect(ca, b.LocalInfo(cb)).ok());
  ASSERT_TRUE(b.Connect(cb, a.LocalInfo(ca)).ok());
  constexpr uint32_t kLen = 300 * 1024 + 100;
  std::mt19937 rng(9);
  std::vector<uint8_t> src = RandomBytes(kLen, rng);
  std::vector<uint8_t> dst(kLen + 2 * kPad, 0x5A);
  const MemoryRegion smr = *a.RegisterMemory(src.data(), kLen, kAccessLocal);
  const MemoryRegion dmr =
      *b.RegisterMemory(dst.data() + kPad, kLen, kAccessRemoteWrite);
  WriteRequest w;
  w.wr_id = 1;
  w.local_addr = src.data();
  w.length = kLen;
  w.lkey = smr.lkey;
  w.remote_addr = dmr.addr;
  w.rkey = dmr.rkey;
  Time now = kMicrosecond;
  ASSERT_TRUE(a.PostWrite(now, ca, w).ok());
  TxPacket tx[64];
  RxPacket rx[64];
  auto pump = [&](Engine& from, Engine& to) {
    const size_t n = from.PollTransmit(now, tx, 64);
    for (size_t i = 0; i < n; ++i) {
      rx[i].data = tx[i].header;
      rx[i].len = tx[i].header_len;
      rx[i].payload = tx[i].payload;
      rx[i].payload_len = tx[i].payload_len;
    }
    if (n > 0) to.OnReceive(now, rx, n);
    return n;
  };
  Completion c[4];
  size_t got = 0;
  for (int round = 0; round < 100000 && got == 0; ++round) {
    const size_t moved = pump(a, b) + pump(b, a);
    got = a.PollCompletions(c, 4);
    now = moved > 0 ? now + 100 * kNanosecond
                    : std::max(now + 1,
                               std::min(a.NextEventTime(), b.NextEventTime()));
  }
  ASSERT_EQ(got, 1u);
  EXPECT_EQ(c[0].status, absl::StatusCode::kOk);
  EXPECT_EQ(0, std::memcmp(dst.data() + kPad, src.data(), kLen));
  for (size_t i = 0; i < kPad; ++i) {
    ASSERT_EQ(dst[i], 0x5A) << i;
    ASSERT_EQ(dst[kPad + kLen + i], 0x5A) << i;
  }
}

}  // namespace
}  // namespace prism
