// The profile cost model. The rules (interpolation, outside the grid, the
// attention fits) are stated at the top of sim/cost/profile_model.h.
#include "sim/cost/profile_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "sim/errors.h"

namespace servesim {
namespace {

// Fit predictions never drop below this fraction of the table's smallest time.
constexpr double kFloorFraction = 1e-3;

void check_curve(const Curve& c, const std::string& where) {
  if (c.x.empty()) throw InputError(fmt::format("{}: the table has no points", where));
  if (c.seconds.size() != c.x.size()) throw InputError(fmt::format("{}: x and seconds differ in length", where));
  for (size_t i = 0; i < c.x.size(); ++i) {
    if (!(c.x[i] > 0) || !std::isfinite(c.x[i])) throw InputError(fmt::format("{}: x values must be > 0", where));
    if (i > 0 && !(c.x[i] > c.x[i - 1])) throw InputError(fmt::format("{}: x values must ascend", where));
    if (!(c.seconds[i] > 0) || !std::isfinite(c.seconds[i]))
      throw InputError(fmt::format("{}: times must be > 0 (got {} at x = {})", where, c.seconds[i], c.x[i]));
  }
}

void check_grid(const Grid2D& g, const std::string& where) {
  check_curve(Curve{g.x, std::vector<double>(g.x.size(), 1.0)}, where + ".x");
  check_curve(Curve{g.y, std::vector<double>(g.y.size(), 1.0)}, where + ".y");
  if (g.seconds.size() != g.x.size()) throw InputError(fmt::format("{}: seconds must have one row per x", where));
  for (size_t i = 0; i < g.x.size(); ++i) {
    if (g.seconds[i].size() != g.y.size())
      throw InputError(fmt::format("{}: seconds must have one column per y", where));
    for (size_t j = 0; j < g.y.size(); ++j)
      if (!(g.seconds[i][j] > 0) || !std::isfinite(g.seconds[i][j]))
        throw InputError(fmt::format("{}: times must be > 0 (got {} at x = {}, y = {})", where, g.seconds[i][j],
                                     g.x[i], g.y[j]));
  }
}

double dtype_bytes(const std::string& dtype, const std::string& source) {
  if (dtype == "fp32" || dtype == "float32") return 4;
  if (dtype == "bf16" || dtype == "fp16" || dtype == "bfloat16" || dtype == "float16") return 2;
  throw InputError(fmt::format("{}: dtype '{}' is not one of fp32, bf16, fp16", source, dtype));
}

// Query-key pairs of q new tokens over c cached ones: query i (0-based) sees
// c + i + 1 keys.
double attention_pairs(double q, double c) { return q * c + q * (q + 1) / 2; }

// The profile's stored fit where it agrees with `fitted` (a fit of the
// tables just made) to 1e-9 of each coefficient, else `fitted`: a profile
// computes the same fit it was written with, bit for bit, and a table edited
// since is fitted afresh.
AttentionFit stored_or(const std::optional<AttentionFit>& stored, const AttentionFit& fitted) {
  if (!stored) return fitted;
  for (size_t i = 0; i < 3; ++i) {
    const double a = stored->coefficients[i], b = fitted.coefficients[i];
    if (std::abs(a - b) > 1e-9 * std::max(std::abs(a), std::abs(b))) return fitted;
  }
  return *stored;
}

// Position of v on an ascending axis in log space: the two neighbouring
// indices and the weight of the upper one; clamped to the ends.
struct AxisPoint {
  size_t lo = 0, hi = 0;
  double w = 0;
};
AxisPoint locate(const std::vector<double>& axis, double v) {
  const size_t n = axis.size();
  if (n == 1 || !(v > axis.front())) return {0, 0, 0};
  if (!(v < axis.back())) return {n - 1, n - 1, 0};
  const size_t hi = size_t(std::upper_bound(axis.begin(), axis.end(), v) - axis.begin());
  const size_t lo = hi - 1;
  if (v == axis[lo]) return {lo, lo, 0};
  return {lo, hi, std::log(v / axis[lo]) / std::log(axis[hi] / axis[lo])};
}

double min_seconds(const Grid2D& g) {
  double m = std::numeric_limits<double>::infinity();
  for (const auto& row : g.seconds)
    for (double s : row) m = std::min(m, s);
  return m;
}

}  // namespace

const char* to_string(ProfileOp op) {
  switch (op) {
    case ProfileOp::GemmQkv: return "gemm_qkv";
    case ProfileOp::GemmO: return "gemm_o";
    case ProfileOp::GemmGateUp: return "gemm_gate_up";
    case ProfileOp::GemmDown: return "gemm_down";
    case ProfileOp::Elementwise: return "elementwise";
    case ProfileOp::LmHead: return "lm_head";
    case ProfileOp::Sampling: return "sampling";
  }
  return "?";
}

ProfileModel::ProfileModel(DeviceProfile profile, const ModelSpec& model, const std::string& source)
    : profile_(std::move(profile)), model_(model) {
  profile_.require_matches(model_, source);
  for (ProfileOp op : {ProfileOp::GemmQkv, ProfileOp::GemmO, ProfileOp::GemmGateUp, ProfileOp::GemmDown,
                       ProfileOp::Elementwise, ProfileOp::LmHead, ProfileOp::Sampling})
    check_curve(curve(op), fmt::format("{}: tables.{}", source, to_string(op)));
  check_grid(profile_.prefill_attention, source + ": tables.prefill_attention");
  check_grid(profile_.decode_attention, source + ": tables.decode_attention");
  if (!(profile_.iteration_overhead_s >= 0) || !std::isfinite(profile_.iteration_overhead_s))
    throw InputError(fmt::format("{}: tables.iteration_overhead_s must be >= 0", source));
  if (!(profile_.gemm_flops_per_s > 0) || !(profile_.stream_copy_bytes_per_s > 0) ||
      !(profile_.stream_triad_bytes_per_s > 0) || !std::isfinite(profile_.gemm_flops_per_s) ||
      !std::isfinite(profile_.stream_copy_bytes_per_s) || !std::isfinite(profile_.stream_triad_bytes_per_s))
    throw InputError(fmt::format("{}: ceilings must be > 0", source));
  if (profile_.block_size < 1) throw InputError(fmt::format("{}: block_size must be >= 1", source));
  bytes_per_element_ = dtype_bytes(profile_.dtype, source);
  bandwidth_ = std::max(profile_.stream_copy_bytes_per_s, profile_.stream_triad_bytes_per_s);

  // Prefill: grid point (q, y) has c = y - offset cached tokens.
  {
    const Grid2D& g = profile_.prefill_attention;
    std::vector<std::array<double, 2>> features;
    std::vector<double> seconds;
    for (size_t i = 0; i < g.x.size(); ++i)
      for (size_t j = 0; j < g.y.size(); ++j) {
        const double q = g.x[i], c = g.y[j] - kAttentionGridYOffset;
        features.push_back({attention_pairs(q, c), c + q});
        seconds.push_back(g.seconds[i][j]);
      }
    prefill_fit_ = stored_or(profile_.prefill_fit, fit_attention_nnls(features, seconds));
    prefill_floor_s_ = kFloorFraction * min_seconds(g);
    prefill_launch_s_ = min_seconds(g);
    prefill_log_ratio_.assign(g.x.size(), std::vector<double>(g.y.size()));
    for (size_t i = 0, k = 0; i < g.x.size(); ++i)
      for (size_t j = 0; j < g.y.size(); ++j, ++k)
        prefill_log_ratio_[i][j] =
            std::log(g.seconds[i][j] / std::max(prefill_fit_(features[k][0], features[k][1]), prefill_floor_s_));
  }
  // Decode: grid point (batch, y) is `batch` rows of y keys each.
  {
    const Grid2D& g = profile_.decode_attention;
    std::vector<std::array<double, 2>> features;
    std::vector<double> seconds;
    for (size_t i = 0; i < g.x.size(); ++i)
      for (size_t j = 0; j < g.y.size(); ++j) {
        features.push_back({g.x[i], g.x[i] * g.y[j]});
        seconds.push_back(g.seconds[i][j]);
      }
    decode_fit_ = stored_or(profile_.decode_fit, fit_attention_nnls(features, seconds));
    decode_floor_s_ = kFloorFraction * min_seconds(g);
    decode_log_ratio_.assign(g.x.size(), std::vector<double>(g.y.size()));
    for (size_t i = 0, k = 0; i < g.x.size(); ++i)
      for (size_t j = 0; j < g.y.size(); ++j, ++k)
        decode_log_ratio_[i][j] =
            std::log(g.seconds[i][j] / std::max(decode_fit_(features[k][0], features[k][1]), decode_floor_s_));
  }
}

ProfileModel ProfileModel::for_layers(DeviceProfile profile, const ModelSpec& model, const std::string& source) {
  if (model.num_hidden_layers < 1 || model.num_hidden_layers > profile.model.num_hidden_layers)
    throw InputError(fmt::format("{}: {} has {} layers; the profile of {} covers 1 .. {}", source, model.name,
                                 model.num_hidden_layers, profile.model.name, profile.model.num_hidden_layers));
  // Every table is per layer (or per iteration for the LM head, sampling and
  // the fixed cost), so only the layer count the match checks changes.
  profile.model.num_hidden_layers = model.num_hidden_layers;
  return ProfileModel(std::move(profile), model, source);
}

const Curve& ProfileModel::curve(ProfileOp op) const {
  switch (op) {
    case ProfileOp::GemmQkv: return profile_.gemm_qkv;
    case ProfileOp::GemmO: return profile_.gemm_o;
    case ProfileOp::GemmGateUp: return profile_.gemm_gate_up;
    case ProfileOp::GemmDown: return profile_.gemm_down;
    case ProfileOp::Elementwise: return profile_.elementwise;
    case ProfileOp::LmHead: return profile_.lm_head;
    case ProfileOp::Sampling: return profile_.sampling;
  }
  return profile_.gemm_qkv;
}

std::pair<double, double> ProfileModel::roofline_parts(ProfileOp op, double x) const {
  const double d = double(model_.hidden_size), I = double(model_.intermediate_size);
  const double H = double(model_.num_attention_heads), Hkv = double(model_.num_key_value_heads);
  const double dh = double(model_.head_dim), V = double(model_.vocab_size);
  const double b = bytes_per_element_, F = profile_.gemm_flops_per_s, B = bandwidth_;
  const double q_out = H * dh, kv_out = Hkv * dh;
  // {memory, compute} of [x, K] x [K, N].
  auto gemm = [&](double K, double N) {
    const double weights = profile_.quantization.linear_bytes(K, N, int(b));  // b K N unquantized
    return std::pair<double, double>{(weights + b * (x * K + x * N)) / B, 2 * x * K * N / F};
  };
  switch (op) {
    case ProfileOp::GemmQkv: return gemm(d, q_out + 2 * kv_out);
    case ProfileOp::GemmO: return gemm(q_out, d);
    case ProfileOp::GemmGateUp: return gemm(d, 2 * I);
    case ProfileOp::GemmDown: return gemm(I, d);
    case ProfileOp::Elementwise:
      // Two RMSNorms, rotary on q and k, two residual adds, SwiGLU: bytes
      // read + written per token, as in sim/roofline_model.cpp.
      return {b * x * (4 * d + 2 * (q_out + kv_out) + 6 * d + 3 * I) / B, 0.0};
    case ProfileOp::LmHead: return {(b * (d * V + x * d) + 4 * x * V) / B, 2 * x * d * V / F};
    case ProfileOp::Sampling: return {4 * x * V / B, 0.0};  // fp32 logits read once
  }
  return {0.0, 0.0};
}

double ProfileModel::roofline_seconds(ProfileOp op, double x) const {
  const auto [memory, compute] = roofline_parts(op, x);
  return std::max(memory, compute);
}

double ProfileModel::op_seconds(ProfileOp op, double x) const {
  if (!(x > 0)) return 0;
  const Curve& c = curve(op);
  if (x < c.x.front()) return c.seconds.front() * roofline_seconds(op, x) / roofline_seconds(op, c.x.front());
  if (x > c.x.back()) return c.seconds.back() * roofline_seconds(op, x) / roofline_seconds(op, c.x.back());
  const AxisPoint p = locate(c.x, x);
  if (p.lo == p.hi) return c.seconds[p.lo];
  return std::exp(std::log(c.seconds[p.lo]) + p.w * (std::log(c.seconds[p.hi]) - std::log(c.seconds[p.lo])));
}

double ProfileModel::grid_correction(const Grid2D& grid, const std::vector<std::vector<double>>& log_ratio,
                                     double x, double y) const {
  const AxisPoint px = locate(grid.x, x), py = locate(grid.y, y);
  auto at = [&](size_t i, size_t j) { return log_ratio[i][j]; };
  const double lo = (1 - py.w) * at(px.lo, py.lo) + py.w * at(px.lo, py.hi);
  const double hi = (1 - py.w) * at(px.hi, py.lo) + py.w * at(px.hi, py.hi);
  return std::exp((1 - px.w) * lo + px.w * hi);
}

double ProfileModel::prefill_attention_seconds(double q, double c) const {
  if (!(q > 0)) return 0;
  const double fit = std::max(prefill_fit_(attention_pairs(q, c), c + q), prefill_floor_s_);
  return fit * grid_correction(profile_.prefill_attention, prefill_log_ratio_, q, prefill_grid_y(c));
}

double ProfileModel::decode_attention_seconds(double rows, double pairs) const {
  if (!(rows > 0)) return 0;
  const double fit = std::max(decode_fit_(rows, pairs), decode_floor_s_);
  return fit * grid_correction(profile_.decode_attention, decode_log_ratio_, rows, pairs / rows);
}

double ProfileModel::gemm_factor(double tokens) const {
  const auto& c = profile_.gemm_factor;
  if (c.x.empty() || !(tokens > 1)) return 1.0;
  if (tokens >= c.x.back()) return c.factor.back();
  // Points (1, 1), (x0, f0), (x1, f1), ...: linear in log T between neighbours.
  double x0 = 1, f0 = 1;
  for (size_t i = 0; i < c.x.size(); ++i) {
    if (tokens <= c.x[i]) {
      if (c.x[i] <= x0) return c.factor[i];
      const double w = std::log(tokens / x0) / std::log(c.x[i] / x0);
      return f0 + w * (c.factor[i] - f0);
    }
    x0 = c.x[i];
    f0 = c.factor[i];
  }
  return c.factor.back();
}

double ProfileModel::decode_step_factor(double sequences) const {
  const auto& c = profile_.decode_step_factor;
  if (c.x.empty()) return 1.0;
  if (sequences <= c.x.front()) return c.factor.front();
  if (sequences >= c.x.back()) return c.factor.back();
  const AxisPoint p = locate(c.x, sequences);
  return c.factor[p.lo] + p.w * (c.factor[p.hi] - c.factor[p.lo]);
}

namespace {

// Every sequence decodes one token and samples it: the CUDA decoder's
// graph-replayed step (kernels/cuda/cuda_decoder.cpp, is_plain_decode).
bool is_decode_step(const IterationPlan& plan) {
  if (plan.sequences.empty() || plan.num_sample_rows != int64_t(plan.sequences.size())) return false;
  for (const ScheduledSequence& s : plan.sequences)
    if (s.is_prefill || s.num_query_tokens != 1 || !s.samples) return false;
  return true;
}

}  // namespace

ProfileBreakdown ProfileModel::breakdown(const IterationPlan& plan) const {
  const double L = double(model_.num_hidden_layers);
  // A decode step the executor pads runs `padding` more one-token rows at
  // context 1, each sampled (sim/cost/decode_padding.h).
  const bool decode_step = is_decode_step(plan);
  const int64_t sequences = int64_t(plan.sequences.size());
  const double padding = decode_step ? double(profile_.decode_padding.bucket(sequences) - sequences) : 0.0;
  const double T = double(plan.num_tokens()) + padding;
  const double S = double(plan.num_sample_rows) + padding;
  ProfileBreakdown out;
  if (T > 0) {
    const double f = gemm_factor(T);
    out.gemm = f * L * (op_seconds(ProfileOp::GemmQkv, T) + op_seconds(ProfileOp::GemmO, T) +
                        op_seconds(ProfileOp::GemmGateUp, T) + op_seconds(ProfileOp::GemmDown, T));
    out.elementwise = f * L * op_seconds(ProfileOp::Elementwise, T);
  }
  // The executor's attention launches (profile.h): per prefill chunk, or
  // two -- the one-token sequences, and one shared by all the others, which
  // pays its fixed cost once.
  const bool two_launches = profile_.attention_launches == DeviceProfile::AttentionLaunches::TwoLaunches;
  double prefill = 0, largest_chunk = 0, decode_rows = 0, decode_pairs = 0;
  int64_t chunks = 0;
  for (const ScheduledSequence& s : plan.sequences) {
    const double q = s.num_query_tokens, c = s.num_cached_tokens;
    if (q <= 0) continue;
    if (two_launches ? q >= 2 : s.is_prefill) {
      const double chunk = prefill_attention_seconds(q, c);
      prefill += chunk;
      largest_chunk = std::max(largest_chunk, chunk);
      ++chunks;
    } else {
      decode_rows += q;
      decode_pairs += attention_pairs(q, c);
    }
  }
  if (two_launches && chunks > 1)
    prefill = std::max(largest_chunk, prefill - double(chunks - 1) * prefill_launch_s_);
  decode_rows += padding;
  decode_pairs += padding * attention_pairs(1, 0);
  out.prefill_attention = L * prefill;
  out.decode_attention = L * decode_attention_seconds(decode_rows, decode_pairs);
  if (S > 0) out.lm_head = op_seconds(ProfileOp::LmHead, S) + op_seconds(ProfileOp::Sampling, S);
  out.overhead = profile_.iteration_overhead_s;
  if (!profile_.decode_step_factor.x.empty() && decode_step) {
    const double g = decode_step_factor(double(sequences) + padding);
    for (double* part : {&out.gemm, &out.elementwise, &out.prefill_attention, &out.decode_attention, &out.lm_head,
                         &out.overhead})
      *part *= g;
  }
  return out;
}

nlohmann::json ProfileModel::describe() const {
  const bool two_launches = profile_.attention_launches == DeviceProfile::AttentionLaunches::TwoLaunches;
  auto fit_json = [](const AttentionFit& f, const char* model) {
    return nlohmann::json{{"model", model},
                          {"coefficients", f.coefficients},
                          {"max_rel_residual", f.max_rel_residual},
                          {"rms_rel_residual", f.rms_rel_residual}};
  };
  const std::string calibration_warning = profile_.unsteadiness_warning();
  return {{"executor", "profile"},
          {"device",
           {{"kind", profile_.device_kind},
            {"description", profile_.device_description},
            {"threads", profile_.threads}}},
          {"profiled_model", profile_.model.name},
          {"dtype", profile_.dtype},
          {"block_size", profile_.block_size},
          {"gemm_in_situ", {{"x", profile_.gemm_factor.x}, {"factor", profile_.gemm_factor.factor}}},
          {"decode_in_situ",
           {{"x", profile_.decode_step_factor.x}, {"factor", profile_.decode_step_factor.factor}}},
          {"iteration_overhead_s", profile_.iteration_overhead_s},
          {"calibration_warning", calibration_warning.empty() ? nlohmann::json() : nlohmann::json(calibration_warning)},
          {"decode_padding", profile_.decode_padding.enabled() ? profile_.decode_padding.to_json() : nullptr},
          {"attention_launches",
           two_launches
               ? nlohmann::json{{"rule", "two_launches"},
                                {"prefill_launch_s", prefill_launch_s_},
                                {"meaning", "sequences of one new token in the decode launch; the S others "
                                            "(prefill chunks, verifications) in one prefill launch: the sum of "
                                            "their prefill-table times minus (S - 1) x prefill_launch_s, at "
                                            "least the largest"}}
               : nlohmann::json{{"rule", "per_chunk"},
                                {"meaning", "each prefill chunk on its own; the other sequences in the decode "
                                            "launch"}}},
          {"ceilings",
           {{"stream_copy_bytes_per_s", profile_.stream_copy_bytes_per_s},
            {"stream_triad_bytes_per_s", profile_.stream_triad_bytes_per_s},
            {"gemm_flops_per_s", profile_.gemm_flops_per_s}}},
          {"attention_fits",
           {{"prefill", fit_json(prefill_fit_, "seconds = c0 + c1 * pairs + c2 * kv_tokens (one sequence)")},
            {"decode", fit_json(decode_fit_, "seconds = c0 + c1 * rows + c2 * sum of pairs (one batch)")}}}};
}

}  // namespace servesim
