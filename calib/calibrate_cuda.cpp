// The CUDA calibration: the CUDA decoder's own kernels on the model's shapes,
// timed with CUDA events (calib/cuda_timer.h), the GPU's ceilings, the
// whole-model measurements, and the profile they make. What each table
// holds is stated in calib/calibrate.h and calib/calibrate_cuda.h.
#include "calib/calibrate_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>

#include <fmt/format.h>

#include "calib/calibration_common.h"
#include "calib/cuda_ceilings.h"
#include "calib/cuda_layer_kernels.h"
#include "calib/cuda_timer.h"
#include "sim/cost/decode_padding.h"
#include "sim/cost/profile_model.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/pinned_buffer.h"
#include "kernels/cuda/cuda_decoder.h"
#include "kernels/decoder/decoder_executor.h"
#include "kernels/decoder/decoder_model.h"
#include "kernels/decoder/device_choice.h"
#include "kernels/decoder/sampler.h"
#include "sim/errors.h"

namespace servesim {
namespace {

using Clock = std::chrono::steady_clock;
using cuda::bf16;
using cuda_calib::Batch;
using cuda_calib::CudaLayerKernels;
using cuda_calib::Timer;

constexpr double kMiB = double(1 << 20);
// Left free beyond the calibration's own buffers (the CUDA context, cuBLAS,
// graphs, fragmentation).
constexpr double kMemoryHeadroomBytes = double(1 << 30);
// The copy ceiling's buffer: 8x the L2 cache, at least this.
constexpr size_t kMinCopyBytes = size_t(64) << 20;
// Timed decode iterations of the whole model (after 3 warm-ups, the first
// of which captures its CUDA graph).
constexpr int kDecodeRepetitions = 30, kQuickDecodeRepetitions = 10;

using calibration::ceil_div;

// Throws InputError unless `bytes` (and the headroom) fit in the free memory
// of the current device now.
void require_free_memory(const std::string& what, double bytes, const DeviceChoice& device, const ModelSpec& model) {
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  if (bytes + kMemoryHeadroomBytes <= double(free)) return;
  throw InputError(fmt::format(
      "calibrating {} on {}: {} would need about {:.1f} GB of GPU memory (+ {:.1f} GB headroom), but only {:.1f} GB "
      "of the GPU's {:.1f} GB are free; lower --max-context or --max-num-batched-tokens, use a smaller model, "
      "or free the GPU",
      model.name, device.name(), what, bytes / 1e9, kMemoryHeadroomBytes / 1e9, double(free) / 1e9,
      double(total) / 1e9));
}



std::string cuda_version_text(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

}  // namespace

DeviceProfile calibrate_cuda(const CalibrationOptions& options, std::function<void(const std::string&)> progress) {
  const auto started = Clock::now();
  const CalibrationGrids grids = calibration_grids(options);  // checks the options
  const DeviceChoice device = parse_device(options.device);
  if (!device.cuda) throw std::logic_error("calibrate_cuda: not a CUDA device");
  require_device(device);
  CUDA_CHECK(cudaSetDevice(device.index));
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };

