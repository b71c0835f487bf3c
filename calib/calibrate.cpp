// The calibration: Google Benchmark timings of the CPU decoder's own kernels
// on the model's shapes, the machine's ceilings, and the profile they make;
// --device cuda[:N] goes to the CUDA calibration (calib/calibrate_cuda.cpp).
// What each table holds is stated in calib/calibrate.h; each benchmark family
// lives in its own calib/cpu_family_*.cpp.
#include "calib/calibrate.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <Eigen/Core>
#include <fmt/format.h>
#include <omp.h>

#include "calib/calibration_common.h"
#include "calib/ceilings.h"
#include "calib/cpu_calibration.h"
#include "calib/microbench_runner.h"
#include "kernels/cuda_plugin/cuda_entry_points.h"
#include "kernels/decoder/device_choice.h"
#include "sim/errors.h"

namespace servesim {
namespace {

using Clock = std::chrono::steady_clock;
using namespace cpu_calibration;

constexpr size_t kMiB = size_t(1) << 20;
// Least time of each timed repetition of a CPU benchmark in full mode.
constexpr double kFullMinTimeS = 0.03;
// Quick mode caps each STREAM array at this (full mode: 4x the LLC).
constexpr size_t kQuickStreamArrayCap = 256 * kMiB;
// Timed data rotates through copies that together hold this many times the
// core's last-level cache ...
constexpr double kRotationCacheMultiple = 4.0;
// ... but never more than this many copies of one attention cell.
constexpr int kMaxAttentionCopies = 64;
// Used when the cache size is unknown.
constexpr size_t kFallbackCacheBytes = 32 * kMiB;
// The families, each announced with a moment before it, and one moment at the end.
constexpr int kFamilies = 12;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Where a CPU calibration's wall time goes: each phase from its announcement
// to the next, and apart from them the whole-model moments between phases
// (settings.phase_seconds: what a cheaper calibration would have to cut).
class PhaseClock {
 public:
  void open(const std::string& name) {
    close();
    name_ = name;
    since_ = Clock::now();
  }
  void close() {
    if (!name_.empty()) seconds_[name_] = seconds_.value(name_, 0.0) + seconds_since(since_);
    name_.clear();
  }
  void add(const std::string& name, double s) { seconds_[name] = seconds_.value(name, 0.0) + s; }
  // The longest phases, "name 40.1 s, ...".
  std::string longest(size_t count) const {
    std::vector<std::pair<double, std::string>> v;
    for (const auto& [name, s] : seconds_.items()) v.emplace_back(s.get<double>(), name);
    std::sort(v.rbegin(), v.rend());
    std::string out;
    for (size_t i = 0; i < std::min(count, v.size()); ++i)
      out += fmt::format("{}{} {:.1f} s", i ? ", " : "", v[i].second, v[i].first);
    return out;
  }
  const nlohmann::json& json() const { return seconds_; }

 private:
  nlohmann::json seconds_ = nlohmann::json::object();  // by name
  std::string name_;
  Clock::time_point since_;
};

double physical_memory_bytes() { return double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE)); }

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

// How many copies of each weight matrix and attention cell rotate, so that
// each call meets memory as a forward pass leaves it: in a forward pass every
// other weight streams through the cache between two uses of one matrix, so
// each call must meet the matrix as cold as that traffic leaves it -- cold
// for a model larger than the cache, warm for a model that fits in it.
struct Rotation {
  double rotation_bytes = 0;         // kRotationCacheMultiple x the local LLC
  double model_stream_bytes = 0;     // every weight of a forward pass
  double weight_rotation_bytes = 0;  // min of the two
  double kv_per_token_layer = 0;     // K and V of one token, one layer, as stored
  double linear_element = 4, head_element = 4;  // bytes of a stored weight (scales aside)
  int64_t layers = 0;

