#include "calib/cuda_layer_kernels.h"

#include "calib/calibration_common.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace servesim::cuda_calib {
namespace {

// The decode attention's split count is at most 64 (kernels/cuda/cuda_kernels.h).
constexpr double kMaxDecodeSplits = 64;

using calibration::ceil_div;

ModelSpec with_layers(ModelSpec m, int64_t layers) {
  m.num_hidden_layers = layers;
  return m;
}

}  // namespace

Shape::Shape(const ModelSpec& m)
    : d(m.hidden_size), I(m.intermediate_size), V(m.vocab_size), H(m.num_attention_heads),
      Hkv(m.num_key_value_heads), dh(m.head_dim), qkv_out((H + 2 * Hkv) * dh), q_out(H * dh),
      L(m.num_hidden_layers) {}

double Shape::layer_weight_bytes() const { return 2.0 * double(qkv_out * d + d * q_out + 2 * I * d + d * I); }

double Shape::head_bytes(bool tied) const { return 2.0 * double(V * d) * (tied ? 1 : 2); }

double Shape::kv_bytes_per_token() const { return 2.0 * double(Hkv * dh) * 2.0; }

double Shape::scratch_bytes(double T, double S, double decode) const {
  // x fp32; h, qkv, attn, branch, gate_up, act bf16; cos and sin fp32.
  const double per_token = 4.0 * double(d) + 2.0 * double(d + qkv_out + q_out + d + 2 * I + I) + 4.0 * double(dh);
  const double workspace = decode * double(H) * kMaxDecodeSplits * double(dh + 2) * 4.0;
  return T * per_token + S * (2.0 * double(d) + 4.0 * double(V)) + workspace;
}

Batch::Batch(int64_t sequences, int64_t query, int64_t cached, int32_t block_size, bool sample)
    : ids_(size_t(query), 0), tables_(size_t(sequences)) {
  int32_t next = 0;
  for (auto& t : tables_)
    for (int64_t b = 0; b < ceil_div(cached + query, block_size); ++b) t.push_back(next++);
  for (const auto& t : tables_) layout_.add_sequence(ids_, int32_t(cached), t, sample);
}

int64_t Batch::blocks(int64_t sequences, int64_t query, int64_t cached, int32_t block_size) {
  return sequences * ceil_div(cached + query, block_size);
}

CudaLayerKernels::CudaLayerKernels(const ModelSpec& model, int64_t kv_blocks, int32_t block_size, uint64_t weights_seed, cudaStream_t stream,
         int32_t max_tokens, int32_t max_rows, int32_t max_decode)
    : be(with_layers(model, 1), stream),
      w(be.random(weights_seed, model)),  // scaled as the whole model's layers are
      kv(be.make_kv_cache(kv_blocks, block_size)),
      gemm(stream),
      seed(weights_seed) {
  be.reserve(s, max_tokens, max_rows, max_decode);
  fill_noise();
}

void CudaLayerKernels::fill_noise() {
  uint64_t k = seed ^ 0x5eedULL;
  auto fill = [&](auto& buffer) {
    if (buffer.size()) cuda::launch_fill_uniform(buffer.data(), int64_t(buffer.size()), ++k, 1.0f, 0.0f, stream());
  };
  fill(s.x);
  fill(s.h);
  fill(s.qkv);
  fill(s.attn);
  fill(s.branch);
  fill(s.gate_up);
  fill(s.act);
  fill(s.last);
  fill(s.logits);
  fill(kv.k);
  fill(kv.v);
  CUDA_CHECK(cudaStreamSynchronize(stream()));
}

void CudaLayerKernels::stage(const BatchLayout& layout) {
  const int64_t generation = s.buffers_generation;
  s.meta.stage(layout, kv.block_size);
  s.meta.upload(stream());
  be.prepare(s, layout);
  if (s.buffers_generation != generation) fill_noise();  // a grown buffer holds fresh, unfilled memory
  CUDA_CHECK(cudaStreamSynchronize(stream()));
}

}  // namespace servesim::cuda_calib
