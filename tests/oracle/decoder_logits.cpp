// decoder_logits: the C++ side of the numpy oracle test (check_oracle.py).
//
//   decoder_logits --write-model DIR --model-type llama|qwen2 --dtype F32|BF16|F16 [--tied] --seed S
//       Writes a tiny random model (model.safetensors + config.json) into DIR.
//   decoder_logits --model DIR --tokens 5,17,3,... [--cached] [--seed S]
//       Loads DIR's config.json and safetensors, runs the CPU decoder on the
//       tokens and prints {"positions": [...], "logits": [[...], ...]} to stdout.
//       Without --cached: one prefill of every token, every row sampled.
//       With --cached: a prefill of the first half (its last row sampled), then
//       one decode step per remaining token (each step's row sampled), so the
//       logits come through the paged KV cache.
//   The block table is a random selection of the cache's blocks (from --seed).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/decoder/batch_layout.h"
#include "kernels/decoder/decoder_model.h"
#include "kernels/decoder/host_weights.h"
#include "sim/model_spec.h"

namespace {

using servesim::BatchLayout;
using servesim::ModelSpec;

constexpr int32_t kBlockSize = 4;

int usage(const char* msg) {
  std::fprintf(stderr,
               "decoder_logits: %s\n"
               "usage: decoder_logits --write-model DIR --model-type llama|qwen2 --dtype F32|BF16|F16 "
               "[--tied] --seed S\n"
               "       decoder_logits --model DIR --tokens 5,17,3,... [--cached] [--seed S]\n",
               msg);
  return 2;
}

ModelSpec tiny_spec(const std::string& type, bool tied) {
  ModelSpec m;
  m.name = "oracle-tiny-" + type;
  m.architecture = type;
  m.hidden_size = 64;
  m.intermediate_size = 96;
  m.num_hidden_layers = 2;
  m.num_attention_heads = 4;
  m.num_key_value_heads = 2;  // GQA: two query heads per KV head
  m.head_dim = 16;
  m.vocab_size = 128;
  m.tie_word_embeddings = tied;
  m.max_position_embeddings = 256;
  m.eos_token_id = 2;
  if (type == "qwen2") {
    m.attention_bias = true;
    m.rope_theta = 1e6;
    m.rms_norm_eps = 1e-6;
  } else {
    m.attention_bias = false;
    m.rope_theta = 10000.0;
    m.rms_norm_eps = 1e-5;
  }
  return m;
}

std::vector<int32_t> parse_tokens(const std::string& s, int64_t vocab) {
  std::vector<int32_t> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    const long v = std::stol(item, &used);
    if (used != item.size() || v < 0 || v >= vocab)
      throw std::runtime_error("--tokens: '" + item + "' is not a token id in [0, " +
                               std::to_string(vocab) + ")");
    out.push_back(int32_t(v));
  }
  if (out.empty()) throw std::runtime_error("--tokens: no token ids given");
  return out;
}

void append_rows(const std::vector<float>& logits, int32_t rows, int64_t vocab,
                 nlohmann::json& out) {
  for (int32_t r = 0; r < rows; ++r) {
    nlohmann::json row = nlohmann::json::array();
    for (int64_t v = 0; v < vocab; ++v) row.push_back(double(logits[size_t(r * vocab + v)]));
    out.push_back(std::move(row));
  }
}

int run_model(const std::string& dir, const std::string& tokens_arg, bool cached, uint64_t seed) {
  const ModelSpec spec = servesim::resolve_model(dir);
  const std::vector<int32_t> tokens = parse_tokens(tokens_arg, spec.vocab_size);
  const int32_t T = int32_t(tokens.size());
  if (T > spec.max_position_embeddings)
    throw std::runtime_error("--tokens: more tokens than max_position_embeddings");

  // A random block table: the blocks this sequence needs, chosen out of twice
  // as many, in shuffled order, so that logical and physical blocks differ.
  const int32_t needed = (T + kBlockSize - 1) / kBlockSize;
  const int64_t num_blocks = 2 * int64_t(needed) + 3;
  std::vector<int32_t> all(static_cast<size_t>(num_blocks));
  std::iota(all.begin(), all.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  const std::vector<int32_t> block_table(all.begin(), all.begin() + needed);

  servesim::HostWeights weights = servesim::load_safetensors_weights(spec, dir);
  auto model = servesim::make_cpu_decoder(std::move(weights), num_blocks, kBlockSize,
                                          servesim::CpuDecoderOptions{});
  const int64_t V = spec.vocab_size;

  nlohmann::json positions = nlohmann::json::array();
  nlohmann::json logits = nlohmann::json::array();
  BatchLayout layout;
  const std::span<const int32_t> ids(tokens);
  if (!cached) {
    layout.add_sequence(ids, 0, block_table, /*sample=*/false);
    for (int32_t r = 0; r < T; ++r) {
      layout.sample_rows.push_back(r);
      positions.push_back(r);
    }
    append_rows(model->forward(layout), T, V, logits);
  } else {
    const int32_t prefill = std::max(1, T / 2);
    layout.add_sequence(ids.subspan(0, size_t(prefill)), 0, block_table, /*sample=*/true);
    append_rows(model->forward(layout), 1, V, logits);
    positions.push_back(prefill - 1);
    for (int32_t p = prefill; p < T; ++p) {
      layout.clear();
      layout.add_sequence(ids.subspan(size_t(p), 1), p, block_table, /*sample=*/true);
      append_rows(model->forward(layout), 1, V, logits);
      positions.push_back(p);
    }
  }
  nlohmann::json out = {{"device", model->device()},
                        {"mode", cached ? "cached" : "prefill"},
                        {"block_table", block_table},
                        {"positions", positions},
                        {"logits", logits}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<std::string> write_dir, model_dir, model_type, dtype, tokens;
  std::optional<uint64_t> seed;
  bool tied = false, cached = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
        return argv[++i];
      };
      if (a == "--write-model") write_dir = value();
      else if (a == "--model") model_dir = value();
      else if (a == "--model-type") model_type = value();
      else if (a == "--dtype") dtype = value();
      else if (a == "--tokens") tokens = value();
      else if (a == "--seed") seed = std::stoull(value());
      else if (a == "--tied") tied = true;
      else if (a == "--cached") cached = true;
      else return usage(("unknown argument '" + a + "'").c_str());
    }
    if (write_dir && model_dir) return usage("--write-model and --model are exclusive");
    if (write_dir) {
      if (!model_type || (*model_type != "llama" && *model_type != "qwen2"))
        return usage("--model-type must be llama or qwen2");
      if (!dtype) return usage("--dtype is required");
      if (!seed) return usage("--seed is required");
      const servesim::HostWeights w = servesim::random_weights(tiny_spec(*model_type, tied), *seed);
      servesim::save_safetensors_weights(w, *write_dir, *dtype);
      return 0;
    }
    if (model_dir) {
      if (!tokens) return usage("--tokens is required with --model");
      return run_model(*model_dir, *tokens, cached, seed.value_or(1));
    }
    return usage("one of --write-model or --model is required");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decoder_logits: %s\n", e.what());
    return 1;
  }
}