  const ModelSpec& model = options.model;
  const cuda_calib::Shape m(model);
  const bool quick = options.quick;
  const int32_t bs = options.block_size;
  const int64_t max_context = options.max_context > 0 ? options.max_context : model.max_position_embeddings;

  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device.index));
  int l2_attr = 0, sm_count = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&l2_attr, cudaDevAttrL2CacheSize, device.index));
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device.index));
  const size_t l2 = l2_attr > 0 ? size_t(l2_attr) : size_t(50) << 20;  // H100/H200's when unknown

  cuda_calib::TimerSettings timing;
  timing.repetitions = options.repetitions > 0 ? options.repetitions : quick ? 3 : 5;
  timing.min_repetition_s = options.min_time_s > 0 ? options.min_time_s : quick ? 0.001 : 0.005;
  cuda_calib::CeilingSizes ceiling_sizes;
  ceiling_sizes.array_bytes = options.stream_array_bytes > 0 ? size_t(options.stream_array_bytes)
                                                             : std::max(8 * l2, kMinCopyBytes);
  ceiling_sizes.gemm_n = options.gemm_ceiling_size > 0 ? options.gemm_ceiling_size : quick ? 4096 : 8192;

  // The kernels: KV blocks for the largest cell (one copy: the L2 is flushed
  // instead of rotating copies), activations for the largest batch.
  int64_t kv_blocks = Batch::blocks(1, grids.tokens.back(), 0, bs);  // elementwise writes M tokens
  for (int64_t q : grids.prefill_query)
    for (int64_t c : grids.prefill_cached) kv_blocks = std::max(kv_blocks, Batch::blocks(1, q, c, bs));
  for (int64_t b : grids.decode_batch)
    for (int64_t ctx : grids.decode_context) kv_blocks = std::max(kv_blocks, Batch::blocks(b, 1, ctx - 1, bs));
  kv_blocks = std::max(kv_blocks, Batch::blocks(grids.sampling_rows.back(), 1, 0, bs));
  const int64_t max_tokens = std::max({grids.tokens.back(), grids.prefill_query.back(), grids.decode_batch.back(),
                                       grids.sampling_rows.back()});
  const int64_t max_rows = grids.sampling_rows.back();
  const int64_t max_decode = std::max({grids.decode_batch.back(), grids.sampling_rows.back(), int64_t(1)});
  const double head_bytes = m.head_bytes(model.tie_word_embeddings);
  const double kv_bytes = double(kv_blocks * bs) * m.kv_bytes_per_token();
  const double scratch_bytes = m.scratch_bytes(double(max_tokens), double(max_rows), double(max_decode));
  // 64 MiB: two cuBLAS workspaces (cuda::Gemm's 32 MiB each): the kernels's own Gemm and its Backend's.
  const double layer_bytes = m.layer_weight_bytes() + head_bytes + kv_bytes + scratch_bytes + 64 * kMiB;
  // The whole model's decoder: every layer, a KV cache for the longest
  // whole-model plan, activations for it.
  const int64_t context = grids.decode_context.front();
  const std::vector<int64_t> in_situ = calibration::gemm_factor_lengths(options, max_context);
  const int64_t whole_tokens = std::max<int64_t>(context, in_situ.empty() ? 1 : in_situ.back());
  // Whole decode steps around a context of 256 (spread over 128 .. 384, as a
  // served batch's are) for the decode-step factor, at every batch the
  // decoder pads a decode step to (its CUDA-graph buckets) up to the one
  // of max_num_seqs, at most 256: a step's time follows its bucket and can
  // jump from one bucket to the next, which g interpolated between a few
  // batch sizes would miss (docs/cost-models.md, "Padded decode steps").
  const DecodePadding padding = DecodePadding::cuda_graphs(CudaDecoderOptions{}.max_graph_batch);
  const int64_t step_cached = std::min<int64_t>(256, max_context) - 1;
  std::vector<int64_t> step_batches;
  const int64_t largest_step = padding.bucket(std::min<int64_t>(options.max_num_seqs, 256));
  for (int64_t b = 1; b <= largest_step; b = padding.bucket(b + 1)) step_batches.push_back(b);
  const int64_t step_sequences = step_batches.empty() ? 0 : step_batches.back();
  const int64_t step_count = calibration::kDecodeStepWarmUp + (quick ? kQuickDecodeRepetitions : kDecodeRepetitions);
  const int64_t decoder_blocks =
      std::max(ceil_div(whole_tokens, bs), calibration::DecodeSteps::blocks(step_sequences, step_cached, step_count, bs));
  const double decoder_bytes = double(m.L) * m.layer_weight_bytes() + head_bytes +
                               double(m.L * decoder_blocks * bs) * m.kv_bytes_per_token() +
                               m.scratch_bytes(double(std::max(whole_tokens, step_sequences)),
                                               double(std::max<int64_t>(1, step_sequences)),
                                               double(std::max<int64_t>(1, step_sequences))) +
                               32 * kMiB;
  const double flush_bytes = 2.0 * double(l2);
  const double ceilings_bytes = cuda_calib::ceilings_bytes(ceiling_sizes);
  // Refused before anything runs when a phase cannot fit (each phase frees
  // its buffers before the next one; the free memory is checked again then).
  {
    size_t free = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free, &total));
    const double weights = double(model.parameter_count()) * 2.0;
    if (weights + kMemoryHeadroomBytes > double(total))
      throw InputError(fmt::format("{} needs {:.1f} GB of bf16 weights, more than {} ({}) holds ({:.1f} GB): the "
                                   "decoder cannot serve it there, so there is nothing to calibrate for",
                                   model.name, weights / 1e9, device.name(), prop.name, double(total) / 1e9));
    require_free_memory("its largest phase", std::max({ceilings_bytes, layer_bytes, decoder_bytes}) + flush_bytes,
                        device, model);
  }

  // The raw measurements' file, opened first so that an unwritable path
  // fails before the calibration runs.
  std::ofstream raw_file;
  if (!options.raw_benchmarks_path.empty()) {
    raw_file.open(options.raw_benchmarks_path);
    if (!raw_file) throw InputError(fmt::format("{}: cannot open for writing", options.raw_benchmarks_path));
  }

  cuda::CudaStream stream_owner;
  const cudaStream_t stream = stream_owner.get();
  Timer timer(stream, l2, timing);

  DeviceProfile p;
  p.device_kind = "cuda";
  p.device_description = fmt::format("{} {}", device.name(), prop.name);
  p.threads = 0;
  p.decode_padding = padding;
  // Backend::attention: one launch for the one-token sequences, one for the
  // rest (the tables below time one chunk, one batch per launch).
  p.attention_launches = DeviceProfile::AttentionLaunches::TwoLaunches;
  p.dtype = "bf16";
  p.block_size = bs;
  p.model = model;

  const int families = 11;
  int family = 0;
  auto announce = [&](const std::string& name, const std::string& what) {
    say(fmt::format("[{}/{}] {}: {}", ++family, families, name, what));
  };
  using calibration::axis_text;
  using calibration::make_curve;

  // ---- ceilings: device-to-device copy, saxpy (triad), a large bf16 GEMM.
  announce("ceilings", fmt::format("device-to-device copy and cuBLAS saxpy on {:.0f} MiB arrays, cuBLAS bf16 GEMM {}^3",
                                   double(ceiling_sizes.array_bytes) / kMiB, ceiling_sizes.gemm_n));
  require_free_memory("the ceilings' buffers", ceilings_bytes, device, model);
  const cuda_calib::Ceilings ceilings = cuda_calib::measure_ceilings(timer, stream, ceiling_sizes, options.weights_seed);
  p.stream_copy_bytes_per_s = ceilings.copy_bytes_per_s;
  p.stream_triad_bytes_per_s = ceilings.triad_bytes_per_s;
  p.gemm_flops_per_s = ceilings.gemm_flops_per_s;

  say(fmt::format("setting up: one layer of {} in bf16 ({:.0f} MiB of KV blocks, {:.0f} MiB of activations); the "
                  "{:.1f} MiB L2 is flushed before every cold launch",
                  model.name, kv_bytes / kMiB, scratch_bytes / kMiB, double(l2) / kMiB));
  require_free_memory("one layer's weights, KV blocks and activations", layer_bytes, device, model);
  auto kernels = std::make_unique<CudaLayerKernels>(model, kv_blocks, bs, options.weights_seed, stream, int32_t(max_tokens),
                                   int32_t(max_rows), int32_t(max_decode));
  CudaLayerKernels& k = *kernels;
  const cuda::LayerWeights& lw = k.w.layers[0];

  // ---- the four projections on M tokens (one layer): the calls cuda::Backend makes.
  struct Projection {
    const char* name;
    const bf16* weight;
    int64_t K, N;
    const bf16* in;
    bf16* out;
  };
  const Projection projections[] = {{"gemm_qkv", lw.w_qkv, m.d, m.qkv_out, k.s.h.data(), k.s.qkv.data()},
                                    {"gemm_o", lw.w_o, m.q_out, m.d, k.s.attn.data(), k.s.branch.data()},
                                    {"gemm_gate_up", lw.w_gate_up, m.d, 2 * m.I, k.s.h.data(), k.s.gate_up.data()},
                                    {"gemm_down", lw.w_down, m.I, m.d, k.s.act.data(), k.s.branch.data()}};
  Curve* curves[] = {&p.gemm_qkv, &p.gemm_o, &p.gemm_gate_up, &p.gemm_down};
  for (size_t pi = 0; pi < 4; ++pi) {
    const Projection& proj = projections[pi];
    announce(proj.name, fmt::format("{} token counts M = {} ([M, {}] x [{}, {}], bf16, cold)", grids.tokens.size(),
                                    axis_text(grids.tokens), proj.K, proj.K, proj.N));
    std::vector<double> seconds;
    for (int64_t M : grids.tokens)
      seconds.push_back(timer.cold(
          fmt::format("{}/M:{}", proj.name, M),
          [&k, &proj, M] { k.gemm.bf16_out(proj.in, proj.weight, M, proj.N, proj.K, proj.out); },
          2.0 * double(M * proj.K * proj.N), 2.0 * double(proj.K * proj.N + M * (proj.K + proj.N))));
    *curves[pi] = make_curve(grids.tokens, std::move(seconds));
  }

  // ---- the two add+RMSNorms, rotary (with the qkv bias) + KV write, SwiGLU (one layer).
  announce("elementwise", fmt::format("{} token counts M = {} (2 add+RMSNorms, rotary + KV write, SwiGLU; warm, "
                                      "graph-replayed)",
                                      grids.elementwise_tokens.size(), axis_text(grids.elementwise_tokens)));
  {
    std::vector<double> seconds;
    for (int64_t M : grids.elementwise_tokens) {
      const Batch batch(1, M, 0, bs, true);
      k.stage(batch.layout());
      const BatchLayout& layout = batch.layout();
      seconds.push_back(timer.warm(
          fmt::format("elementwise/M:{}", M),
          [&k, &layout, M, I = m.I] {
            k.s.branch_pending = true;  // the previous layer's down projection awaits its residual add
            k.be.rmsnorm_attention_input(k.w, 0, k.s);
            k.s.qkv_bias = k.w.layers[0].b_qkv;
            k.be.rotary_and_cache_write(0, layout, k.kv, k.s);
            k.be.rmsnorm_mlp_input(k.w, 0, k.s);
            cuda::launch_swiglu(k.s.gate_up.data(), int32_t(M), I, k.s.act.data(), k.stream());
          },
          0, double(M) * (24.0 * double(m.d) + 4.0 * double(m.qkv_out) + 4.0 * double(m.Hkv * m.dh) + 6.0 * double(m.I))));
    }
    p.elementwise = make_curve(grids.elementwise_tokens, std::move(seconds));
  }

  // ---- attention of one prefill chunk (one layer): q new tokens after c cached.
  const double per_token_kv = m.kv_bytes_per_token();
  announce("prefill_attention",
           fmt::format("{} x {} cells, query tokens q = {}, cached tokens c = {} (cold)", grids.prefill_query.size(),
                       grids.prefill_cached.size(), axis_text(grids.prefill_query), axis_text(grids.prefill_cached)));
  {
    Grid2D& g = p.prefill_attention;
    for (int64_t q : grids.prefill_query) g.x.push_back(double(q));
    for (int64_t c : grids.prefill_cached) g.y.push_back(prefill_grid_y(double(c)));
    for (int64_t q : grids.prefill_query) {
      std::vector<double> row;
      for (int64_t c : grids.prefill_cached) {
        const Batch batch(1, q, c, bs, false);
        k.stage(batch.layout());
        const BatchLayout& layout = batch.layout();
        const double pairs = double(q) * double(c) + double(q) * double(q + 1) / 2;
        row.push_back(timer.cold(fmt::format("prefill_attention/q:{}/c:{}", q, c),
                                 [&k, &layout] { k.be.attention(0, layout, k.kv, k.s); },
                                 4.0 * double(m.H * m.dh) * pairs, double(c + q) * per_token_kv));
      }
      g.seconds.push_back(std::move(row));
    }
  }

  // ---- attention of a decode batch (one layer): b sequences, context L each.
  announce("decode_attention",
           fmt::format("{} x {} cells, batch b = {}, context L = {} (cold)", grids.decode_batch.size(),
                       grids.decode_context.size(), axis_text(grids.decode_batch), axis_text(grids.decode_context)));
  {
    Grid2D& g = p.decode_attention;
    for (int64_t b : grids.decode_batch) g.x.push_back(double(b));
    for (int64_t ctx : grids.decode_context) g.y.push_back(decode_grid_y(double(ctx - 1)));
    for (int64_t b : grids.decode_batch) {
      std::vector<double> row;
      for (int64_t ctx : grids.decode_context) {
        const Batch batch(b, 1, ctx - 1, bs, false);
        k.stage(batch.layout());
        const BatchLayout& layout = batch.layout();
        row.push_back(timer.cold(fmt::format("decode_attention/b:{}/L:{}", b, ctx),
                                 [&k, &layout] { k.be.attention(0, layout, k.kv, k.s); },
                                 4.0 * double(m.H * m.dh) * double(b * ctx), double(b * ctx) * per_token_kv));
      }
      g.seconds.push_back(std::move(row));
    }
  }

  // ---- the final add+RMSNorm on S rows and the fp32-out LM head.
  announce("lm_head", fmt::format("{} row counts S = {} (final add+RMSNorm + [S, {}] x [{}, {}] to fp32; cold)",
                                  grids.lm_head_rows.size(), axis_text(grids.lm_head_rows), m.d, m.d, m.V));
  {
    std::vector<double> seconds;
    for (int64_t S : grids.lm_head_rows) {
      const Batch batch(S, 1, 0, bs, true);
      k.stage(batch.layout());
      const BatchLayout& layout = batch.layout();
      seconds.push_back(timer.cold(
          fmt::format("lm_head/S:{}", S),
          [&k, &layout] {
            k.s.branch_pending = true;  // the last layer's down projection awaits its residual add
            k.be.logits(k.w, layout, k.s);
          },
          2.0 * double(S * m.d * m.V), 2.0 * double(m.V * m.d + S * m.d) + 4.0 * double(S * m.V)));
    }
    p.lm_head = make_curve(grids.lm_head_rows, std::move(seconds));
  }

  // ---- sampling: what the decoder does after the LM head.
  const SamplingParams sampling = options.sampling;
  const bool on_device = sampling.top_p >= 1.0;  // CudaDecoder::forward_select's rule
  announce("sampling",
           fmt::format("{} row counts S = {} ({} over {} logits)", grids.sampling_rows.size(),
                       axis_text(grids.sampling_rows),
                       on_device ? "token selection on the device, the ids copied back (warm, graph-replayed)"
                                 : "the logits copied to the host and sampled there (top-p; wall clock)",
                       m.V));
  {
    const size_t rows = size_t(max_rows);
    cuda::PinnedBuffer<double> host_uniforms;
    cuda::PinnedBuffer<int32_t> host_tokens;
    cuda::DeviceBuffer<double> device_uniforms(rows);
    cuda::DeviceBuffer<int32_t> device_tokens(rows);
    host_uniforms.reserve(rows);
    host_tokens.reserve(rows);
    for (size_t r = 0; r < rows; ++r) host_uniforms[r] = (double(r) + 0.5) / double(rows);
    cuda::PinnedBuffer<float> host_logits;
    std::vector<float> logits;
    std::vector<double> seconds;
    for (int64_t S : grids.sampling_rows) {
      const std::string name = fmt::format("sampling/S:{}", S);
      if (on_device) {
        seconds.push_back(timer.warm(name, [&, S] {
          CUDA_CHECK(cudaMemcpyAsync(device_uniforms.data(), host_uniforms.data(), size_t(S) * sizeof(double),
                                     cudaMemcpyHostToDevice, stream));
          cuda::launch_select_tokens(k.s.logits.data(), int32_t(S), m.V, float(sampling.temperature),
                                     device_uniforms.data(), device_tokens.data(), stream);
          CUDA_CHECK(cudaMemcpyAsync(host_tokens.data(), device_tokens.data(), size_t(S) * sizeof(int32_t),
                                     cudaMemcpyDeviceToHost, stream));
        }, 0, 4.0 * double(S * m.V)));
      } else {
        const size_t n = size_t(S * m.V);
        host_logits.reserve(n);
        seconds.push_back(timer.host(name, [&, S, n] {
          // CudaDecoder::forward, then DecoderExecutor's sampling.
          CUDA_CHECK(cudaMemcpyAsync(host_logits.data(), k.s.logits.data(), n * sizeof(float), cudaMemcpyDeviceToHost,
                                     stream));
          CUDA_CHECK(cudaStreamSynchronize(stream));
          logits.assign(host_logits.data(), host_logits.data() + n);
          for (int64_t r = 0; r < S; ++r) {
            const int32_t token = sample_token(std::span<const float>(logits).subspan(size_t(r * m.V), size_t(m.V)),
                                               sampling, r, 1);
            host_tokens[0] = token;
          }
        }, 8.0 * double(n)));
      }
    }
    p.sampling = make_curve(grids.sampling_rows, std::move(seconds));
  }
  kernels.reset();

  // ---- the whole model: a 1-token decode through the real CUDA decoder
  // (graph replay) minus what the tables predict, and the in-situ prefills.
  const int decode_repetitions = quick ? kQuickDecodeRepetitions : kDecodeRepetitions;
  std::string in_situ_text = in_situ.empty() ? "no" : "";
  for (int64_t t : in_situ) in_situ_text += (in_situ_text.empty() ? "" : ", ") + std::to_string(t);
  announce("iteration_overhead",
           fmt::format("a 1-token decode at context {} through DecoderExecutor on the CUDA decoder ({} layers, "
                       "median of {}), minus its kernels; whole-model prefills of {} tokens for the in-situ factor; "
                       "decode steps of {} sequences around context {} for the decode-step factor",
                       context, m.L, decode_repetitions, in_situ_text, calibration::axis_text(step_batches),
                       step_cached + 1));
  require_free_memory(fmt::format("{}'s bf16 decoder", model.name), decoder_bytes, device, model);
  double measured_decode_s = 0, predicted_decode_s = 0;
  {
    CudaDecoderOptions decoder_options;
    decoder_options.device = device.index;
    DecoderExecutorOptions executor_options;
    executor_options.sampling = sampling;
    DecoderExecutor executor(
        cuda::make_decoder_random(model, options.weights_seed, decoder_blocks, bs, decoder_options, nullptr),
        executor_options);
    const calibration::OneSequencePlan decode(1, 1, context - 1, false, bs);
    measured_decode_s = calibration::median_execute_s(executor, decode.plan(), 3, decode_repetitions);
    predicted_decode_s = calibration::tables_seconds(p, decode.plan());
    // The fixed cost: host-side staging, the graph launch, token selection
    // and the sync, and whatever the kernels cost inside a pass beyond their
    // timings alone.
    p.iteration_overhead_s = std::max(0.0, measured_decode_s - predicted_decode_s);
    executor.on_request_finished(1);
    calibration::measure_gemm_factor(p, executor, in_situ, bs, timing.repetitions, say);
    calibration::measure_decode_step_factor(p, executor, step_batches, step_cached, bs, decode_repetitions, say);
  }

  // ---- provenance.
  const double wall = std::chrono::duration<double>(Clock::now() - started).count();
  int runtime_version = 0, driver_version = 0, cublas_version = 0;
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime_version));
  CUDA_CHECK(cudaDriverGetVersion(&driver_version));
  cublasHandle_t handle = nullptr;
  if (cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS) {
    cublasGetVersion(handle, &cublas_version);
    cublasDestroy(handle);
  }
  nlohmann::json& meta = p.metadata;
  meta["date"] = calibration::utc_now_iso();
  meta["commit"] = calibration::git_commit();
  meta["compiler"] = calibration::compiler_version();
  meta["libraries"] = {{"cuda_runtime", cuda_version_text(runtime_version)},
                       {"cuda_driver", cuda_version_text(driver_version)},
                       {"cublas", cublas_version},
                       {"nlohmann_json", fmt::format("{}.{}.{}", NLOHMANN_JSON_VERSION_MAJOR,
                                                     NLOHMANN_JSON_VERSION_MINOR, NLOHMANN_JSON_VERSION_PATCH)}};
  meta["host"] = calibration::host_identity();
  meta["device"] = p.device_description;
  meta["gpu"] = {{"name", prop.name},
                 {"ordinal", device.index},
                 {"compute_capability", fmt::format("{}.{}", prop.major, prop.minor)},
                 {"multiprocessors", sm_count},
                 {"memory_bytes", double(prop.totalGlobalMem)},
                 {"l2_cache_bytes", double(l2)}};
  meta["settings"] = {
      {"mode", quick ? "quick" : "full"},
      {"block_size", bs},
      {"max_batched_tokens", options.max_batched_tokens},
      {"max_context", max_context},
      {"max_num_seqs", options.max_num_seqs},
      {"weights", fmt::format("random (seed {}), made on the device as the decoder makes them", options.weights_seed)},
      {"sampling", {{"temperature", sampling.temperature}, {"top_p", sampling.top_p}}},
      {"repetitions", timing.repetitions},
      {"min_time_s", timing.min_repetition_s},
      {"statistic", "median over repetitions of the seconds per launch (each repetition: the mean of its launches)"},
      {"timing",
       {{"cold", "gemm_*, prefill_attention, decode_attention, lm_head: the L2 flushed (cudaMemsetAsync over "
                 "l2_flush_bytes) before every launch, CUDA events around that single launch"},
        {"warm", "elementwise, sampling: CUDA events around a CUDA graph of back-to-back launches"},
        {"host", "sampling with top_p < 1: the wall clock around the logits' copy and host sampling"}}},
      {"grids", calibration::grids_json(grids)},
      {"copy_array_bytes", double(ceiling_sizes.array_bytes)},
      {"stream_copy", "device-to-device cudaMemcpyAsync; bytes read + written"},
      {"stream_triad", "cuBLAS saxpy y = a x + y on two fp32 arrays (STREAM triad's traffic: 12 bytes per element)"},
      {"gemm_ceiling", fmt::format("cuBLAS bf16 {}^3", ceiling_sizes.gemm_n)},
      {"l2_flush_bytes", double(timer.flush_bytes())},
      {"kv_blocks_allocated", kv_blocks},
      {"decode_kv_budget_bytes", 8.0 * double(size_t(1) << 30)},
      {"benchmarks", int(timer.measurements().size())},
      {"wall_time_s", wall}};
  meta["conventions"] = {
      {"units", "seconds; gemm_*, elementwise and the attention tables per layer, lm_head, sampling and "
                "iteration_overhead_s per iteration"},
      {"prefill_attention", "x = query tokens q of one sequence's chunk, y = cached tokens c + 1"},
      {"decode_attention", "x = sequences b (one query token each), y = context length L = cached tokens c + 1"},
      {"elementwise", "2 add+RMSNorms (the o and down projections' residual adds), rotary with the qkv bias + KV "
                      "write, SwiGLU"},
      {"lm_head", "the final add+RMSNorm of S rows and the LM-head GEMM to fp32 logits"},
      {"sampling", on_device ? "the S uniforms to the device, token selection there, the S ids back"
                             : "the [S, V] logits to the host and a top-p draw per row"}};
  meta["iteration_overhead"] = {
      {"plan", fmt::format("1 decode token, {} cached", context - 1)},
      {"layers", m.L},
      {"measured_s", measured_decode_s},
      {"measured_by", fmt::format("DecoderExecutor on the CUDA decoder (CUDA graph replay), median of {} after 3 "
                                  "warm-ups", decode_repetitions)},
      {"predicted_kernels_s", predicted_decode_s},
      {"clamped_at_zero", measured_decode_s < predicted_decode_s}};
  meta["decode_in_situ"] = {
      {"plan", fmt::format("successive decode steps of {} sequences, one token each, the contexts spread evenly "
                           "over {} .. {} cached tokens and growing by one a step",
                           calibration::axis_text(step_batches), step_cached / 2, step_cached / 2 + step_cached)},
      {"measured_by", fmt::format("DecoderExecutor on the CUDA decoder (CUDA graph replay): the median over {} "
                                  "steps after 3 of measured / the tables' prediction with gemm_in_situ and the "
                                  "overhead", decode_repetitions)}};
  if (!options.raw_benchmarks_path.empty()) {
    p.raw_benchmarks_file = std::filesystem::path(options.raw_benchmarks_path).filename().string();
    const nlohmann::json context_json = {{"date", meta["date"]},
                                         {"device", p.device_description},
                                         {"gpu", meta["gpu"]},
                                         {"model", model.name},
                                         {"settings", meta["settings"]}};
    raw_file << timer.raw_json(context_json).dump(2) << "\n";
    raw_file.close();
    if (!raw_file) throw InputError(fmt::format("{}: write failed", options.raw_benchmarks_path));
  }
  say(fmt::format("done: {} benchmarks in {:.1f} s", timer.measurements().size(), wall));
  calibration::store_attention_fits(p);
  return p;
}

}  // namespace servesim
