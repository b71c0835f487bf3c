#include "sim/cost/cost_jitter.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <utility>

#include <fmt/format.h>

#include "sim/errors.h"
#include "sim/input_file.h"
#include "sim/stats.h"

namespace servesim {

CostJitter CostJitter::lognormal(double sigma) {
  if (!(sigma >= 0) || !std::isfinite(sigma) || sigma > 1)
    throw InputError(fmt::format("cost jitter sigma {}: expected a number in [0, 1]", sigma));
  CostJitter j;
  j.kind_ = sigma > 0 ? Kind::Lognormal : Kind::None;
  j.sigma_ = sigma;
  return j;
}

CostJitter CostJitter::resampled(std::vector<double> multipliers, std::string source) {
  if (multipliers.size() < 2)
    throw InputError(fmt::format("cost jitter from {}: {} multipliers, need at least 2", source,
                                 multipliers.size()));
  for (double m : multipliers)
    if (!(m > 0) || !std::isfinite(m))
      throw InputError(fmt::format("cost jitter from {}: multiplier {} is not a positive number", source, m));
  CostJitter j;
  j.kind_ = Kind::Resampled;
  j.multipliers_ = std::move(multipliers);
  j.source_ = std::move(source);
  return j;
}

double CostJitter::draw(Rng& rng) const {
  switch (kind_) {
    case Kind::None: return 1.0;
    case Kind::Lognormal: return std::exp(sigma_ * rng.normal());
    case Kind::Resampled: return multipliers_[size_t(rng.uniform_int(0, int64_t(multipliers_.size()) - 1))];
  }
  return 1.0;
}

nlohmann::json CostJitter::to_json() const {
  switch (kind_) {
    case Kind::None: return {{"kind", "none"}};
    case Kind::Lognormal:
      return {{"kind", "lognormal"},
              {"sigma", sigma_},
              {"meaning", "each iteration's cost times exp(sigma z), z ~ N(0, 1)"}};
    case Kind::Resampled: {
      std::vector<double> sorted = multipliers_;
      const Distribution d = summarize(sorted);
      std::vector<double> quantiles;
      for (int q = 0; q <= 100; ++q) quantiles.push_back(percentile_sorted(sorted, q));
      return {{"kind", "resampled"},
              {"source", source_},
              {"count", d.count},
              {"median", d.p50},
              {"mean", d.mean},
              {"p10", percentile_sorted(sorted, 10)},
              {"p90", d.p90},
              {"quantiles", quantiles},
              {"meaning", "each iteration's cost times one of the multipliers, drawn uniformly with replacement"}};
    }
  }
  return {};
}

CostJitter CostJitter::from_json(const nlohmann::json& j, const std::string& source) {
  const std::string kind = j.is_object() && j.contains("kind") && j["kind"].is_string() ? j["kind"].get<std::string>()
                                                                                        : std::string();
  if (kind == "none") return CostJitter();
  if (kind == "lognormal" && j.contains("sigma") && j["sigma"].is_number())
    return lognormal(j["sigma"].get<double>());
  if (kind == "resampled" && j.contains("quantiles") && j["quantiles"].is_array()) {
    std::vector<double> q;
    for (const nlohmann::json& x : j["quantiles"]) {
      if (!x.is_number()) throw InputError(fmt::format("{}: jitter quantile {} is not a number", source, x.dump()));
      q.push_back(x.get<double>());
    }
    return resampled(std::move(q), fmt::format("{} (its 101 quantiles of: {})", source, j.value("source", "?")));
  }
  throw InputError(fmt::format("{}: not a cost jitter (expected kind none, lognormal with sigma, or resampled with "
                               "quantiles)",
                               source));
}

CostJitter CostJitter::from_flag(const std::string& value, const std::string& flag) {
  const std::string what = flag + " " + value;
  size_t used = 0;
  double sigma = 0;
  try {
    sigma = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used > 0 && used == value.size()) {
    try {
      return lognormal(sigma);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: {}", what, e.what()));
    }
  }
  refuse_folder(value, what, "a validate report.json");
  std::ifstream in(value);
  if (!in) throw InputError(fmt::format("{}: neither a sigma nor a file that can be opened", what));
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not valid JSON ({})", what, e.what()));
  }
  if (j.is_object() && j.contains("predict_draws") && j["predict_draws"].is_object() &&
      j["predict_draws"].contains("jitter"))
    return from_json(j["predict_draws"]["jitter"], what);
  if (j.is_object() && j.contains("mode") && !j.contains("predict_draws"))
    throw InputError(fmt::format("{}: a validate report without predict_draws (validate with --predict-draws N > 1 "
                                 "measures the jitter; report_predict.json has it)",
                                 what));
  return from_json(j, what);
}

std::vector<double> noise_around_rolling_level(const std::vector<double>& measured_s,
                                               const std::vector<double>& predicted_s, int window) {
  if (measured_s.size() != predicted_s.size())
    throw InputError(fmt::format("noise_around_rolling_level: {} measured times, {} predicted", measured_s.size(),
                                 predicted_s.size()));
  if (window < 3 || window % 2 == 0)
    throw InputError(fmt::format("noise_around_rolling_level: window {} must be odd and at least 3", window));
  std::vector<double> ratio;  // measured / predicted, valid iterations in order
  for (size_t i = 0; i < measured_s.size(); ++i)
    if (measured_s[i] > 0 && predicted_s[i] > 0 && std::isfinite(measured_s[i]) && std::isfinite(predicted_s[i]))
      ratio.push_back(measured_s[i] / predicted_s[i]);
  const size_t half = size_t(window / 2);
  std::vector<double> noise, around;
  noise.reserve(ratio.size());
  for (size_t i = 0; i < ratio.size(); ++i) {
    const size_t lo = i >= half ? i - half : 0, hi = std::min(ratio.size(), i + half + 1);
    around.assign(ratio.begin() + lo, ratio.begin() + hi);
    std::sort(around.begin(), around.end());
    noise.push_back(ratio[i] / percentile_sorted(around, 50));
  }
  return noise;
}

}  // namespace servesim
