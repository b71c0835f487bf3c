#include "validate/fit_roofline.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include <fmt/format.h>

#include "sim/errors.h"
#include "validate/iteration_errors.h"
#include "validate/measured_report.h"

namespace servesim {
namespace {

struct Bounds {
  double lo, hi;
};

Bounds bounds_of(FitParameter p) {
  switch (p) {
    case FitParameter::ComputeEfficiency:
    case FitParameter::MemoryEfficiency: return {0.01, 1.0};
    case FitParameter::IterationOverhead: return {1e-6, 0.1};
    case FitParameter::SequenceOverhead: return {1e-7, 0.1};
  }
  return {0, 0};
}

double& field(RooflineOptions& r, FitParameter p) {
  switch (p) {
    case FitParameter::ComputeEfficiency: return r.compute_efficiency;
    case FitParameter::MemoryEfficiency: return r.memory_efficiency;
    case FitParameter::IterationOverhead: return r.iteration_overhead_s;
    case FitParameter::SequenceOverhead: return r.sequence_overhead_s;
  }
  return r.compute_efficiency;
}

using Point = std::vector<double>;  // log of each fitted parameter

// The squared relative error of one statistic, when the measurement has one.
void add_term(double predicted, double measured, double& sum, int& terms) {
  const double e = rel_error(predicted, measured);
  if (!std::isfinite(e)) return;
  sum += e * e;
  ++terms;
}

// Nelder-Mead on the log parameters (fit_roofline.h).
class Search {
 public:
  Search(const SimulationSetup& setup, std::span<const MeasuredRun> runs, const FitOptions& options)
      : setup_(setup), runs_(runs), options_(options) {
    for (FitParameter p : options.parameters) {
      const Bounds b = bounds_of(p);
      lo_.push_back(std::log(b.lo));
      hi_.push_back(std::log(b.hi));
    }
  }

  RooflineOptions options_at(const Point& x) const {
    RooflineOptions r = setup_.cost.roofline;
    for (size_t i = 0; i < x.size(); ++i) field(r, options_.parameters[i]) = std::exp(x[i]);
    return r;
  }

  Point start() const {
    Point x;
    RooflineOptions r = setup_.cost.roofline;
    for (size_t i = 0; i < options_.parameters.size(); ++i) {
      const FitParameter p = options_.parameters[i];
      const Bounds b = bounds_of(p);
      // An unmodelled (0) per-sequence overhead starts at 10 us: its lower
      // bound is too many log steps away from the milliseconds a host-bound
      // engine spends.
      const double v = p == FitParameter::SequenceOverhead && field(r, p) == 0 ? 1e-5 : field(r, p);
      x.push_back(std::log(std::clamp(v, b.lo, b.hi)));
    }
    return x;
  }

  // Past the budget a candidate is not simulated but scored +inf, so no
  // step of a search (a simplex's reflection and contraction, the golden
  // section's first pair) can go over --max-evaluations.
  double value(const Point& x) {
    if (out_of_budget()) return std::numeric_limits<double>::infinity();
    const RooflineOptions r = options_at(x);
    const double f = fit_objective(evaluate_roofline(setup_, r, runs_));
    ++evaluations_;
    if (options_.progress) options_.progress(evaluations_, f, r);
    return f;
  }

  bool out_of_budget() const { return evaluations_ >= options_.max_evaluations; }
  int evaluations() const { return evaluations_; }

