// Summary statistics: means and percentiles of latency samples.
//
// Percentiles use linear interpolation between closest ranks (Hyndman & Fan
// type 7, numpy's default): for sorted x[0..n-1], P(p) = x[h] + (h - floor(h))
// * (x[floor(h)+1] - x[floor(h)]) with h = (n - 1) * p / 100.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace servesim {

struct Distribution {
  int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p95 = 0, p99 = 0, min = 0, max = 0;
};

// Percentile p in [0, 100] of already sorted values (non-empty).
double percentile_sorted(const std::vector<double>& sorted, double p);
// Sorts `values` in place and summarises them; all zeros when empty.
Distribution summarize(std::vector<double>& values);

// Collects a stream of positive samples too long to keep (inter-token
// latencies: one per token emission, hundreds of millions on a long run).
// Exact up to `exact_limit` samples; past that, samples go into a
// logarithmic histogram whose bins are 0.1% wide, so a percentile is off by
// at most 0.1% of its value (the mean stays exact).
class StreamingSamples {
 public:
  explicit StreamingSamples(size_t exact_limit = size_t(1) << 22);
  void add(double value) {
    // Most samples repeat the last one (every sequence of a decode step
    // adds the same gap): one more of the last run, inline.
    if (!runs_.empty() && value == runs_.back().value && size_t(exact_count_) < exact_limit_) {
      ++runs_.back().count;
      ++exact_count_;
      ++count_;
      return;
    }
    add_new_value(value);
  }
  // add(value) `n` times, in O(1) steps rather than n: the same runs, sum
  // (add_repeatedly) and histogram. What a decode step of n sequences adds.
  void add_repeated(double value, int64_t n);
  // Adds every sample of `other` (exactly while both are exact; a histogram
  // bin's samples at their bin's value otherwise, its sum and extremes kept).
  void merge(const StreamingSamples& other);
  Distribution summarize();
  int64_t count() const { return count_; }
  bool exact() const { return histogram_.empty(); }

 private:
  void move_to_histogram();
  void add_to_histogram(double value);
  double bin_value(size_t bin) const;

  // The exact samples as runs of equal values in arrival order: every
  // sequence of a decode step adds the same gap, so a run-length list is
  // far shorter than the samples, and sorting it far cheaper. Packed in 12
  // bytes, not 16: a long run keeps one a decode step, hundreds of
  // thousands, and first touching memory is much of a short simulation's
  // time (docs/performance.md). A run holds at most exact_limit samples,
  // which the constructor keeps below 2^31.
  struct [[gnu::packed]] Run {
    double value;
    int32_t count;
  };
  void add_exact(double value);
  void add_new_value(double value);  // add() of any other sample

  size_t exact_limit_;
  std::vector<Run> runs_;
  int64_t exact_count_ = 0;  // samples in runs_
  std::vector<int64_t> histogram_;  // bin i holds values in [lo*r^i, lo*r^(i+1))
  int64_t count_ = 0;
  // The samples' sum in arrival order, for the histogram's mean: kept from
  // the move to the histogram on (the exact samples' is taken from their
  // runs then; summarize() sums exact samples in sorted order).
  double sum_ = 0, min_ = 0, max_ = 0;
  double last_value_ = -1;  // the last value binned, and its bin
  size_t last_bin_ = 0;
};

}  // namespace servesim
