// Seeded random variates whose values are the same on every platform.
//
// std::mt19937_64's output sequence is fixed by the C++ standard, but
// std::*_distribution are implementation-defined; servesim promises
// byte-identical outputs for the same seed, so every variate is derived here
// from the raw 64-bit engine output with a documented formula.
#pragma once

#include <cstdint>
#include <random>

namespace servesim {

// SplitMix64's finaliser (Steele, Lea, Flood 2014): a bijective 64-bit
// mix, for seeding per-item generators and hashing (seed, id, position)
// without a generator's state.
inline uint64_t splitmix64_finalize(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}

  // Uniform on [0, 1) with 53 random bits.
  double uniform();
  // Uniform integer on [lo, hi] (inclusive); requires lo <= hi.
  int64_t uniform_int(int64_t lo, int64_t hi);
  // Exponential with the given rate (mean 1/rate): -ln(1-U)/rate.
  double exponential(double rate);
  // Standard normal by the Box-Muller transform (one value per call).
  double normal();
  // Gamma(shape k, scale theta) by Marsaglia & Tsang (2000); for k < 1 the
  // boost U^(1/k) of the same paper.
  double gamma(double shape, double scale);

  std::mt19937_64& engine() { return engine_; }

 private:
  std::mt19937_64 engine_;
};

}  // namespace servesim
