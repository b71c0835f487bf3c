// The shape of a Llama-family decoder: what the cost models and the built-in
// decoder need to know about a model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/quantization.h"

namespace servesim {

struct ModelSpec {
  std::string name;                    // preset name or the config.json path
  std::string architecture = "llama";  // model_type: llama | mistral | qwen2
  int64_t hidden_size = 0;             // d
  int64_t intermediate_size = 0;       // MLP width I
  int64_t num_hidden_layers = 0;       // L
  int64_t num_attention_heads = 0;     // H
  int64_t num_key_value_heads = 0;     // Hkv (GQA); defaults to H
  int64_t head_dim = 0;                // dh; defaults to d / H
  int64_t vocab_size = 0;              // V
  bool tie_word_embeddings = false;    // LM head shares the embedding matrix
  bool attention_bias = false;         // bias on the q, k, v projections (Qwen2)
  int64_t max_position_embeddings = 0; // the longest context the model takes
  std::string torch_dtype = "bfloat16";
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  int64_t eos_token_id = 2;            // the first id when config.json lists several
  // How a deployment stores it (--quantization, --kv-cache-dtype): not part
  // of config.json; the default is the checkpoint's dtype throughout.
  Quantization quantization;

  // Bytes of one weight or KV element in torch_dtype (bf16/fp16: 2, fp32: 4).
  int dtype_bytes() const;
  // Weights: embedding V*d; per layer q,k,v,o projections d*(H+2Hkv)*dh +
  // H*dh*d (+ (H+2Hkv)*dh biases), gate/up/down 3*d*I, two RMSNorm weights
  // 2*d; final norm d; LM head V*d unless tied.
  int64_t parameter_count() const;
  // The parameters above in bytes: the linear layers as `quantization`
  // stores them (Quantization::linear_bytes), everything else in torch_dtype.
  double weight_bytes() const;
  // K and V of one token in every layer: L x Quantization::kv_bytes_per_token_layer
  // (auto: 2 * L * Hkv * dh * bytes).
  double kv_bytes_per_token() const;

  // Throws InputError (naming `source`) if a field is out of range or the
  // shapes disagree (H not divisible by Hkv, ...).
  void validate(const std::string& source) const;
};

// Reads a Hugging Face config.json (the file or the folder holding it).
ModelSpec model_from_config_json(const std::string& path);

// Built-in presets with the fields of each model's config.json.
const std::vector<ModelSpec>& model_presets();

// A preset name (case-insensitive) or a path to a config.json / its folder.
// Throws InputError listing the presets when neither matches.
ModelSpec resolve_model(const std::string& name_or_path);

}  // namespace servesim
