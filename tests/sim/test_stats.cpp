// Summary statistics: percentiles (numpy's linear method), summaries, and the
// streaming collector's exact and histogram modes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "sim/random.h"
#include "sim/stats.h"

using servesim::Distribution;
using servesim::percentile_sorted;
using servesim::Rng;
using servesim::StreamingSamples;
using servesim::summarize;

namespace {

// Lognormal samples spread over about four decades (1e-4 s .. 1 s), the range
// inter-token latencies live in.
std::vector<double> lognormal_samples(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<double> v(n);
  for (double& x : v) x = 0.02 * std::exp(1.2 * rng.normal());
  return v;
}

double rel_diff(double a, double b) { return std::abs(a - b) / std::abs(b); }

}  // namespace

TEST_CASE("percentile_sorted matches numpy's linear method on hand-checked arrays", "[stats]") {
  // numpy.percentile([1, 2, 3, 4], q): h = 3 q / 100.
  const std::vector<double> a = {1, 2, 3, 4};
  CHECK(percentile_sorted(a, 50) == Approx(2.5).margin(1e-12));
  CHECK(percentile_sorted(a, 90) == Approx(3.7).margin(1e-12));
  CHECK(percentile_sorted(a, 25) == Approx(1.75).margin(1e-12));
  CHECK(percentile_sorted(a, 0) == 1.0);
  CHECK(percentile_sorted(a, 100) == 4.0);

  // numpy.percentile([10, 20, 30, 40, 50], q): h = 4 q / 100.
  const std::vector<double> b = {10, 20, 30, 40, 50};
  CHECK(percentile_sorted(b, 50) == Approx(30).margin(1e-12));  // h = 2 exactly: no interpolation
  CHECK(percentile_sorted(b, 95) == Approx(48).margin(1e-12));  // h = 3.8
  CHECK(percentile_sorted(b, 99) == Approx(49.6).margin(1e-12));  // h = 3.96
  CHECK(percentile_sorted(b, 10) == Approx(14).margin(1e-12));  // h = 0.4

  // Uneven gaps: interpolation uses the gap at the rank, not a global slope.
  const std::vector<double> c = {1, 2, 10, 100};
  CHECK(percentile_sorted(c, 50) == Approx(6).margin(1e-12));    // h = 1.5
  CHECK(percentile_sorted(c, 90) == Approx(73).margin(1e-12));   // h = 2.7: 10 + 0.7 * 90

  // A single value is every percentile.
  const std::vector<double> one = {7.25};
  for (double p : {0.0, 50.0, 99.0, 100.0}) CHECK(percentile_sorted(one, p) == 7.25);
}

TEST_CASE("summarize sorts its input and reports mean, percentiles and extremes", "[stats]") {
  std::vector<double> v = {3, 1, 4, 1, 5, 9, 2, 6};  // sorted: 1 1 2 3 4 5 6 9
  const Distribution d = summarize(v);
  CHECK(std::is_sorted(v.begin(), v.end()));
  CHECK(d.count == 8);
  CHECK(d.mean == Approx(31.0 / 8).margin(1e-12));
  CHECK(d.p50 == Approx(3.5).margin(1e-12));   // h = 3.5
  CHECK(d.p90 == Approx(6.9).margin(1e-12));   // h = 6.3: 6 + 0.3 * 3
  CHECK(d.p95 == Approx(7.95).margin(1e-12));  // h = 6.65
  CHECK(d.p99 == Approx(8.79).margin(1e-12));  // h = 6.93
  CHECK(d.min == 1);
  CHECK(d.max == 9);

  std::vector<double> empty;
  const Distribution e = summarize(empty);
  CHECK(e.count == 0);
}

namespace {
// Every field equal, exactly.
void check_equal(const Distribution& got, const Distribution& want) {
  CHECK(got.count == want.count);
  CHECK(got.mean == want.mean);
  CHECK(got.p50 == want.p50);
  CHECK(got.p90 == want.p90);
  CHECK(got.p95 == want.p95);
  CHECK(got.p99 == want.p99);
  CHECK(got.min == want.min);
  CHECK(got.max == want.max);
}
}  // namespace

TEST_CASE("StreamingSamples in exact mode equals summarize()", "[stats]") {
  const std::vector<double> data = lognormal_samples(5000, 11);
  StreamingSamples s;  // default limit: far above 5000
  for (double x : data) s.add(x);
  REQUIRE(s.exact());
  CHECK(s.count() == int64_t(data.size()));

  std::vector<double> copy = data;
  check_equal(s.summarize(), summarize(copy));
}

TEST_CASE("StreamingSamples kept as runs of equal values summarises exactly as the samples would", "[stats]") {
  // A decode step adds one gap per sequence: runs of equal values, the same
  // value recurring in later runs, interleaved with others.
  const std::vector<double> distinct = lognormal_samples(300, 5);
  std::vector<double> data;
  for (size_t i = 0; i < 3000; ++i) {
    const double v = distinct[(i * 7919) % distinct.size()];
    for (size_t k = 0; k < 1 + i % 13; ++k) data.push_back(v);
  }
  StreamingSamples s, merged;
  for (double x : data) s.add(x);
  merged.merge(s);
  std::vector<double> copy = data;
  const Distribution want = summarize(copy);
  for (StreamingSamples* samples : {&s, &merged}) {
    REQUIRE(samples->exact());
    check_equal(samples->summarize(), want);  // the mean: the same sum in the same (sorted) order
  }
}

