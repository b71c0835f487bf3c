// The DecoderModel of the CUDA backend: the shared forward pass over
// cuda::Backend on one stream, decode iterations replayed from CUDA graphs.
//
// Graphs: an iteration whose every sequence decodes one token and samples
// it is padded to a bucket size (1, 2, 4, then multiples of 8, as vLLM
// does) and replayed from that bucket's graph, captured on first use. The
// graph covers the whole forward pass (rotary tables to logits); the batch's
// index arrays are copied in before each replay at the fixed addresses the
// graph reads. A reallocation of any buffer (a larger batch than seen
// before) drops every graph.
#include "kernels/cuda/cuda_decoder.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/pinned_buffer.h"
#include "kernels/decoder/decoder_model.h"
#include "kernels/decoder/decoder_precision.h"
#include "kernels/decoder/device_choice.h"
#include "kernels/decoder/forward.h"
#include "sim/cost/decode_padding.h"
#include "sim/errors.h"

namespace servesim {
namespace {

using cuda::bf16;

// The bucket a decode batch of n sequences is padded to (the rule a CUDA
// profile records, so that the simulator costs the same padded step).
int32_t graph_bucket(int32_t n) {
  static const DecodePadding rule = DecodePadding::cuda_graphs(std::numeric_limits<int32_t>::max());
  return int32_t(rule.bucket(n));
}

// Every sequence has one new token and samples it, in row order.
bool is_plain_decode(const BatchLayout& layout) {
  if (layout.num_samples() != int32_t(layout.sequences.size()) || layout.num_tokens() != layout.num_samples())
    return false;
  for (size_t i = 0; i < layout.sequences.size(); ++i)
    if (layout.sequences[i].num_query != 1 || layout.sample_rows[i] != layout.sequences[i].first_row) return false;
  return true;
}

// Selects the device before anything is allocated on it, and refuses a
// model whose bf16 weights and KV cache would not fit its free memory
// (with 1 GiB left for activations, cuBLAS and graphs).
int select_device(int index, const ModelSpec& spec, int64_t num_blocks, int32_t block_size) {
  require_device(DeviceChoice{true, index});
  CUDA_CHECK(cudaSetDevice(index));
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  const double weights = double(spec.parameter_count()) * 2.0;
  const double kv = double(num_blocks) * block_size * decoder_kv_bytes_per_token(spec, DeviceChoice{true, index});
  constexpr double kHeadroom = double(size_t(1) << 30);
  if (weights + kv + kHeadroom > double(free))
    throw InputError(fmt::format(
        "{} needs {:.1f} GB of bf16 weights plus {:.1f} GB of KV cache on cuda:{}, which has {:.1f} GB free "
        "(1 GiB is kept for activations); lower --kv-cache-memory or --num-gpu-blocks, or use a smaller model",
        spec.name, weights / 1e9, kv / 1e9, index, double(free) / 1e9));
  return index;
}

class CudaDecoder final : public DecoderModel {
 public:
  // Weights from the host, or made on the device (`host` empty) with the
  // scales of `scales_of`.
  CudaDecoder(const ModelSpec& spec, std::optional<HostWeights> host, uint64_t seed, const ModelSpec& scales_of,
              int64_t num_blocks, int32_t block_size, const CudaDecoderOptions& options)
      : device_(select_device(options.device, spec, num_blocks, block_size)),
        backend_(spec, stream_.get()),
        weights_(host ? backend_.upload(std::move(*host)) : backend_.random(seed, scales_of)),
        kv_(backend_.make_kv_cache(num_blocks, block_size)),
        options_(options) {
    cudaDeviceProp p{};
    CUDA_CHECK(cudaGetDeviceProperties(&p, device_));
    name_ = fmt::format("cuda:{} {}", device_, p.name);
  }
  ~CudaDecoder() override { drop_graphs(); }

  const ModelSpec& spec() const override { return backend_.spec(); }
  std::string device() const override { return name_; }
  double weight_bytes() const override { return weights_.bytes(); }
  double kv_cache_bytes() const override { return kv_.bytes(); }
  int64_t kv_num_blocks() const override { return kv_.num_blocks; }
  int32_t kv_block_size() const override { return kv_.block_size; }

