// How far each real iteration's predicted cost is from its measured time,
// by kind of iteration, and the run's own noise floor.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "validate/record.h"

namespace servesim {

// predicted / measured - 1 (positive: over-prediction); NaN when measured <= 0.
double rel_error(double predicted, double measured);
// A relative error as the tables print it: "+4.2%", "-" when not finite.
std::string format_rel_error(double e);

struct ClassError {
  double mape = 0;  // mean of |predicted - measured| / measured; NaN when count == 0
  double bias = 0;  // mean of predicted / measured - 1; NaN when count == 0
  int64_t count = 0;
};
struct IterationErrors {
  ClassError all, decode, prefill, mixed;
};
// Iterations with measured <= 0 are skipped (none occur in a real run).
IterationErrors iteration_errors(std::span<const double> measured, std::span<const double> predicted,
                                 std::span<const IterationKind> kinds);

// The same, of recorded iterations: their measured times and kinds.
IterationErrors iteration_errors(const std::vector<RecordedIteration>& iterations, std::span<const double> predicted);
std::vector<double> measured_times(const std::vector<RecordedIteration>& iterations);

// report.json's iteration_mape: {all, decode, prefill, mixed, counts {..},
// bias {..}, floor} (null where a figure is not finite).
nlohmann::json iteration_mape_json(const IterationErrors& e, double floor);
// The stdout lines: MAPE (bias) and count per kind, then the floor.
std::string format_iteration_errors(const IterationErrors& e, double floor);

// The run's noise floor from its iteration noise (noise_around_rolling_level
// of sim/cost/cost_jitter.h: each iteration's measured time over its
// predicted cost, over that ratio's rolling median): mean |1 / noise - 1|,
// the MAPE a model that knew the run's level at every moment, and nothing
// else, would have; NaN without noise.
double noise_floor(std::span<const double> noise);

}  // namespace servesim