TEST_CASE("StreamingSamples with long runs and many distinct values summarises as the samples would", "[stats]") {
  // Runs of thousands of equal gaps (a large decode batch) among thousands
  // of distinct values: the sorted order and the sum of each run as the
  // samples' own additions.
  const std::vector<double> distinct = lognormal_samples(2000, 17);
  Rng rng(3);
  std::vector<double> data;
  for (size_t i = 0; i < 4000; ++i) {
    const double v = distinct[size_t(rng.uniform_int(0, int64_t(distinct.size()) - 1))];
    data.insert(data.end(), size_t(rng.uniform_int(1, i % 50 == 0 ? 5000 : 40)), v);
  }
  StreamingSamples s;
  for (double x : data) s.add(x);
  REQUIRE(s.exact());
  std::vector<double> copy = data;
  check_equal(s.summarize(), summarize(copy));
}

TEST_CASE("StreamingSamples stays exact up to its limit and switches past it", "[stats]") {
  const size_t limit = 100;
  const std::vector<double> data = lognormal_samples(limit + 1, 5);
  StreamingSamples s(limit);
  for (size_t i = 0; i < limit; ++i) s.add(data[i]);
  CHECK(s.exact());
  s.add(data[limit]);
  CHECK_FALSE(s.exact());
  CHECK(s.count() == int64_t(limit + 1));
}

TEST_CASE("StreamingSamples histogram percentiles are within 0.1% of the exact ones", "[stats]") {
  const std::vector<double> data = lognormal_samples(200000, 42);
  StreamingSamples s(1000);  // the histogram takes over after 1000 samples
  for (double x : data) s.add(x);
  REQUIRE_FALSE(s.exact());
  const Distribution got = s.summarize();

  std::vector<double> copy = data;
  const Distribution want = summarize(copy);
  CHECK(got.count == want.count);
  // The mean is kept exactly (summed in arrival order rather than sorted
  // order, so only rounding differs).
  CHECK(rel_diff(got.mean, want.mean) < 1e-12);
  CHECK(got.min == want.min);
  CHECK(got.max == want.max);
  CHECK(rel_diff(got.p50, want.p50) <= 1e-3);
  CHECK(rel_diff(got.p90, want.p90) <= 1e-3);
  CHECK(rel_diff(got.p95, want.p95) <= 1e-3);
  CHECK(rel_diff(got.p99, want.p99) <= 1e-3);
  // The percentiles are ordered as any distribution's are.
  CHECK(got.min <= got.p50);
  CHECK(got.p50 < got.p90);
  CHECK(got.p90 < got.p95);
  CHECK(got.p95 < got.p99);
  CHECK(got.p99 <= got.max);
}

TEST_CASE("StreamingSamples histogram handles a few distinct values", "[stats]") {
  // 10% of samples at 1 ms, 80% at 10 ms, 10% at 100 ms: P50 is 10 ms, P95
  // and P99 are 100 ms; the histogram must put each within 0.1%.
  StreamingSamples s(16);
  std::vector<double> all;
  for (int i = 0; i < 1000; ++i) {
    const double x = i < 100 ? 1e-3 : i < 900 ? 1e-2 : 1e-1;
    s.add(x);
    all.push_back(x);
  }
  REQUIRE_FALSE(s.exact());
  const Distribution d = s.summarize();
  const Distribution want = summarize(all);
  CHECK(rel_diff(d.p50, 1e-2) <= 1e-3);
  CHECK(rel_diff(d.p95, 1e-1) <= 1e-3);
  CHECK(rel_diff(d.p99, 1e-1) <= 1e-3);
  CHECK(rel_diff(d.mean, want.mean) < 1e-12);
  CHECK(d.min == 1e-3);
  CHECK(d.max == 1e-1);
}

TEST_CASE("StreamingSamples::add_repeated is n calls of add, across the exact limit too", "[stats]") {
  // Runs of equal gaps (a decode step's sequences), some long enough to
  // cross the exact limit into the histogram in the middle of a run.
  for (const size_t limit : {size_t(40), size_t(1000), size_t(1) << 22}) {
    StreamingSamples one_by_one(limit), repeated(limit);
    Rng rng(7);
    for (int run = 0; run < 300; ++run) {
      const double gap = run % 5 == 0 ? 0.0125 : 0.001 * (1.0 + double(rng.uniform_int(0, 40)));
      const int64_t n = rng.uniform_int(0, 64);
      for (int64_t i = 0; i < n; ++i) one_by_one.add(gap);
      repeated.add_repeated(gap, n);
    }
    INFO("exact limit " << limit);
    CHECK(repeated.count() == one_by_one.count());
    CHECK(repeated.exact() == one_by_one.exact());
    CHECK(repeated.exact() == (limit > 10000));
    const Distribution a = repeated.summarize(), b = one_by_one.summarize();
    CHECK(a.count == b.count);
    CHECK(a.mean == b.mean);
    CHECK(a.p50 == b.p50);
    CHECK(a.p90 == b.p90);
    CHECK(a.p99 == b.p99);
    CHECK(a.min == b.min);
    CHECK(a.max == b.max);
  }
}

TEST_CASE("StreamingSamples past its exact limit keeps the mean of the samples added in turn", "[stats]") {
  // The histogram's mean divides the sum of every sample in arrival order:
  // the exact ones' taken from their runs at the move, the later ones added.
  const std::vector<double> data = lognormal_samples(5000, 11);
  for (const size_t limit : {size_t(1), size_t(100), size_t(4999)}) {
    StreamingSamples s(limit);
    double sum = 0;
    for (size_t i = 0; i < data.size(); ++i) {
      s.add(data[i]);
      if (i % 7 == 0) s.add_repeated(data[i], 30);
      sum += data[i];
      if (i % 7 == 0)
        for (int k = 0; k < 30; ++k) sum += data[i];
    }
    INFO("exact limit " << limit);
    REQUIRE_FALSE(s.exact());
    const Distribution d = s.summarize();
    CHECK(d.mean == sum / double(d.count));
  }
}
