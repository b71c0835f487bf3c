// The calibration: Google Benchmark timings of the CPU decoder's own kernels
// on the model's shapes, the machine's ceilings, and the profile they make;
// --device cuda[:N] goes to the CUDA calibration (calib/calibrate_cuda.cpp).
// What each table holds is stated in calib/calibrate.h.
#include "calib/calibrate.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>

#include <Eigen/Core>
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <omp.h>

#include "calib/calibration_common.h"
#include "calib/calibrate_cuda.h"
#include "calib/ceilings.h"
#include "calib/microbench_runner.h"
#include "calib/placement_ratios.h"
#include "calib/profile_model.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/decoder/batch_layout.h"
#include "kernels/decoder/decoder_executor.h"
#include "kernels/decoder/decoder_model.h"
#include "kernels/decoder/device_choice.h"
#include "kernels/decoder/host_weights.h"
#include "sim/errors.h"
#include "sim/iteration_plan.h"

namespace servesim {
namespace {

using Clock = std::chrono::steady_clock;
using cpu::Matrix;
using calibration::axis_text;
using calibration::cpu_model_name;
using calibration::make_curve;

constexpr size_t kMiB = size_t(1) << 20;
// Quick mode caps each STREAM array at this (full mode: 4x the LLC).
constexpr size_t kQuickStreamArrayCap = 256 * kMiB;
// The largest decode cell's K and V, one layer (the GPU's memory is larger,
// and flushing its L2 needs no copies of the cell).
constexpr double kDecodeKvBudgetBytes = 2.0 * double(size_t(1) << 30);
constexpr double kCudaDecodeKvBudgetBytes = 8.0 * double(size_t(1) << 30);
// n of the anchor probe's GEMM (calib/anchor.h): about 7 ms on 2 cores.
constexpr int64_t kAnchorGemmSize = 1024;
// Timed data rotates through copies that together hold this many times the
// core's last-level cache ...
constexpr double kRotationCacheMultiple = 4.0;
// ... but never more than this many copies of one attention cell.
constexpr int kMaxAttentionCopies = 64;
// Full CPU grids time every token count and every sampling row count up to
// this one (see dense_then_doubling).
constexpr int64_t kDenseTokens = 64;
// Used when the cache size is unknown.
constexpr size_t kFallbackCacheBytes = 32 * kMiB;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

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
// between powers of two are no power law. On the 2-core VM the qkv GEMM of
// small-110m took 0.26 ms at M = 7, 0.36 ms at M = 8 and 0.43 ms at M = 11
// against 0.38 ms at M = 12.
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

int64_t resolved_max_context(const CalibrationOptions& o) {
  return o.max_context > 0 ? o.max_context : o.model.max_position_embeddings;
}

void check_options(const CalibrationOptions& o) {
  const DeviceChoice device = parse_device(o.device);  // InputError naming --device
  o.model.validate(o.model.name);
  if (o.threads < 0) throw InputError(fmt::format("--threads must be >= 0 (got {})", o.threads));
  if (o.block_size < 1 || o.block_size > 1024)
    throw InputError(fmt::format("--block-size must be in [1, 1024] (got {})", o.block_size));
  const int32_t max_tokens = device.cuda ? kCudaMaxBatchedTokens : 1 << 20;
  if (o.max_batched_tokens < 1 || o.max_batched_tokens > max_tokens)
    throw InputError(fmt::format("--max-num-batched-tokens must be in [1, {}] on {} (got {})", max_tokens,
                                 device.kind(), o.max_batched_tokens));
  if (o.max_context < 0 || o.max_context > int64_t(1) << 24)
    throw InputError(fmt::format("--max-context must be in [0, 16777216] (got {}; 0: the model's maximum)",
                                 o.max_context));
  if (resolved_max_context(o) < 1)
    throw InputError(fmt::format("--max-context: {} declares no max_position_embeddings; give --max-context",
                                 o.model.name));
  if (o.max_num_seqs < 1 || o.max_num_seqs > 1 << 16)
    throw InputError(fmt::format("--max-num-seqs must be in [1, 65536] (got {})", o.max_num_seqs));
  if (o.stream_array_bytes < 0) throw InputError("stream_array_bytes must be >= 0");
  if (o.gemm_ceiling_size < 0 || o.gemm_ceiling_size > 16384)
    throw InputError("gemm_ceiling_size must be in [0, 16384]");
  if (o.repetitions < 0 || o.repetitions > 1000) throw InputError("repetitions must be in [0, 1000]");
  if (!(o.placement_seconds <= 3600))
    throw InputError(fmt::format("--placement-seconds must be at most 3600 (got {})", o.placement_seconds));
  if (!(o.min_time_s >= 0) || o.min_time_s > 60) throw InputError("min_time_s must be in [0, 60]");
  o.sampling.validate();
}

// ------------------------------------------------------------ the machine ---

double physical_memory_bytes() {
  return double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
}

nlohmann::json host_json(int threads) {
  nlohmann::json host = calibration::host_identity();
  host["logical_cpus"] = omp_get_num_procs();
  host["threads_used"] = threads;
  host["memory_bytes"] = physical_memory_bytes();
  host["last_level_cache_bytes"] = ceilings::last_level_cache_bytes();
  host["local_last_level_cache_bytes"] = ceilings::local_last_level_cache_bytes();
  return host;
}

// Restores the OpenMP thread count on the way out.
struct ThreadsGuard {
  int saved = omp_get_max_threads();
  explicit ThreadsGuard(int threads) { omp_set_num_threads(threads); }
  ~ThreadsGuard() { omp_set_num_threads(saved); }
};

// ------------------------------------------------------------------- data ---

// Fills p[0, n) with values uniform on [-scale, scale) from `seed` (SplitMix64
// of the index, so threads fill their share independently).
void fill_noise(float* p, size_t n, uint64_t seed, float scale) {
  const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for schedule(static) if (count > 65536)
  for (std::ptrdiff_t i = 0; i < count; ++i) {
    uint64_t z = seed + uint64_t(i) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    p[i] = scale * float(double(z >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  }
}

Matrix noise(int64_t rows, int64_t cols, uint64_t seed) {
  Matrix m(rows, cols);
  fill_noise(m.data(), size_t(m.size()), seed, 1.0f);
  return m;
}

// ------------------------------------------------------------- benchmarks ---

// One benchmark: `make()` builds its data on the first run (so a family
// holds only its own) and returns the step one iteration performs; the step
// gets the iteration's index to rotate through copies. Counters report
// FLOP/s and bytes/s where given (> 0), per call.
using Step = std::function<void(int64_t)>;

void add_benchmark(MicrobenchSession& session, const std::string& name, std::function<Step()> make,
                   double flops = 0, double bytes = 0) {
  auto step = std::make_shared<Step>();
  session.add(name, [step, make = std::move(make), flops, bytes](benchmark::State& state) {
    if (!*step) *step = make();
    int64_t i = 0;
    for (auto _ : state) {
      (*step)(i++);
      benchmark::ClobberMemory();
    }
    using C = benchmark::Counter;
    if (flops > 0) state.counters["FLOP/s"] = C(flops, C::kIsIterationInvariantRate, C::kIs1000);
    if (bytes > 0) state.counters["bytes/s"] = C(bytes, C::kIsIterationInvariantRate, C::kIs1000);
  });
}

// The backend of one layer of the model (heads, rotary, norms, attention)
// with its RMSNorm weights and a KV cache that holds every attention cell's
// copies. The projections and the LM head get their own weight copies,
// family by family (weight_copies).
struct KernelRig {
  ModelSpec spec;
  cpu::Backend be;
  cpu::Weights norms;  // layer 0's two RMSNorm vectors, the final norm
  cpu::KvCache kv;

  KernelRig(const ModelSpec& model, int64_t kv_blocks, int32_t block_size, uint64_t seed)
      : spec(with_layers(model, 1)), be(spec), kv(be.make_kv_cache(kv_blocks, block_size)) {
    const int64_t d = model.hidden_size;
    norms.layers.resize(1);
    norms.layers[0].attn_norm = cpu::Vector::Ones(d) + 0.5f * cpu::Vector::Random(d);
    norms.layers[0].mlp_norm = cpu::Vector::Ones(d) + 0.5f * cpu::Vector::Random(d);
    norms.final_norm = cpu::Vector::Ones(d) + 0.5f * cpu::Vector::Random(d);
    // Keys and values of unit scale: softmax over real numbers, not a tie.
    fill_noise(kv.k.data(), kv.k.size(), seed ^ 0x6b, 1.0f);
    fill_noise(kv.v.data(), kv.v.size(), seed ^ 0x76, 1.0f);
  }

  static ModelSpec with_layers(ModelSpec m, int64_t layers) {
    m.num_hidden_layers = layers;
    return m;
  }
};

// `copies` weight matrices [rows, cols], uniform with variance 1 / cols (as
// random_weights scales a projection), each in its own memory.
std::vector<Matrix> weight_copies(int copies, int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<Matrix> out;
  const float scale = float(std::sqrt(3.0 / double(cols)));
  for (int c = 0; c < copies; ++c) {
    out.emplace_back(rows, cols);
    fill_noise(out.back().data(), size_t(out.back().size()), seed + uint64_t(c) * 0x1000193ULL, scale);
  }
  return out;
}

// The copies of a cell whose one copy touches `bytes`: enough to exceed
// the rotation bytes, at most `cap`.
int copies_for(double bytes, double rotation_bytes, int cap) {
  if (!(bytes > 0)) return 1;
  return int(std::clamp(std::ceil(rotation_bytes / bytes), 1.0, double(cap)));
}

using calibration::ceil_div;

// A packed batch and the block tables its slices point into.
struct LayoutCopy {
  std::vector<std::vector<int32_t>> tables;
  BatchLayout layout;
};

// `copies` layouts of `sequences` sequences, each with `cached` tokens in
// the cache and `query` new ones, every sequence of every copy in its own
// blocks: blocks 0 .. copies x sequences x blocks per sequence - 1, in a
// shuffled order (a fixed seed), because a served sequence's blocks lie
// wherever the block manager found free ones, not one after another.
std::vector<LayoutCopy> make_layouts(int copies, int64_t sequences, int64_t cached, int64_t query,
                                     int32_t block_size) {
  const int64_t per_seq = ceil_div(cached + query, block_size);
  std::vector<int32_t> blocks(static_cast<size_t>(int64_t(copies) * sequences * per_seq));
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937(12345));
  std::vector<LayoutCopy> out(static_cast<size_t>(copies));
  size_t next = 0;
  const std::vector<int32_t> ids(static_cast<size_t>(query), 7);
  for (LayoutCopy& c : out) {
    c.tables.resize(static_cast<size_t>(sequences));
    for (auto& t : c.tables)
      for (int64_t b = 0; b < per_seq; ++b) t.push_back(blocks[next++]);
    for (const auto& t : c.tables) c.layout.add_sequence(ids, int32_t(cached), t, true);
  }
  return out;
}

// One attention benchmark cell (one layer): `sequences` sequences of `query`
// new tokens after `cached` ones, their q/k/v filled with noise from `seed`,
// rotating through `copies` layouts so K and V are read cold.
std::function<Step()> attention_cell(KernelRig& k, int copies, int64_t sequences, int64_t cached,
                                     int64_t query, int64_t qkv_out, int32_t block_size, uint64_t seed) {
  return [&k, copies, sequences, cached, query, qkv_out, block_size, seed]() -> Step {
    struct Cell {
      cpu::Scratch s;
      std::vector<LayoutCopy> layouts;
    };
    auto cell = std::make_shared<Cell>();
    cell->layouts = make_layouts(copies, sequences, cached, query, block_size);
    cell->s.qkv = noise(sequences * query, qkv_out, seed);
    return [&k, cell](int64_t i) {
      k.be.attention(0, cell->layouts[size_t(i % int64_t(cell->layouts.size()))].layout, k.kv, cell->s);
    };
  };
}

// Blocks make_layouts uses.
int64_t layout_blocks(int copies, int64_t sequences, int64_t cached, int64_t query, int32_t block_size) {
  return int64_t(copies) * sequences * ceil_div(cached + query, block_size);
}

// Seconds of one table, in grid order.
std::vector<double> medians(const std::vector<MicrobenchResult>& r, size_t first, size_t count) {
  std::vector<double> out;
  for (size_t i = first; i < first + count; ++i) out.push_back(r[i].median_s);
  return out;
}



}  // namespace

CalibrationGrids calibration_grids(const CalibrationOptions& o) {
  check_options(o);
  const DeviceChoice device = parse_device(o.device);
  const bool quick = o.quick;
  const int64_t max_tokens = o.max_batched_tokens;
  const int64_t max_context = resolved_max_context(o);
  const int64_t max_rows = std::min<int64_t>(o.max_num_seqs, max_tokens);

  CalibrationGrids g;
  if (quick) {
    g.tokens = capped({1, 4, 16, 64, 256}, max_tokens);
    g.tokens.push_back(max_tokens);
    g.prefill_query = capped({16, 128, 512}, max_tokens);
    g.prefill_cached = {0, std::min<int64_t>(256, max_context) - 1, max_context - 1};
    g.decode_batch = capped({1, 8, 32}, o.max_num_seqs);
    if (device.cuda) g.decode_batch.push_back(o.max_num_seqs);  // a GPU batches every running sequence
    g.sampling_rows = capped({1, 8, 64}, max_rows);
    g.sampling_rows.push_back(max_rows);
  } else {
    // cuBLAS changes tiles at multiples of 64 and more: doubling suffices there.
    g.tokens = device.cuda ? doubling(1, max_tokens) : dense_then_doubling(kDenseTokens, max_tokens);
    g.prefill_query = doubling(1, max_tokens);
    g.prefill_cached = {0};
    for (int64_t y : doubling(16, max_context)) g.prefill_cached.push_back(y - 1);
    g.decode_batch = doubling(1, device.cuda ? o.max_num_seqs : std::min<int32_t>(64, o.max_num_seqs));
    // The LM head is a matmul of S rows: the same kernels as the GEMMs.
    g.sampling_rows = device.cuda ? doubling(1, max_rows) : dense_then_doubling(kDenseTokens, max_rows);
  }
  // The longest decode context: the largest cell's K and V within budget.
  const double per_token = kv_bytes_per_token_layer(o.model, device);
  const double largest_batch = double(*std::max_element(g.decode_batch.begin(), g.decode_batch.end()));
  const double budget = device.cuda ? kCudaDecodeKvBudgetBytes : kDecodeKvBudgetBytes;
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
  for (auto* axis : {&g.tokens, &g.prefill_query, &g.prefill_cached, &g.decode_batch, &g.decode_context,
                     &g.sampling_rows})
    *axis = ascending(*axis);
  return g;
}

DeviceProfile calibrate(const CalibrationOptions& options, std::function<void(const std::string&)> progress) {
  const DeviceChoice device = parse_device(options.device);
  if (device.cuda) {
    calibration_grids(options);  // the options first, then the device
    require_device(device);      // InputError: no GPU, no CUDA backend, ...
#if SERVESIM_WITH_CUDA
    return calibrate_cuda(options, std::move(progress));
#else
    throw std::logic_error("require_device accepted a CUDA device in a build without CUDA");
#endif
  }
  const auto started = Clock::now();
  const ceilings::CpuUse cpu_at_start = ceilings::CpuUse::now();
  const CalibrationGrids grids = calibration_grids(options);  // checks the options
  const ModelSpec& model = options.model;
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };

