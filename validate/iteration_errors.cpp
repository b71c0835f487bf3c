#include "validate/iteration_errors.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

namespace servesim {
namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }
std::string abs_pct(double e) { return std::isfinite(e) ? fmt::format("{:.1f}%", e * 100) : std::string("-"); }
}  // namespace

std::string format_rel_error(double e) {
  return std::isfinite(e) ? fmt::format("{:+.1f}%", e * 100) : std::string("-");
}

double rel_error(double predicted, double measured) {
  if (!(measured > 0)) return kNaN;
  return predicted / measured - 1.0;
}

IterationErrors iteration_errors(std::span<const double> measured, std::span<const double> predicted,
                                 std::span<const IterationKind> kinds) {
  if (measured.size() != predicted.size() || measured.size() != kinds.size())
    throw std::invalid_argument("iteration_errors: measured, predicted and kinds differ in length");
  struct Sum {
    double abs = 0, signed_ = 0;
    int64_t n = 0;
  };
  Sum all, by_kind[3];
  for (size_t i = 0; i < measured.size(); ++i) {
    const double e = rel_error(predicted[i], measured[i]);
    if (std::isnan(e)) continue;
    for (Sum* s : {&all, &by_kind[int(kinds[i])]}) {
      s->abs += std::fabs(e);
      s->signed_ += e;
      s->n += 1;
    }
  }
  auto finish = [](const Sum& s) {
    ClassError c;
    c.count = s.n;
    c.mape = s.n > 0 ? s.abs / double(s.n) : kNaN;
    c.bias = s.n > 0 ? s.signed_ / double(s.n) : kNaN;
    return c;
  };
  IterationErrors e;
  e.all = finish(all);
  e.decode = finish(by_kind[int(IterationKind::Decode)]);
  e.prefill = finish(by_kind[int(IterationKind::Prefill)]);
  e.mixed = finish(by_kind[int(IterationKind::Mixed)]);
  return e;
}

double noise_floor(std::span<const double> noise) {
  if (noise.empty()) return kNaN;
  double sum = 0;
  for (double n : noise) sum += std::abs(1.0 / n - 1.0);
  return sum / double(noise.size());
}

std::vector<double> measured_times(const std::vector<RecordedIteration>& iterations) {
  std::vector<double> measured;
  measured.reserve(iterations.size());
  for (const RecordedIteration& it : iterations) measured.push_back(it.measured_s);
  return measured;
}

IterationErrors iteration_errors(const std::vector<RecordedIteration>& iterations, std::span<const double> predicted) {
  std::vector<IterationKind> kinds;
  kinds.reserve(iterations.size());
  for (const RecordedIteration& it : iterations) kinds.push_back(it.kind());
  return iteration_errors(measured_times(iterations), predicted, kinds);
}

nlohmann::json iteration_mape_json(const IterationErrors& e, double floor) {
  return {{"all", number(e.all.mape)},
          {"decode", number(e.decode.mape)},
          {"prefill", number(e.prefill.mape)},
          {"mixed", number(e.mixed.mape)},
          {"counts",
           {{"all", e.all.count}, {"decode", e.decode.count}, {"prefill", e.prefill.count}, {"mixed", e.mixed.count}}},
          {"bias",
           {{"all", number(e.all.bias)}, {"decode", number(e.decode.bias)}, {"prefill", number(e.prefill.bias)},
            {"mixed", number(e.mixed.bias)}}},
          {"floor", number(floor)}};
}

std::string format_iteration_errors(const IterationErrors& e, double floor) {
  std::string t;
  auto klass = [&](const char* name, const ClassError& c) {
    t += fmt::format("    {:<8} {:>7} ({:>7})  {:>6} iterations\n", name, abs_pct(c.mape), format_rel_error(c.bias),
                     c.count);
  };
  klass("all", e.all);
  klass("decode", e.decode);
  klass("prefill", e.prefill);
  klass("mixed", e.mixed);
  t += fmt::format("    {:<8} {:>7}            the run's own noise: MAPE with its level known at every moment\n",
                   "floor", abs_pct(floor));
  return t;
}

}  // namespace servesim
