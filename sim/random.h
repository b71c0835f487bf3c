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
