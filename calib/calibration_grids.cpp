// The sizes each table of a calibration is measured at (calib/calibrate.h:
// calibration_grids), and the options' checks.
#include <algorithm>
#include <cmath>
#include <initializer_list>

#include <fmt/format.h>

#include "calib/calibrate.h"
#include "calib/calibration_common.h"
#include "kernels/decoder/device_choice.h"
#include "kernels/decoder/gemm_buckets.h"
#include "sim/errors.h"

namespace servesim {
namespace {

// Full CPU grids time every token count and every sampling row count up to
// this one (see dense_then_doubling).
constexpr int64_t kDenseTokens = 64;
// Quick CPU grids time every token count and LM-head row count up to this
// one: the decode batches a served step mostly runs.
constexpr int64_t kQuickDenseTokens = 32;

// ------------------------------------------------------------------ grids ---

// lo, 2 lo, 4 lo, ... below hi, then hi (just hi when hi <= lo).
std::vector<int64_t> doubling(int64_t lo, int64_t hi) {
  std::vector<int64_t> v;
  for (int64_t x = std::max<int64_t>(lo, 1); x < hi; x *= 2) v.push_back(x);
  v.push_back(hi);
  return v;
}

// Every count 1 .. min(dense, hi), then doubling from the next power of two
// to hi. The CPU's token-count axes need the dense start: its matmul changes
// kernel at M = 8 (dot products below, Eigen's GEMM from there) and Eigen's
// GEMM runs a saw-tooth of period 4 in M (its register blocks), so costs
// between powers of two are no power law (docs/calibration.md has a
// measured example).
std::vector<int64_t> dense_then_doubling(int64_t dense, int64_t hi) {
  std::vector<int64_t> v;
  for (int64_t x = 1; x <= std::min(dense, hi); ++x) v.push_back(x);
  if (hi > dense) {
    int64_t x = 1;
    while (x <= dense) x *= 2;
    for (int64_t y : doubling(x, hi)) v.push_back(y);
  }
  return v;
}

// Powers of two and 1.5 times them (1, 2, 3, 4, 6, 8, 12, ...) up to
// min(dense, hi), then doubling to hi. For the tables whose cost is close to
// linear in their axis (elementwise, sampling): log-log interpolation on
// this grid predicts the dense grid's other points within their own
// repetitions' spread, and moves a whole iteration's kernel sum by at most
// 0.11% (experiments/diagnostics/grid_thinning.py; docs/calibration.md).
std::vector<int64_t> half_octaves_then_doubling(int64_t dense, int64_t hi) {
  std::vector<int64_t> v;
  const int64_t top = std::min(dense, hi);
  for (int64_t x = 1; x <= top; x *= 2) {
    v.push_back(x);
    if (x >= 2 && x + x / 2 <= top) v.push_back(x + x / 2);
  }
  if (hi > dense) {
    int64_t x = 1;
    while (x <= dense) x *= 2;
    for (int64_t y : doubling(x, hi)) v.push_back(y);
  } else if (v.back() != top) {
    v.push_back(top);
  }
  return v;
}

// The CUDA GEMM axis: the edges of cuBLASLt's algorithm buckets
// (kernels/decoder/gemm_buckets.h) up to hi. The backend runs every T of a
// bucket (lo, hi] with the algorithm chosen for hi, so a GEMM's time steps
// at each edge, up or down (on the H200, 8B: 8.6 ms prefills at 256 tokens,
// 9.9-10.5 ms at 257-258; 16-17 ms at 387-446, 12.5-13 ms at 450-508:
// docs/calibration.md#grids); interpolating between powers of two missed
// the steps by up to 30%. Each bucket's top is timed, and its bottom lo + 1
// too where the bucket is wider than kNarrowBucket rows (past 256), so the
// log-log interpolation between them stays inside one algorithm; within a
// bucket of 8 rows the tiles barely change.
constexpr int64_t kNarrowBucket = 8;
std::vector<int64_t> algorithm_bucket_edges(int64_t hi) {
  std::vector<int64_t> v;
  int64_t lo = 0;
  for (int64_t top : gemm_algorithm_buckets(hi)) {
    const int64_t timed_top = std::min(top, hi);
    if (top - lo > kNarrowBucket && lo + 1 < timed_top) v.push_back(lo + 1);
    v.push_back(timed_top);
    lo = top;
  }
  return v;
}

// Every count 1 .. dense, then the values of `then` above it, all up to hi.
std::vector<int64_t> dense_then(int64_t dense, std::initializer_list<int64_t> then, int64_t hi) {
  std::vector<int64_t> v;
  for (int64_t x = 1; x <= std::min(dense, hi); ++x) v.push_back(x);
  for (int64_t x : then)
    if (x > dense && x <= hi) v.push_back(x);
  return v;
}

// The values up to hi; hi itself when some value lay above it.
std::vector<int64_t> capped(std::initializer_list<int64_t> values, int64_t hi) {
  std::vector<int64_t> v;
  bool above = false;
  for (int64_t x : values) {
    if (x <= hi) v.push_back(x);
    else above = true;
  }
  if (above) v.push_back(hi);
  return v;
}

// Sorted, without repeats.
std::vector<int64_t> ascending(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// K and V bytes of one token in one layer as the decoder on `device` stores
// them (fp32 on the CPU, bf16 on CUDA).
double kv_bytes_per_token_layer(const ModelSpec& m, const DeviceChoice& device) {
  return 2.0 * double(m.num_key_value_heads * m.head_dim) * (device.cuda ? 2.0 : 4.0);
}


void check_options(const CalibrationOptions& o) {
  const DeviceChoice device = parse_device(o.device);  // InputError naming --device
  o.model.validate(o.model.name);
  check_cpu_threads(o.threads);
  if (o.block_size < 1 || o.block_size > 1024)
    throw InputError(fmt::format("--block-size must be in [1, 1024] (got {})", o.block_size));
  const int32_t max_tokens = device.cuda ? kCudaMaxBatchedTokens : 1 << 20;
  if (o.max_batched_tokens < 1 || o.max_batched_tokens > max_tokens)
    throw InputError(fmt::format("--max-num-batched-tokens must be in [1, {}] on {} (got {})", max_tokens,
                                 device.kind(), o.max_batched_tokens));
  if (o.max_context < 0 || o.max_context > int64_t(1) << 24)
    throw InputError(fmt::format("--max-context must be in [0, 16777216] (got {}; 0: the model's maximum)",
                                 o.max_context));
  if (max_context_of(o) < 1)
    throw InputError(fmt::format("--max-context: {} declares no max_position_embeddings; give --max-context",
                                 o.model.name));
  if (o.max_num_seqs < 1 || o.max_num_seqs > 1 << 16)
    throw InputError(fmt::format("--max-num-seqs must be in [1, 65536] (got {})", o.max_num_seqs));
  if (o.stream_array_bytes < 0) throw InputError("stream_array_bytes must be >= 0");
  if (o.gemm_ceiling_size < 0 || o.gemm_ceiling_size > 16384)
    throw InputError("gemm_ceiling_size must be in [0, 16384]");
  if (o.repetitions < 0 || o.repetitions > 1000) throw InputError("repetitions must be in [0, 1000]");
  if (!(o.min_time_s >= 0) || o.min_time_s > 60) throw InputError("min_time_s must be in [0, 60]");
  o.sampling.validate();
}

}  // namespace

int64_t max_context_of(const CalibrationOptions& o) {
  return o.max_context > 0 ? o.max_context : o.model.max_position_embeddings;
}

CalibrationGrids calibration_grids(const CalibrationOptions& o) {
  check_options(o);
  const DeviceChoice device = parse_device(o.device);
  const bool quick = o.quick;
  const int64_t max_tokens = o.max_batched_tokens;
  const int64_t max_context = max_context_of(o);
  const int64_t max_rows = std::min<int64_t>(o.max_num_seqs, max_tokens);

  CalibrationGrids g;
  if (quick) {
    // The CPU's matmul costs no power law between decode batch sizes
    // (dense_then_doubling: its kernel change at M = 8, M = 3 costing about
    // M = 4, Eigen's saw-tooth of period 4 above), and the decode-step
    // factor g(B), linear between 1, 2, 4, 8, 16 and 32, cannot follow that
    // either: quick times every M a decode step of up to 32 sequences runs
    // (docs/calibration.md#grids: what sparser grids got wrong). Elementwise
    // and sampling costs are near-linear; sparse grids lose nothing there.
    // On CUDA, sparse to 256 but every algorithm bucket's edges past it,
    // where the buckets are wide and their steps large (algorithm_bucket_edges).
    // Every axis is sorted and rid of repeats below.
    g.tokens = device.cuda ? capped({1, 4, 16, 64, 256}, max_tokens)
                           : dense_then(kQuickDenseTokens, {64, 256}, max_tokens);
    g.tokens.push_back(max_tokens);
    g.elementwise_tokens = device.cuda ? g.tokens : capped({1, 2, 4, 8, 16, 64, 256}, max_tokens);
    g.elementwise_tokens.push_back(max_tokens);
    if (device.cuda)
      for (int64_t m : algorithm_bucket_edges(max_tokens))
        if (m > 256) g.tokens.push_back(m);
    g.prefill_query = capped({16, 128, 512}, max_tokens);
    g.prefill_cached = {0, std::min<int64_t>(256, max_context) - 1, max_context - 1};
    g.decode_batch = capped({1, 8, 32}, o.max_num_seqs);
    if (device.cuda) g.decode_batch.push_back(o.max_num_seqs);  // a GPU batches every running sequence
    g.lm_head_rows = device.cuda ? capped({1, 8, 64}, max_rows) : dense_then(kQuickDenseTokens, {64}, max_rows);
    g.lm_head_rows.push_back(max_rows);
    g.sampling_rows = device.cuda ? g.lm_head_rows : capped({1, 2, 4, 8, 16, 64}, max_rows);
    g.sampling_rows.push_back(max_rows);
  } else {
    g.tokens = device.cuda ? algorithm_bucket_edges(max_tokens) : dense_then_doubling(kDenseTokens, max_tokens);
    g.prefill_query = doubling(1, max_tokens);
    g.prefill_cached = {0};
    for (int64_t y : doubling(16, max_context)) g.prefill_cached.push_back(y - 1);
    g.decode_batch = doubling(1, device.cuda ? o.max_num_seqs : std::min<int32_t>(64, o.max_num_seqs));
    // The LM head is a matmul of S rows: the same kernels as the GEMMs.
    g.lm_head_rows = device.cuda ? algorithm_bucket_edges(max_rows) : dense_then_doubling(kDenseTokens, max_rows);
    // Near-linear costs: no kernel changes to follow (half_octaves_then_doubling;
    // on CUDA the servesim kernels' cost grows smoothly too).
    g.elementwise_tokens =
        device.cuda ? doubling(1, max_tokens) : half_octaves_then_doubling(kDenseTokens, max_tokens);
    g.sampling_rows = device.cuda ? doubling(1, max_rows) : half_octaves_then_doubling(kDenseTokens, max_rows);
  }
  // The longest decode context: the largest cell's K and V within budget.
  const double per_token = kv_bytes_per_token_layer(o.model, device);
  const double largest_batch = double(*std::max_element(g.decode_batch.begin(), g.decode_batch.end()));
  const double budget = device.cuda ? kCudaDecodeKvBudgetBytes : kCpuDecodeKvBudgetBytes;
  const int64_t fits = int64_t(std::floor(budget / (largest_batch * per_token)));
  const int64_t max_decode = std::max<int64_t>(1, std::min(max_context, fits));
  const int64_t lo = std::min<int64_t>(16, max_decode);
  if (quick) {
    const auto mid = int64_t(std::exp2(std::round(0.5 * std::log2(double(lo) * double(max_decode)))));
    g.decode_context = {lo, max_decode};
    if (mid > lo && mid < max_decode) g.decode_context.push_back(mid);
  } else {
    g.decode_context = doubling(lo, max_decode);
  }
  for (auto* axis : {&g.tokens, &g.elementwise_tokens, &g.prefill_query, &g.prefill_cached, &g.decode_batch,
                     &g.decode_context, &g.lm_head_rows, &g.sampling_rows})
    *axis = ascending(*axis);
  return g;
}

}  // namespace servesim
