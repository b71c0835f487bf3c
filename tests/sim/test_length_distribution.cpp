#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "sim/errors.h"
#include "sim/length_distribution.h"

using servesim::InputError;
using servesim::LengthDistribution;
using servesim::Rng;
using Kind = LengthDistribution::Kind;

namespace {

constexpr int kN = 200'000;

std::vector<int32_t> sample(const LengthDistribution& d, int n, uint64_t seed = 11) {
  Rng rng(seed);
  std::vector<int32_t> xs(static_cast<size_t>(n));
  for (auto& x : xs) x = d.sample(rng);
  return xs;
}

double mean_of(const std::vector<int32_t>& xs) {
  double sum = 0;
  for (int32_t x : xs) sum += x;
  return sum / static_cast<double>(xs.size());
}

// Every one of `n` samples lies in [lo, hi], and both ends are hit.
void check_fills_clip_range(const LengthDistribution& d, int n, int32_t lo, int32_t hi) {
  bool hit_lo = false, hit_hi = false;
  for (int32_t x : sample(d, n)) {
    REQUIRE(x >= lo);
    REQUIRE(x <= hi);
    hit_lo = hit_lo || x == lo;
    hit_hi = hit_hi || x == hi;
  }
  CHECK(hit_lo);
  CHECK(hit_hi);
}

}  // namespace

TEST_CASE("A bare number and fixed:N are fixed lengths", "[length]") {
  for (const std::string spec : {"512", "fixed:512", " fixed : 512 "}) {
    const auto d = LengthDistribution::parse(spec, "--prompt-len");
    CHECK(d.kind() == Kind::Fixed);
    CHECK(d.describe() == "fixed:512");
    CHECK(d.nominal_mean() == 512.0);
    for (int32_t x : sample(d, 100)) REQUIRE(x == 512);
  }
  CHECK(LengthDistribution::fixed(7).describe() == "fixed:7");
  CHECK(LengthDistribution::parse("2147483647", "--prompt-len").describe() == "fixed:2147483647");
}

TEST_CASE("uniform:LO:HI covers LO..HI evenly", "[length]") {
  const auto d = LengthDistribution::parse("uniform:10:20", "--output-len");
  CHECK(d.kind() == Kind::Uniform);
  CHECK(d.describe() == "uniform:10:20");
  CHECK(d.nominal_mean() == 15.0);
  const auto xs = sample(d, kN);
  std::set<int32_t> seen;
  for (int32_t x : xs) {
    REQUIRE(x >= 10);
    REQUIRE(x <= 20);
    seen.insert(x);
  }
  CHECK(seen.size() == 11);
  // Variance of a discrete uniform on 11 values: (11^2 - 1)/12 = 10.
  CHECK(mean_of(xs) == Approx(15.0).margin(5 * std::sqrt(10.0 / kN)));
}

