// A synthetic device profile sampled from known closed forms, for the cost
// model's tests (test_profile_model.cpp and its neighbours) and the in-situ
// refresh's (test_in_situ_refresh.cpp), and the plan items they cost.
#pragma once

#include <cmath>
#include <vector>

#include "sim/cost/profile.h"
#include "sim/cost/profile_model.h"
#include "sim/iteration_plan.h"
#include "sim/model_spec.h"
#include "support/test_support.h"

namespace servesim::test::synthetic {

// d 64, I 128, L 2, H 4, Hkv 2, dh 16, V 1000.
inline ModelSpec tiny_model() {
  ModelSpec m = test::small_model("tiny", 64, 128, 2, 4, 2, 16, 1000, 8192, "float32");
  m.validate("tiny");
  return m;
}

// The closed forms the synthetic profile is sampled from (seconds).
inline double gemm_s(double m) { return 1e-4 + 2e-7 * m; }             // every projection
inline double elementwise_s(double m) { return 1e-6 + 3e-8 * m; }
inline double lm_head_s(double s) { return 4e-5 * std::pow(s, 0.5); }  // a power law
inline double sampling_s(double s) { return 1e-6 * s; }
// Prefill attention of one sequence: a + b pairs + c kv_tokens.
constexpr double kPa = 2e-6, kPb = 3e-10, kPc = 5e-9;
inline double prefill_s(double q, double c) { return kPa + kPb * (q * c + q * (q + 1) / 2) + kPc * (c + q); }
// Decode attention of a batch: a + b rows + c sum of contexts.
constexpr double kDa = 4e-6, kDb = 1e-7, kDc = 2e-10;
inline double decode_s(double rows, double sum_context) { return kDa + kDb * rows + kDc * sum_context; }
constexpr double kOverhead = 3e-5;
constexpr double kFlops = 1e11, kCopy = 2e10, kTriad = 2.5e10;

inline Curve sample(const std::vector<double>& xs, double (*f)(double)) {
  Curve c;
  c.x = xs;
  for (double x : xs) c.seconds.push_back(f(x));
  return c;
}

inline std::vector<double> powers_of_two(double lo, double hi) {
  std::vector<double> v;
  for (double x = lo; x <= hi; x *= 2) v.push_back(x);
  return v;
}

// `noise` > 0 perturbs the attention grids by a deterministic +-noise pattern.
inline DeviceProfile synthetic_profile(const ModelSpec& m, double noise = 0) {
  DeviceProfile p;
  p.device_kind = "cpu";
  p.device_description = "synthetic test device";
  p.threads = 1;
  p.dtype = "fp32";
  p.block_size = 16;
  p.model = m;
  const auto tokens = powers_of_two(1, 2048);
  p.gemm_qkv = p.gemm_o = p.gemm_gate_up = p.gemm_down = sample(tokens, gemm_s);
  p.elementwise = sample(tokens, elementwise_s);
  p.lm_head = sample(powers_of_two(1, 256), lm_head_s);
  p.sampling = sample(powers_of_two(1, 256), sampling_s);
  // y = cached tokens + 1 (kAttentionGridYOffset).
  p.prefill_attention.x = {1, 4, 16, 64, 256, 1024};
  p.prefill_attention.y = {1, 17, 129, 1025, 4097};
  for (size_t i = 0; i < p.prefill_attention.x.size(); ++i) {
    p.prefill_attention.seconds.emplace_back();
    for (size_t j = 0; j < p.prefill_attention.y.size(); ++j) {
      const double wobble = 1 + noise * std::sin(double(3 * i + 7 * j + 1));
      p.prefill_attention.seconds.back().push_back(
          wobble * prefill_s(p.prefill_attention.x[i], p.prefill_attention.y[j] - kAttentionGridYOffset));
    }
  }
  p.decode_attention.x = {1, 2, 8, 32, 128};
  p.decode_attention.y = {16, 128, 1024, 4096};
  for (size_t i = 0; i < p.decode_attention.x.size(); ++i) {
    p.decode_attention.seconds.emplace_back();
    for (size_t j = 0; j < p.decode_attention.y.size(); ++j) {
      const double wobble = 1 + noise * std::cos(double(5 * i + 2 * j));
      const double b = p.decode_attention.x[i], y = p.decode_attention.y[j];
      p.decode_attention.seconds.back().push_back(wobble * decode_s(b, b * y));
    }
  }
  p.iteration_overhead_s = kOverhead;
  p.gemm_flops_per_s = kFlops;
  p.stream_copy_bytes_per_s = kCopy;
  p.stream_triad_bytes_per_s = kTriad;
  return p;
}

// seq(id, q, c, prefill, samples): the plan item of tests/support/test_support.h.
using test::seq;

}  // namespace servesim::test::synthetic
