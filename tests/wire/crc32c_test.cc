// CRC32C: known answers (RFC 3720 appendix B.4 vectors and the standard
// check value), hardware == software, and chaining.
#include "transport/wire/crc32c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "transport/base/random.h"
#include "transport/wire/packet.h"

namespace prism::wire {
namespace {

using CrcFn = uint32_t (*)(const uint8_t*, size_t, uint32_t);

struct Impl {
  const char* name;
  CrcFn fn;
};

std::vector<Impl> Impls() {
  std::vector<Impl> v = {{"dispatch", &Crc32c}, {"software", &Crc32cSoftware}};
  if (Crc32cHardwareAvailable()) v.push_back({"hardware", &Crc32cHardware});
  return v;
}

TEST(Crc32c, KnownAnswers) {
  const uint8_t check[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
  uint8_t zeros[32], ones[32], inc[32], dec[32];
  std::memset(zeros, 0, 32);
  std::memset(ones, 0xFF, 32);
  for (int i = 0; i < 32; ++i) {
    inc[i] = static_cast<uint8_t>(i);
    dec[i] = static_cast<uint8_t>(31 - i);
  }
  for (const Impl& impl : Impls()) {
    SCOPED_TRACE(impl.name);
    EXPECT_EQ(impl.fn(check, sizeof(check), 0), 0xE3069283u);
    EXPECT_EQ(impl.fn(nullptr, 0, 0), 0u);
    EXPECT_EQ(impl.fn(zeros, 32, 0), 0x8A9136AAu);
    EXPECT_EQ(impl.fn(ones, 32, 0), 0x62A8AB43u);
    EXPECT_EQ(impl.fn(inc, 32, 0), 0x46DD794Eu);
    EXPECT_EQ(impl.fn(dec, 32, 0), 0x113FDB5Cu);
  }
}

TEST(Crc32c, HardwareMatchesSoftwareOnRandomBuffers) {
  if (!Crc32cHardwareAvailable()) {
    GTEST_SKIP() << "CPU without SSE4.2: only the software CRC32C is used";
  }
  Rng rng(21);
  std::vector<uint8_t> buf(9000 + 16);
  for (auto& b : buf) b = static_cast<uint8_t>(rng.Next());
  for (int i = 0; i < 3000; ++i) {
    // Every alignment, lengths around the 8-byte steps and up to a jumbo MTU.
    const size_t start = rng.Uniform(16);
    const size_t len = i < 600 ? static_cast<size_t>(i % 300)
                               : rng.Uniform(buf.size() - start + 1);
    const uint32_t seed = rng.Bernoulli(0.5) ? 0 : rng.Next32();
    ASSERT_EQ(Crc32cHardware(buf.data() + start, len, seed),
              Crc32cSoftware(buf.data() + start, len, seed))
        << "start " << start << " len " << len;
  }
}

TEST(Crc32c, ChainingEqualsOneShot) {
  Rng rng(22);
  std::vector<uint8_t> buf(5000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng.Next());
  for (const Impl& impl : Impls()) {
    SCOPED_TRACE(impl.name);
    const uint32_t whole = impl.fn(buf.data(), buf.size(), 0);
    for (int i = 0; i < 200; ++i) {
      const size_t cut = rng.Uniform(buf.size() + 1);
      const uint32_t a = impl.fn(buf.data(), cut, 0);
      EXPECT_EQ(impl.fn(buf.data() + cut, buf.size() - cut, a), whole);
    }
  }
}

TEST(Crc32c, DetectsEverySingleBitErrorIn4KiB) {
  Rng rng(23);
  std::vector<uint8_t> buf(4096);
  for (auto& b : buf) b = static_cast<uint8_t>(rng.Next());
  const uint32_t good = Crc32c(buf.data(), buf.size());
  for (size_t bit = 0; bit < 8 * buf.size(); bit += 7) {
    buf[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    ASSERT_NE(Crc32c(buf.data(), buf.size()), good) << bit;
    buf[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
}

TEST(Crc32c, Zero4At4EqualsCrcOfTheBufferWithThoseBytesZeroed) {
  Rng rng(99);
  for (size_t len = 8; len < 200; ++len) {
    std::vector<uint8_t> b(len);
    for (auto& x : b) x = static_cast<uint8_t>(rng.Next32());
    std::vector<uint8_t> z = b;
    std::memset(z.data() + 4, 0, 4);
    const uint32_t want = Crc32cSoftware(z.data(), z.size());
    EXPECT_EQ(Crc32cZero4At4(b.data(), b.size()), want) << len;
    EXPECT_EQ(Crc32c(z.data(), z.size()), want) << len;
  }
}

// The burst version equals single calls for every mix of lengths (runs of
// four equal lengths take the interleaved path, the rest the single one).
TEST(Crc32c, Zero4At4MultiEqualsSingleCalls) {
  Rng rng(7);
  constexpr size_t kMax = 40;
  const size_t kLens[] = {8, 12, 20, 28, 32, 36, 64, 84, 85, 127, 200};
  for (int round = 0; round < 300; ++round) {
    const size_t n = rng.Uniform(kMax + 1);
    std::vector<std::vector<uint8_t>> bufs(n);
    std::vector<const uint8_t*> ptrs(n);
    std::vector<size_t> lens(n);
    // Mostly equal lengths (the header burst case), sometimes mixed.
    const size_t common = kLens[rng.Uniform(std::size(kLens))];
    for (size_t i = 0; i < n; ++i) {
      lens[i] =
          rng.Uniform(4) == 0 ? kLens[rng.Uniform(std::size(kLens))] : common;
      bufs[i].resize(lens[i]);
      for (auto& x : bufs[i]) x = static_cast<uint8_t>(rng.Next32());
      ptrs[i] = bufs[i].data();
    }
    std::vector<uint32_t> got(n + 1, 0xDEADBEEF);
    Crc32cZero4At4Multi(ptrs.data(), lens.data(), n, got.data());
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(got[i], Crc32cZero4At4(ptrs[i], lens[i])) << round << " " << i;
    }
    EXPECT_EQ(got[n], 0xDEADBEEFu);  // nothing written past n
  }
}

// The strided variant writes each record's checksum into its bytes [4, 8)
// (little-endian), the same as single calls, and nothing else: not the
// length fields, not past the n-th record.
TEST(Crc32c, Zero4At4StoreStridedEqualsSingleCalls) {
  Rng rng(8);
  constexpr size_t kMax = 40;
  constexpr size_t kStride = 232, kLenOff = 216;  // buffers up to 200 bytes
  const size_t kLens[] = {8, 12, 20, 28, 32, 36, 64, 84, 85, 127, 200};
  for (int round = 0; round < 300; ++round) {
    const size_t n = rng.Uniform(kMax + 1);
    std::vector<uint8_t> recs((n + 1) * kStride);
    for (auto& x : recs) x = static_cast<uint8_t>(rng.Next32());
    // Mostly equal lengths (the header burst case), sometimes mixed.
    const size_t common = kLens[rng.Uniform(std::size(kLens))];
    for (size_t i = 0; i < n; ++i) {
      const uint16_t len = static_cast<uint16_t>(
          rng.Uniform(4) == 0 ? kLens[rng.Uniform(std::size(kLens))] : common);
      std::memcpy(recs.data() + i * kStride + kLenOff, &len, sizeof(len));
    }
    std::vector<uint8_t> want = recs;
    for (size_t i = 0; i < n; ++i) {
      uint8_t* r = want.data() + i * kStride;
      uint16_t len;
      std::memcpy(&len, r + kLenOff, sizeof(len));
      const uint32_t crc = Crc32cZero4At4(r, len);
      for (int b = 0; b < 4; ++b)
        r[4 + b] = static_cast<uint8_t>(crc >> (8 * b));
    }
    Crc32cZero4At4StoreStrided(recs.data(), kStride, kLenOff, n);
    EXPECT_TRUE(recs == want) << round;
  }
}

}  // namespace
}  // namespace prism::wire