  const int threads = options.threads > 0 ? options.threads : omp_get_num_procs();
  ThreadsGuard threads_guard(threads);

  const bool quick = options.quick;
  MicrobenchSettings settings;
  settings.repetitions = options.repetitions > 0 ? options.repetitions : 5;
  settings.min_time_s = options.min_time_s > 0 ? options.min_time_s : quick ? 0.01 : 0.05;
  settings.warmup_s = quick ? 0.005 : 0.02;

  // Sizes of the ceilings and the cache rotation.
  const size_t llc = ceilings::last_level_cache_bytes();
  size_t stream_bytes = options.stream_array_bytes > 0 ? size_t(options.stream_array_bytes)
                                                       : ceilings::stream_array_bytes();
  const bool stream_capped = options.stream_array_bytes == 0 && quick && stream_bytes > kQuickStreamArrayCap;
  if (stream_capped) stream_bytes = kQuickStreamArrayCap;
  const int64_t gemm_n = options.gemm_ceiling_size > 0 ? options.gemm_ceiling_size : quick ? 1024 : 2048;
  const size_t local_llc = ceilings::local_last_level_cache_bytes();
  const double rotation_bytes = kRotationCacheMultiple * double(local_llc ? local_llc : kFallbackCacheBytes);

  const int64_t d = model.hidden_size, I = model.intermediate_size, V = model.vocab_size;
  const int64_t H = model.num_attention_heads, dh = model.head_dim, Hkv = model.num_key_value_heads;
  const int64_t qkv_out = (H + 2 * Hkv) * dh, q_out = H * dh;
  const int64_t L = model.num_hidden_layers;
  const int32_t bs = options.block_size;
  const double per_token_kv = kv_bytes_per_token_layer(model, DeviceChoice{});
  const double layer_weight_bytes = 4.0 * double(qkv_out * d + d * q_out + 2 * I * d + d * I);
  // The whole-iteration measurement and the anchor probe run the whole
  // model's decoder: a decode step streams every layer's weights, and the
  // tables are checked against exactly that (see iteration_overhead_s).
  const int weight_layers = int(L);
  const double head_bytes = 4.0 * double(V * d);
  // Each projection and the LM head rotate through their own copies: in a
  // forward pass every other weight streams through the cache between two
  // uses of one matrix, so each call must meet the matrix as cold as that
  // traffic leaves it -- cold for a model larger than the cache, warm for a
  // model that fits in it.
  const double model_stream_bytes = double(L) * layer_weight_bytes + head_bytes;
  const double weight_rotation_bytes = std::min(rotation_bytes, model_stream_bytes);
  auto copies_of = [&](double matrix_bytes) {
    return int(std::clamp(std::ceil(weight_rotation_bytes / matrix_bytes), 1.0, 4096.0));
  };

