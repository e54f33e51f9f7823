// Seeded, deterministic pseudo-random generator (xoshiro256** seeded by
// splitmix64). Same seed, same sequence, on every platform.
//
// Contract: never mixes in outside entropy (unlike absl::BitGen). Every module
// that needs randomness takes an Rng (or a seed) as an argument; there is no
// global generator. Not thread-safe: one Rng per single-threaded owner.
#ifndef PRISM_BASE_RANDOM_H_
#define PRISM_BASE_RANDOM_H_

#include <cstdint>

namespace prism {

class Rng {
 public:
  explicit Rng(uint64_t seed) { Seed(seed); }

  void Seed(uint64_t seed) {
    uint64_t x = seed;
    for (auto& s : s_) s = SplitMix64(&x);
  }

  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }
  uint32_t Next32() { return static_cast<uint32_t>(Next() >> 32); }

  // Uniform in [0, n); n > 0. Lemire's multiply-shift (tiny bias, fine here).
  uint64_t Uniform(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >>
                                 64);
  }
  // Uniform in [lo, hi] inclusive.
  int64_t Range(int64_t lo, int64_t hi) {
    return lo +
           static_cast<int64_t>(Uniform(static_cast<uint64_t>(hi - lo) + 1));
  }
  // Uniform double in [0, 1).
  double NextDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  bool Bernoulli(double p) { return NextDouble() < p; }

  // A generator for a sub-component, derived deterministically from this one.
  Rng Fork() { return Rng(Next()); }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t SplitMix64(uint64_t* x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t s_[4];
};

}  // namespace prism

#endif  // PRISM_BASE_RANDOM_H_