  // One Nelder-Mead descent from `full` over the coordinates `free` (the
  // others held), initial steps of `step` (log), at most `budget` evaluations.
  std::pair<Point, double> descend(const Point& full, double f_full, double step, const std::vector<size_t>& free,
                                   int budget) {
    const int stop_at = std::min(options_.max_evaluations, evaluations_ + budget);
    auto spent = [&] { return evaluations_ >= stop_at; };
    // The search's own point: the free coordinates only.
    auto embed = [&](const Point& y) {
      Point x = full;
      for (size_t i = 0; i < free.size(); ++i) x[free[i]] = y[i];
      return x;
    };
    auto f = [&](const Point& y) { return value(embed(y)); };
    auto clamp = [&](Point y) {
      for (size_t i = 0; i < y.size(); ++i) y[i] = std::clamp(y[i], lo_[free[i]], hi_[free[i]]);
      return y;
    };
    const size_t d = free.size();
    Point x0(d);
    for (size_t i = 0; i < d; ++i) x0[i] = full[free[i]];
    std::vector<Point> xs{x0};
    std::vector<double> fs{f_full};
    for (size_t i = 0; i < d && !spent(); ++i) {
      Point x = x0;
      // Step inwards where the bound is near.
      x[i] = x0[i] + step <= hi_[free[i]] ? x0[i] + step : x0[i] - step;
      xs.push_back(clamp(x));
      fs.push_back(f(xs.back()));
    }
    while (xs.size() == d + 1 && !spent()) {
      std::vector<size_t> order(d + 1);
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return fs[a] < fs[b]; });
      std::vector<Point> sx;
      std::vector<double> sf;
      for (size_t k : order) sx.push_back(xs[k]), sf.push_back(fs[k]);
      xs = std::move(sx), fs = std::move(sf);
      double spread = 0;
      for (size_t k = 1; k <= d; ++k)
        for (size_t i = 0; i < d; ++i) spread = std::max(spread, std::abs(xs[k][i] - xs[0][i]));
      if (fs[d] - fs[0] <= 1e-10 && spread <= 1e-5) break;

      Point c(d, 0.0);
      for (size_t k = 0; k < d; ++k)
        for (size_t i = 0; i < d; ++i) c[i] += xs[k][i] / double(d);
      auto along = [&](double t) {  // c + t (c - worst)
        Point x(d);
        for (size_t i = 0; i < d; ++i) x[i] = c[i] + t * (c[i] - xs[d][i]);
        return clamp(x);
      };
      const Point xr = along(1.0);
      const double fr = f(xr);
      if (fr < fs[0]) {
        const Point xe = along(2.0);
        const double fe = spent() ? fr + 1 : f(xe);
        if (fe < fr) xs[d] = xe, fs[d] = fe;
        else xs[d] = xr, fs[d] = fr;
      } else if (fr < fs[d - 1]) {
        xs[d] = xr, fs[d] = fr;
      } else {
        const bool outside = fr < fs[d];
        const Point xc = along(outside ? 0.5 : -0.5);
        const double fc = f(xc);
        if (fc < std::min(fr, fs[d])) {
          xs[d] = xc, fs[d] = fc;
        } else {
          for (size_t k = 1; k <= d && !spent(); ++k) {
            for (size_t i = 0; i < d; ++i) xs[k][i] = xs[0][i] + 0.5 * (xs[k][i] - xs[0][i]);
            fs[k] = f(xs[k]);
          }
        }
      }
    }
    const size_t best = size_t(std::min_element(fs.begin(), fs.end()) - fs.begin());
    return {embed(xs[best]), fs[best]};
  }

  double lo(size_t i) const { return lo_[i]; }
  double hi(size_t i) const { return hi_[i]; }

 private:
  const SimulationSetup& setup_;
  std::span<const MeasuredRun> runs_;
  const FitOptions& options_;
  Point lo_, hi_;
  int evaluations_ = 0;
};

nlohmann::json pair_json(const Distribution& measured, const Distribution& predicted) {
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  return {{"measured", {{"p50", measured.p50}, {"p90", measured.p90}}},
          {"predicted", {{"p50", predicted.p50}, {"p90", predicted.p90}}},
          {"rel_error",
           {{"p50", num(rel_error(predicted.p50, measured.p50))}, {"p90", num(rel_error(predicted.p90, measured.p90))}}}};
}

}  // namespace

