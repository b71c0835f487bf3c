#include "validate/iteration_errors.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace servesim {
namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

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

}  // namespace servesim
