// The profile cost model: an iteration's time from a calibrated
// DeviceProfile (sim/cost/profile.h) instead of datasheet numbers.
//
// Iteration time (L layers, T = plan.num_tokens(), S = sampling rows):
//
//   L x [ gemm_qkv(T) + gemm_o(T) + gemm_gate_up(T) + gemm_down(T) + elementwise(T)
//         + sum over prefill sequences of prefill_attention(q, c)
//         + decode_attention(decode rows, sum of their query-key pairs) ]
//   (which sequences each attention term covers: the attention launches below)
//   + lm_head(S) + sampling(S) + iteration_overhead_s
//
// 1-D tables (the GEMMs, elementwise, lm_head, sampling):
//   inside the grid: linear interpolation of log(seconds) against log(x)
//     between neighbouring points -- exact at grid points and exact for a
//     power law t = a x^p between two points;
//   outside the grid: anchored on the nearest edge point and scaled by the
//     operator's roofline built from the profile's measured ceilings,
//       t(x) = t(edge) x R(x) / R(edge),
//       R(x) = max(flops(x) / gemm_flops_per_s, bytes(x) / stream bandwidth),
//     where stream bandwidth = max(stream copy, stream triad) and, with b the
//     profile dtype's bytes per element and the operator's weight K x N,
//       GEMMs [x, K] x [K, N]: flops 2 x K N, bytes W + b (x K + x N), W the
//         weight's bytes as the profile's quantization stores them
//         (Quantization::linear_bytes; b K N unquantized)
//         qkv K = d, N = (H + 2 Hkv) dh;  o K = H dh, N = d;
//         gate_up K = d, N = 2 I;          down K = I, N = d
//       lm_head [x, d] x [d, V]:  flops 2 x d V, bytes b (d V + x d) + 4 x V
//       elementwise, sampling:    bytes proportional to x, so R(x)/R(edge) = x/edge.
//   A table of one point uses the roofline rule on both sides of it.
//
// Attention tables (2-D): a model fitted by least squares
// (sim/cost/attention_fit.h) sets the shape, the grid sets the level.
//   prefill, one sequence with q query tokens and c cached tokens:
//     fit(q, c) = a + b pairs + k kv_tokens,  pairs = q c + q (q + 1) / 2,
//                                             kv_tokens = c + q
//   decode, a batch of sequences: each decode sequence contributes q rows
//     (q = 1, or k + 1 for a speculative verification) and q c + q (q + 1) / 2
//     query-key pairs (for q = 1: its context c + 1):
//     fit(rows, P) = a + b rows + k P,  P = sum of the pairs
//   Coefficients are non-negative least squares on relative residuals
//   (each grid point weighted by 1 / its seconds); a rank-deficient grid
//   (one q, one batch size) still gets a fit. The fits are monotone
//   non-decreasing in every token count. A profile stores the fits it was
//   written with; they are used where they agree with a fit of its tables.
//   Prediction: fit x exp(rho), where rho is log(measured / fit) on the grid,
//   interpolated bilinearly in (log x, log y) inside the grid and taken at the
//   nearest grid point's coordinates (clamped log x and log y) outside it. So
//   it is exact at grid points, continuous, equal to the fit wherever the fit
//   is exact, and outside the grid it follows the fit's shape from the edge.
//   A ragged decode batch is evaluated at the grid point (rows, P / rows).
//   Which table costs a sequence follows the executor's attention launches
//   (DeviceProfile::attention_launches). per_chunk (the CPU): a prefill
//   chunk is costed alone from the prefill table, every other sequence in
//   the decode batch. two_launches (the CUDA decoder): a sequence of one new
//   token is in the decode batch, every other one (prefill chunks and
//   speculative verifications) in one prefill launch; the prefill table
//   times one chunk per launch, so the launch's fixed cost F -- the table's
//   smallest time, a launch with next to no work -- is paid once: the sum
//   over the launch's S sequences - (S - 1) F, at least the largest one.
//   The fit is floored at 1e-3 x the smallest seconds of its table, so every
//   prediction is > 0.
//
// Whole-model factors (DeviceProfile::gemm_factor, decode_step_factor): the
// kernels run one at a time when calibrated, and inside a forward pass the
// same GEMMs run at another speed. The calibration measures whole-model
// prefills of T tokens and keeps
//   f(T) = (measured - attention - LM head - overhead) / (GEMMs + elementwise),
// and the GEMM and elementwise parts of an iteration of T tokens are
// multiplied by f(T): linear in log T between the measured points, and
// between (1, 1) and the first point (a 1-token decode is matched by the
// fixed overhead, measured on the whole model's decode); f of the last point
// beyond it. A profile without the curve uses f = 1.
//
// An iteration whose every sequence decodes one token and samples it --
// what the CUDA decoder replays from a CUDA graph -- is the sum above times
// g(B), B its number of sequences; g is the measured whole step over that
// sum at each calibrated B, linear in log B between them and the nearest
// end's value beyond. A profile without the curve uses g = 1. Where the
// profile records that the executor pads such a step (decode_padding: the
// CUDA decoder's graph buckets), the step is costed as the one it runs:
// bucket(B) - B more one-token rows at context 1, and g at bucket(B).
#pragma once