  Rotation(const ModelSpec& m, double rotation, const DecoderPrecision& precision)
      : rotation_bytes(rotation), layers(m.num_hidden_layers) {
    const cpu::Precision storage = cpu_precision(precision);
    linear_element = cpu::storage_bytes(storage.linear);
    head_element = cpu::storage_bytes(storage.embedding);
    const double d = double(m.hidden_size), I = double(m.intermediate_size), V = double(m.vocab_size);
    const double qkv_out = double((m.num_attention_heads + 2 * m.num_key_value_heads) * m.head_dim);
    const double q_out = double(m.num_attention_heads * m.head_dim);
    const double layer_weight_bytes = linear_element * (qkv_out * d + d * q_out + 2 * I * d + d * I);
    model_stream_bytes = double(layers) * layer_weight_bytes + head_element * V * d;
    weight_rotation_bytes = std::min(rotation_bytes, model_stream_bytes);
    kv_per_token_layer = decoder_kv_bytes_per_token(m, DeviceChoice{}, precision) / double(layers);
  }
  int weight_copies(double matrix_bytes) const {
    return int(std::clamp(std::ceil(weight_rotation_bytes / matrix_bytes), 1.0, 4096.0));
  }
  // Between two uses of one layer's K and V a forward pass streams the
  // weights and the other layers' K and V.
  int kv_copies(double cell_bytes) const {
    const double between_uses = model_stream_bytes + double(layers) * cell_bytes;
    return copies_for(cell_bytes, std::min(rotation_bytes, between_uses), kMaxAttentionCopies);
  }
  int prefill_copies(int64_t q, int64_t c) const { return kv_copies(double(q + c) * kv_per_token_layer); }
  int decode_copies(int64_t b, int64_t context) const { return kv_copies(double(b * context) * kv_per_token_layer); }
};

// The KV blocks every attention cell's copies need (and the elementwise
// family's M tokens).
int64_t kv_blocks_needed(const CalibrationGrids& grids, const Rotation& r, int32_t bs) {
  int64_t blocks = calibration::ceil_div(grids.tokens.back(), bs);
  for (int64_t q : grids.prefill_query)
    for (int64_t c : grids.prefill_cached) blocks = std::max(blocks, layout_blocks(r.prefill_copies(q, c), 1, c, q, bs));
  for (int64_t b : grids.decode_batch)
    for (int64_t ctx : grids.decode_context)
      blocks = std::max(blocks, layout_blocks(r.decode_copies(b, ctx), b, ctx - 1, 1, bs));
  return blocks;
}

// Refuses what would not fit: a model the CPU decoder cannot hold (`servesim
// run` refuses it), or the largest family's weight copies, the KV blocks and
// the largest activations beside the whole-model decoders.
void check_memory(const CalibrationOptions& o, const CalibrationGrids& grids, const Rotation& r, double kv_bytes) {
  const ModelSpec& m = o.model;
  const int64_t d = m.hidden_size, I = m.intermediate_size, V = m.vocab_size;
  const int64_t qkv_out = (m.num_attention_heads + 2 * m.num_key_value_heads) * m.head_dim;
  const int64_t q_out = m.num_attention_heads * m.head_dim;
  double copies_bytes = 0;
  const double lb = r.linear_element, hb = r.head_element;
  for (double bytes : {lb * double(qkv_out * d), lb * double(d * q_out), 2 * lb * double(I * d), lb * double(d * I),
                       hb * double(V * d)})
    copies_bytes = std::max(copies_bytes, r.weight_copies(bytes) * bytes);
  const double activations = 4.0 * double(grids.tokens.back()) * double(2 * d + qkv_out + q_out + 3 * I) * 3;
  // Up to two whole-model decoders live through the calibration: the
  // timings' own, and a caller's (calibrate --host-drift's drift probes).
  const double peak = 2 * WholeModelTimings::decoder_bytes(o) + WholeModelTimings::decode_steps_kv_bytes(o) +
                      copies_bytes + kv_bytes + activations;
  const double physical = physical_memory_bytes();
  const double model_bytes = double(m.parameter_count()) * sizeof(float);
  if (physical > 0 && model_bytes > 0.8 * physical)
    throw InputError(fmt::format(
        "{} needs {:.1f} GB of fp32 weights on the CPU, more than 80% of this machine's {:.1f} GB: the "
        "decoder cannot serve it here, so there is nothing to calibrate for; use a smaller model "
        "(tiny-15m, small-110m)",
        m.name, model_bytes / 1e9, physical / 1e9));
  if (physical > 0 && peak > 0.8 * physical)
    throw InputError(fmt::format(
        "calibrating {} needs about {:.1f} GB (weight copies, {:.1f} GB of KV blocks; two decoders of {} "
        "layer(s)), more than 80% of this machine's {:.1f} GB; lower --max-context or "
        "--max-num-batched-tokens, or use a smaller model",
        m.name, peak / 1e9, kv_bytes / 1e9, m.num_hidden_layers, physical / 1e9));
}

}  // namespace

