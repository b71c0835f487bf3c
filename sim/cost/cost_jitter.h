// A device's iteration-to-iteration noise, for simulations that draw it.
//
// A cost model predicts one duration per plan; a real device runs the same
// plan a few percent faster or slower each time. Near saturation a simulated
// queue is chaotic in those costs (a small change of every cost moves a
// percentile by much more: docs/validation.md), so a single simulation is
// one draw of the percentiles a run can have. Drawing each iteration's cost
// from the device's noise, over several seeded simulations, gives the
// percentiles' centre and spread (sim/draw_band.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/cost/cost_model.h"
#include "sim/random.h"

namespace servesim {

// A multiplier drawn per iteration.
class CostJitter {
 public:
  CostJitter() = default;  // none: every multiplier 1
  // exp(sigma z), z standard normal: median 1, about sigma relative spread.
  static CostJitter lognormal(double sigma);
  // One of `multipliers` (each > 0, at least 2), uniformly, with
  // replacement: a device's measured noise, its skew and tail included.
  // `source` says where they were measured.
  static CostJitter resampled(std::vector<double> multipliers, std::string source);

  bool active() const { return kind_ != Kind::None; }
  double draw(Rng& rng) const;
  // {kind, sigma | (source, count, median, mean, p10, p90, quantiles: the
  // multipliers' 0th, 1st, ..., 100th percentile)}.
  nlohmann::json to_json() const;
  // The jitter to_json describes (a resampled one as its 101 quantiles, a
  // close copy of the multipliers' distribution); `source` names the file
  // in errors and the result. InputError when it is not such an object.
  static CostJitter from_json(const nlohmann::json& j, const std::string& source);
  // A flag's value: a number is a lognormal sigma; anything else a JSON
  // file, either `servesim validate`'s report.json (report_predict.json) of
  // a run with --predict-draws, whose predict_draws.jitter is the device's
  // measured noise, or such a jitter object itself. InputError, naming
  // `flag`, otherwise.
  static CostJitter from_flag(const std::string& value, const std::string& flag);

 private:
  enum class Kind { None, Lognormal, Resampled } kind_ = Kind::None;
  double sigma_ = 0;
  std::vector<double> multipliers_;
  std::string source_;
};

// Multipliers for a cost model from a real run: each iteration's measured
// time over its predicted cost, divided by the rolling median of that ratio
// over the `window` iterations around it (fewer at the ends; `window` odd),
// so that the level the run moved through, and the model's bias, are left
// out and only the iteration-to-iteration noise remains. Iterations with a
// non-positive or non-finite time or cost are skipped. InputError when the
// lengths differ or `window` is even or below 3.
std::vector<double> noise_around_rolling_level(const std::vector<double>& measured_s,
                                               const std::vector<double>& predicted_s, int window = 51);

// A CostMultiplier that draws each iteration's factor from `jitter` with its
// own seeded generator (the same seed draws the same sequence).
class JitterMultiplier final : public CostMultiplier {
 public:
  JitterMultiplier(const CostJitter& jitter, uint64_t seed) : jitter_(jitter), rng_(seed) {}
  double factor(const IterationPlan&, double) override { return jitter_.draw(rng_); }
  bool needs_plan_items() const override { return false; }

 private:
  const CostJitter& jitter_;
  Rng rng_;
};

}  // namespace servesim