FitParameter parse_fit_parameter(const std::string& name) {
  if (name == "compute-efficiency") return FitParameter::ComputeEfficiency;
  if (name == "memory-efficiency") return FitParameter::MemoryEfficiency;
  if (name == "iteration-overhead") return FitParameter::IterationOverhead;
  if (name == "sequence-overhead") return FitParameter::SequenceOverhead;
  throw InputError(fmt::format("--fit-parameters: unknown parameter '{}' (compute-efficiency, memory-efficiency, "
                               "iteration-overhead, sequence-overhead)",
                               name));
}

const char* to_string(FitParameter p) {
  switch (p) {
    case FitParameter::ComputeEfficiency: return "compute-efficiency";
    case FitParameter::MemoryEfficiency: return "memory-efficiency";
    case FitParameter::IterationOverhead: return "iteration-overhead";
    case FitParameter::SequenceOverhead: return "sequence-overhead";
  }
  return "?";
}

std::vector<FitRunErrors> evaluate_roofline(const SimulationSetup& setup, const RooflineOptions& roofline,
                                            std::span<const MeasuredRun> runs) {
  SimulationSetup s = setup;
  s.cost.roofline = roofline;
  s.keep_iterations = false;
  const CostModels costs = setup_cost_models(s);
  std::vector<FitRunErrors> out;
  for (const MeasuredRun& run : runs) {
    const SimulationOutput o = predict_measured_run(s, costs, run);
    FitRunErrors e;
    e.source = run.source;
    e.measured_ttft = run.ttft();
    e.measured_tpot = run.tpot();
    e.predicted_ttft = o.summary.ttft_s;
    e.predicted_tpot = o.summary.tpot_s;
    double sum = 0;
    add_term(e.predicted_ttft.mean, e.measured_ttft.mean, sum, e.terms);
    add_term(e.predicted_ttft.p50, e.measured_ttft.p50, sum, e.terms);
    add_term(e.predicted_ttft.p90, e.measured_ttft.p90, sum, e.terms);
    add_term(e.predicted_tpot.mean, e.measured_tpot.mean, sum, e.terms);
    add_term(e.predicted_tpot.p50, e.measured_tpot.p50, sum, e.terms);
    add_term(e.predicted_tpot.p90, e.measured_tpot.p90, sum, e.terms);
    e.objective = e.terms > 0 ? sum / e.terms : 0.0;
    out.push_back(e);
  }
  return out;
}

double fit_objective(std::span<const FitRunErrors> errors) {
  double sum = 0;
  int terms = 0;
  for (const FitRunErrors& e : errors) sum += e.objective * e.terms, terms += e.terms;
  return terms > 0 ? sum / terms : 0.0;
}