DeviceProfile calibrate(const CalibrationOptions& options, std::function<void(const std::string&)> progress,
                        const CalibrationHooks& hooks) {
  const DeviceChoice device = parse_device(options.device);
  const DecoderPrecision precision = options.precision.on(device);  // InputError for what the device lacks
  if (device.cuda) {
    calibration_grids(options);  // the options first, then the device
    require_device(device);      // InputError: no GPU, no CUDA backend, ...
    // require_device found the backend's entry points (kernels/cuda_plugin/).
    return cuda_entry_points(nullptr)->calibrate(options, std::move(progress));
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
  // 0.03 s, not Google Benchmark's 0.05 s default: a quarter less time, and
  // on the same served iterations profiles of either cost within the spread
  // between two calibrations of one (docs/calibration.md#timing-rules).
  settings.min_time_s = options.min_time_s > 0 ? options.min_time_s : quick ? 0.01 : kFullMinTimeS;
  settings.warmup_s = quick ? 0.005 : 0.02;

  // Sizes of the ceilings and the cache rotation.
  const size_t llc = ceilings::last_level_cache_bytes();
  size_t stream_bytes = options.stream_array_bytes > 0 ? size_t(options.stream_array_bytes)
                                                       : ceilings::stream_array_bytes();
  const bool stream_capped = options.stream_array_bytes == 0 && quick && stream_bytes > kQuickStreamArrayCap;
  if (stream_capped) stream_bytes = kQuickStreamArrayCap;
  const int64_t gemm_n = options.gemm_ceiling_size > 0 ? options.gemm_ceiling_size : quick ? 1024 : 2048;
  const size_t local_llc = ceilings::local_last_level_cache_bytes();
  const Rotation rotation(model, kRotationCacheMultiple * double(local_llc ? local_llc : kFallbackCacheBytes),
                          precision);
  const int32_t bs = options.block_size;
  const int64_t kv_blocks = kv_blocks_needed(grids, rotation, bs);
  const double kv_bytes = double(kv_blocks) * bs * rotation.kv_per_token_layer;
  check_memory(options, grids, rotation, kv_bytes);

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
  p.device_description = fmt::format("{} ({} threads)", calibration::cpu_model_name(), threads);
  p.threads = threads;
  p.dtype = precision.dtype;
  p.quantization = precision.quantization;
  p.block_size = bs;
  p.model = model;

  PhaseClock phases;
  WholeModelTimings whole(options, grids, threads);
  size_t moments = 0;
  auto moment = [&] {
    phases.close();
    const auto moment_started = Clock::now();
    if (hooks.at_moment) hooks.at_moment();
    whole.at_moment();
    phases.add("whole_model_moments", seconds_since(moment_started));
    ++moments;
  };
  int family = 0;
  FamilyContext ctx{options,
                    grids,
                    session,
                    p,
                    [&](const std::string& name, const std::string& what) {
                      moment();
                      phases.open(name);
                      say(fmt::format("[{}/{}] {}: {}", ++family, kFamilies, name, what));
                    },
                    [&](double bytes) { return rotation.weight_copies(bytes); },
                    [&](int64_t q, int64_t c) { return rotation.prefill_copies(q, c); },
                    [&](int64_t b, int64_t context) { return rotation.decode_copies(b, context); },
                    rotation.kv_per_token_layer,
                    cpu_precision(precision)};

  measure_ceilings(ctx, stream_bytes, gemm_n);
  say(fmt::format("setting up: {:.0f} MiB of KV blocks; each weight matrix rotates through {:.0f} MiB of copies",
                  kv_bytes / double(kMiB), rotation.weight_rotation_bytes / double(kMiB)));
  phases.open("setup");
  int head_copies = 0;
  {
    LayerKernels kernels(model, kv_blocks, bs, options.weights_seed, ctx.storage);
    measure_projections(ctx, kernels);
    measure_elementwise(ctx, kernels);
    measure_prefill_attention(ctx, kernels);
    measure_decode_attention(ctx, kernels);
    head_copies = measure_lm_head(ctx, kernels);
    measure_sampling(ctx);
  }

  // ---- a whole minimal iteration: one decode token at the smallest
  // context, through the real executor, on the whole model's decoder.
  ctx.announce("iteration_overhead",
               fmt::format("a 1-token decode at context {} through DecoderExecutor ({} layers), minus its kernels",
                           whole.context(), model.num_hidden_layers));
  const double benchmark_decode_s = whole.benchmark_decode(session);
  session.finish();
  ctx.announce("whole_model",
               fmt::format("the 1-token decode timed at every moment of the calibration{}: their medians set the "
                           "iteration overhead{}",
                           quick ? "" : ", whole-model prefills and decode steps at every other",
                           quick ? "" : " and the whole-model factors"));
  moment();  // the last moment
  phases.open("whole_model_fits");
  whole.finish(p, hooks.keeps_moment, say, benchmark_decode_s);
  whole.release();
  phases.close();
  if (json_file.is_open()) {
    json_file.close();
    if (!json_file) throw InputError(fmt::format("{}: write failed", options.raw_benchmarks_path));
  }

  // ---- provenance.
  if (!options.raw_benchmarks_path.empty())
    p.raw_benchmarks_file = std::filesystem::path(options.raw_benchmarks_path).filename().string();
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
  const int64_t d = model.hidden_size, I = model.intermediate_size;
  const int64_t qkv_out = (model.num_attention_heads + 2 * model.num_key_value_heads) * model.head_dim;
  const int64_t q_out = model.num_attention_heads * model.head_dim;
  m["settings"] = {
      {"mode", quick ? "quick" : "full"},
      {"threads", threads},
      {"block_size", bs},
      {"max_batched_tokens", options.max_batched_tokens},
      {"max_context", max_context_of(options)},
      {"max_num_seqs", options.max_num_seqs},
      {"weights", fmt::format("random (seed {})", options.weights_seed)},
      {"sampling", {{"temperature", options.sampling.temperature}, {"top_p", options.sampling.top_p}}},
      {"repetitions", settings.repetitions},
      {"min_time_s", settings.min_time_s},
      {"min_warmup_time_s", settings.warmup_s},
      {"moments", moments},
      {"statistic", "median over repetitions of the wall time per call (each repetition: the mean of its calls)"},
      {"grids", calibration::grids_json(grids)},
      {"stream_array_bytes", stream_bytes},
      {"stream_array_rule", options.stream_array_bytes > 0 ? "set by the caller"
                            : stream_capped ? "4x the last-level cache, capped at 256 MiB in quick mode"
                            : llc ? "4x the last-level cache" : "256 MiB (last-level cache unknown)"},
      {"gemm_ceiling", fmt::format("cpu::matmul {}^3 fp32", gemm_n)},
      {"rotation_bytes", rotation.rotation_bytes},
      {"weight_rotation_bytes", rotation.weight_rotation_bytes},
      {"precision", cpu::to_string(ctx.storage)},
      {"weight_copies", {{"gemm_qkv", rotation.weight_copies(rotation.linear_element * double(qkv_out * d))},
                         {"gemm_o", rotation.weight_copies(rotation.linear_element * double(d * q_out))},
                         {"gemm_gate_up", rotation.weight_copies(2 * rotation.linear_element * double(I * d))},
                         {"gemm_down", rotation.weight_copies(rotation.linear_element * double(d * I))},
                         {"lm_head", head_copies}}},
      {"iteration_decoder_layers", model.num_hidden_layers},
      {"kv_blocks_allocated", kv_blocks},
      {"decode_kv_budget_bytes", kCpuDecodeKvBudgetBytes},
      {"benchmarks", session.benchmarks_run()},
      {"wall_time_s", 0.0}};
  m["conventions"] = {
      {"units", "seconds; gemm_*, elementwise and the attention tables per layer, lm_head, sampling and "
                "iteration_overhead_s per iteration"},
      {"prefill_attention", "x = query tokens q of one sequence's chunk, y = cached tokens c + 1"},
      {"decode_attention", "x = sequences b (one query token each), y = context length L = cached tokens c + 1"},
      {"elementwise", "2 RMSNorms, rotary + KV write, SwiGLU; residual adds are inside gemm_o and gemm_down"},
      {"sampling", "copying the [S, V] logits to the host vector and choosing a token per row"}};
  calibration::store_attention_fits(p);
  if (hooks.finish) {
    phases.open("host_drift_finish");  // --host-drift: the placement ratios, in full mode
    hooks.finish(p);
    phases.close();
  }
  const double wall = seconds_since(started);
  m["settings"]["wall_time_s"] = wall;
  m["settings"]["phase_seconds"] = phases.json();
  // Timings from a busy machine are not the device's: say so.
  const double others = ceilings::CpuUse::now().others_share_since(cpu_at_start);
  m["machine_load"] = {{"others_cpu_share", others},
                       {"meaning", "share of all CPUs' time that other processes (and the hypervisor) took "
                                   "during the calibration; above 0.05 the timings are suspect"}};
  say(fmt::format("done: {} benchmarks in {:.1f} s (longest: {})", session.benchmarks_run(), wall,
                  phases.longest(4)));
  if (others > 0.05)
    say(fmt::format("warning: other processes took {:.0f}% of the CPUs during the calibration; its timings are "
                    "suspect -- rerun on an idle machine",
                    100 * others));
  return p;
}

}  // namespace servesim
