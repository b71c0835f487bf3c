#include "sim/cost/attention_fit.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <optional>

namespace servesim {
namespace {

using Column = std::vector<double>;

double dot(const Column& a, const Column& b, size_t from = 0) {
  double s = 0;
  for (size_t i = from; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Least squares min |A x - b| for the n x k matrix A (k <= 3 columns), by
// Householder QR with column pivoting. nullopt when A's columns are
// collinear (numerical rank below k).
std::optional<std::vector<double>> least_squares(std::vector<Column> a, Column b) {
  const size_t n = b.size(), k = a.size();
  if (k > n) return std::nullopt;
  std::vector<size_t> order(k);
  for (size_t j = 0; j < k; ++j) order[j] = j;
  std::vector<double> diagonal(k, 0.0);
  double largest_pivot = 0;
  for (size_t step = 0; step < k; ++step) {
    // Pivot: the remaining column with the largest norm below row `step`.
    size_t best = step;
    double best_norm = -1;
    for (size_t j = step; j < k; ++j) {
      const double norm = dot(a[j], a[j], step);
      if (norm > best_norm) best_norm = norm, best = j;
    }
    std::swap(a[step], a[best]);
    std::swap(order[step], order[best]);
    // The reflector H = I - tau v v^T that maps a[step][step..] onto the axis.
    Column& x = a[step];
    const double alpha = std::sqrt(best_norm);
    if (alpha == 0) return std::nullopt;
    const double beta = x[step] >= 0 ? -alpha : alpha;
    Column v(n, 0.0);
    v[step] = x[step] - beta;
    for (size_t i = step + 1; i < n; ++i) v[i] = x[i];
    const double vv = dot(v, v, step);
    diagonal[step] = beta;
    largest_pivot = std::max(largest_pivot, std::abs(beta));
    for (size_t i = step; i < n; ++i) x[i] = i == step ? beta : 0.0;
    if (vv > 0) {
      auto reflect = [&](Column& c) {
        const double f = 2 * dot(v, c, step) / vv;
        for (size_t i = step; i < n; ++i) c[i] -= f * v[i];
      };
      for (size_t j = step + 1; j < k; ++j) reflect(a[j]);
      reflect(b);
    }
  }
  const double threshold = largest_pivot * std::numeric_limits<double>::epsilon() * double(k);
  for (double d : diagonal)
    if (!(std::abs(d) > threshold)) return std::nullopt;
  // Back substitution: R x = (Q^T b)[0..k), R's column j is a[j][0..j].
  std::vector<double> solved(k, 0.0);
  for (size_t r = k; r-- > 0;) {
    double s = b[r];
    for (size_t j = r + 1; j < k; ++j) s -= a[j][r] * solved[j];
    solved[r] = s / a[r][r];
  }
  std::vector<double> x(k, 0.0);
  for (size_t j = 0; j < k; ++j) x[order[j]] = solved[j];
  return x;
}

}  // namespace

AttentionFit fit_attention_nnls(const std::vector<std::array<double, 2>>& features,
                                const std::vector<double>& seconds) {
  const size_t n = seconds.size();
  // Row i of the weighted system: [1, f1, f2] / t_i against 1.
  std::array<Column, 3> columns;
  for (Column& c : columns) c.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const double w = 1.0 / seconds[i];
    columns[0][i] = w;
    columns[1][i] = features[i][0] * w;
    columns[2][i] = features[i][1] * w;
  }
  // Scaled to unit norm for conditioning: pairs reach 1e8 where the intercept is 1.
  std::array<double, 3> scale{};
  for (int j = 0; j < 3; ++j) {
    const double norm = std::sqrt(dot(columns[size_t(j)], columns[size_t(j)]));
    scale[size_t(j)] = norm > 0 ? norm : 1.0;
    for (double& v : columns[size_t(j)]) v /= scale[size_t(j)];
  }
  const Column ones(n, 1.0);

  std::array<double, 3> best{0, 0, 0};
  double best_residual = std::sqrt(double(n));  // the empty subset: all coefficients zero
  const double tie = 1e-12 * std::sqrt(double(n));
  for (int size = 1; size <= 3; ++size) {
    for (unsigned mask = 1; mask < 8; ++mask) {
      if (std::popcount(mask) != size) continue;
      std::vector<int> cols;
      std::vector<Column> sub;
      for (int j = 0; j < 3; ++j)
        if (mask & (1u << j)) {
          cols.push_back(j);
          sub.push_back(columns[size_t(j)]);
        }
      const std::optional<std::vector<double>> solution = least_squares(sub, ones);
      if (!solution) continue;
      if (std::any_of(solution->begin(), solution->end(), [](double c) { return c < 0; })) continue;
      double residual_sq = 0;
      for (size_t i = 0; i < n; ++i) {
        double fitted = 0;
        for (size_t k = 0; k < cols.size(); ++k) fitted += sub[k][i] * (*solution)[k];
        residual_sq += (fitted - 1.0) * (fitted - 1.0);
      }
      const double residual = std::sqrt(residual_sq);
      if (residual < best_residual - tie) {
        best_residual = residual;
        best = {0, 0, 0};
        for (size_t k = 0; k < cols.size(); ++k) best[size_t(cols[k])] = (*solution)[k] / scale[size_t(cols[k])];
      }
    }
  }
  AttentionFit fit;
  fit.coefficients = best;
  double sum_sq = 0;
  for (size_t i = 0; i < n; ++i) {
    const double t = seconds[i];
    const double rel = std::abs(fit(features[i][0], features[i][1]) - t) / t;
    fit.max_rel_residual = std::max(fit.max_rel_residual, rel);
    sum_sq += rel * rel;
  }
  fit.rms_rel_residual = n > 0 ? std::sqrt(sum_sq / double(n)) : 0;
  return fit;
}

}  // namespace servesim
