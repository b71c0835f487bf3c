#include "kernels/decoder/host_weights.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "kernels/decoder/safetensors.h"
#include "sim/config_json.h"
#include "sim/draft_model.h"
#include "sim/errors.h"

namespace servesim {
namespace {

// SplitMix64 (Steele, Lea & Flood 2014): a fast stream of 64-bit values.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform on [-1, 1).
  float symmetric() { return float(double(next() >> 11) * 0x1.0p-53 * 2.0 - 1.0); }
};

// n values uniform on [center - half_width, center + half_width).
std::vector<float> uniform(uint64_t seed, const std::string& name, int64_t n, float center,
                           float half_width) {
  SplitMix64 rng{random_tensor_seed(seed, name)};
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = center + half_width * rng.symmetric();
  return v;
}

}  // namespace

// Qwen2 puts biases on q, k and v only; Llama and Mistral with
// attention_bias also bias o_proj, which this decoder does not implement.
void check_decoder_supports(const ModelSpec& m) {
  m.validate(m.name);
  if (m.head_dim % 2 != 0)
    throw InputError(fmt::format("{}: head_dim {} is odd; rotary embedding pairs dimension i with "
                                 "i + head_dim/2 and needs it even", m.name, m.head_dim));
  if (m.vocab_size < 4)
    throw InputError(fmt::format("{}: vocab_size {} is too small for the built-in decoder "
                                 "(prompts use ids 3 .. V-1)", m.name, m.vocab_size));
  if (m.attention_bias && m.architecture != "qwen2")
    throw InputError(fmt::format(
        "{}: attention_bias with model_type '{}' also biases o_proj, which the built-in decoder "
        "does not implement (it supports q/k/v biases as in qwen2)",
        m.name, m.architecture));
}

uint64_t random_tensor_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a of the name
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ULL;
  return seed ^ h;
}

std::string layer_tensor_name(int64_t layer, const std::string& suffix) {
  return fmt::format("model.layers.{}.{}", layer, suffix);
}

RandomWeightScales random_weight_scales(const ModelSpec& m) {
  // Uniform on [-a, a] has variance a^2 / 3: a = sqrt(3 / fan_in) gives 1 / fan_in.
  auto proj = [](int64_t fan_in) { return float(std::sqrt(3.0 / double(fan_in))); };
  const float residual = float(1.0 / std::sqrt(2.0 * double(m.num_hidden_layers)));
  RandomWeightScales r;
  r.embedding = std::sqrt(3.f);
  r.norm = 0.5f;
  r.bias = 0.1f;
  r.qkv = proj(m.hidden_size);
  r.o = proj(m.num_attention_heads * m.head_dim) * residual;
  r.gate_up = proj(m.hidden_size);
  r.down = proj(m.intermediate_size) * residual;
  r.lm_head = proj(m.hidden_size);
  return r;
}

HostWeights random_weights(const ModelSpec& m, uint64_t seed) {
  check_decoder_supports(m);
  const int64_t d = m.hidden_size, I = m.intermediate_size, V = m.vocab_size;
  const int64_t q_out = m.num_attention_heads * m.head_dim, kv_out = m.num_key_value_heads * m.head_dim;
  const RandomWeightScales a = random_weight_scales(m);

  HostWeights w;
  w.spec = m;
  w.source = fmt::format("random (seed {})", seed);
  w.embedding = uniform(seed, "model.embed_tokens.weight", V * d, 0.f, a.embedding);
  w.final_norm = uniform(seed, "model.norm.weight", d, 1.f, a.norm);
  if (!m.tie_word_embeddings) w.lm_head = uniform(seed, "lm_head.weight", V * d, 0.f, a.lm_head);
  w.layers.resize(size_t(m.num_hidden_layers));
  for (int64_t l = 0; l < m.num_hidden_layers; ++l) {
    HostLayerWeights& L = w.layers[size_t(l)];
    auto name = [&](const char* suffix) { return layer_tensor_name(l, suffix); };
    L.attn_norm = uniform(seed, name("input_layernorm.weight"), d, 1.f, a.norm);
    L.wq = uniform(seed, name("self_attn.q_proj.weight"), q_out * d, 0.f, a.qkv);
    L.wk = uniform(seed, name("self_attn.k_proj.weight"), kv_out * d, 0.f, a.qkv);
    L.wv = uniform(seed, name("self_attn.v_proj.weight"), kv_out * d, 0.f, a.qkv);
    if (m.attention_bias) {
      L.bq = uniform(seed, name("self_attn.q_proj.bias"), q_out, 0.f, a.bias);
      L.bk = uniform(seed, name("self_attn.k_proj.bias"), kv_out, 0.f, a.bias);
      L.bv = uniform(seed, name("self_attn.v_proj.bias"), kv_out, 0.f, a.bias);
    }
    L.wo = uniform(seed, name("self_attn.o_proj.weight"), d * q_out, 0.f, a.o);
    L.mlp_norm = uniform(seed, name("post_attention_layernorm.weight"), d, 1.f, a.norm);
    L.w_gate = uniform(seed, name("mlp.gate_proj.weight"), I * d, 0.f, a.gate_up);
    L.w_up = uniform(seed, name("mlp.up_proj.weight"), I * d, 0.f, a.gate_up);
    L.w_down = uniform(seed, name("mlp.down_proj.weight"), d * I, 0.f, a.down);
  }
  return w;
}

