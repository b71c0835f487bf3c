// A Llama-family model's weights in host memory, fp32, in Hugging Face's
// layout (nn.Linear weights are [out_features, in_features], row-major).
// Backends build their own copies (fused, converted) from these.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/model_spec.h"

namespace servesim {

struct HostLayerWeights {
  std::vector<float> attn_norm;            // [d]      input_layernorm
  std::vector<float> wq, wk, wv;           // [H*dh, d], [Hkv*dh, d], [Hkv*dh, d]
  std::vector<float> bq, bk, bv;           // [H*dh], [Hkv*dh], [Hkv*dh]; empty without attention_bias
  std::vector<float> wo;                   // [d, H*dh]
  std::vector<float> mlp_norm;             // [d]      post_attention_layernorm
  std::vector<float> w_gate, w_up;         // [I, d]
  std::vector<float> w_down;               // [d, I]
};

struct HostWeights {
  ModelSpec spec;
  std::string source;                // "random (seed N)" or the weights folder
  std::vector<float> embedding;      // [V, d]   model.embed_tokens
  std::vector<HostLayerWeights> layers;
  std::vector<float> final_norm;     // [d]      model.norm
  std::vector<float> lm_head;        // [V, d]   lm_head; empty when tied to the embedding
};

// Random weights from `seed`, each tensor from its own stream (so a tensor's
// values do not depend on the others). Scaled so activations stay finite
// through every layer: projections uniform with variance 1/fan_in, the
// residual-branch outputs (o_proj, down_proj) further by 1/sqrt(2L) as in
// GPT-2, embedding rows with unit variance, norm weights in [0.5, 1.5],
// biases in [-0.1, 0.1].
HostWeights random_weights(const ModelSpec& spec, uint64_t seed);

// InputError unless the built-in decoder can run `spec` (even head_dim,
// vocab_size >= 4, attention biases only as qwen2 has them).
void check_decoder_supports(const ModelSpec& spec);

// The SplitMix64 stream seed of the tensor `name` in random_weights(spec,
// seed): seed ^ FNV-1a(name), so a tensor's values do not depend on the
// others (the CUDA backend fills its tensors on the device from the same
// streams). Value i of the stream is uniform_i = (splitmix64_finalize(s + i *
// 0x9E3779B97F4A7C15) >> 11) * 2^-53, and a tensor of center c and half
// width a holds c + a * float(2 uniform_i - 1).
uint64_t random_tensor_seed(uint64_t seed, const std::string& name);

// random_weights()' half widths (values uniform on [-a, a), norm weights on
// [1 - a, 1 + a)), shared with the CUDA backend's device-side fill.
struct RandomWeightScales {
  float embedding = 0;    // sqrt(3): unit variance
  float norm = 0;         // 0.5 around 1
  float bias = 0;         // 0.1
  float qkv = 0;          // sqrt(3 / d): variance 1 / fan_in
  float o = 0;            // sqrt(3 / (H dh)) / sqrt(2 L)   (residual branch, GPT-2)
  float gate_up = 0;      // sqrt(3 / d)
  float down = 0;         // sqrt(3 / I) / sqrt(2 L)
  float lm_head = 0;      // sqrt(3 / d)
};
RandomWeightScales random_weight_scales(const ModelSpec& spec);

// Hugging Face safetensors (model.safetensors or a sharded index) in `dir`,
// checked against `spec` (normally read from the same folder's config.json).
// InputError names the file and tensor of a missing or misshapen weight.
// An FP8 checkpoint's F8_E4M3 linear weights are dequantized with their
// weight_scale tensors (per tensor or per output channel) on load; the
// decoder then stores them as --dtype / --quantization say.
HostWeights load_safetensors_weights(const ModelSpec& spec, const std::string& dir);

// Writes `weights` as model.safetensors + config.json into `dir` (for tests
// and the numpy oracle).
void save_safetensors_weights(const HostWeights& weights, const std::string& dir,
                              const std::string& dtype /* "F32" | "BF16" | "F16" */);

// A self-draft of `target`: its first `layers` layers (1 .. L - 1) with its
// embedding, final norm and LM head, named like "small-110m[:4 layers]".
// InputError naming --self-draft-layers outside that range.
ModelSpec self_draft_spec(const ModelSpec& target, int32_t layers);

// The weights of self_draft_spec(target.spec, layers), copied from `target`
// (left intact). The copy costs the embedding (and head) a second time; the
// backends consume and convert their HostWeights, so sharing would have to
// happen there, and for the CPU presets the copy is small beside the KV cache.
HostWeights self_draft_weights(const HostWeights& target, int32_t layers);

// Hugging Face tensor names.
std::string layer_tensor_name(int64_t layer, const std::string& suffix);

}  // namespace servesim
