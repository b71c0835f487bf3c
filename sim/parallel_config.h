// Tensor and pipeline parallelism (vLLM's --tensor-parallel-size and
// --pipeline-parallel-size): how a model is split over GPUs, the shapes one
// rank computes and the memory one GPU holds. docs/parallelism.md gives the
// rules and their sources.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/model_spec.h"

namespace servesim {

struct ParallelConfig {
  int32_t tensor_parallel_size = 1;    // TP: ranks sharing every layer (Megatron-LM's split)
  int32_t pipeline_parallel_size = 1;  // PP: stages of L / PP consecutive layers

  int32_t world_size() const { return tensor_parallel_size * pipeline_parallel_size; }
  bool single_gpu() const { return world_size() == 1; }

  // InputError naming the flag: TP must divide the attention heads and the
  // MLP width, TP and the KV heads must divide one into the other (fewer KV
  // heads than ranks: each is replicated on TP / Hkv ranks), PP must divide
  // the layers.
  void validate_for(const ModelSpec& model) const;
  // {"tensor_parallel_size", "pipeline_parallel_size", "world_size"}.
  nlohmann::json to_json() const;
};

// What one rank of a TP group computes (Megatron-LM column/row-parallel
// linears; vLLM's QKVParallelLinear replicates KV heads when Hkv < TP):
//   heads H / TP, KV heads max(Hkv / TP, 1), MLP width I / TP,
//   LM head and embedding rows ceil(V / TP) (vLLM pads the vocabulary).
struct RankShape {
  int64_t heads = 0, kv_heads = 0, intermediate = 0, vocab = 0;
  int64_t layers_per_stage = 0;  // L / PP
  bool kv_heads_replicated = false;
};
RankShape rank_shape(const ModelSpec& model, const ParallelConfig& parallel);

// The model one TP rank runs, as a model of its own: heads, KV heads, MLP
// width and vocabulary as rank_shape says, every layer (the stages of a
// pipeline, summed), d and head_dim unchanged. What `calibrate
// --tensor-parallel-size N` times on one device; at TP 1, `model` itself.
ModelSpec tensor_parallel_shard(const ModelSpec& model, int32_t tensor_parallel_size);

// Bytes one GPU holds of the weights, on the largest stage: its L / PP
// layers at the TP shard's shapes, plus the embedding (first stage) or the
// final norm and LM head (last stage; its own copy even when tied, as vLLM's
// last rank holds one), or both with PP 1. At TP = PP = 1,
// model.weight_bytes() exactly.
double weight_bytes_per_gpu(const ModelSpec& model, const ParallelConfig& parallel);
// K and V bytes one GPU holds per token: its stage's layers, its KV heads.
// At TP = PP = 1, model.kv_bytes_per_token() exactly.
double kv_bytes_per_token_per_gpu(const ModelSpec& model, const ParallelConfig& parallel);

// "TP 4" / "TP 2 x PP 2" / "1 GPU".
std::string describe_layout(const ParallelConfig& parallel);

}  // namespace servesim
