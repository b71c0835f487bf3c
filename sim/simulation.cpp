#include "sim/simulation.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "sim/clock.h"
#include "sim/errors.h"
#include "sim/kv_capacity.h"
#include "sim/speculative_cost.h"

namespace servesim {

SchedulerConfig resolve_scheduler_config(const SchedulerSettings& s, const ModelSpec& model,
                                         const HardwareSpec& hardware, const DraftModel* draft) {
  SchedulerConfig c;
  c.policy = s.policy;
  c.max_num_seqs = s.max_num_seqs;
  c.block_size = s.block_size;
  c.num_speculative_tokens = s.num_speculative_tokens;
  c.speculative_disable_by_batch_size = s.speculative_disable_by_batch_size;
  c.max_model_len = s.max_model_len.value_or(model.max_position_embeddings);
  if (c.max_model_len > model.max_position_embeddings)
    throw InputError(fmt::format("--max-model-len {} exceeds {}'s max_position_embeddings {}",
                                 c.max_model_len, model.name, model.max_position_embeddings));
  if (s.max_num_batched_tokens) {
    c.max_num_batched_tokens = *s.max_num_batched_tokens;
  } else if (s.policy == SchedulerPolicy::Chunked) {
    c.max_num_batched_tokens = 2048;
  } else {
    c.max_num_batched_tokens = int32_t(std::min<int64_t>(std::max<int64_t>(c.max_model_len, 2048), INT32_MAX));
  }
  if (s.num_gpu_blocks) {
    c.num_gpu_blocks = *s.num_gpu_blocks;
  } else {
    c.num_gpu_blocks = kv_capacity_blocks(model, hardware, s.gpu_memory_utilization, s.block_size, draft);
  }
  c.validate();
  return c;
}

namespace {

// Serves `workload` with an already resolved scheduler configuration.
SimulationOutput run_simulation(const SimulationSetup& setup, const SchedulerConfig& config,
                                const Workload& workload, Executor& executor,
                                std::function<void(const RunProgress&)> progress) {
  SimulationOutput out;
  out.scheduler = config;
  Scheduler scheduler(out.scheduler);
  VirtualClock clock;
  std::optional<JitteredExecutor> jittered;
  if (setup.jitter.active()) jittered.emplace(executor, setup.jitter, setup.jitter_seed);
  Runner runner(scheduler, jittered ? static_cast<Executor&>(*jittered) : executor, clock);
  runner.keep_iterations(setup.keep_iterations);
  if (progress) runner.on_progress(std::move(progress));
  out.records = runner.run(workload);
  out.summary = summarize_run(out.records, setup.slo);
  if (const SpeculativeStats* stats = executor.speculative_stats()) out.speculative = *stats;
  return out;
}

}  // namespace

SimulationOutput simulate_workload(const SimulationSetup& setup, const Workload& workload,
                                   std::function<void(const RunProgress&)> progress) {
  const DraftModel* draft = setup.draft ? &*setup.draft : nullptr;
  const SchedulerConfig config = resolve_scheduler_config(setup.scheduler, setup.model, setup.hardware, draft);
  check_speculative_flags(config.num_speculative_tokens, draft != nullptr, setup.acceptance.has_value(), true);
  RooflineModel executor(setup.model, setup.hardware, setup.roofline);
  if (config.num_speculative_tokens == 0) return run_simulation(setup, config, workload, executor, std::move(progress));
  // The draft is costed by the same roofline on the same hardware.
  RooflineModel draft_executor(draft->spec, setup.hardware, setup.roofline);
  SpeculativeCostModel speculative(executor, draft_executor, *setup.acceptance, config.num_speculative_tokens,
                                   setup.workload.seed);
  return run_simulation(setup, config, workload, speculative, std::move(progress));
}

SimulationOutput simulate_with_executor(const SimulationSetup& setup, const Workload& workload,
                                        Executor& executor,
                                        std::function<void(const RunProgress&)> progress) {
  const SchedulerConfig config = resolve_scheduler_config(setup.scheduler, setup.model, setup.hardware,
                                                          setup.draft ? &*setup.draft : nullptr);
  return run_simulation(setup, config, workload, executor, std::move(progress));
}

SimulationOutput simulate(const SimulationSetup& setup,
                          std::function<void(const RunProgress&)> progress) {
  setup.model.validate(setup.model.name);
  return simulate_workload(setup, make_workload(setup.workload), std::move(progress));
}

nlohmann::json model_to_json(const ModelSpec& m) {
  return {{"name", m.name},
          {"architecture", m.architecture},
          {"hidden_size", m.hidden_size},
          {"intermediate_size", m.intermediate_size},
          {"num_hidden_layers", m.num_hidden_layers},
          {"num_attention_heads", m.num_attention_heads},
          {"num_key_value_heads", m.num_key_value_heads},
          {"head_dim", m.head_dim},
          {"vocab_size", m.vocab_size},
          {"tie_word_embeddings", m.tie_word_embeddings},
          {"attention_bias", m.attention_bias},
          {"max_position_embeddings", m.max_position_embeddings},
          {"torch_dtype", m.torch_dtype},
          {"parameters", m.parameter_count()},
          {"weight_bytes", m.weight_bytes()},
          {"kv_bytes_per_token", m.kv_bytes_per_token()}};
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
          {"speculative_disable_by_batch_size", c.speculative_disable_by_batch_size}};
}

nlohmann::json workload_to_json(const WorkloadSpec& w) {
  nlohmann::json wl = {{"arrival", to_string(w.arrival)}, {"seed", w.seed}};
  if (w.arrival == ArrivalProcess::Trace) {
    wl["trace"] = {{"path", w.trace.path},
                   {"format", w.trace.format == TraceFormat::Azure ? "azure" : "csv"},
                   {"rate_scale", w.trace.rate_scale},
                   {"window_start_s", w.trace.window_start_s},
                   {"max_requests", w.trace.max_requests}};
    if (std::isfinite(w.trace.window_duration_s)) wl["trace"]["window_duration_s"] = w.trace.window_duration_s;
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
  return wl;
}

nlohmann::json setup_to_json(const SimulationSetup& setup, const SchedulerConfig& c) {
  const HardwareSpec& h = setup.hardware;
  nlohmann::json j;
  j["model"] = model_to_json(setup.model);
  j["hardware"] = {{"name", h.name},
                   {"bf16_flops", h.bf16_flops},
                   {"memory_bandwidth_bytes_per_s", h.memory_bandwidth},
                   {"memory_bytes", h.memory_bytes}};
  j["scheduler"] = scheduler_to_json(c, setup.scheduler.gpu_memory_utilization);
  j["cost_model"] = {{"executor", "roofline"},
                     {"compute_efficiency", setup.roofline.compute_efficiency},
                     {"memory_efficiency", setup.roofline.memory_efficiency},
                     {"iteration_overhead_s", setup.roofline.iteration_overhead_s}};
  j["workload"] = workload_to_json(setup.workload);
  j["seed"] = setup.workload.seed;
  if (c.num_speculative_tokens > 0)
    j["speculative"] = speculative_to_json(c, setup.draft ? &*setup.draft : nullptr,
                                           setup.acceptance ? &*setup.acceptance : nullptr);
  return j;
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
