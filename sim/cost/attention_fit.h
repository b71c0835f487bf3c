// The least-squares fit that sets the shape of an attention table
// (sim/cost/profile_model.h): seconds ~ c0 + c1 f1 + c2 f2 with every
// coefficient >= 0, on relative residuals (each grid point weighted by
// 1 / its seconds).
//
// With three columns the exact non-negative least-squares solution is the
// best unconstrained solution whose coefficients are all >= 0, over the
// subsets of columns; every subset is tried, smaller subsets first, and a
// larger one must lower the residual to replace a smaller one. Each subset
// is solved by Householder QR with column pivoting (Golub & Van Loan,
// "Matrix Computations", 4th ed., algorithm 5.4.1) on columns scaled to
// unit norm; a subset whose columns are collinear is skipped (a smaller one
// covers it), so a rank-deficient grid (one q, one batch size) still fits.
#pragma once

#include <array>
#include <vector>

namespace servesim {

struct AttentionFit {
  // prefill: seconds = c[0] + c[1] pairs + c[2] kv_tokens
  // decode:  seconds = c[0] + c[1] rows  + c[2] sum of pairs
  std::array<double, 3> coefficients{};
  double max_rel_residual = 0;  // max over grid points of |fit - measured| / measured
  double rms_rel_residual = 0;  // root mean square of the same
  double operator()(double f1, double f2) const {
    return coefficients[0] + coefficients[1] * f1 + coefficients[2] * f2;
  }
};

// Fits seconds[i] ~ c0 + c1 features[i][0] + c2 features[i][1] (seconds > 0).
AttentionFit fit_attention_nnls(const std::vector<std::array<double, 2>>& features,
                                const std::vector<double>& seconds);

}  // namespace servesim