  // Every attention cell's copies (between two uses of one layer's K and V,
  // a forward pass streams the weights and the other layers' K and V), and
  // the KV blocks they need.
  auto kv_copies = [&](double cell_bytes) {
    const double between_uses = model_stream_bytes + double(L) * cell_bytes;
    return copies_for(cell_bytes, std::min(rotation_bytes, between_uses), kMaxAttentionCopies);
  };
  auto prefill_copies = [&](int64_t q, int64_t c) { return kv_copies(double(q + c) * per_token_kv); };
  auto decode_copies = [&](int64_t b, int64_t ctx) { return kv_copies(double(b * ctx) * per_token_kv); };
  int64_t kv_blocks = ceil_div(grids.tokens.back(), bs);  // elementwise writes M tokens
  for (int64_t q : grids.prefill_query)
    for (int64_t c : grids.prefill_cached)
      kv_blocks = std::max(kv_blocks, layout_blocks(prefill_copies(q, c), 1, c, q, bs));
  for (int64_t b : grids.decode_batch)
    for (int64_t ctx : grids.decode_context)
      kv_blocks = std::max(kv_blocks, layout_blocks(decode_copies(b, ctx), b, ctx - 1, 1, bs));
  const double kv_bytes = double(kv_blocks) * bs * per_token_kv;

