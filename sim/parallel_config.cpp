#include "sim/parallel_config.h"

#include <algorithm>

#include <fmt/format.h>

#include "sim/errors.h"

namespace servesim {

void ParallelConfig::validate_for(const ModelSpec& m) const {
  const int64_t tp = tensor_parallel_size, pp = pipeline_parallel_size;
  if (tp < 1 || tp > 64)
    throw InputError(fmt::format("--tensor-parallel-size must be in 1 .. 64 (got {})", tp));
  if (pp < 1 || pp > 64)
    throw InputError(fmt::format("--pipeline-parallel-size must be in 1 .. 64 (got {})", pp));
  if (m.num_attention_heads % tp != 0)
    throw InputError(fmt::format("--tensor-parallel-size {}: {}'s {} attention heads do not split evenly over {} "
                                 "ranks; use a TP degree that divides {}",
                                 tp, m.name, m.num_attention_heads, tp, m.num_attention_heads));
  if (m.num_key_value_heads % tp != 0 && tp % m.num_key_value_heads != 0)
    throw InputError(fmt::format("--tensor-parallel-size {}: {}'s {} KV heads neither split over {} ranks nor "
                                 "replicate evenly on them (one must divide the other)",
                                 tp, m.name, m.num_key_value_heads, tp));
  if (m.intermediate_size % tp != 0)
    throw InputError(fmt::format("--tensor-parallel-size {}: {}'s MLP width {} does not split evenly over {} ranks",
                                 tp, m.name, m.intermediate_size, tp));
  if (m.num_hidden_layers % pp != 0)
    throw InputError(fmt::format("--pipeline-parallel-size {}: {}'s {} layers do not split into {} equal stages; "
                                 "use a PP degree that divides {}",
                                 pp, m.name, m.num_hidden_layers, pp, m.num_hidden_layers));
}

nlohmann::json ParallelConfig::to_json() const {
  return {{"tensor_parallel_size", tensor_parallel_size},
          {"pipeline_parallel_size", pipeline_parallel_size},
          {"world_size", world_size()}};
}

RankShape rank_shape(const ModelSpec& m, const ParallelConfig& p) {
  const int64_t tp = p.tensor_parallel_size;
  RankShape r;
  r.heads = m.num_attention_heads / tp;
  r.kv_heads_replicated = m.num_key_value_heads < tp;
  r.kv_heads = r.kv_heads_replicated ? 1 : m.num_key_value_heads / tp;
  r.intermediate = m.intermediate_size / tp;
  r.vocab = (m.vocab_size + tp - 1) / tp;
  r.layers_per_stage = m.num_hidden_layers / p.pipeline_parallel_size;
  return r;
}

ModelSpec tensor_parallel_shard(const ModelSpec& model, int32_t tensor_parallel_size) {
  if (tensor_parallel_size == 1) return model;
  const RankShape r = rank_shape(model, ParallelConfig{tensor_parallel_size, 1});
  ModelSpec shard = model;
  shard.name = fmt::format("{} (one rank of TP {})", model.name, tensor_parallel_size);
  shard.num_attention_heads = r.heads;
  shard.num_key_value_heads = r.kv_heads;
  shard.intermediate_size = r.intermediate;
  shard.vocab_size = r.vocab;
  return shard;
}

double weight_bytes_per_gpu(const ModelSpec& model, const ParallelConfig& p) {
  if (p.single_gpu()) return model.weight_bytes();
  const ModelSpec shard = tensor_parallel_shard(model, p.tensor_parallel_size);
  const double b = shard.dtype_bytes(), d = double(shard.hidden_size);
  const double embedding = double(shard.vocab_size) * d * b;
  const double final_norm = d * b;
  const double lm_head = shard.tie_word_embeddings ? 0.0 : embedding;
  const double all = shard.weight_bytes();
  if (p.pipeline_parallel_size == 1) return all;
  const double per_layer = (all - embedding - final_norm - lm_head) / double(shard.num_hidden_layers);
  const double layers = per_layer * double(shard.num_hidden_layers / p.pipeline_parallel_size);
  // The largest stage is the last: its layers, the final norm and its own
  // LM head (V_rank x d, tied or not), at least the first stage's embedding.
  return layers + final_norm + embedding;
}

double kv_bytes_per_token_per_gpu(const ModelSpec& model, const ParallelConfig& p) {
  if (p.single_gpu()) return model.kv_bytes_per_token();
  ModelSpec shard = tensor_parallel_shard(model, p.tensor_parallel_size);
  shard.num_hidden_layers /= p.pipeline_parallel_size;
  return shard.kv_bytes_per_token();
}

std::string describe_layout(const ParallelConfig& p) {
  if (p.single_gpu()) return "1 GPU";
  if (p.pipeline_parallel_size == 1) return fmt::format("TP {}", p.tensor_parallel_size);
  if (p.tensor_parallel_size == 1) return fmt::format("PP {}", p.pipeline_parallel_size);
  return fmt::format("TP {} x PP {}", p.tensor_parallel_size, p.pipeline_parallel_size);
}

}  // namespace servesim
