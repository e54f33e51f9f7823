// PlacementCopy (the default placer's copy) must write exactly what memcpy
// writes: every byte of [dst, dst + len) and nothing outside it, for any
// length (whole 64-byte blocks, a tail, both, neither) and any alignment
// of either side.
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "prism/engine.h"

namespace prism {
namespace {

constexpr size_t kPad = 128;  // guard bytes each side of the destination

// Copies src[s_off, s_off + len) into a guarded buffer at d_off with
// PlacementCopy and with memcpy, and expects the two buffers to be equal
// byte for byte (the guards included).
void ExpectSameAsMemcpy(const std::vector<uint8_t>& src, size_t s_off,
                        size_t d_off, uint32_t len, uint8_t guard) {
  std::vector<uint8_t> got(kPad + d_off + len + kPad, guard);
  std::vector<uint8_t> want = got;
  PlacementCopy(got.data() + kPad + d_off, src.data() + s_off, len);
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

TEST(PlacementCopy, SameAsMemcpy) {
  std::mt19937 rng(11);
  const std::vector<uint8_t> src = RandomBytes(3 * 9000, rng);
  // The edges: empty, under one block, exactly whole blocks, one byte
  // either side of a block boundary, a 4 KiB packet and around it.
  for (uint32_t len : {0u, 1u, 15u, 16u, 17u, 63u, 64u, 65u, 127u, 128u, 129u,
                       191u, 192u, 4032u, 4095u, 4096u, 4097u, 9000u}) {
    for (size_t s_off : {0u, 1u, 8u, 15u, 16u, 63u}) {
      for (size_t d_off : {0u, 1u, 7u, 16u, 33u, 64u}) {
        SCOPED_TRACE(len);
        ExpectSameAsMemcpy(src, s_off, d_off, len, 0xA5);
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
    ExpectSameAsMemcpy(src, s_off, d_off, len, static_cast<uint8_t>(rng()));
  }
}

}  // namespace
}  // namespace prism