  // Refuse what would not fit: the largest family's weight copies, the KV
  // blocks and the largest activations; then the decoder of the iteration
  // measurement (its layers, embedding and head).
  double copies_bytes = 0;
  for (double bytes : {4.0 * double(qkv_out * d), 4.0 * double(d * q_out), 8.0 * double(I * d), 4.0 * double(d * I),
                       head_bytes})
    copies_bytes = std::max(copies_bytes, copies_of(bytes) * bytes);
  const double activations = 4.0 * double(grids.tokens.back()) * double(2 * d + qkv_out + q_out + 3 * I) * 3;
  const double decoder_bytes =
      weight_layers * layer_weight_bytes + head_bytes * (model.tie_word_embeddings ? 1 : 2);
  // Two decoders live through the whole calibration: the anchor probe's and
  // the whole-model one of the in-situ prefills and the iteration overhead.
  // At the end the placement ratios' decoder takes the whole-model one's
  // place, with KV for its largest decode batch (calib/placement_ratios.h).
  const PlacementRatioSettings ladder_defaults;
  const double ladder_kv_bytes = double(ladder_defaults.decode_batches.back()) *
                                 double(ceil_div(ladder_defaults.context + 1, bs)) * bs * per_token_kv;
  // The whole-model decoder also serves the decode-step factor's steps:
  // 1 .. 32 sequences (up to max_num_seqs) around context 128, spread over
  // 64 .. 191 cached tokens and growing a token a step, as served batches
  // are (calibration::DecodeSteps).
  const int64_t step_cached = std::min<int64_t>(128, resolved_max_context(options)) - 1;
  std::vector<int64_t> step_batches;
  for (int64_t b : {1, 2, 4, 8, 16, 32})
    if (b <= options.max_num_seqs) step_batches.push_back(b);
  // Full mode times steps 5-8 of each run: they follow the in-situ
  // prefills, and on the 2-core VM the first three decode steps after a
  // prefill run 2-7% slower than the steady ones that fill a served
  // request's output (experiments/validation_cpu/decode_after_prefill.py
  // on the light points of the 2026-11-30 studies).
  constexpr int kFullDecodeStepWarmUp = 4;
  const int step_warm_up = quick ? calibration::kDecodeStepWarmUp : kFullDecodeStepWarmUp;
  const int step_timed = quick ? settings.repetitions : 4;
  const int64_t step_blocks = step_batches.empty() ? 0
      : calibration::DecodeSteps::blocks(step_batches.back(), step_cached, step_warm_up + step_timed, bs);
  const double step_kv_bytes = double(step_blocks) * bs * per_token_kv * double(L);
  const double peak = 2 * decoder_bytes + step_kv_bytes +
                      std::max(copies_bytes + kv_bytes + activations, ladder_kv_bytes);
  const double physical = physical_memory_bytes();
  // A model the CPU decoder cannot hold (`servesim run` refuses it) is not
  // worth calibrating for.
  const double model_bytes = double(model.parameter_count()) * sizeof(float);
  if (physical > 0 && model_bytes > 0.8 * physical)
    throw InputError(fmt::format(
        "{} needs {:.1f} GB of fp32 weights on the CPU, more than 80% of this machine's {:.1f} GB: the "
        "decoder cannot serve it here, so there is nothing to calibrate for; use a smaller model "
        "(tiny-15m, small-110m)",
        model.name, model_bytes / 1e9, physical / 1e9));
  if (physical > 0 && peak > 0.8 * physical)
    throw InputError(fmt::format(
        "calibrating {} needs about {:.1f} GB (fp32 weight copies, {:.1f} GB of KV blocks; two decoders of {} "
        "layer(s)), more than 80% of this machine's {:.1f} GB; lower --max-context or "
        "--max-num-batched-tokens, or use a smaller model",
        model.name, peak / 1e9, kv_bytes / 1e9, weight_layers, physical / 1e9));

  // The raw Google Benchmark JSON.
  std::ofstream json_file;
  std::ostringstream json_discard;
  std::ostream* json_out = &json_discard;
  if (!options.raw_benchmarks_path.empty()) {
    json_file.open(options.raw_benchmarks_path);
    if (!json_file) throw InputError(fmt::format("{}: cannot open for writing", options.raw_benchmarks_path));
    json_out = &json_file;
  }
  MicrobenchSession session(*json_out, settings);

  DeviceProfile p;
  p.device_kind = "cpu";
  p.device_description = fmt::format("{} ({} threads)", cpu_model_name(), threads);
  p.threads = threads;
  p.dtype = "fp32";
  p.block_size = bs;
  p.model = model;

  // The anchor probes (calib/anchor.h), measured before every family and at
  // the end: their median is the device's typical state while the tables
  // were measured, the reference a later run is re-anchored against.
  const int64_t context = grids.decode_context.front();
  AnchorSettings anchor_settings;
  anchor_settings.model = model;
  anchor_settings.threads = threads;
  anchor_settings.layers = int32_t(model.num_hidden_layers);  // the whole model: a decode step as a run makes it
  anchor_settings.context = context;
  anchor_settings.block_size = bs;
  anchor_settings.weights_seed = options.weights_seed;
  anchor_settings.sampling = options.sampling;
  anchor_settings.gemm_n = kAnchorGemmSize;
  anchor_settings.repetitions = quick ? 10 : 20;
  AnchorProber prober(anchor_settings);
  std::vector<AnchorProbe> probes;

  // The in-situ prefills (calib/profile_model.h), in full mode measured with
  // every anchor probe and their median kept, as for the decode probe: one
  // measurement at the end is one moment of a machine whose compute speed
  // drifts by 5-10% over minutes (the 2-core VM), and it set the level of
  // every prefill prediction.
  const std::vector<int64_t> situ_lengths = calibration::in_situ_lengths(options, resolved_max_context(options));
  std::vector<std::vector<double>> situ_times(situ_lengths.size());
  // The whole model's decoder for the in-situ prefills and the iteration
  // overhead (a 1-token decode at the probe's context).
  std::shared_ptr<DecoderExecutor> whole;
  {
    CpuDecoderOptions decoder_options;
    decoder_options.threads = threads;
    DecoderExecutorOptions executor_options;
    executor_options.sampling = options.sampling;
    // The in-situ prefills follow decode steps (calibration::time_prefills).
    const int64_t prefill_blocks =
        situ_lengths.empty() ? 0
                             : calibration::prefill_blocks_with_lead(situ_lengths.back(), bs,
                                                                     calibration::kPrefillLeadSteps, step_cached);
    const int64_t blocks = std::max({ceil_div(context, bs), prefill_blocks, step_blocks});
    whole = std::make_shared<DecoderExecutor>(
        make_cpu_decoder(random_weights(model, options.weights_seed), blocks, bs, decoder_options),
        executor_options);
  }
  // step_times[moment][i]: the timed decode steps of step_batches[i] at one
  // anchor probe's moment (full mode; quick measures them once at the end).
  std::vector<std::vector<std::vector<double>>> step_times;
  auto measure_situ = [&] {
    if (quick) return;  // quick: once, at the end
    for (size_t i = 0; i < situ_lengths.size(); ++i)
      situ_times[i].push_back(calibration::median(
          calibration::time_prefills(*whole, situ_lengths[i], bs, 1, 2, calibration::kPrefillLeadSteps, step_cached)));
    auto& moment = step_times.emplace_back();
    for (int64_t b : step_batches)
      moment.push_back(calibration::time_decode_steps(*whole, b, step_cached, bs, step_warm_up, step_timed));
  };

  const int families = 12;
  int family = 0;
  auto announce = [&](const std::string& name, const std::string& what) {
    probes.push_back(prober.measure());
    measure_situ();
    say(fmt::format("[{}/{}] {}: {}", ++family, families, name, what));
  };

