// PlacementCopy (the default placer's copy) must write exactly what memcpy
// writes: every byte of [dst, dst + len) and nothing outside it, for any
// length (whole 64-byte blocks, a tail, both, neither) and any alignment
// of either side, with either copy method (CopyMethod in prism/engine.h),
// whichever this CPU picks; and an engine whose default placer uses either
// method delivers the same bytes. The string move is skipped where the
// destination lies just ahead of the source modulo 4 KiB
// (PlacementCopyChoice), and both sides of that rule write the same bytes.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "prism/engine.h"

namespace prism {
namespace {

constexpr size_t kPad = 128;  // guard bytes each side of the destination
constexpr size_t kPage = 4096;

// Page-aligned scratch, so that a test sets the distance between
// destination and source modulo 4 KiB exactly.
class Pages {
 public:
  explicit Pages(size_t n)
      : n_(n),
        p_(static_cast<uint8_t*>(::operator new (n, std::align_val_t{kPage}))) {
  }
  ~Pages() { ::operator delete (p_, std::align_val_t{kPage}); }
  Pages(const Pages&) = delete;
  Pages& operator=(const Pages&) = delete;
  uint8_t* data() { return p_; }
  size_t size() const { return n_; }

 private:
  size_t n_;
  uint8_t* p_;
};

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

// Every distance of the destination ahead of the source modulo 4 KiB near
// the string move's window (0..130, the window being 1..63), behind it
// (4000..4095) and a spread of others: memcpy's bytes, nothing around them
// touched, for packet-sized lengths either side of kStringCopyMinLen.
TEST_P(PlacementCopyMethods, SameAsMemcpyAtEveryDistanceModulo4KiB) {
  const CopyMethod method = GetParam();
  std::mt19937 rng(17);
  Pages src(3 * kPage);
  for (size_t i = 0; i < src.size(); ++i) {
    src.data()[i] = static_cast<uint8_t>(rng());
  }
  Pages arena(6 * kPage);
  uint8_t* const base = arena.data() + kPage;  // page-aligned, guards before
  std::vector<size_t> distances;
  for (size_t d = 0; d <= 130; ++d) distances.push_back(d);
  for (size_t d = 4000; d < kPage; ++d) distances.push_back(d);
  for (size_t d = 131; d < 4000; d += 97) distances.push_back(d);
  for (size_t s_off : {size_t{0}, size_t{100}}) {
    for (size_t d : distances) {
      for (uint32_t len : {255u, 256u, 4096u, 4097u, 8192u}) {
        const uint8_t guard = static_cast<uint8_t>(rng() | 1);
        std::memset(arena.data(), guard, arena.size());
        uint8_t* const dst = base + (s_off + d) % kPage;
        PlacementCopyWith(method, dst, src.data() + s_off, len);
        ASSERT_EQ(0, std::memcmp(dst, src.data() + s_off, len))
            << "distance " << d << " len " << len;
        ASSERT_TRUE(std::all_of(arena.data(), dst,
                                [&](uint8_t b) { return b == guard; }))
            << "distance " << d << " len " << len;
        ASSERT_TRUE(std::all_of(dst + len, arena.data() + arena.size(),
                                [&](uint8_t b) { return b == guard; }))
            << "distance " << d << " len " << len;
      }
    }
  }
}

// The string move runs for kStringCopyMinLen bytes or more unless the
// destination lies 1..kStringCopyAliasWindow-1 bytes ahead of the source
// modulo 4 KiB (whatever their own alignment); kVector never runs it;
// kAuto follows the process's choice.
TEST(PlacementCopy, StringMoveSkipsDestinationsJustAheadModulo4KiB) {
  static_assert(kStringCopyAliasWindow == 64);
  Pages arena(4 * kPage);
  const uint8_t* const page = arena.data();
  for (size_t s_off : {size_t{0}, size_t{1}, size_t{100}, size_t{4095}}) {
    const uint8_t* const src = page + s_off;
    for (size_t d = 0; d < 2 * kPage; ++d) {
      const uint8_t* const dst = src + d;
      const bool window = d % kPage >= 1 && d % kPage <= 63;
      SCOPED_TRACE(testing::Message()
                   << "source offset " << s_off << " distance " << d);
      EXPECT_EQ(PlacementCopyChoice(CopyMethod::kString, dst, src, 4096),
                window ? CopyMethod::kVector : CopyMethod::kString);
      EXPECT_EQ(PlacementCopyChoice(CopyMethod::kString, dst, src, 256),
                window ? CopyMethod::kVector : CopyMethod::kString);
      EXPECT_EQ(PlacementCopyChoice(CopyMethod::kString, dst, src, 255),
                CopyMethod::kVector);
      EXPECT_EQ(PlacementCopyChoice(CopyMethod::kVector, dst, src, 4096),
                CopyMethod::kVector);
      EXPECT_EQ(PlacementCopyChoice(CopyMethod::kAuto, dst, src, 4096),
                PlacementCopyChoice(DefaultCopyMethod(), dst, src, 4096));
    }
  }
  // Behind the source (dst < src) by 1..63: not the window.
  EXPECT_EQ(
      PlacementCopyChoice(CopyMethod::kString, page + 100, page + 116, 4096),
      CopyMethod::kString);
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
// tail) between two engines, the receiver's default placer set to `method`,
// the receive region `distance` bytes ahead of the source modulo 4 KiB (the
// loopback's payloads point into the source region, so every packet's copy
// has that distance), lands byte-exact and nothing around it is touched.
void ExpectEngineDelivers(CopyMethod method, size_t distance) {
  SCOPED_TRACE(testing::Message()
               << CopyMethodName(method) << " distance " << distance);
  EngineOptions ea;
  ea.seed = 3;
  ea.mtu_payload = 4096;
  EngineOptions eb = ea;
  eb.seed = 4;
  eb.copy_method = method;
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
  Pages src(kLen + kPage);
  for (size_t i = 0; i < kLen; ++i) src.data()[i] = static_cast<uint8_t>(rng());
  Pages dst(kLen + 3 * kPage);
  std::memset(dst.data(), 0x5A, dst.size());
  uint8_t* const region = dst.data() + kPage + distance % kPage;
  const MemoryRegion smr = *a.RegisterMemory(src.data(), kLen, kAccessLocal);
  const MemoryRegion dmr = *b.RegisterMemory(region, kLen, kAccessRemoteWrite);
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
  EXPECT_EQ(0, std::memcmp(region, src.data(), kLen));
  EXPECT_TRUE(
      std::all_of(dst.data(), region, [](uint8_t x) { return x == 0x5A; }));
  EXPECT_TRUE(std::all_of(region + kLen, dst.data() + dst.size(),
                          [](uint8_t x) { return x == 0x5A; }));
}

TEST_P(PlacementCopyMethods, EngineDeliversTheSameBytes) {
  // 0: page-aligned both; 1, 16, 63: the string move's window (the block
  // loop runs); 64, 2048, 4095: outside it.
  for (size_t distance : {0, 1, 16, 63, 64, 2048, 4095}) {
    ExpectEngineDelivers(GetParam(), distance);
  }
}

}  // namespace
}  // namespace prism
