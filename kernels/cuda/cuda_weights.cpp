// The CUDA backend's weights and KV cache: one bf16 allocation for every
// matrix, one fp32 allocation for the norm weights and biases, filled either
// from host weights (converted on the device) or with random_weights()'
// values made on the device.
#include <algorithm>
#include <functional>
#include <string>

#include "kernels/cuda/cuda_backend.h"

namespace servesim::cuda {
namespace {

// Offsets (in elements) of every tensor inside the two allocations; each
// rounded up to 128 elements so every matrix starts 256-byte aligned.
struct WeightLayout {
  struct Layer {
    size_t attn_norm, b_qkv, mlp_norm;       // in vectors
    size_t w_qkv, w_o, w_gate_up, w_down;    // in matrices
  };
  size_t embedding = 0, lm_head = 0, final_norm = 0;
  std::vector<Layer> layers;
  size_t matrix_elements = 0, vector_elements = 0;
};

size_t round_up(size_t n) { return (n + 127) / 128 * 128; }

WeightLayout weight_layout(const ModelSpec& m) {
  const size_t d = size_t(m.hidden_size), I = size_t(m.intermediate_size), V = size_t(m.vocab_size);
  const size_t qkv = size_t((m.num_attention_heads + 2 * m.num_key_value_heads) * m.head_dim);
  const size_t q_out = size_t(m.num_attention_heads * m.head_dim);
  WeightLayout w;
  size_t mat = 0, vec = 0;
  auto matrix = [&](size_t n) { const size_t at = mat; mat += round_up(n); return at; };
  auto vector = [&](size_t n) { const size_t at = vec; vec += round_up(n); return at; };
  w.embedding = matrix(V * d);
  w.lm_head = m.tie_word_embeddings ? w.embedding : matrix(V * d);
  w.final_norm = vector(d);
  for (int64_t l = 0; l < m.num_hidden_layers; ++l) {
    WeightLayout::Layer L;
    L.attn_norm = vector(d);
    L.b_qkv = m.attention_bias ? vector(qkv) : 0;
    L.mlp_norm = vector(d);
    L.w_qkv = matrix(qkv * d);
    L.w_o = matrix(d * q_out);
    L.w_gate_up = matrix(2 * I * d);
    L.w_down = matrix(d * I);
    w.layers.push_back(L);
  }
  w.matrix_elements = mat;
  w.vector_elements = vec;
  return w;
}

// Allocates the two buffers and points every tensor of `w` into them.
Weights allocate_weights(const ModelSpec& m, const WeightLayout& lay) {
  Weights w;
  w.matrices.resize(lay.matrix_elements);
  w.vectors.resize(lay.vector_elements);
  bf16* M = w.matrices.data();
  float* v = w.vectors.data();
  w.embedding = M + lay.embedding;
  w.lm_head = M + lay.lm_head;
  w.final_norm = v + lay.final_norm;
  for (const WeightLayout::Layer& L : lay.layers) {
    LayerWeights lw;
    lw.attn_norm = v + L.attn_norm;
    lw.b_qkv = m.attention_bias ? v + L.b_qkv : nullptr;
    lw.mlp_norm = v + L.mlp_norm;
    lw.w_qkv = M + L.w_qkv;
    lw.w_o = M + L.w_o;
    lw.w_gate_up = M + L.w_gate_up;
    lw.w_down = M + L.w_down;
    w.layers.push_back(lw);
  }
  return w;
}

// Copies host tensors to the device one at a time through a staging buffer
// (fp32), converting the matrices to bf16 there; each host tensor is freed
// once copied, to bound peak host memory.
class Uploader {
 public:
  explicit Uploader(cudaStream_t stream) : stream_(stream) {}
  void matrix(std::vector<float>& host, bf16* dst) {
    stage(host);
    launch_convert_to_bf16(staging_.data(), int64_t(host.size()), dst, stream_);
    done(host);
  }
  void vector(std::vector<float>& host, float* dst) {
    if (host.empty()) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
    done(host);
  }

