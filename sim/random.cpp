#include "sim/random.h"

#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <string>

namespace servesim {

namespace {

// Rng's preconditions are the caller's duty (user values are validated at
// the boundary), so a violation is a programming error, not an InputError.
void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("Rng: ") + what);
}

bool positive_finite(double x) { return std::isfinite(x) && x > 0.0; }

}  // namespace

double Rng::uniform() {
  // The top 53 bits of the 64-bit output scaled by 2^-53: every value is a
  // multiple of 2^-53 in [0, 1), exactly representable as a double.
  return static_cast<double>(engine_() >> 11) * 0x1.0p-53;
}

int64_t Rng::uniform_int(int64_t lo, int64_t hi) {
  require(lo <= hi, "uniform_int needs lo <= hi");
  // Unsigned arithmetic: hi - lo may exceed INT64_MAX.
  const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
  if (span == std::numeric_limits<uint64_t>::max()) {
    return static_cast<int64_t>(engine_());  // the whole int64 range
  }
  const uint64_t n = span + 1;
  // Rejection sampling without modulo bias: accept x >= 2^64 mod n, so the
  // accepted range [threshold, 2^64) holds a whole multiple of n values.
  const uint64_t threshold = (0 - n) % n;
  uint64_t x = engine_();
  while (x < threshold) x = engine_();
  return static_cast<int64_t>(static_cast<uint64_t>(lo) + x % n);
}

double Rng::exponential(double rate) {
  require(positive_finite(rate), "exponential needs a finite rate > 0");
  // 1 - U lies in (0, 1], so the logarithm is finite.
  return -std::log1p(-uniform()) / rate;
}

double Rng::normal() {
  const double u1 = 1.0 - uniform();  // (0, 1]: log(u1) is finite
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

double Rng::gamma(double shape, double scale) {
  require(positive_finite(shape), "gamma needs a finite shape > 0");
  require(positive_finite(scale), "gamma needs a finite scale > 0");
  if (shape < 1.0) {
    // Marsaglia & Tsang: if X ~ Gamma(k + 1) then X * U^(1/k) ~ Gamma(k).
    const double boost = std::pow(1.0 - uniform(), 1.0 / shape);
    return gamma(shape + 1.0, scale) * boost;
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = normal();
    double v = 1.0 + c * x;
    if (v <= 0.0) continue;
    v = v * v * v;
    const double u = uniform();
    const double x2 = x * x;
    // Cheap squeeze first, then the exact acceptance test.
    if (u < 1.0 - 0.0331 * x2 * x2) return d * v * scale;
    if (std::log(u) < 0.5 * x2 + d * (1.0 - v + std::log(v))) return d * v * scale;
  }
}

}  // namespace servesim