  // ---- ceilings: STREAM copy and triad, the large GEMM.
  announce("ceilings", fmt::format("STREAM copy and triad on 3 arrays of {:.0f} MiB, GEMM {}^3",
                                   double(stream_bytes) / double(kMiB), gemm_n));
  {
    auto arrays = std::make_shared<ceilings::StreamArrays>(stream_bytes);
    auto gemm = std::make_shared<ceilings::Gemm>(gemm_n);
    const double copy_b = ceilings::copy_bytes(*arrays), triad_b = ceilings::triad_bytes(*arrays);
    add_benchmark(session, "stream_copy", [arrays] { return [arrays](int64_t) { ceilings::copy_pass(*arrays); }; },
                  0, copy_b);
    add_benchmark(session, "stream_triad", [arrays] { return [arrays](int64_t) { ceilings::triad_pass(*arrays); }; },
                  0, triad_b);
    add_benchmark(session, fmt::format("gemm_peak/n:{}", gemm_n),
                  [gemm] { return [gemm](int64_t) { gemm->pass(); }; }, gemm->flops());
    const auto r = session.run();
    p.stream_copy_bytes_per_s = copy_b / r[0].median_s;
    p.stream_triad_bytes_per_s = triad_b / r[1].median_s;
    p.gemm_flops_per_s = gemm->flops() / r[2].median_s;
  }

  say(fmt::format("setting up: {:.0f} MiB of KV blocks; each weight matrix rotates through {:.0f} MiB of copies",
                  kv_bytes / double(kMiB), weight_rotation_bytes / double(kMiB)));
  auto rig = std::make_unique<KernelRig>(model, kv_blocks, bs, options.weights_seed);
  KernelRig& k = *rig;

  // ---- the four projections, on M tokens (one layer).
  struct Projection {
    const char* name;
    int64_t K, N;
    bool accumulate;
  };
  const Projection projections[] = {{"gemm_qkv", d, qkv_out, false},
                                    {"gemm_o", q_out, d, true},
                                    {"gemm_gate_up", d, 2 * I, false},
                                    {"gemm_down", I, d, true}};
  Curve* curves[] = {&p.gemm_qkv, &p.gemm_o, &p.gemm_gate_up, &p.gemm_down};
  for (size_t pi = 0; pi < 4; ++pi) {
    const Projection& proj = projections[pi];
    const int copies = copies_of(4.0 * double(proj.K * proj.N));
    announce(proj.name, fmt::format("{} token counts M = {} ([M, {}] x [{}, {}]{}; {} weight copies)",
                                    grids.tokens.size(), axis_text(grids.tokens), proj.K, proj.K, proj.N,
                                    proj.accumulate ? ", accumulating" : "", copies));
    // The weight copies: one-layer Weights per copy for the backend's own
    // methods (qkv with its bias, o), plain matrices for the MLP's GEMMs.
    auto weights = std::make_shared<cpu::Weights>();
    auto matrices = std::make_shared<std::vector<Matrix>>(
        weight_copies(copies, proj.N, proj.K, options.weights_seed + 101 * (pi + 1)));
    if (pi < 2) {
      weights->layers.resize(size_t(copies));
      for (int c = 0; c < copies; ++c) {
        cpu::LayerWeights& lw = weights->layers[size_t(c)];
        (pi == 0 ? lw.w_qkv : lw.w_o) = std::move((*matrices)[size_t(c)]);
        if (pi == 0 && model.attention_bias) lw.b_qkv = 0.1f * cpu::Vector::Random(qkv_out);
      }
      matrices->clear();
    }
    for (int64_t M : grids.tokens) {
      auto make = [&k, pi, M, d, I, qkv_out, q_out, weights, matrices]() -> Step {
        auto s = std::make_shared<cpu::Scratch>();
        const int64_t n = pi < 2 ? int64_t(weights->layers.size()) : int64_t(matrices->size());
        switch (pi) {
          case 0:  // s.qkv = s.h W_qkv^T (+ b): the backend's own method
            s->h = noise(M, d, 11);
            s->qkv = noise(M, qkv_out, 12);
            return [&k, s, weights, n](int64_t i) { k.be.qkv_projection(*weights, int(i % n), *s); };
          case 1:  // s.x += s.attn W_o^T
            s->attn = noise(M, q_out, 13);
            s->x = noise(M, d, 14);
            return [&k, s, weights, n](int64_t i) { k.be.output_projection_add(*weights, int(i % n), *s); };
          case 2:  // the first GEMM of mlp_add
            s->h = noise(M, d, 15);
            s->gate_up = noise(M, 2 * I, 16);
            return [s, matrices, n](int64_t i) { cpu::matmul(s->h, (*matrices)[size_t(i % n)], s->gate_up, false); };
          default:  // the last GEMM of mlp_add: s.x += s.act W_down^T
            s->act = noise(M, I, 17);
            s->x = noise(M, d, 18);
            return [s, matrices, n](int64_t i) { cpu::matmul(s->act, (*matrices)[size_t(i % n)], s->x, true); };
        }
      };
      add_benchmark(session, fmt::format("{}/M:{}", proj.name, M), make, 2.0 * double(M * proj.K * proj.N),
                    4.0 * double(proj.K * proj.N + M * (proj.K + proj.N)));
    }
    *curves[pi] = make_curve(grids.tokens, medians(session.run(), 0, grids.tokens.size()));
  }

  // ---- norms, rotary + KV write, SwiGLU (one layer).
  announce("elementwise", fmt::format("{} token counts M = {} (2 RMSNorms, rotary + KV write, SwiGLU)",
                                      grids.tokens.size(), axis_text(grids.tokens)));
  for (int64_t M : grids.tokens) {
    auto make = [&k, M, d, I, qkv_out, bs]() -> Step {
      struct Cell {
        cpu::Scratch s;
        std::vector<LayoutCopy> layouts;
      };
      auto c = std::make_shared<Cell>();
      c->layouts = make_layouts(1, 1, 0, M, bs);
      c->s.x = noise(M, d, 21);
      c->s.qkv = noise(M, qkv_out, 22);
      c->s.gate_up = noise(M, 2 * I, 23);
      k.be.prepare(c->s, c->layouts[0].layout);  // rotary tables: per iteration, not per layer
      return [&k, c](int64_t) {
        k.be.rmsnorm_attention_input(k.norms, 0, c->s);
        k.be.rotary_and_cache_write(0, c->layouts[0].layout, k.kv, c->s);
        k.be.rmsnorm_mlp_input(k.norms, 0, c->s);
        cpu::swiglu(c->s.gate_up, c->s.act);
      };
    };
    add_benchmark(session, fmt::format("elementwise/M:{}", M), make, 0,
                  4.0 * double(M) * double(4 * d + qkv_out + 2 * Hkv * dh + 3 * I));
  }
  p.elementwise = make_curve(grids.tokens, medians(session.run(), 0, grids.tokens.size()));

