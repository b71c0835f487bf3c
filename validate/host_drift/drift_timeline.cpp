#include "validate/host_drift/drift_timeline.h"

#include <algorithm>
#include <stdexcept>

namespace servesim {

DriftTimeline::DriftTimeline(const ProfileModel& calibrated, std::optional<ProfileModel> refreshed,
                             std::optional<PlacementRatios> ratios, std::vector<double> starts_s,
                             std::vector<Placement> placements, DriftLevels levels)
    : calibrated_(calibrated), refreshed_(std::move(refreshed)), ratios_(std::move(ratios)),
      starts_s_(std::move(starts_s)), placements_(std::move(placements)), levels_(std::move(levels)) {
  if (starts_s_.size() != placements_.size())
    throw std::invalid_argument("DriftTimeline: one placement per iteration start");
}

Placement DriftTimeline::placement_at(double t) const {
  if (placements_.empty()) return Placement::Unknown;
  const auto after = std::upper_bound(starts_s_.begin(), starts_s_.end(), t);
  return placements_[after == starts_s_.begin() ? 0 : size_t(after - starts_s_.begin()) - 1];
}

double DriftTimeline::factor(const IterationPlan& plan, double t) {
  double f = 1.0;
  if (refreshed_) f *= refreshed_->seconds(plan) / calibrated_.seconds(plan);
  if (ratios_) f *= ratios_->ratio(plan, placement_at(t));
  if (!levels_.empty()) f *= levels_.at(plan.num_prefill_sequences > 0, t);
  return f;
}

}  // namespace servesim