TEST_CASE("normal:MEAN:STD has the requested mean and honours the clip", "[length]") {
  const auto d = LengthDistribution::parse("normal:100:10", "--prompt-len");
  CHECK(d.kind() == Kind::Normal);
  CHECK(d.describe() == "normal:100:10:1:inf");
  const auto xs = sample(d, kN);
  for (int32_t x : xs) REQUIRE(x >= 1);
  // Rounding to the nearest integer adds variance 1/12 but no bias.
  CHECK(mean_of(xs) == Approx(100.0).margin(5 * 10.0 / std::sqrt(kN)));

  const auto clipped = LengthDistribution::parse("normal:100:50:80:120", "--prompt-len");
  check_fills_clip_range(clipped, 10'000, 80, 120);
  // A wide normal near 1 never yields a length below 1.
  for (int32_t x : sample(LengthDistribution::parse("normal:2:100", "--p"), 10'000)) {
    REQUIRE(x >= 1);
  }
}

TEST_CASE("lognormal:MEAN:SIGMA has mean MEAN", "[length]") {
  const double mean = 512, sigma = 0.8;
  const auto d = LengthDistribution::parse("lognormal:512:0.8", "--prompt-len");
  CHECK(d.kind() == Kind::LogNormal);
  CHECK(d.nominal_mean() == 512.0);
  const auto xs = sample(d, kN);
  for (int32_t x : xs) REQUIRE(x >= 1);
  // SD of a lognormal = MEAN * sqrt(exp(SIGMA^2) - 1).
  const double sd = mean * std::sqrt(std::exp(sigma * sigma) - 1);
  CHECK(mean_of(xs) == Approx(mean).margin(5 * sd / std::sqrt(kN)));
  // The median is exp(mu) = MEAN * exp(-SIGMA^2 / 2).
  auto sorted = xs;
  std::nth_element(sorted.begin(), sorted.begin() + kN / 2, sorted.end());
  CHECK(sorted[kN / 2] == Approx(mean * std::exp(-sigma * sigma / 2)).epsilon(0.02));
}

TEST_CASE("lognormal with a clip range stays inside it", "[length]") {
  const auto d = LengthDistribution::parse("lognormal:1024:1.0:16:8192", "--prompt-len");
  CHECK(d.describe() == "lognormal:1024:1:16:8192");
  check_fills_clip_range(d, kN, 16, 8192);
  // A huge sigma overflows exp() to inf: it must clip, not wrap.
  for (int32_t x : sample(LengthDistribution::parse("lognormal:1000:40", "--p"), 10'000)) {
    REQUIRE(x >= 1);
  }
}

TEST_CASE("describe() gives a spec that parses back to the same distribution", "[length]") {
  for (const std::string spec :
       {"7", "uniform:1:9", "normal:128.5:3.25", "lognormal:512:0.8:1:8192",
        "lognormal:300:0.5:2:inf"}) {
    const auto d = LengthDistribution::parse(spec, "--prompt-len");
    const auto again = LengthDistribution::parse(d.describe(), "--prompt-len");
    INFO(spec << " -> " << d.describe());
    CHECK(again.describe() == d.describe());
    CHECK(sample(again, 1000) == sample(d, 1000));
  }
}

TEST_CASE("Sampling is deterministic for a seed", "[length]") {
  const auto d = LengthDistribution::parse("lognormal:512:0.8", "--prompt-len");
  CHECK(sample(d, 1000, 5) == sample(d, 1000, 5));
  CHECK(sample(d, 1000, 5) != sample(d, 1000, 6));
}

TEST_CASE("Every malformed spec throws InputError naming the flag", "[length]") {
  const std::vector<std::string> bad = {
      "",          "  ",          "abc",           "0",
      "-5",        "1.5",         "2147483648",    "fixed",
      "fixed:0",   "fixed:x",     "fixed:1:2",     "uniform",
      "uniform:5", "uniform:5:1", "uniform:0:5",   "uniform:1:x",
      "uniform:1:2:3",            "uniform:1:inf", "normal:100",
      "normal:100:10:1",          "normal:100:10:1:2:3",
      "normal:nan:10",            "normal:inf:10", "normal:100:-1",
      "normal:-5:1",              "normal:0:1",    "normal:100:nan",
      "normal:100:10:0:50",       "normal:100:10:50:10",
      "lognormal:0:1",            "lognormal:512:0.8:10:5",
      "lognormal:512:inf",        "lognormal:512:0.8:1:x",
      "lognormal:512:0.8e",       "weibull:1:2",   "uniform:1:99999999999",
      "1:2",       ":"};
  for (const auto& spec : bad) {
    INFO("spec '" << spec << "'");
    CHECK_THROWS_AS(LengthDistribution::parse(spec, "--prompt-len"), InputError);
    CHECK_THROWS_WITH(LengthDistribution::parse(spec, "--prompt-len"),
                      Catch::Contains("--prompt-len"));
  }
}

TEST_CASE("Spec error messages say what is wrong", "[length]") {
  using Catch::Contains;
  CHECK_THROWS_WITH(LengthDistribution::parse("uniform:5", "--prompt-len"),
                    Contains("--prompt-len: 'uniform:5' needs LO:HI"));
  CHECK_THROWS_WITH(LengthDistribution::parse("uniform:9:5", "--output-len"),
                    Contains("--output-len") && Contains("LO <= HI"));
  CHECK_THROWS_WITH(LengthDistribution::parse("fixed:0", "--output-len"),
                    Contains("N must be an integer in [1, 2147483647]"));
  CHECK_THROWS_WITH(LengthDistribution::parse("normal:100:-1", "--prompt-len"),
                    Contains("STD must be a finite number >= 0") && Contains("-1"));
  CHECK_THROWS_WITH(LengthDistribution::parse("weibull:1:2", "--prompt-len"),
                    Contains("unknown distribution 'weibull'"));
}