  // ---- attention of one prefill chunk (one layer): q new tokens after c cached.
  announce("prefill_attention",
           fmt::format("{} x {} cells, query tokens q = {}, cached tokens c = {}", grids.prefill_query.size(),
                       grids.prefill_cached.size(), axis_text(grids.prefill_query), axis_text(grids.prefill_cached)));
  for (int64_t q : grids.prefill_query)
    for (int64_t c : grids.prefill_cached) {
      const int copies = prefill_copies(q, c);
      auto make = attention_cell(k, copies, 1, c, q, qkv_out, bs, 31);
      const double pairs = double(q) * double(c) + double(q) * double(q + 1) / 2;
      add_benchmark(session, fmt::format("prefill_attention/q:{}/c:{}", q, c), make, 4.0 * double(H * dh) * pairs,
                    double(c + q) * per_token_kv);
    }
  {
    const auto r = session.run();
    Grid2D& g = p.prefill_attention;
    for (int64_t q : grids.prefill_query) g.x.push_back(double(q));
    for (int64_t c : grids.prefill_cached) g.y.push_back(prefill_grid_y(double(c)));
    const size_t ny = grids.prefill_cached.size();
    for (size_t i = 0; i < grids.prefill_query.size(); ++i) g.seconds.push_back(medians(r, i * ny, ny));
  }

  // ---- attention of a decode batch (one layer): b sequences, context L each.
  announce("decode_attention",
           fmt::format("{} x {} cells, batch b = {}, context L = {}", grids.decode_batch.size(),
                       grids.decode_context.size(), axis_text(grids.decode_batch), axis_text(grids.decode_context)));
  for (int64_t b : grids.decode_batch)
    for (int64_t ctx : grids.decode_context) {
      const int copies = decode_copies(b, ctx);
      auto make = attention_cell(k, copies, b, ctx - 1, 1, qkv_out, bs, 41);
      add_benchmark(session, fmt::format("decode_attention/b:{}/L:{}", b, ctx), make,
                    4.0 * double(H * dh) * double(b * ctx), double(b * ctx) * per_token_kv);
    }
  {
    const auto r = session.run();
    Grid2D& g = p.decode_attention;
    for (int64_t b : grids.decode_batch) g.x.push_back(double(b));
    for (int64_t ctx : grids.decode_context) g.y.push_back(decode_grid_y(double(ctx - 1)));
    const size_t ny = grids.decode_context.size();
    for (size_t i = 0; i < grids.decode_batch.size(); ++i) g.seconds.push_back(medians(r, i * ny, ny));
  }

  // ---- final norm + LM head on S rows (the head rotating through copies).
  const int head_copies = copies_of(head_bytes);
  announce("lm_head", fmt::format("{} row counts S = {} (final RMSNorm + [S, {}] x [{}, {}]; {} head copies)",
                                  grids.sampling_rows.size(), axis_text(grids.sampling_rows), d, d, V, head_copies));
  {
    auto heads = std::make_shared<std::vector<cpu::Weights>>(size_t(head_copies));
    std::vector<Matrix> matrices = weight_copies(head_copies, V, d, options.weights_seed + 707);
    for (int c = 0; c < head_copies; ++c) {
      (*heads)[size_t(c)].lm_head = std::move(matrices[size_t(c)]);
      (*heads)[size_t(c)].final_norm = k.norms.final_norm;
    }
    for (int64_t S : grids.sampling_rows) {
      auto make = [&k, S, d, heads]() -> Step {
        struct Cell {
          cpu::Scratch s;
          BatchLayout layout;
        };
        auto c = std::make_shared<Cell>();
        c->s.x = noise(S, d, 51);
        for (int32_t r = 0; r < int32_t(S); ++r) c->layout.sample_rows.push_back(r);
        return [&k, c, heads](int64_t i) {
          k.be.logits((*heads)[size_t(i % int64_t(heads->size()))], c->layout, c->s);
        };
      };
      add_benchmark(session, fmt::format("lm_head/S:{}", S), make, 2.0 * double(S * d * V),
                    4.0 * double(V * d + S * (d + V)));
    }
    p.lm_head = make_curve(grids.sampling_rows, medians(session.run(), 0, grids.sampling_rows.size()));
  }

  // ---- sampling: the logits out of the backend, one token per row.
  const SamplingParams sampling = options.sampling;
  announce("sampling", fmt::format("{} row counts S = {} ({} over {} logits)", grids.sampling_rows.size(),
                                   axis_text(grids.sampling_rows),
                                   sampling.temperature == 0 ? "greedy" : "temperature/top-p", V));
  for (int64_t S : grids.sampling_rows) {
    auto make = [S, V, sampling]() -> Step {
      struct Cell {
        Matrix logits;
        std::vector<float> host;
      };
      auto c = std::make_shared<Cell>();
      c->logits = noise(S, V, 61);
      return [c, S, V, sampling](int64_t i) {
        c->host.assign(c->logits.data(), c->logits.data() + c->logits.size());
        for (int64_t r = 0; r < S; ++r) {
          const int32_t token = sample_token(std::span<const float>(c->host).subspan(size_t(r * V), size_t(V)),
                                             sampling, r, i);
          benchmark::DoNotOptimize(token);
        }
      };
    };
    add_benchmark(session, fmt::format("sampling/S:{}", S), make, 0, 8.0 * double(S * V));
  }
  p.sampling = make_curve(grids.sampling_rows, medians(session.run(), 0, grids.sampling_rows.size()));
  rig.reset();

  // ---- a whole minimal iteration: one decode token at the smallest context,
  // through the real executor, on the whole model's decoder.
  announce("iteration_overhead",
           fmt::format("a 1-token decode at context {} through DecoderExecutor ({} layers), minus its kernels",
                       context, weight_layers));
  const auto decode_plan = std::make_shared<calibration::OneSequencePlan>(1, 1, context - 1, false, bs);
  double iteration_s = 0;
  {
    auto make = [executor = whole, decode_plan]() -> Step {
      auto result = std::make_shared<IterationResult>();
      return [executor, decode_plan, result](int64_t) {
        result->reset();
        executor->execute(decode_plan->plan(), *result);
      };
    };
    add_benchmark(session, fmt::format("iteration/decode/b:1/L:{}", context), make);
    iteration_s = session.run()[0].median_s;
  }
  session.finish();