#include <array>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "sim/cost/attention_fit.h"
#include "sim/cost/cost_model.h"
#include "sim/cost/profile.h"

namespace servesim {

// The y axis of the attention grids, shared with calib/calibrate.cpp:
//   prefill_attention: x = query tokens q of one sequence's chunk,
//                      y = cached tokens c + 1 (so y > 0 for a first chunk);
//   decode_attention:  x = sequences in the batch,
//                      y = context length of each = cached tokens c + 1
//                      (the keys the decode query attends, its own included).
// A point measured with c cached tokens is stored at y = c + kAttentionGridYOffset.
inline constexpr double kAttentionGridYOffset = 1.0;
constexpr double prefill_grid_y(double cached_tokens) { return cached_tokens + kAttentionGridYOffset; }
constexpr double decode_grid_y(double cached_tokens) { return cached_tokens + kAttentionGridYOffset; }

// Seconds per component for one iteration (summed over layers).
struct ProfileBreakdown {
  double gemm = 0;               // qkv, o, gate_up, down projections
  double elementwise = 0;        // norms, rotary + KV write, SwiGLU, residuals
  double prefill_attention = 0;  // every prefill chunk (two_launches: every sequence of 2+ new tokens)
  double decode_attention = 0;   // the decode batch (two_launches: every sequence of one new token)
  double lm_head = 0;            // final norm + LM head + sampling
  double overhead = 0;           // fixed per iteration
  double total() const {
    return gemm + elementwise + prefill_attention + decode_attention + lm_head + overhead;
  }
};

// The operators with a 1-D table.
enum class ProfileOp { GemmQkv, GemmO, GemmGateUp, GemmDown, Elementwise, LmHead, Sampling };
const char* to_string(ProfileOp op);

class ProfileModel final : public CostModel {
 public:
  // Throws InputError if the profile is not usable for `model`: a model of
  // another shape (the message names `source` and the differing fields) or a
  // malformed table (naming the table).
  ProfileModel(DeviceProfile profile, const ModelSpec& model, const std::string& source = "profile");
  // The profile's per-layer tables for a model of the profiled shape with
  // fewer layers (a self-draft: the target's first layers with its
  // embedding and LM head). Throws InputError unless `model` is the
  // profile's shape with 1 .. all of its layers.
  static ProfileModel for_layers(DeviceProfile profile, const ModelSpec& model, const std::string& source);

  std::string name() const override { return "profile"; }
  double seconds(const IterationPlan& plan) const override { return breakdown(plan).total(); }
  ProfileBreakdown breakdown(const IterationPlan& plan) const;
  const DeviceProfile& profile() const { return profile_; }

  // One operator's seconds (per layer; per iteration for lm_head, sampling)
  // at size x > 0 (tokens or rows): the 1-D rule above.
  double op_seconds(ProfileOp op, double x) const;
  // The operator's roofline R(x) with the measured ceilings, seconds.
  double roofline_seconds(ProfileOp op, double x) const;
  // Its memory and compute parts {bytes / bandwidth, FLOPs / GEMM ceiling}.
  std::pair<double, double> roofline_parts(ProfileOp op, double x) const;

  // f(T) and g(B) of the whole-model factors (see the top of this file); 1
  // without their curves.
  double gemm_factor(double tokens) const;
  double decode_step_factor(double sequences) const;

  // One layer's attention for one prefill sequence (q >= 1, c >= 0).
  double prefill_attention_seconds(double query_tokens, double cached_tokens) const;
  // One layer's attention for a decode batch of `rows` query rows whose
  // query-key pairs sum to `pairs` (rows decodes of context y each: rows x y).
  double decode_attention_seconds(double rows, double pairs) const;
  // The fits alone, without the grid correction.
  const AttentionFit& prefill_fit() const { return prefill_fit_; }
  const AttentionFit& decode_fit() const { return decode_fit_; }

  // The cost model for summary.json's config: device, dtype, block size,
  // ceilings, and the attention fits with their residuals.
  nlohmann::json describe() const override;

 private:
  const Curve& curve(ProfileOp op) const;
  double grid_correction(const Grid2D& grid, const std::vector<std::vector<double>>& log_ratio, double x,
                         double y) const;

  DeviceProfile profile_;
  ModelSpec model_;
  double bytes_per_element_ = 4;
  double bandwidth_ = 0;  // max(stream copy, stream triad), bytes/s
  AttentionFit prefill_fit_, decode_fit_;
  // log(measured / fit) at every grid point, [x][y].
  std::vector<std::vector<double>> prefill_log_ratio_, decode_log_ratio_;
  double prefill_floor_s_ = 0, decode_floor_s_ = 0;
  double prefill_launch_s_ = 0;  // the prefill table's smallest time: one launch's fixed cost (two_launches)
};

}  // namespace servesim
