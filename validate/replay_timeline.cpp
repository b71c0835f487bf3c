#include "validate/replay_timeline.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace servesim {

ReplayTimeline::ReplayTimeline(std::vector<double> real_starts_s, std::vector<double> real_durations_s,
                         std::span<const double> replayed_durations_s)
    : real_starts_(std::move(real_starts_s)),
      real_durations_(std::move(real_durations_s)),
      replayed_(replayed_durations_s.begin(), replayed_durations_s.end()) {
  const size_t n = real_starts_.size();
  if (real_durations_.size() != n || replayed_.size() != n)
    throw std::invalid_argument(fmt::format("ReplayTimeline: {} starts, {} real and {} replayed durations", n,
                                            real_durations_.size(), replayed_.size()));
  starts_.resize(n);
  for (size_t k = 0; k < n; ++k) {
    for (double d : {real_durations_[k], replayed_[k]})
      if (!std::isfinite(d) || d < 0)
        throw std::invalid_argument(fmt::format("ReplayTimeline: iteration {} has duration {}", k, d));
    if (!std::isfinite(real_starts_[k]) || (k > 0 && real_starts_[k] < real_starts_[k - 1]))
      throw std::invalid_argument(fmt::format("ReplayTimeline: iteration {} starts at {}, before the one ahead of it", k,
                                              real_starts_[k]));
    if (k == 0) {
      starts_[k] = real_starts_[k];
    } else {
      // A real run starts an iteration after the previous one ended; a
      // record that overlaps (rounding) counts as no gap.
      const double gap = std::max(0.0, real_starts_[k] - (real_starts_[k - 1] + real_durations_[k - 1]));
      starts_[k] = end(k - 1) + gap;
    }
  }
}

double ReplayTimeline::at(double t) const {
  const auto after = std::upper_bound(real_starts_.begin(), real_starts_.end(), t);
  if (after == real_starts_.begin()) return t;  // before the first iteration the clocks agree
  const size_t k = size_t(after - real_starts_.begin()) - 1;
  const double into = t - real_starts_[k];
  if (into < real_durations_[k]) return starts_[k] + into * (replayed_[k] / real_durations_[k]);
  return end(k) + (into - real_durations_[k]);  // in the gap after iteration k
}

}  // namespace servesim