  // ---- the anchor probes: the device's state as the tables saw it.
  announce("anchor", fmt::format("the decode probe (all {} layers, context {}) and a {}^3 GEMM, measured before "
                                 "every family and now: their median re-anchors this profile on a later run",
                                 model.num_hidden_layers, context, kAnchorGemmSize));
  probes.push_back(prober.measure());
  measure_situ();
  // The median over the probes in the placement most of them saw
  // (calib/placement.h): the tables' medians are that placement's too.
  const PlacementCounts placements = placement_counts(probes);
  p.anchor = median_probe(probes_in_dominant_placement(probes));
  if (placements.near > 0 && placements.far > 0)
    say(fmt::format("warning: the threads' placement changed during the calibration ({} probes near, {} far, {} "
                    "unknown); the anchor is the median of the {} probes' and the tables mix both speeds",
                    placements.near, placements.far, placements.unknown, to_string(placements.dominant())));
  // The fixed cost: the whole model's 1-token decode minus what the tables
  // predict for the same plan. Measured on the whole model
  // because its layers cost more inside a forward pass than their kernels
  // alone (about 35% more per layer for small-110m on the 2-core VM); the
  // difference for the model's own layer count lands here.
  const double predicted = calibration::tables_seconds(p, decode_plan->plan());
  // The whole-model decode is the anchor probe's plan: its median over the
  // calibration is the measurement to use, robust to the machine changing
  // speed at the moment the iteration family ran (on the 2-core VM one
  // calibration saw 7.4 ms before that moment and 10.4 ms from it on).
  p.iteration_overhead_s = std::max(0.0, p.anchor->decode_iteration_s - predicted);

  // ---- in situ: whole-model prefills of T tokens against the tables
  // (calib/profile_model.h), so the GEMMs' cost inside a forward pass is
  // what a prediction uses.
  // The moments of the anchor's placement (all when none dominates): the
  // in-situ prefills and decode steps measured at them set the factors.
  auto in_anchor_placement = [&, dominant = placements.dominant()](size_t moment) {
    return dominant == Placement::Unknown || (moment < probes.size() && probes[moment].placement() == dominant);
  };
  if (!situ_lengths.empty() && quick) {
    calibration::measure_in_situ(p, *whole, situ_lengths, bs, settings.repetitions, say,
                                 calibration::kPrefillLeadSteps, step_cached);
  } else if (!situ_lengths.empty()) {
    std::vector<double> medians;
    for (const std::vector<double>& times : situ_times) {
      std::vector<double> kept;
      for (size_t i = 0; i < times.size() && i < probes.size(); ++i)
        if (in_anchor_placement(i)) kept.push_back(times[i]);
      medians.push_back(calibration::median(kept.empty() ? times : kept));
    }
    say(fmt::format("in situ: whole-model prefills of {} tokens, the median over {} moments of the calibration",
                    axis_text(situ_lengths), situ_times.front().size()));
    calibration::set_in_situ(p, situ_lengths, medians, bs, say);
    p.metadata["in_situ_prefills"] = {
        {"tokens", situ_lengths},
        {"seconds", situ_times},
        {"meaning", "whole-model prefills (median of 2 after 1 warm-up) with every anchor probe; the in-situ "
                    "factor uses each length's median over the moments of the anchor's placement"}};
  }

  // ---- decode steps in situ (calib/profile_model.h): served-like decode
  // steps of 1 .. 32 sequences against the tables with the overhead and
  // gemm_in_situ. On the 2-core VM the tables alone put steps of 2-8
  // sequences 4-9% above what the study's real runs took, 1 sequence and
  // 16-32 within 2% (experiments/results/cpu/reruns/2026-11-29_44269b9_placement).
  if (!step_batches.empty() && quick) {
    calibration::measure_decode_in_situ(p, *whole, step_batches, step_cached, bs, settings.repetitions, say);
  } else if (!step_batches.empty()) {
    std::vector<std::vector<double>> kept(step_batches.size());
    std::vector<std::vector<double>> medians(step_times.size());  // per moment, per batch size
    for (size_t m = 0; m < step_times.size(); ++m) {
      for (size_t i = 0; i < step_batches.size(); ++i) medians[m].push_back(calibration::median(step_times[m][i]));
      if (!in_anchor_placement(m)) continue;
      for (size_t i = 0; i < step_batches.size(); ++i)
        kept[i].insert(kept[i].end(), step_times[m][i].begin(), step_times[m][i].end());
    }
    say(fmt::format("in situ: decode steps of {} sequences around context {}, {} steps after {} untimed at each "
                    "of {} moments",
                    axis_text(step_batches), step_cached + 1, step_timed, step_warm_up, step_times.size()));
    calibration::set_decode_in_situ(p, step_batches, step_cached, bs, step_warm_up, step_timed, kept, say);
    p.metadata["decode_in_situ"] = {
        {"sequences", step_batches},
        {"cached", {step_cached / 2, step_cached / 2 + step_cached}},
        {"seconds_median", medians},
        {"warm_up_steps", step_warm_up},
        {"timed_steps", step_timed},
        {"meaning", "successive decode steps (contexts spread over 'cached', one token further each step; "
                    "median per moment and batch size here) with every anchor probe; the factor is the median "
                    "over the anchor placement's moments of measured / predicted"}};
  }

  // ---- placement ratios (calib/placement_ratios.h): whole-model
  // iterations in the other placement of the threads against the tables'.
  const double placement_seconds = options.placement_seconds >= 0 ? options.placement_seconds : quick ? 0 : 180;
  p.metadata["placement_ratios"] = nullptr;
  if (placement_seconds > 0 && threads >= 2) {
    whole.reset();  // its memory goes to the ladder's decoder
    PlacementRatioSettings ladder;
    ladder.threads = threads;
    ladder.max_seconds = placement_seconds;
    ladder.context = std::min<int64_t>(256, resolved_max_context(options) - 1);
    // The default ladder, within the calibration's limits.
    std::erase_if(ladder.decode_batches, [&](int64_t b) { return b > options.max_num_seqs; });
    std::erase_if(ladder.prefill_tokens, [&](int64_t t) {
      return t > options.max_batched_tokens || t > resolved_max_context(options);
    });
    // A profile's ladders are never empty (PlacementRatios::from_json).
    if (ladder.prefill_tokens.empty())
      ladder.prefill_tokens.push_back(std::min<int64_t>(options.max_batched_tokens, resolved_max_context(options)));
    const int64_t blocks = std::max(ladder.decode_batches.back() * ceil_div(ladder.context + 1, bs),
                                    ceil_div(ladder.prefill_tokens.empty() ? 1 : ladder.prefill_tokens.back(), bs));
    CpuDecoderOptions decoder_options;
    decoder_options.threads = threads;
    DecoderExecutorOptions executor_options;
    executor_options.sampling = options.sampling;
    DecoderExecutor executor(make_cpu_decoder(random_weights(model, options.weights_seed), blocks, bs, decoder_options),
                             executor_options);
    const Placement reference = placements.dominant() == Placement::Unknown ? Placement::Near : placements.dominant();
    say(fmt::format("placement ratios: whole-model decode steps of {} sequences and prefills of {} tokens, each "
                    "with the threads {} and {}, for at most {:.0f} s",
                    axis_text(ladder.decode_batches), axis_text(ladder.prefill_tokens), to_string(reference),
                    reference == Placement::Near ? "far" : "near", placement_seconds));
    p.placement_ratios = measure_placement_ratios(executor, bs, reference, ladder, say);
    if (p.placement_ratios) {
      std::string line = "placement ratios (other / reference):";
      for (size_t k = 0; k < p.placement_ratios->decode_batch.size(); ++k)
        line += fmt::format(" decode {} {:.3f};", p.placement_ratios->decode_batch[k], p.placement_ratios->decode_ratio[k]);
      for (size_t k = 0; k < p.placement_ratios->prefill_tokens.size(); ++k)
        line += fmt::format(" prefill {} {:.3f};", p.placement_ratios->prefill_tokens[k],
                            p.placement_ratios->prefill_ratio[k]);
      say(line);
    } else {
      say("placement ratios: the threads stayed in one placement (none measured)");
      p.metadata["placement_ratios"] = "the threads stayed in one placement";
    }
  }
  if (json_file.is_open()) {
    json_file.close();
    if (!json_file) throw InputError(fmt::format("{}: write failed", options.raw_benchmarks_path));
  }