  // What a serving engine does at start-up (vLLM's profiling run and graph
  // capture): activations and batch metadata for the largest batch, so no
  // buffer grows later (a growth drops every graph); every GEMM bucket's
  // algorithm chosen and its kernel loaded; a graph for every decode
  // bucket. Without these, a served workload pays a kernel's first launch
  // the first time each prompt-length bucket comes up and a graph capture
  // whenever the batch reaches a new bucket or a buffer grows (docs/cuda.md).
  // Activations are reserved for at most kPreparedTokens tokens, and at
  // most half the free memory; larger batches grow them when they come.
  void prepare_batches(int32_t max_tokens, int32_t max_sample_rows) override {
    constexpr int32_t kPreparedTokens = 8192;
    size_t free = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free, &total));
    int32_t tokens = std::min(max_tokens, kPreparedTokens);
    while (tokens > 1 && backend_.scratch_bytes(tokens, std::min(max_sample_rows, tokens)) > 0.5 * double(free))
      tokens /= 2;
    const int32_t rows = std::min(max_sample_rows, tokens);
    const int32_t decode = std::min(rows, options_.graphs ? options_.max_graph_batch : 0);
    for (int32_t n = 1; n <= rows; ++n) backend_.reserve(scratch_, tokens, rows, n);  // every split count's workspace
    scratch_.meta.reserve(tokens, rows, rows, int32_t(std::min<int64_t>(kv_.num_blocks + rows, INT32_MAX / 2)),
                          tokens / cuda::kPrefillQueryTile + rows);
    backend_.prepare_gemms(weights_, scratch_, max_tokens, rows);
    for (int32_t bucket = 1; decode > 0; bucket = graph_bucket(bucket + 1)) {
      capture_bucket(bucket);
      if (bucket >= decode) break;  // the bucket of the largest batch, perhaps above it
    }
    CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  }

  const std::vector<float>& forward(const BatchLayout& layout) override {
    run(layout);
    const size_t n = size_t(layout.num_samples()) * size_t(spec().vocab_size);
    host_logits_.reserve(n);
    if (n)
      CUDA_CHECK(cudaMemcpyAsync(host_logits_.data(), scratch_.logits.data(), n * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream_.get()));
    CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    logits_.assign(host_logits_.data(), host_logits_.data() + n);
    return logits_;
  }

  bool forward_select(const BatchLayout& layout, const SamplingParams& params, std::span<const double> uniforms,
                      std::vector<int32_t>& tokens) override {
    if (params.top_p < 1.0) return false;  // the nucleus needs a sort: the host sampler does it
    const int32_t S = layout.num_samples();
    if (uniforms.size() != size_t(S)) throw std::logic_error("CudaDecoder::forward_select: one uniform per sampling row");
    run(layout);
    tokens.resize(size_t(S));
    if (S > 0) {
      host_uniforms_.reserve(size_t(S));
      std::copy(uniforms.begin(), uniforms.end(), host_uniforms_.data());
      device_uniforms_.reserve(size_t(S));
      device_tokens_.reserve(size_t(S));
      host_tokens_.reserve(size_t(S));
      cudaStream_t st = stream_.get();
      CUDA_CHECK(cudaMemcpyAsync(device_uniforms_.data(), host_uniforms_.data(), size_t(S) * sizeof(double),
                                 cudaMemcpyHostToDevice, st));
      cuda::launch_select_tokens(scratch_.logits.data(), S, spec().vocab_size, float(params.temperature),
                                 device_uniforms_.data(), device_tokens_.data(), st);
      CUDA_CHECK(cudaMemcpyAsync(host_tokens_.data(), device_tokens_.data(), size_t(S) * sizeof(int32_t),
                                 cudaMemcpyDeviceToHost, st));
    }
    CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    std::copy_n(host_tokens_.data(), S, tokens.begin());
    return true;
  }