 private:
  void stage(const std::vector<float>& host) {
    staging_.reserve(host.size());
    CUDA_CHECK(cudaMemcpyAsync(staging_.data(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice,
                               stream_));
  }
  void done(std::vector<float>& host) {
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // before the host copy or the staging buffer is reused
    std::vector<float>().swap(host);
  }
  cudaStream_t stream_;
  DeviceBuffer<float> staging_;
};

}  // namespace

Weights Backend::upload(HostWeights&& host) const {
  const ModelSpec& m = spec_;
  const WeightLayout lay = weight_layout(m);
  Weights w = allocate_weights(m, lay);
  bf16* M = w.matrices.data();
  float* v = w.vectors.data();
  const size_t d = size_t(m.hidden_size), I = size_t(m.intermediate_size);
  const size_t q_out = size_t(m.num_attention_heads * m.head_dim), kv_out = size_t(m.num_key_value_heads * m.head_dim);
  Uploader up(stream_);
  up.matrix(host.embedding, M + lay.embedding);
  if (!m.tie_word_embeddings) up.matrix(host.lm_head, M + lay.lm_head);
  up.vector(host.final_norm, v + lay.final_norm);
  for (size_t l = 0; l < host.layers.size(); ++l) {
    HostLayerWeights& H = host.layers[l];
    const WeightLayout::Layer& L = lay.layers[l];
    up.vector(H.attn_norm, v + L.attn_norm);
    up.vector(H.mlp_norm, v + L.mlp_norm);
    if (m.attention_bias) {
      up.vector(H.bq, v + L.b_qkv);
      up.vector(H.bk, v + L.b_qkv + q_out);
      up.vector(H.bv, v + L.b_qkv + q_out + kv_out);
    }
    up.matrix(H.wq, M + L.w_qkv);                               // rows 0 .. q_out - 1
    up.matrix(H.wk, M + L.w_qkv + q_out * d);                   // then k
    up.matrix(H.wv, M + L.w_qkv + (q_out + kv_out) * d);        // then v
    up.matrix(H.wo, M + L.w_o);
    up.matrix(H.w_gate, M + L.w_gate_up);                       // gate rows
    up.matrix(H.w_up, M + L.w_gate_up + I * d);                 // then up rows
    up.matrix(H.w_down, M + L.w_down);
  }
  return w;
}

Weights Backend::random(uint64_t seed, const ModelSpec& scales_of) const {
  const ModelSpec& m = spec_;
  check_decoder_supports(m);
  const WeightLayout lay = weight_layout(m);
  Weights w = allocate_weights(m, lay);
  bf16* M = w.matrices.data();
  float* v = w.vectors.data();
  const int64_t d = m.hidden_size, I = m.intermediate_size, V = m.vocab_size;
  const int64_t q_out = m.num_attention_heads * m.head_dim, kv_out = m.num_key_value_heads * m.head_dim;
  const RandomWeightScales a = random_weight_scales(scales_of);
  // Each tensor from its own stream, named as random_weights() names it.
  auto matrix = [&](const std::string& name, bf16* dst, int64_t n, float half) {
    launch_fill_uniform(dst, n, random_tensor_seed(seed, name), half, 0.0f, stream_);
  };
  auto vector = [&](const std::string& name, float* dst, int64_t n, float center, float half) {
    launch_fill_uniform(dst, n, random_tensor_seed(seed, name), half, center, stream_);
  };
  matrix("model.embed_tokens.weight", M + lay.embedding, V * d, a.embedding);
  if (!m.tie_word_embeddings) matrix("lm_head.weight", M + lay.lm_head, V * d, a.lm_head);
  vector("model.norm.weight", v + lay.final_norm, d, 1.f, a.norm);
  for (int64_t l = 0; l < m.num_hidden_layers; ++l) {
    const WeightLayout::Layer& L = lay.layers[size_t(l)];
    auto name = [&](const char* suffix) { return layer_tensor_name(l, suffix); };
    vector(name("input_layernorm.weight"), v + L.attn_norm, d, 1.f, a.norm);
    vector(name("post_attention_layernorm.weight"), v + L.mlp_norm, d, 1.f, a.norm);
    if (m.attention_bias) {
      vector(name("self_attn.q_proj.bias"), v + L.b_qkv, q_out, 0.f, a.bias);
      vector(name("self_attn.k_proj.bias"), v + L.b_qkv + q_out, kv_out, 0.f, a.bias);
      vector(name("self_attn.v_proj.bias"), v + L.b_qkv + q_out + kv_out, kv_out, 0.f, a.bias);
    }
    matrix(name("self_attn.q_proj.weight"), M + L.w_qkv, q_out * d, a.qkv);
    matrix(name("self_attn.k_proj.weight"), M + L.w_qkv + q_out * d, kv_out * d, a.qkv);
    matrix(name("self_attn.v_proj.weight"), M + L.w_qkv + (q_out + kv_out) * d, kv_out * d, a.qkv);
    matrix(name("self_attn.o_proj.weight"), M + L.w_o, d * q_out, a.o);
    matrix(name("mlp.gate_proj.weight"), M + L.w_gate_up, I * d, a.gate_up);
    matrix(name("mlp.up_proj.weight"), M + L.w_gate_up + I * d, I * d, a.gate_up);
    matrix(name("mlp.down_proj.weight"), M + L.w_down, d * I, a.down);
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return w;
}

KvCache Backend::make_kv_cache(int64_t num_blocks, int32_t block_size) const {
  KvCache kv;
  kv.num_blocks = num_blocks;
  kv.block_size = block_size;
  kv.kv_heads = spec_.num_key_value_heads;
  kv.head_dim = spec_.head_dim;
  kv.layers = spec_.num_hidden_layers;
  const size_t n = size_t(kv.layers) * kv.layer_elements();
  kv.k.resize(n);
  kv.v.resize(n);
  // Zeros, so a padding row that reads an unwritten slot sees finite values.
  CUDA_CHECK(cudaMemsetAsync(kv.k.data(), 0, kv.k.bytes(), stream_));
  CUDA_CHECK(cudaMemsetAsync(kv.v.data(), 0, kv.v.bytes(), stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return kv;
}

}  // namespace servesim::cuda
