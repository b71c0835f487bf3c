// The CPU backend's kernels against plain double-precision loops.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "kernels/cpu/cpu_backend.h"

using namespace servesim;
using cpu::Matrix;
using cpu::Vector;

namespace {

Matrix random_matrix(Eigen::Index rows, Eigen::Index cols, uint64_t seed, bool small_integers = false) {
  std::mt19937_64 rng(seed);
  Matrix m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    const double u = double(rng() >> 11) * 0x1.0p-53;
    m.data()[i] = small_integers ? float(int(u * 7) - 3) : float(2 * u - 1);
  }
  return m;
}

}  // namespace

TEST_CASE("matmul on small integers is exact for every token count", "[cpu]") {
  // Integers in [-3, 3] with K = 96: every partial sum is an exact float.
  for (Eigen::Index T : {1, 3, 31, 32, 100}) {
    const Matrix in = random_matrix(T, 96, 1, true), w = random_matrix(200, 96, 2, true);
    Matrix out;
    cpu::matmul(in, w, out, false);
    REQUIRE(out.rows() == T);
    REQUIRE(out.cols() == 200);
    for (Eigen::Index t = 0; t < T; ++t)
      for (Eigen::Index n = 0; n < 200; ++n) {
        double ref = 0;
        for (Eigen::Index k = 0; k < 96; ++k) ref += double(in(t, k)) * double(w(n, k));
        REQUIRE(out(t, n) == float(ref));
      }
    Matrix acc = out;
    cpu::matmul(in, w, acc, true);  // accumulate: twice the product
    REQUIRE(acc.isApprox(2 * out));
  }
}

TEST_CASE("rmsnorm matches the definition in double", "[cpu]") {
  const Matrix in = random_matrix(5, 64, 3);
  Vector weight = random_matrix(64, 1, 4).col(0).array() + 1.5f;
  Matrix out;
  cpu::rmsnorm(in, weight, 1e-5f, out);
  for (Eigen::Index t = 0; t < 5; ++t) {
    double ms = 0;
    for (Eigen::Index i = 0; i < 64; ++i) ms += double(in(t, i)) * in(t, i);
    const double scale = 1.0 / std::sqrt(ms / 64 + 1e-5);
    for (Eigen::Index i = 0; i < 64; ++i)
      REQUIRE(out(t, i) == Approx(in(t, i) * scale * weight(i)).epsilon(1e-5));
  }
}

TEST_CASE("swiglu is silu(gate) * up", "[cpu]") {
  const Matrix gu = random_matrix(3, 2 * 40, 5) * 4;
  Matrix act;
  cpu::swiglu(gu, act);
  REQUIRE(act.cols() == 40);
  for (Eigen::Index t = 0; t < 3; ++t)
    for (Eigen::Index i = 0; i < 40; ++i) {
      const double g = gu(t, i), u = gu(t, 40 + i);
      REQUIRE(act(t, i) == Approx(g / (1 + std::exp(-g)) * u).epsilon(1e-5));
    }
}