ModelSpec self_draft_spec(const ModelSpec& target, int32_t layers) {
  // The simulator's rule, so a run and its prediction name the same draft.
  return make_self_draft(target, layers).spec;
}

HostWeights self_draft_weights(const HostWeights& target, int32_t layers) {
  HostWeights draft;
  draft.spec = self_draft_spec(target.spec, layers);
  draft.source = fmt::format("the first {} layers of {}", layers, target.source);
  draft.embedding = target.embedding;
  draft.layers.assign(target.layers.begin(), target.layers.begin() + layers);
  draft.final_norm = target.final_norm;
  draft.lm_head = target.lm_head;
  return draft;
}

namespace {

// A linear layer's weight [N, K] in fp32. An F8_E4M3 weight is dequantized
// with its `<module>.weight_scale` (as FP8 checkpoints from vLLM's and
// Hugging Face's tools store them): one scale ([] or [1], per tensor) or
// one per output row ([N] or [N, 1], per channel), in F32, BF16 or F16.
// InputError naming the file and tensor for a missing or misshapen scale.
std::vector<float> read_linear(const SafetensorsModel& file, const std::string& name,
                               const std::vector<int64_t>& shape) {
  std::vector<float> w = file.read_f32(name, shape);
  if (file.info(name).dtype != SafetensorsDtype::F8_E4M3) return w;
  const std::string scale_name = name.substr(0, name.size() - std::string("weight").size()) + "weight_scale";
  if (!file.has(scale_name))
    throw InputError(fmt::format("{}: tensor '{}' is F8_E4M3 but its scale '{}' is missing", file.file_of(name),
                                 name, scale_name));
  const TensorInfo& si = file.info(scale_name);
  if (si.dtype == SafetensorsDtype::F8_E4M3)
    throw InputError(fmt::format("{}: tensor '{}' must be F32, BF16 or F16 (got F8_E4M3)", file.file_of(scale_name),
                                 scale_name));
  const int64_t N = shape[0], K = shape[1];
  const bool per_tensor = si.shape.empty() || si.shape == std::vector<int64_t>{1};
  const bool per_channel = si.shape == std::vector<int64_t>{N} || si.shape == std::vector<int64_t>{N, 1};
  if (!per_tensor && !per_channel)
    throw InputError(fmt::format("{}: tensor '{}' has shape [{}]; expected [] or [1] (per tensor) or [{}] or "
                                 "[{}, 1] (per output channel) for '{}' [{}, {}]",
                                 file.file_of(scale_name), scale_name, fmt::join(si.shape, ", "), N, N, name, N, K));
  const std::vector<float> scale = file.read_f32(scale_name, si.shape);
  for (int64_t n = 0; n < N; ++n) {
    const float s = scale[per_tensor ? 0 : size_t(n)];
    if (!std::isfinite(s) || !(s > 0))
      throw InputError(fmt::format("{}: tensor '{}' holds {} at row {}: scales must be finite and > 0",
                                   file.file_of(scale_name), scale_name, s, per_tensor ? 0 : n));
    for (int64_t k = 0; k < K; ++k) w[size_t(n * K + k)] *= s;
  }
  return w;
}

// Only linear layers may be stored in FP8: the embedding, norms, biases and
// LM head of an FP8 checkpoint stay in its higher-precision dtype.
std::vector<float> read_not_fp8(const SafetensorsModel& file, const std::string& name,
                                const std::vector<int64_t>& shape) {
  if (file.has(name) && file.info(name).dtype == SafetensorsDtype::F8_E4M3)
    throw InputError(fmt::format("{}: tensor '{}' is F8_E4M3; only the linear layers' weights may be (with a "
                                 "weight_scale)",
                                 file.file_of(name), name));
  return file.read_f32(name, shape);
}

}  // namespace

