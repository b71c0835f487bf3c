#include "sim/stats.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

#include "sim/repeated_sum.h"

namespace servesim {
namespace {
// Histogram range: 1 ns .. 1e6 s with bins growing by 0.1%.
constexpr double kHistLow = 1e-9;
constexpr double kHistRatio = 1.001;
const double kLogRatio = std::log(kHistRatio);
const size_t kHistBins = size_t(std::ceil(std::log(1e6 / kHistLow) / std::log(kHistRatio))) + 1;

// Orders `items` by value_of(item), as std::sort comparing those values
// with < would (equal values may come in any order: they are
// interchangeable), by an LSD radix sort of the values' bit patterns mapped
// so that unsigned order is numeric order, one byte a pass, skipping the
// bytes every value shares. Several times faster than comparing them: an
// inter-token latency's runs number one a decode step, hundreds of
// thousands, and a run's per-request metrics one a request.
template <class T, class ValueOf>
void radix_sort_by_value(std::vector<T>& items, ValueOf value_of) {
  if (items.size() < 256) {
    std::sort(items.begin(), items.end(), [&](const T& a, const T& b) { return value_of(a) < value_of(b); });
    return;
  }
  auto key = [&](const T& item) {
    const auto bits = std::bit_cast<uint64_t>(double(value_of(item)));
    return bits >> 63 ? ~bits : bits | (uint64_t(1) << 63);  // negatives reversed, below positives
  };
  std::array<std::array<size_t, 256>, 8> counts{};
  for (const T& item : items) {
    const uint64_t k = key(item);
    for (int b = 0; b < 8; ++b) ++counts[size_t(b)][(k >> (8 * b)) & 0xff];
  }
  std::vector<T> buffer(items.size());
  for (int b = 0; b < 8; ++b) {
    auto& c = counts[size_t(b)];
    if (std::find(c.begin(), c.end(), items.size()) != c.end()) continue;  // one value of this byte
    size_t offset = 0;
    for (size_t& n : c) offset += std::exchange(n, offset);
    for (const T& item : items) buffer[c[(key(item) >> (8 * b)) & 0xff]++] = item;
    items.swap(buffer);
  }
}
}  // namespace

double percentile_sorted(const std::vector<double>& sorted, double p) {
  const double h = (double(sorted.size()) - 1.0) * p / 100.0;
  const size_t lo = size_t(std::floor(h));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - double(lo)) * (sorted[hi] - sorted[lo]);
}

Distribution summarize(std::vector<double>& values) {
  Distribution d;
  if (values.empty()) return d;
  radix_sort_by_value(values, [](double v) { return v; });
  d.count = int64_t(values.size());
  double sum = 0;
  for (double v : values) sum += v;
  d.mean = sum / double(values.size());
  d.p50 = percentile_sorted(values, 50);
  d.p90 = percentile_sorted(values, 90);
  d.p95 = percentile_sorted(values, 95);
  d.p99 = percentile_sorted(values, 99);
  d.min = values.front();
  d.max = values.back();
  return d;
}

StreamingSamples::StreamingSamples(size_t exact_limit) : exact_limit_(exact_limit) {
  if (exact_limit_ > size_t(std::numeric_limits<int32_t>::max()))
    throw std::invalid_argument("StreamingSamples: an exact limit beyond 2^31 - 1 samples");
}

void StreamingSamples::add_new_value(double value) {
  if (count_ == 0) {
    min_ = max_ = value;
  } else {
    min_ = std::min(min_, value);
    max_ = std::max(max_, value);
  }
  ++count_;
  if (histogram_.empty()) {
    add_exact(value);
    if (size_t(exact_count_) > exact_limit_) move_to_histogram();
  } else {
    sum_ += value;
    add_to_histogram(value);
  }
}

void StreamingSamples::add_repeated(double value, int64_t n) {
  if (n <= 0) return;
  add(value);  // extremes, a new run, the move to the histogram
  --n;
  // The sum's shortcut holds for non-negative values (gaps always are).
  if (!(value >= 0) || !std::isfinite(value)) {
    for (; n > 0; --n) add(value);
    return;
  }
  if (histogram_.empty()) {
    // add() made `value` the last run's: the run grows up to the exact limit.
    const int64_t m = std::min(n, int64_t(exact_limit_) - exact_count_);
    if (m > 0) {
      runs_.back().count += int32_t(m);  // within the exact limit
      exact_count_ += m;
      count_ += m;
      n -= m;
    }
    if (n == 0) return;
    add(value);  // past the limit: the samples move to the histogram
    --n;
  }
  // In the histogram, add() put `value` in last_bin_: the rest go there too.
  histogram_[last_bin_] += n;
  count_ += n;
  sum_ = add_repeatedly(sum_, value, n);
}

