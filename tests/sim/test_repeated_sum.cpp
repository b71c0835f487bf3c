// add_repeatedly: n additions of one value in O(binades), bit for bit what
// the loop gives, ties to even included.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "sim/random.h"
#include "sim/repeated_sum.h"

using servesim::add_repeatedly;
using servesim::Rng;

namespace {

double add_in_a_loop(double s, double v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) s += v;
  return s;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST_CASE("add_repeatedly equals a loop of additions, bit for bit", "[stats]") {
  Rng rng(2026);
  int ties = 0;
  for (int t = 0; t < 4000; ++t) {
    // Starting sums and values over many decades, counts up to 20,000.
    const double s = t % 10 == 0 ? 0.0 : std::ldexp(1.0 + rng.uniform(), int(rng.uniform_int(-30, 30)));
    double v = std::ldexp(1.0 + rng.uniform(), int(rng.uniform_int(-40, 10)));
    if (t % 4 == 1 && s > 0) {
      // A tie: v an odd number of half spacings of s's binade.
      int e = 0;
      std::frexp(s, &e);
      const double u = std::ldexp(1.0, e - 53);
      v = (double(rng.uniform_int(0, 1000)) + 0.5) * u;
      ++ties;
    }
    if (t % 7 == 2) v = 0.0;
    const auto n = rng.uniform_int(0, 20000);
    const double want = add_in_a_loop(s, v, n), got = add_repeatedly(s, v, n);
    INFO("s = " << s << ", v = " << v << ", n = " << n);
    REQUIRE(same_bits(got, want));
  }
  CHECK(ties > 500);
}

TEST_CASE("add_repeatedly over long runs that cross many binades", "[stats]") {
  // The mean of inter-token gaps: millions of equal gaps summed from 0.
  for (const double v : {0.0109375, 1e-3, 3.14159e-2, 0.1 + 0.2, 7e-5}) {
    for (const int64_t n : {int64_t(1), int64_t(999), int64_t(65536), int64_t(2'000'000)}) {
      INFO("v = " << v << ", n = " << n);
      CHECK(same_bits(add_repeatedly(0.0, v, n), add_in_a_loop(0.0, v, n)));
      CHECK(same_bits(add_repeatedly(123.456, v, n), add_in_a_loop(123.456, v, n)));
    }
  }
  // A value below half a spacing of the sum leaves it unchanged.
  CHECK(add_repeatedly(1.0, 1e-17, 1'000'000'000) == 1.0);
}
