#include "sim/repeated_sum.h"

#include <cfloat>
#include <cmath>

namespace servesim {

double add_repeatedly(double s, double v, int64_t n) {
  constexpr int64_t kLimit = int64_t(1) << 53;  // mantissas of one binade: [2^52, 2^53)
  // A short run (a decode step of a few sequences): the loop itself is cheaper.
  if (n <= 16) {
    for (; n > 0; --n) s += v;
    return s;
  }
  while (n > 0) {
    if (v == 0) return s;
    // The sum is small next to v, or not a normal double: one plain addition
    // (it at least doubles s while v > s, so this happens a few times).
    if (!(s >= v) || s < DBL_MIN || !std::isfinite(s) || v < DBL_MIN) {
      s += v;
      --n;
      continue;
    }
    int e = 0;
    std::frexp(s, &e);                   // s in [2^(e-1), 2^e)
    const double u = std::ldexp(1.0, e - 53);  // its spacing
    const double vu = v / u;             // exact: a power-of-two scaling, < 2^53 as v <= s
    const double q_real = std::floor(vu);
    const double f = vu - q_real;        // exact
    const auto q = int64_t(q_real);
    const auto m = int64_t(s / u);       // exact integer in [2^52, 2^53)
    // The exact sum m + q + f must stay below 2^53 (this binade).
    if (m + q > kLimit - 1) {
      s += v;
      --n;
      continue;
    }
    int64_t d;
    if (f < 0.5) {
      d = q;
    } else if (f > 0.5) {
      d = q + 1;
    } else if (m % 2 != 0) {  // a tie from an odd mantissa: this one rounds to the even neighbour
      s += v;
      --n;
      continue;
    } else {  // a tie from an even mantissa keeps it even
      d = q + (q & 1);
    }
    if (d == 0) return s;  // each addition rounds back to s
    // Steps j = 0 .. k-1 start at m + j d and need m + j d + q <= 2^53 - 1.
    const int64_t k_max = (kLimit - 1 - q - m) / d + 1;
    const int64_t k = n < k_max ? n : k_max;
    s = double(m + k * d) * u;  // exact: at most 2^53 times a power of two
    n -= k;
  }
  return s;
}

}  // namespace servesim