void StreamingSamples::add_exact(double value) {
  if (!runs_.empty() && runs_.back().value == value) {
    ++runs_.back().count;
  } else {
    runs_.push_back(Run{value, 1});
  }
  ++exact_count_;
}

void StreamingSamples::merge(const StreamingSamples& other) {
  if (other.count_ == 0) return;
  if (other.histogram_.empty()) {
    for (const Run& run : other.runs_) add_repeated(run.value, run.count);
    return;
  }
  const double min_seen = count_ ? std::min(min_, other.min_) : other.min_;
  const double max_seen = count_ ? std::max(max_, other.max_) : other.max_;
  if (histogram_.empty()) move_to_histogram();
  for (size_t b = 0; b < other.histogram_.size(); ++b) histogram_[b] += other.histogram_[b];
  count_ += other.count_;
  sum_ += other.sum_;
  min_ = min_seen;
  max_ = max_seen;
}

void StreamingSamples::move_to_histogram() {
  // The sum so far, as adding each sample in turn gives it (add_repeatedly).
  sum_ = 0;
  for (const Run& run : runs_) sum_ = add_repeatedly(sum_, run.value, run.count);
  histogram_.assign(kHistBins, 0);
  for (const Run& run : runs_)
    for (int64_t i = 0; i < run.count; ++i) add_to_histogram(run.value);
  runs_.clear();
  runs_.shrink_to_fit();
  exact_count_ = 0;
}

void StreamingSamples::add_to_histogram(double value) {
  // Every sequence of a decode step sees the same gap: the last value's bin
  // is remembered rather than taking the logarithm again.
  if (value != last_value_) {
    const double clamped = std::max(value, kHistLow);
    last_bin_ = std::min(size_t(std::log(clamped / kHistLow) / kLogRatio), kHistBins - 1);
    last_value_ = value;
  }
  histogram_[last_bin_] += 1;
}

double StreamingSamples::bin_value(size_t bin) const {
  // Geometric centre of the bin.
  return kHistLow * std::exp((double(bin) + 0.5) * kLogRatio);
}

Distribution StreamingSamples::summarize() {
  if (histogram_.empty()) {
    // servesim::summarize of the samples, from their runs: the same sorted
    // sequence (equal values are interchangeable), so the same sum, in the
    // same order, and the same percentiles.
    Distribution d;
    if (exact_count_ == 0) return d;
    radix_sort_by_value(runs_, [](const Run& r) { return r.value; });
    double sum = 0;
    for (const Run& run : runs_) sum = add_repeatedly(sum, run.value, run.count);
    const auto n = double(exact_count_);
    auto at_rank = [&](int64_t rank) {  // the sorted samples' value at `rank`
      int64_t seen = 0;
      for (const Run& run : runs_) {
        seen += run.count;
        if (seen > rank) return run.value;
      }
      return runs_.back().value;
    };
    auto pct = [&](double p) {  // percentile_sorted's interpolation
      const double h = (n - 1.0) * p / 100.0;
      const auto lo = int64_t(std::floor(h));
      const int64_t hi = std::min(lo + 1, exact_count_ - 1);
      const double x_lo = at_rank(lo), x_hi = at_rank(hi);
      return x_lo + (h - double(lo)) * (x_hi - x_lo);
    };
    d.count = exact_count_;
    d.mean = sum / n;
    d.p50 = pct(50);
    d.p90 = pct(90);
    d.p95 = pct(95);
    d.p99 = pct(99);
    d.min = runs_.front().value;
    d.max = runs_.back().value;
    return d;
  }
  Distribution d;
  d.count = count_;
  d.mean = sum_ / double(count_);
  d.min = min_;
  d.max = max_;
  // Rank-based lookup: the value of the sample at rank floor((n-1) p / 100).
  auto at_rank = [&](int64_t rank) {
    int64_t seen = 0;
    for (size_t b = 0; b < histogram_.size(); ++b) {
      seen += histogram_[b];
      if (seen > rank) return std::clamp(bin_value(b), min_, max_);
    }
    return max_;
  };
  auto pct = [&](double p) { return at_rank(int64_t(std::floor(double(count_ - 1) * p / 100.0))); };
  d.p50 = pct(50);
  d.p90 = pct(90);
  d.p95 = pct(95);
  d.p99 = pct(99);
  return d;
}

}  // namespace servesim
