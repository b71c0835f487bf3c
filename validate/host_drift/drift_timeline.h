// The one thing the host-drift machinery produces for a prediction: a
// multiplier on each iteration's predicted cost at a time on the real run's
// clock, from what it measured of the machine around and during the run:
//
//   factor(plan, t) = refreshed(plan) / calibrated(plan)
//                     x placement ratio(plan, placement at t)
//                     x level(plan has a prefill, t)
//
//   refreshed / calibrated - the profile model with the whole-model factors
//       re-timed around the run, over the calibrated one
//       (whole_model_refresh.h);
//   placement ratio - 1 in the placement the refreshed factors describe,
//       the ratio for the plan's shape in the other (placement_ratios.h),
//       at the placement of the real run's last iteration that started by
//       t (its first before that);
//   level - the interleaved probes' level around t for the plan's kind: a
//       decode-only plan's by the decode probes, a plan with a prefill by
//       the prefill probes (DriftLevels::at).
// Replay reads it at each real iteration's start, predict at the simulated
// time. A part that was not measured is 1.
#pragma once

#include <optional>
#include <vector>

#include "sim/cost/cost_model.h"
#include "sim/cost/profile_model.h"
#include "validate/host_drift/placement.h"
#include "validate/host_drift/placement_ratios.h"
#include "validate/host_drift/whole_model_refresh.h"

namespace servesim {

class DriftTimeline final : public CostMultiplier {
 public:
  // `calibrated` outlives this. `starts_s` (increasing) and `placements` are
  // the real run's iterations' starts and placements.
  DriftTimeline(const ProfileModel& calibrated, std::optional<ProfileModel> refreshed,
                std::optional<PlacementRatios> ratios, std::vector<double> starts_s, std::vector<Placement> placements,
                DriftLevels levels);

  double factor(const IterationPlan& plan, double t) override;
  Placement placement_at(double t) const;

 private:
  const ProfileModel& calibrated_;
  std::optional<ProfileModel> refreshed_;
  std::optional<PlacementRatios> ratios_;
  std::vector<double> starts_s_;
  std::vector<Placement> placements_;
  DriftLevels levels_;
};

}  // namespace servesim