HostWeights load_safetensors_weights(const ModelSpec& m, const std::string& dir) {
  check_decoder_supports(m);
  const SafetensorsModel file(dir);
  const int64_t d = m.hidden_size, I = m.intermediate_size, V = m.vocab_size;
  const int64_t q_out = m.num_attention_heads * m.head_dim, kv_out = m.num_key_value_heads * m.head_dim;

  HostWeights w;
  w.spec = m;
  w.source = dir;
  w.embedding = read_not_fp8(file, "model.embed_tokens.weight", {V, d});
  w.final_norm = read_not_fp8(file, "model.norm.weight", {d});
  if (!m.tie_word_embeddings) w.lm_head = read_not_fp8(file, "lm_head.weight", {V, d});
  w.layers.resize(size_t(m.num_hidden_layers));
  for (int64_t l = 0; l < m.num_hidden_layers; ++l) {
    HostLayerWeights& L = w.layers[size_t(l)];
    auto read = [&](const char* suffix, std::vector<int64_t> shape) {
      const std::string name = layer_tensor_name(l, suffix);
      return shape.size() == 2 ? read_linear(file, name, shape) : read_not_fp8(file, name, shape);
    };
    L.attn_norm = read("input_layernorm.weight", {d});
    L.wq = read("self_attn.q_proj.weight", {q_out, d});
    L.wk = read("self_attn.k_proj.weight", {kv_out, d});
    L.wv = read("self_attn.v_proj.weight", {kv_out, d});
    if (m.attention_bias) {
      L.bq = read("self_attn.q_proj.bias", {q_out});
      L.bk = read("self_attn.k_proj.bias", {kv_out});
      L.bv = read("self_attn.v_proj.bias", {kv_out});
    }
    L.wo = read("self_attn.o_proj.weight", {d, q_out});
    L.mlp_norm = read("post_attention_layernorm.weight", {d});
    L.w_gate = read("mlp.gate_proj.weight", {I, d});
    L.w_up = read("mlp.up_proj.weight", {I, d});
    L.w_down = read("mlp.down_proj.weight", {d, I});
  }
  return w;
}

void save_safetensors_weights(const HostWeights& w, const std::string& dir, const std::string& dtype) {
  SafetensorsDtype type;
  if (dtype == "F32") type = SafetensorsDtype::F32;
  else if (dtype == "BF16") type = SafetensorsDtype::BF16;
  else if (dtype == "F16") type = SafetensorsDtype::F16;
  else throw InputError(fmt::format("weights dtype '{}' is not one of F32, BF16, F16", dtype));

  const ModelSpec& m = w.spec;
  const int64_t d = m.hidden_size, I = m.intermediate_size, V = m.vocab_size;
  const int64_t q_out = m.num_attention_heads * m.head_dim, kv_out = m.num_key_value_heads * m.head_dim;
  std::vector<TensorToWrite> t;
  t.push_back({"model.embed_tokens.weight", {V, d}, w.embedding});
  for (int64_t l = 0; l < m.num_hidden_layers; ++l) {
    const HostLayerWeights& L = w.layers[size_t(l)];
    auto add = [&](const char* suffix, std::vector<int64_t> shape, const std::vector<float>& v) {
      t.push_back({layer_tensor_name(l, suffix), std::move(shape), v});
    };
    add("input_layernorm.weight", {d}, L.attn_norm);
    add("self_attn.q_proj.weight", {q_out, d}, L.wq);
    add("self_attn.k_proj.weight", {kv_out, d}, L.wk);
    add("self_attn.v_proj.weight", {kv_out, d}, L.wv);
    if (m.attention_bias) {
      add("self_attn.q_proj.bias", {q_out}, L.bq);
      add("self_attn.k_proj.bias", {kv_out}, L.bk);
      add("self_attn.v_proj.bias", {kv_out}, L.bv);
    }
    add("self_attn.o_proj.weight", {d, q_out}, L.wo);
    add("post_attention_layernorm.weight", {d}, L.mlp_norm);
    add("mlp.gate_proj.weight", {I, d}, L.w_gate);
    add("mlp.up_proj.weight", {I, d}, L.w_up);
    add("mlp.down_proj.weight", {d, I}, L.w_down);
  }
  t.push_back({"model.norm.weight", {d}, w.final_norm});
  if (!m.tie_word_embeddings) t.push_back({"lm_head.weight", {V, d}, w.lm_head});

  std::filesystem::create_directories(dir);
  write_safetensors((std::filesystem::path(dir) / "model.safetensors").string(), t, type);
  nlohmann::json config = hf_config_json(m);
  config["torch_dtype"] = type == SafetensorsDtype::F32 ? "float32" : type == SafetensorsDtype::BF16 ? "bfloat16" : "float16";
  std::ofstream((std::filesystem::path(dir) / "config.json").string()) << config.dump(2) << "\n";
}

}  // namespace servesim
