#include "kernels/decoder/fp8_e4m3.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace servesim {
namespace {

// The 127 non-negative finite values, by code 0x00 .. 0x7E (ascending).
const std::array<float, 127>& positive_values() {
  static const std::array<float, 127> table = [] {
    std::array<float, 127> t{};
    for (int code = 0; code < 127; ++code) {
      const int e = code >> 3, m = code & 7;
      t[size_t(code)] = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(1.0f + float(m) / 8, e - 7);
    }
    return t;
  }();
  return table;
}

}  // namespace

float e4m3_to_f32(uint8_t v) {
  const uint8_t magnitude = v & 0x7F;
  if (magnitude == 0x7F) return std::nanf("");
  const float a = positive_values()[magnitude];
  return (v & 0x80) ? -a : a;
}

uint8_t f32_to_e4m3(float v) {
  if (std::isnan(v)) return 0x7F;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const float a = std::fabs(v);
  const auto& t = positive_values();
  if (a >= t.back()) return sign | 0x7E;
  // t[hi - 1] <= a < t[hi]: the nearer of the two, the even code on a tie.
  const size_t hi = size_t(std::upper_bound(t.begin(), t.end(), a) - t.begin());
  const size_t lo = hi - 1;
  const float below = a - t[lo], above = t[hi] - a;
  const size_t code = below < above ? lo : above < below ? hi : (lo % 2 == 0 ? lo : hi);
  return uint8_t(sign | code);
}

}  // namespace servesim