  // ---- provenance.
  if (!options.raw_benchmarks_path.empty())
    p.raw_benchmarks_file = std::filesystem::path(options.raw_benchmarks_path).filename().string();
  const double wall = seconds_since(started);
  nlohmann::json& m = p.metadata;
  m["date"] = calibration::utc_now_iso();
  m["commit"] = calibration::git_commit();
  m["compiler"] = calibration::compiler_version();
  m["libraries"] = {{"eigen", fmt::format("{}.{}.{}", EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION)},
                    {"google_benchmark", benchmark_library_version()},
#ifdef _OPENMP
                    {"openmp", _OPENMP},
#endif
                    {"nlohmann_json", fmt::format("{}.{}.{}", NLOHMANN_JSON_VERSION_MAJOR,
                                                  NLOHMANN_JSON_VERSION_MINOR, NLOHMANN_JSON_VERSION_PATCH)}};
  m["host"] = host_json(threads);
  m["device"] = p.device_description;
  m["settings"] = {
      {"mode", quick ? "quick" : "full"},
      {"threads", threads},
      {"block_size", bs},
      {"max_batched_tokens", options.max_batched_tokens},
      {"max_context", resolved_max_context(options)},
      {"max_num_seqs", options.max_num_seqs},
      {"weights", fmt::format("random (seed {})", options.weights_seed)},
      {"sampling", {{"temperature", sampling.temperature}, {"top_p", sampling.top_p}}},
      {"repetitions", settings.repetitions},
      {"min_time_s", settings.min_time_s},
      {"placement_seconds", placement_seconds},
      {"min_warmup_time_s", settings.warmup_s},
      {"statistic", "median over repetitions of the wall time per call (each repetition: the mean of its calls)"},
      {"grids", calibration::grids_json(grids)},
      {"stream_array_bytes", stream_bytes},
      {"stream_array_rule", options.stream_array_bytes > 0 ? "set by the caller"
                            : stream_capped ? "4x the last-level cache, capped at 256 MiB in quick mode"
                            : llc ? "4x the last-level cache" : "256 MiB (last-level cache unknown)"},
      {"gemm_ceiling", fmt::format("cpu::matmul {}^3 fp32", gemm_n)},
      {"rotation_bytes", rotation_bytes},
      {"weight_rotation_bytes", weight_rotation_bytes},
      {"weight_copies", {{"gemm_qkv", copies_of(4.0 * double(qkv_out * d))},
                         {"gemm_o", copies_of(4.0 * double(d * q_out))},
                         {"gemm_gate_up", copies_of(8.0 * double(I * d))},
                         {"gemm_down", copies_of(4.0 * double(d * I))},
                         {"lm_head", head_copies}}},
      {"iteration_decoder_layers", weight_layers},
      {"kv_blocks_allocated", kv_blocks},
      {"decode_kv_budget_bytes", kDecodeKvBudgetBytes},
      {"benchmarks", session.benchmarks_run()},
      {"wall_time_s", wall}};
  m["conventions"] = {
      {"units", "seconds; gemm_*, elementwise and the attention tables per layer, lm_head, sampling and "
                "iteration_overhead_s per iteration"},
      {"prefill_attention", "x = query tokens q of one sequence's chunk, y = cached tokens c + 1"},
      {"decode_attention", "x = sequences b (one query token each), y = context length L = cached tokens c + 1"},
      {"elementwise", "2 RMSNorms, rotary + KV write, SwiGLU; residual adds are inside gemm_o and gemm_down"},
      {"sampling", "copying the [S, V] logits to the host vector and choosing a token per row"}};
  {
    nlohmann::json& a = m["anchor_probes"];
    for (const AnchorProbe& probe : probes) {
      a["decode_iteration_s"].push_back(probe.decode_iteration_s);
      a["gemm_flops_per_s"].push_back(probe.gemm_flops_per_s);
      a["placement"].push_back(to_string(probe.placement()));
    }
    a["placement_counts"] = {{"near", placements.near}, {"far", placements.far}, {"unknown", placements.unknown}};
    // Each placement's own median (from 2 probes on): what a validation's
    // probe taken in that placement is compared with (drift_gate.py).
    for (Placement placement : {Placement::Near, Placement::Far}) {
      std::vector<AnchorProbe> in_placement;
      for (const AnchorProbe& probe : probes)
        if (probe.placement() == placement) in_placement.push_back(probe);
      if (in_placement.size() >= 2) a["by_placement"][to_string(placement)] = median_probe(in_placement).to_json();
    }
    a["meaning"] = "the anchor probes before each family and at the end, each with the threads' placement "
                   "(calib/placement.h); the profile's anchor is the median of those in the placement most saw; "
                   "by_placement: the median in each placement that 2 or more probes saw";
  }
  m["iteration_overhead"] = {{"plan", fmt::format("1 decode token, {} cached", context - 1)},
                             {"layers", weight_layers},
                             {"measured_s", p.anchor->decode_iteration_s},
                             {"measured_by", "the anchor probes' median (the same plan)"},
                             {"google_benchmark_family_s", iteration_s},
                             {"predicted_kernels_s", predicted},
                             {"clamped_at_zero", p.anchor->decode_iteration_s < predicted}};
  // Timings from a busy machine are not the device's: say so.
  const double others = ceilings::CpuUse::now().others_share_since(cpu_at_start);
  m["machine_load"] = {{"others_cpu_share", others},
                       {"meaning", "share of all CPUs' time that other processes (and the hypervisor) took "
                                   "during the calibration; above 0.05 the timings are suspect"}};
  say(fmt::format("done: {} benchmarks in {:.1f} s", session.benchmarks_run(), wall));
  if (others > 0.05)
    say(fmt::format("warning: other processes took {:.0f}% of the CPUs during the calibration; its timings are "
                    "suspect -- rerun on an idle machine",
                    100 * others));
  return p;
}

}  // namespace servesim