FitResult fit_roofline(const SimulationSetup& setup, std::span<const MeasuredRun> runs, const FitOptions& options) {
  if (runs.empty()) throw InputError("fit: give at least one --measured run");
  if (setup.cost.profile)
    throw InputError("fit: --profile does not apply: fit finds the roofline's parameters (a profile's tables are measured)");
  if (options.parameters.empty()) throw InputError("--fit-parameters: name at least one parameter");
  for (size_t i = 0; i < options.parameters.size(); ++i)
    for (size_t k = 0; k < i; ++k)
      if (options.parameters[i] == options.parameters[k])
        throw InputError(fmt::format("--fit-parameters: {} named twice", to_string(options.parameters[i])));
  if (options.max_evaluations < 10)
    throw InputError(fmt::format("--max-evaluations must be >= 10 (got {})", options.max_evaluations));
  bool any_term = false;
  for (const MeasuredRun& run : runs) any_term = any_term || run.ttft().count > 0 || run.tpot().count > 0;
  if (!any_term) throw InputError("fit: no measured run has a completed request (nothing to fit to)");

  Search search(setup, runs, options);
  FitResult result;
  Point x = search.start();
  result.start = search.options_at(x);
  double f = search.value(x);
  result.start_objective = f;
  const size_t d = options.parameters.size();
  std::vector<size_t> all(d);
  std::iota(all.begin(), all.end(), 0);
  std::optional<size_t> overhead, sequence;
  for (size_t i = 0; i < d; ++i) {
    if (options.parameters[i] == FitParameter::IterationOverhead) overhead = i;
    if (options.parameters[i] == FitParameter::SequenceOverhead) sequence = i;
  }
  auto keep = [&](const std::pair<Point, double>& candidate) {
    if (candidate.second < f) x = candidate.first, f = candidate.second;
  };
  // Coordinate `i` at `log_v` with the best other parameters there
  // (warm-started from the best point so far), and their objective.
  auto at = [&](size_t i, double log_v, double step, int budget) {
    Point y = x;
    y[i] = log_v;
    const double fy = search.value(y);
    std::vector<size_t> others;
    for (size_t k : all)
      if (k != i) others.push_back(k);
    return others.empty() ? std::pair{y, fy} : search.descend(y, fy, step, others, budget);
  };
  // An overhead trades against the memory efficiency along a long valley (a
  // decode step is weight bytes / (bandwidth x efficiency) + overheads)
  // whose floor is rugged (a small change of the costs moves the iteration
  // boundaries past arrivals and flips scheduling decisions), where a
  // simplex over all parameters stalls. So each overhead is searched on its
  // own -- a log grid over [lo, 20 ms], then golden section in the best grid
  // point's bracket -- each point with its best other parameters.
  auto search_alone = [&](size_t i, double lo_s) {
    const double lo = std::log(lo_s), hi = std::log(2e-2);
    const int grid = 12;
    std::vector<double> grid_f(grid);
    std::vector<double> grid_x(grid);
    for (int k = 0; k < grid && !search.out_of_budget(); ++k) {
      grid_x[k] = lo + (hi - lo) * k / (grid - 1);
      const auto candidate = at(i, grid_x[k], 0.3, 40);
      grid_f[k] = candidate.second;
      keep(candidate);
    }
    const int best = int(std::min_element(grid_f.begin(), grid_f.end()) - grid_f.begin());
    double a = grid_x[std::max(best - 1, 0)], b = grid_x[std::min(best + 1, grid - 1)];
    const double ratio = (std::sqrt(5.0) - 1) / 2;
    double c = b - ratio * (b - a), e = a + ratio * (b - a);
    auto fc = at(i, c, 0.1, 40), fe = at(i, e, 0.1, 40);
    keep(fc), keep(fe);
    for (int it = 0; it < 10 && !search.out_of_budget() && b - a > 0.01; ++it) {
      if (fc.second < fe.second) {
        b = e, e = c, fe = fc;
        c = b - ratio * (b - a);
        fc = at(i, c, 0.05, 40);
        keep(fc);
      } else {
        a = c, c = e, fc = fe;
        e = a + ratio * (b - a);
        fe = at(i, e, 0.05, 40);
        keep(fe);
      }
    }
  };
  if (overhead) search_alone(*overhead, 1e-5);
  if (sequence) search_alone(*sequence, 1e-6);
  // A simplex over every parameter from the best point, restarted with
  // small steps while that improves it.
  const bool searched = overhead || sequence;
  keep(search.descend(x, f, searched ? 0.05 : 0.3, all, searched ? 150 : options.max_evaluations));
  for (int restart = 0; restart < 4 && !search.out_of_budget(); ++restart) {
    const double before = f;
    keep(search.descend(x, f, 0.02, all, 100));
    if (!(f < before - 1e-12)) break;
  }
  result.fitted = search.options_at(x);
  result.objective = f;
  result.evaluations = search.evaluations();
  result.runs = evaluate_roofline(setup, result.fitted, runs);
  return result;
}

nlohmann::json fit_run_errors_json(const FitRunErrors& e) {
  return {{"source", e.source},
          {"objective", e.objective},
          {"rms_rel_error", std::sqrt(e.objective)},
          {"ttft_s", pair_json(e.measured_ttft, e.predicted_ttft)},
          {"tpot_s", pair_json(e.measured_tpot, e.predicted_tpot)}};
}

}  // namespace servesim
