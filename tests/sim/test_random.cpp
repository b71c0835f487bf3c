#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <stdexcept>
#include <vector>

#include "sim/random.h"

using servesim::Rng;

namespace {

struct Moments {
  double mean = 0, variance = 0, skewness = 0, kurtosis = 0;
};

Moments moments(const std::vector<double>& xs) {
  const double n = static_cast<double>(xs.size());
  double mean = 0;
  for (double x : xs) mean += x;
  mean /= n;
  double m2 = 0, m3 = 0, m4 = 0;
  for (double x : xs) {
    const double d = x - mean;
    m2 += d * d;
    m3 += d * d * d;
    m4 += d * d * d * d;
  }
  m2 /= n;
  m3 /= n;
  m4 /= n;
  return {mean, m2, m3 / std::pow(m2, 1.5), m4 / (m2 * m2)};
}

template <typename F>
std::vector<double> draw(size_t n, F&& f) {
  std::vector<double> xs(n);
  for (double& x : xs) x = f();
  return xs;
}

constexpr size_t kN = 200'000;

}  // namespace

TEST_CASE("Rng engine is the standard mt19937_64", "[random]") {
  // The C++ standard fixes the 10000th output of a default-seeded engine.
  Rng rng(5489u);
  rng.engine().discard(9999);
  CHECK(rng.engine()() == 9981545732273789042ULL);
}

TEST_CASE("Rng::uniform uses the top 53 bits of the raw output", "[random]") {
  Rng rng(42);
  std::mt19937_64 reference(42);
  for (int i = 0; i < 1000; ++i) {
    const double expected = static_cast<double>(reference() >> 11) * 0x1.0p-53;
    REQUIRE(rng.uniform() == expected);
  }
}

TEST_CASE("Rng::uniform lies in 0 <= u < 1 with mean 1/2 and variance 1/12", "[random]") {
  Rng rng(1);
  const auto xs = draw(kN, [&] { return rng.uniform(); });
  for (double x : xs) REQUIRE((x >= 0.0 && x < 1.0));
  const Moments m = moments(xs);
  // Standard error of the mean: sqrt(1/12 / n) ~ 6.5e-4; allow 5 of them.
  CHECK(m.mean == Approx(0.5).margin(5 * std::sqrt(1.0 / 12 / kN)));
  CHECK(m.variance == Approx(1.0 / 12).margin(0.002));
}

TEST_CASE("Rng: the same seed gives the same sequence, another seed another", "[random]") {
  Rng a(7), b(7), c(8);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const double x = a.normal();
    REQUIRE(x == b.normal());
    differs = differs || x != c.normal();
  }
  CHECK(differs);
}

TEST_CASE("Rng::uniform_int stays in bounds and hits every value evenly", "[random]") {
  Rng rng(3);
  std::map<int64_t, int> counts;
  const int draws = 70'000;
  for (int i = 0; i < draws; ++i) {
    const int64_t v = rng.uniform_int(-3, 3);
    REQUIRE(v >= -3);
    REQUIRE(v <= 3);
    ++counts[v];
  }
  REQUIRE(counts.size() == 7);
  // Binomial(70000, 1/7): mean 10000, sd ~ 93.
  for (const auto& [value, count] : counts) {
    INFO("value " << value);
    CHECK(std::abs(count - 10'000) < 5 * 93);
  }
}

TEST_CASE("Rng::uniform_int edge ranges", "[random]") {
  Rng rng(4);
  CHECK(rng.uniform_int(5, 5) == 5);
  const int64_t lo = std::numeric_limits<int64_t>::min();
  const int64_t hi = std::numeric_limits<int64_t>::max();
  bool negative = false, positive = false;
  for (int i = 0; i < 100; ++i) {
    const int64_t v = rng.uniform_int(lo, hi);
    negative = negative || v < 0;
    positive = positive || v > 0;
  }
  CHECK(negative);
  CHECK(positive);
  // A span just over half the 64-bit range exercises the rejection step.
  for (int i = 0; i < 1000; ++i) {
    const int64_t v = rng.uniform_int(-1, hi);
    REQUIRE(v >= -1);
  }
  CHECK_THROWS_AS(rng.uniform_int(2, 1), std::invalid_argument);
}

TEST_CASE("Rng::exponential has mean 1/rate and variance 1/rate^2", "[random]") {
  const double rate = 2.0;
  Rng rng(5);
  const auto xs = draw(kN, [&] { return rng.exponential(rate); });
  for (double x : xs) REQUIRE((x >= 0.0 && std::isfinite(x)));
  const Moments m = moments(xs);
  // SE(mean) = 0.5/sqrt(n) ~ 1.1e-3; SE(var) = sqrt(8/rate^4/n) ~ 1.6e-3.
  CHECK(m.mean == Approx(0.5).margin(5 * 0.5 / std::sqrt(kN)));
  CHECK(m.variance == Approx(0.25).margin(5 * std::sqrt(8.0 / 16 / kN)));
  CHECK(m.skewness == Approx(2.0).margin(0.1));
  CHECK_THROWS_AS(rng.exponential(0.0), std::invalid_argument);
  CHECK_THROWS_AS(rng.exponential(-1.0), std::invalid_argument);
  CHECK_THROWS_AS(rng.exponential(std::nan("")), std::invalid_argument);
}

TEST_CASE("Rng::normal has the standard normal's moments", "[random]") {
  Rng rng(6);
  const auto xs = draw(kN, [&] { return rng.normal(); });
  const Moments m = moments(xs);
  CHECK(m.mean == Approx(0.0).margin(5 / std::sqrt(kN)));
  CHECK(m.variance == Approx(1.0).margin(5 * std::sqrt(2.0 / kN)));
  CHECK(m.skewness == Approx(0.0).margin(5 * std::sqrt(6.0 / kN)));
  CHECK(m.kurtosis == Approx(3.0).margin(5 * std::sqrt(24.0 / kN)));
  // Tail mass: P(|Z| > 1.96) = 0.05.
  double tail = 0;
  for (double x : xs) tail += std::abs(x) > 1.959964 ? 1 : 0;
  CHECK(tail / kN == Approx(0.05).margin(5 * std::sqrt(0.05 * 0.95 / kN)));
}

TEST_CASE("Rng::gamma has mean k*theta and CV 1/sqrt(k)", "[random]") {
  for (double shape : {0.2, 0.7, 1.0, 2.5, 20.0}) {
    const double scale = 3.0;
    Rng rng(static_cast<uint64_t>(shape * 1000));
    const auto xs = draw(kN, [&] { return rng.gamma(shape, scale); });
    for (double x : xs) REQUIRE((x >= 0.0 && std::isfinite(x)));
    const Moments m = moments(xs);
    const double mean = shape * scale;
    const double cv = 1.0 / std::sqrt(shape);
    INFO("shape " << shape);
    // SE(mean) = mean * cv / sqrt(n).
    CHECK(m.mean == Approx(mean).margin(5 * mean * cv / std::sqrt(kN)));
    CHECK(std::sqrt(m.variance) / m.mean == Approx(cv).epsilon(0.03));
  }
}

TEST_CASE("Rng::gamma rejects a bad shape or scale", "[random]") {
  Rng rng(9);
  CHECK_THROWS_AS(rng.gamma(0.0, 1.0), std::invalid_argument);
  CHECK_THROWS_AS(rng.gamma(-1.0, 1.0), std::invalid_argument);
  CHECK_THROWS_AS(rng.gamma(1.0, 0.0), std::invalid_argument);
  CHECK_THROWS_AS(rng.gamma(std::numeric_limits<double>::infinity(), 1.0),
                  std::invalid_argument);
}
