#include "sim/config_json.h"

#include <cmath>

#include "sim/length_distribution.h"
#include "sim/sessions.h"

namespace servesim {

namespace {

// The shape fields both descriptions share, under Hugging Face's names.
nlohmann::json shape_json(const ModelSpec& m) {
  return {{"hidden_size", m.hidden_size},
          {"intermediate_size", m.intermediate_size},
          {"num_hidden_layers", m.num_hidden_layers},
          {"num_attention_heads", m.num_attention_heads},
          {"num_key_value_heads", m.num_key_value_heads},
          {"head_dim", m.head_dim},
          {"vocab_size", m.vocab_size},
          {"tie_word_embeddings", m.tie_word_embeddings},
          {"attention_bias", m.attention_bias},
          {"max_position_embeddings", m.max_position_embeddings},
          {"torch_dtype", m.torch_dtype}};
}

}  // namespace

nlohmann::json model_to_json(const ModelSpec& m) {
  nlohmann::json j = shape_json(m);
  j.update({{"name", m.name},
            {"architecture", m.architecture},
            {"parameters", m.parameter_count()},
            {"quantization", m.quantization.to_json()},
            {"weight_bytes", m.weight_bytes()},
            {"kv_bytes_per_token", m.kv_bytes_per_token()}});
  return j;
}

nlohmann::json hf_config_json(const ModelSpec& m) {
  nlohmann::json j = shape_json(m);
  j.update({{"architectures", {m.architecture == "qwen2"     ? "Qwen2ForCausalLM"
                               : m.architecture == "mistral" ? "MistralForCausalLM"
                                                             : "LlamaForCausalLM"}},
            {"model_type", m.architecture},
            {"rope_theta", m.rope_theta},
            {"rms_norm_eps", m.rms_norm_eps},
            {"eos_token_id", m.eos_token_id},
            {"hidden_act", "silu"}});
  return j;
}

nlohmann::json scheduler_to_json(const SchedulerConfig& c, double gpu_memory_utilization) {
  return {{"policy", to_string(c.policy)},
          {"max_num_seqs", c.max_num_seqs},
          {"max_num_batched_tokens", c.max_num_batched_tokens},
          {"block_size", c.block_size},
          {"num_gpu_blocks", c.num_gpu_blocks},
          {"gpu_memory_utilization", gpu_memory_utilization},
          {"max_model_len", c.max_model_len},
          {"watermark", c.watermark},
          {"num_speculative_tokens", c.num_speculative_tokens},
          {"speculative_disable_by_batch_size", c.speculative_disable_by_batch_size},
          {"enable_prefix_caching", c.enable_prefix_caching},
          {"scheduling_policy", to_string(c.waiting_order)}};
}

nlohmann::json workload_to_json(const WorkloadSpec& w) {
  nlohmann::json wl = {{"arrival", to_string(w.arrival)}, {"seed", w.seed}};
  if (w.arrival == ArrivalProcess::Trace) {
    wl["trace"] = {{"path", w.trace.path},
                   {"format", to_string(w.trace.format)},
                   {"rate_scale", w.trace.rate_scale},
                   {"window_start_s", w.trace.window_start_s},
                   {"max_requests", w.trace.max_requests}};
    if (std::isfinite(w.trace.window_duration_s)) wl["trace"]["window_duration_s"] = w.trace.window_duration_s;
    if (w.trace.format == TraceFormat::Mooncake) wl["trace"]["mooncake_block_tokens"] = w.trace.mooncake_block_tokens;
    return wl;
  }
  wl["num_requests"] = w.num_requests;
  if (w.arrival == ArrivalProcess::Closed) {
    wl["concurrency"] = w.concurrency;
  } else {
    wl["rate"] = w.rate;
    if (w.arrival == ArrivalProcess::Gamma) wl["cv"] = w.cv;
  }
  if (w.lengths_from_trace) {
    wl["lengths_from_trace"] = w.lengths_from_trace->path;
  } else {
    wl["prompt_len"] = LengthDistribution::parse(w.prompt_len, "--prompt-len").describe();
    wl["output_len"] = LengthDistribution::parse(w.output_len, "--output-len").describe();
  }
  // Only when set, so the config of a workload without them stays as it was.
  if (w.shared_prefix_groups > 0)
    wl["shared_prefix"] = {{"groups", w.shared_prefix_groups}, {"len", w.shared_prefix_len}};
  if (w.session_turns) {
    wl["sessions"] = {
        {"turns", LengthDistribution::parse(*w.session_turns, "--session-turns").describe()},
        {"think_time_s", ThinkTime::parse(w.think_time, "--think-time").describe()}};
  }
  return wl;
}

nlohmann::json speculative_to_json(const SchedulerConfig& c, const DraftModel* draft,
                                   const AcceptanceModel* acceptance) {
  nlohmann::json j = {{"num_speculative_tokens", c.num_speculative_tokens},
                      {"disable_by_batch_size", c.speculative_disable_by_batch_size},
                      {"draft", draft ? draft_to_json(*draft) : nlohmann::json()},
                      {"acceptance", acceptance ? acceptance->to_json() : nlohmann::json()}};
  if (acceptance)
    j["acceptance"]["expected_tokens_per_step"] = acceptance->expected_tokens_per_step(c.num_speculative_tokens);
  return j;
}

}  // namespace servesim
