// A device's iteration-to-iteration noise, for simulations that draw it.
//
// A cost model predicts one duration per plan; a real device runs the same
// plan a few percent faster or slower each time (the 2-core CPU VM: 2-5%
// per iteration around its moving level, with a long slow tail). Near
// saturation a simulated queue is chaotic in those costs (a 0.5% change of
// every cost moved a percentile by 5%: experiments/results/cpu/
// predict_sensitivity.md), so a single simulation is one draw of the
// percentiles a run can have. Drawing each iteration's cost from the
// device's noise, over several seeded simulations, gives the percentiles'
// centre and spread (sim/draw_band.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/executor.h"
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

// `inner`'s durations, each times a multiplier drawn from `jitter` with its
// own seeded generator (the same seed draws the same sequence).
class JitteredExecutor final : public Executor {
 public:
  JitteredExecutor(Executor& inner, const CostJitter& jitter, uint64_t seed)
      : inner_(inner), jitter_(jitter), rng_(seed) {}
  std::string name() const override { return inner_.name(); }
  void execute(const IterationPlan& plan, IterationResult& result) override;
  void on_request_finished(int64_t request_id) override { inner_.on_request_finished(request_id); }
  const SpeculativeStats* speculative_stats() const override { return inner_.speculative_stats(); }

 private:
  Executor& inner_;
  const CostJitter& jitter_;
  Rng rng_;
};

}  // namespace servesim