  void read_kv(int32_t layer, std::span<const int32_t> block_table, int32_t position, std::span<float> k,
               std::span<float> v) const override {
    const int64_t dh = kv_.head_dim, bs = kv_.block_size;
    if (layer < 0 || layer >= kv_.layers || position < 0 || size_t(position / bs) >= block_table.size() ||
        k.size() != size_t(kv_.kv_heads * dh) || v.size() != k.size())
      throw std::logic_error("CudaDecoder::read_kv: layer, position or buffer size out of range");
    CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    const int64_t block = block_table[size_t(position / bs)], slot = position % bs;
    std::vector<bf16> kh(static_cast<size_t>(dh)), vh(static_cast<size_t>(dh));
    for (int64_t g = 0; g < kv_.kv_heads; ++g) {
      const size_t at = size_t(((block * kv_.kv_heads + g) * bs + slot) * dh);
      CUDA_CHECK(cudaMemcpy(kh.data(), kv_.k_layer(layer) + at, size_t(dh) * sizeof(bf16), cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaMemcpy(vh.data(), kv_.v_layer(layer) + at, size_t(dh) * sizeof(bf16), cudaMemcpyDeviceToHost));
      for (int64_t i = 0; i < dh; ++i) {
        k[size_t(g * dh + i)] = __bfloat162float(kh[size_t(i)]);
        v[size_t(g * dh + i)] = __bfloat162float(vh[size_t(i)]);
      }
    }
  }

 private:
  // Enqueues the forward pass of `layout`, leaving the logits of its
  // sampling rows (and of any padding rows after them) in scratch_.logits.
  void run(const BatchLayout& layout) {
    if (layout.num_tokens() == 0) throw std::logic_error("CudaDecoder: an empty batch");
    cudaStream_t st = stream_.get();
    const int32_t n = int32_t(layout.sequences.size());
    const bool plain = is_plain_decode(layout) && n <= options_.max_graph_batch;
    const bool graphed = options_.graphs && plain;
    if (!graphed) {
      // A plain decode is padded to its bucket with graphs off too: the
      // decode attention's split count follows the padded batch, so graphs
      // on and off compute the same numbers.
      scratch_.meta.stage(layout, kv_.block_size, plain ? graph_bucket(n) : 0);
      scratch_.meta.upload(st);
      servesim::forward(backend_, weights_, kv_, scratch_, layout);
      return;
    }
    const int32_t bucket = graph_bucket(n);
    scratch_.meta.stage(layout, kv_.block_size, bucket);
    backend_.reserve(scratch_, bucket, bucket, bucket);  // nothing may be allocated while capturing
    drop_graphs_if_buffers_moved();
    scratch_.meta.upload(st);
    auto it = graphs_.find(bucket);
    if (it == graphs_.end()) it = graphs_.emplace(bucket, capture(layout)).first;
    CUDA_CHECK(cudaGraphLaunch(it->second, st));
  }

  // Captures bucket's graph ahead of use: a one-token sequence padded to
  // `bucket` is staged (not uploaded: nothing runs while capturing, and
  // every replay uploads its own batch first).
  void capture_bucket(int32_t bucket) {
    const int32_t token = 0, block = 0;
    BatchLayout layout;
    layout.add_sequence(std::span<const int32_t>(&token, 1), 0, std::span<const int32_t>(&block, 1), true);
    scratch_.meta.stage(layout, kv_.block_size, bucket);
    backend_.reserve(scratch_, bucket, bucket, bucket);
    drop_graphs_if_buffers_moved();
    if (!graphs_.count(bucket)) graphs_.emplace(bucket, capture(layout));
  }

  // A graph reads fixed addresses: once any buffer was reallocated, every
  // captured graph is stale.
  void drop_graphs_if_buffers_moved() {
    if (scratch_.generation() == graphs_generation_) return;
    drop_graphs();
    graphs_generation_ = scratch_.generation();
  }

  // Records one forward pass of the staged (padded) batch as a graph.
  cudaGraphExec_t capture(const BatchLayout& layout) {
    cudaStream_t st = stream_.get();
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    try {
      servesim::forward(backend_, weights_, kv_, scratch_, layout);
    } catch (...) {
      cudaStreamEndCapture(st, &graph);  // leave the stream usable
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    CUDA_CHECK(cudaStreamEndCapture(st, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    CUDA_CHECK(status);
    return exec;
  }

  void drop_graphs() noexcept {
    for (auto& [bucket, exec] : graphs_) cudaGraphExecDestroy(exec);
    graphs_.clear();
  }

  int device_;
  cuda::CudaStream stream_;
  cuda::Backend backend_;
  cuda::Weights weights_;
  cuda::KvCache kv_;
  cuda::Scratch scratch_;
  CudaDecoderOptions options_;
  std::string name_;
  std::map<int32_t, cudaGraphExec_t> graphs_;
  int64_t graphs_generation_ = -1;
  cuda::PinnedBuffer<float> host_logits_;
  std::vector<float> logits_;
  cuda::PinnedBuffer<double> host_uniforms_;
  cuda::DeviceBuffer<double> device_uniforms_;
  cuda::DeviceBuffer<int32_t> device_tokens_;
  cuda::PinnedBuffer<int32_t> host_tokens_;
};

}  // namespace

namespace cuda {

std::string device_unavailable(int index) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver)
    return fmt::format("no GPU with a CUDA driver is visible on this machine (cudaGetDeviceCount: {})",
                       cudaGetErrorString(status));
  if (status != cudaSuccess) return fmt::format("no usable CUDA device ({})", cudaGetErrorString(status));
  if (count == 0) return "no CUDA device is visible";
  if (index < 0 || index >= count)
    return fmt::format("device ordinal {} is out of range ({} CUDA device{} visible)", index, count,
                       count == 1 ? "" : "s");
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, index) != cudaSuccess) return "its properties cannot be read";
  if (p.major < 9)
    return fmt::format("{} is compute capability {}.{}; this build targets sm_90 (Hopper)", p.name, p.major, p.minor);
  return "";
}

std::unique_ptr<DecoderModel> make_decoder(HostWeights&& weights, int64_t num_blocks, int32_t block_size,
                                           const CudaDecoderOptions& options) {
  const ModelSpec spec = weights.spec;
  check_decoder_supports(spec);
  return std::make_unique<CudaDecoder>(spec, std::optional<HostWeights>(std::move(weights)), 0, spec, num_blocks,
                                       block_size, options);
}

std::unique_ptr<DecoderModel> make_decoder_random(const ModelSpec& spec, uint64_t seed, int64_t num_blocks,
                                                  int32_t block_size, const CudaDecoderOptions& options,
                                                  const ModelSpec* layers_of) {
  check_decoder_supports(spec);
  if (layers_of && layers_of->num_hidden_layers < spec.num_hidden_layers)
    throw std::logic_error("cuda::make_decoder_random: a self-draft has fewer layers than its target");
  return std::make_unique<CudaDecoder>(spec, std::nullopt, seed, layers_of ? *layers_of : spec, num_blocks,
                                       block_size, options);
}

}  // namespace cuda
}  // namespace servesim
