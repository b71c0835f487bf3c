#include "engine/simulation.h"

#include <memory>
#include <stdexcept>

#include <fmt/format.h>

#include "engine/pipeline_engines.h"
#include "sim/clock.h"
#include "sim/config_json.h"
#include "sim/cost/simulated_executor.h"
#include "sim/errors.h"

namespace servesim {

namespace {

// Sums each iteration's communication and duration.
class CommunicationObserver final : public LoopObserver {
 public:
  CommunicationObserver(const CommunicationModel& model, CommunicationTally& tally) : model_(model), tally_(tally) {}
  void after_iteration(const IterationPlan& plan, const IterationResult& result, const IterationRecord&) override {
    tally_.communication_s += model_.seconds(plan);
    tally_.busy_s += result.duration_s;
  }
  bool needs_plan_items() const override { return false; }  // token and row counts

 private:
  const CommunicationModel& model_;
  CommunicationTally& tally_;
};

// `workload` served by `replicas` replicas of `config` behind `router`, each
// of `engines` PP virtual engines (engine_config's share of `config`) with
// its own scheduler, virtual clock and simulated executor; their
// speculative statistics are merged into `speculative`.
RunRecords serve_on_virtual_clocks(const SchedulerConfig& config, int32_t replicas, const RouterSettings& router,
                                   const Workload& workload, const CostModels& costs,
                                   const SimulatedSpeculation* speculation,
                                   std::span<CostMultiplier* const> multipliers, const LoopOptions& loop,
                                   std::optional<SpeculativeStats>& speculative, int32_t engines = 1) {
  std::vector<std::unique_ptr<Scheduler>> schedulers;
  std::vector<std::unique_ptr<VirtualClock>> clocks;
  std::vector<std::unique_ptr<SimulatedExecutor>> executors;
  std::vector<ServingReplica> parts;
  for (int32_t j = 0; j < replicas * engines; ++j) {
    schedulers.push_back(std::make_unique<Scheduler>(engines == 1 ? config : engine_config(config, engines, j % engines)));
    clocks.push_back(std::make_unique<VirtualClock>());
    executors.push_back(std::make_unique<SimulatedExecutor>(*costs.target, *clocks.back()));
    if (config.num_speculative_tokens > 0) {
      if (!speculation || !costs.draft)
        throw std::logic_error("simulate_replicas: a speculative configuration without a draft or acceptance");
      // Replica j draws acceptance from its own stream (replica 0: the one-replica run's).
      executors.back()->speculate(*costs.draft, speculation->acceptance, config.num_speculative_tokens,
                                  speculation->seed + uint64_t(j));
    }
    for (CostMultiplier* m : multipliers) executors.back()->multiply_by(*m);
    parts.push_back(ServingReplica{schedulers.back().get(), executors.back().get(), clocks.back().get()});
  }
  Router r(router, engines);
  RunRecords records = run_cluster_loop(parts, r, workload, loop);
  for (const auto& e : executors)
    if (const SpeculativeStats* stats = e->speculative_stats()) {
      if (speculative) speculative->merge(*stats);
      else speculative = *stats;
    }
  return records;
}

}  // namespace

SimulationOutput simulate_replicas(const SchedulerConfig& config, int32_t replicas, const RouterSettings& router,
                                   const Workload& workload, const CostModels& costs,
                                   const SimulatedSpeculation* speculation,
                                   std::span<CostMultiplier* const> multipliers, const SloTargets& slo,
                                   const LoopOptions& loop) {
  if (replicas < 1 || replicas > 4096)
    throw InputError(fmt::format("--num-replicas must be in 1 .. 4096 (got {})", replicas));
  const int32_t engines = costs.parallel.pipeline_parallel_size;
  SimulationOutput out;
  out.scheduler = config;
  LoopOptions options = loop;
  std::optional<CommunicationObserver> observer;
  if (costs.communication) {
    out.communication.emplace();
    observer.emplace(*costs.communication, *out.communication);
    options.observers.push_back(&*observer);
  }
  if (engines == 1 || replicas > 1) {
    // Replicas of PP groups: every replica's engines in one loop, the router
    // choosing the replica and dealing its requests to its engines.
    out.records = serve_on_virtual_clocks(config, replicas, router, workload, costs, speculation, multipliers,
                                          options, out.speculative, engines);
  } else {
    const std::vector<EngineShare> shares = split_for_engines(workload, engines);
    std::vector<RunRecords> parts;
    for (size_t e = 0; e < shares.size(); ++e)
      parts.push_back(serve_on_virtual_clocks(engine_config(config, int32_t(shares.size()), int32_t(e)), 1, router,
                                              shares[e].workload, costs, speculation, multipliers, options,
                                              out.speculative));
    out.records = merge_engine_records(parts, shares, workload.requests.size());
  }
  out.summary = summarize_run(out.records, slo);
  return out;
}

SimulationOutput simulate_costed(const SchedulerConfig& config, const Workload& workload, const CostModels& costs,
                                 const SimulatedSpeculation* speculation, std::span<CostMultiplier* const> multipliers,
                                 const SloTargets& slo, const LoopOptions& loop) {
  return simulate_replicas(config, 1, RouterSettings{}, workload, costs, speculation, multipliers, slo, loop);
}

SchedulerConfig resolve_scheduler_config(const SimulationSetup& setup) {
  return resolve_scheduler_config(setup.scheduler, setup.model, setup.hardware,
                                  setup.draft ? &*setup.draft : nullptr, setup.parallel);
}

CostModels setup_cost_models(const SimulationSetup& setup) {
  const bool speculating = setup.scheduler.num_speculative_tokens > 0 && setup.draft;
  return build_cost_models(setup.cost, setup.model, setup.hardware, speculating ? &*setup.draft : nullptr,
                           setup.parallel);
}

namespace {

// The scheduler configuration of `setup`, its speculative flags checked.
SchedulerConfig checked_config(const SimulationSetup& setup) {
  const SchedulerConfig config = resolve_scheduler_config(setup);
  check_speculative_flags(config.num_speculative_tokens, setup.draft.has_value(), setup.acceptance.has_value(),
                          true);
  return config;
}

SimulationOutput simulate_checked(const SimulationSetup& setup, const SchedulerConfig& config,
                                  const Workload& workload, const CostModels& costs, LoopOptions loop,
                                  std::span<CostMultiplier* const> multipliers) {
  std::optional<SimulatedSpeculation> speculation;
  if (config.num_speculative_tokens > 0) speculation = SimulatedSpeculation{*setup.acceptance, setup.workload.seed};
  loop.keep_iterations = setup.keep_iterations;
  return simulate_replicas(config, setup.num_replicas, setup.router, workload, costs,
                           speculation ? &*speculation : nullptr, multipliers, setup.slo, loop);
}

}  // namespace

SimulationOutput simulate_workload(const SimulationSetup& setup, const Workload& workload, const CostModels& costs,
                                   LoopOptions loop, std::span<CostMultiplier* const> multipliers) {
  return simulate_checked(setup, checked_config(setup), workload, costs, std::move(loop), multipliers);
}

SimulationOutput simulate_workload(const SimulationSetup& setup, const Workload& workload,
                                   std::function<void(const RunProgress&)> progress) {
  // Settings that cannot be served fail before any cost model is built.
  const SchedulerConfig config = checked_config(setup);
  LoopOptions loop;
  loop.progress = std::move(progress);
  return simulate_checked(setup, config, workload, setup_cost_models(setup), std::move(loop), {});
}

SimulationOutput simulate(const SimulationSetup& setup, std::function<void(const RunProgress&)> progress) {
  setup.model.validate(setup.model.name);
  return simulate_workload(setup, make_workload(setup.workload), std::move(progress));
}

LatencyBands simulate_draws(int draws, const CostJitter& jitter, uint64_t seed,
                            const std::function<RunSummary(CostMultiplier& jitter)>& simulate_one,
                            const std::function<void(int done, int total)>& progress) {
  if (draws < 1 || draws > kMaxDraws)
    throw InputError(fmt::format("draws {}: expected 1 .. {}", draws, kMaxDraws));
  std::vector<RunSummary> drawn;
  drawn.reserve(size_t(draws));
  for (int d = 0; d < draws; ++d) {
    JitterMultiplier multiplier(jitter, draw_seed(seed, d));
    drawn.push_back(simulate_one(multiplier));
    if (progress) progress(d + 1, draws);
  }
  return band_latencies(drawn);
}

nlohmann::json parallel_to_json(const SimulationSetup& setup, const SchedulerConfig& c,
                                const SimulationOutput& output) {
  const ParallelConfig& p = setup.parallel;
  const DraftModel* draft = setup.draft && c.num_speculative_tokens > 0 ? &*setup.draft : nullptr;
  double weights = weight_bytes_per_gpu(setup.model, p);
  double kv_token = kv_bytes_per_token_per_gpu(setup.model, p);
  if (draft) {
    if (!draft->shares_target_weights) weights += weight_bytes_per_gpu(draft->spec, p);
    kv_token += kv_bytes_per_token_per_gpu(draft->spec, p);
  }
  const double kv = double(c.num_gpu_blocks) * c.block_size * kv_token;
  nlohmann::json j = p.to_json();
  j["layout"] = describe_layout(p);
  const RankShape r = rank_shape(setup.model, p);
  j["rank_shape"] = {{"attention_heads", r.heads},
                     {"kv_heads", r.kv_heads},
                     {"kv_heads_replicated", r.kv_heads_replicated},
                     {"intermediate_size", r.intermediate},
                     {"vocab_rows", r.vocab},
                     {"layers_per_stage", r.layers_per_stage}};
  j["memory_per_gpu"] = {
      {"weights_bytes", weights},
      {"kv_cache_bytes", kv},
      {"activations_bytes", 0},
      {"total_bytes", weights + kv},
      {"meaning", "one GPU of the group: its share of the weights and the KV blocks of num_gpu_blocks (each "
                  "holding its stage's layers and its ranks' KV heads); activations are not reserved, as "
                  "the KV rule sizes the cache without vLLM's activation-peak profiling"}};
  if (p.pipeline_parallel_size > 1)
    j["virtual_engines"] = {{"engines", p.pipeline_parallel_size},
                            {"meaning", "batches in flight: each engine has its own requests (round-robin), "
                                        "num_gpu_blocks / PP blocks and max_num_seqs / PP sequences"}};
  if (output.communication) {
    j["communication_s"] = output.communication->communication_s;
    j["busy_s"] = output.communication->busy_s;
    j["communication_share"] = output.communication->share();
  }
  return j;
}

nlohmann::json replicas_to_json(const SimulationSetup& setup, const SimulationOutput& output) {
  const RunRecords& records = output.records;
  const size_t n = records.replicas.size();
  struct Tally {
    int64_t submitted = 0, completed = 0, rejected = 0, output_tokens = 0, prompt_tokens = 0, cached_tokens = 0;
  };
  std::vector<Tally> t(n);
  for (const RequestRecord& r : records.requests) {
    if (!r.submitted() || size_t(r.replica) >= n) continue;
    Tally& x = t[size_t(r.replica)];
    ++x.submitted;
    if (r.rejected()) ++x.rejected;
    if (r.completed()) {
      ++x.completed;
      x.output_tokens += r.tokens_emitted;
    }
    if (!r.rejected()) {
      x.prompt_tokens += r.prompt_tokens;
      x.cached_tokens += r.cached_tokens;
    }
  }
  const double duration = output.summary.duration_s;
  nlohmann::json per = nlohmann::json::array();
  for (size_t j = 0; j < n; ++j) {
    const ReplicaRecord& rr = records.replicas[j];
    per.push_back({{"replica", j},
                   {"requests", {{"submitted", t[j].submitted}, {"completed", t[j].completed},
                                 {"rejected", t[j].rejected}}},
                   {"output_tokens_per_s", duration > 0 ? double(t[j].output_tokens) / duration : 0.0},
                   {"kv_cache", {{"num_gpu_blocks", rr.num_gpu_blocks}, {"peak_blocks_used", rr.peak_kv_blocks},
                                 {"peak_utilization", rr.num_gpu_blocks > 0
                                                          ? double(rr.peak_kv_blocks) / double(rr.num_gpu_blocks)
                                                          : 0.0}}},
                   // Only where the cluster looked prefixes up at all (token identity, caching on).
                   {"prefix_cache_hit_rate", output.summary.prefix_cache_hit_rate && t[j].prompt_tokens > 0
                                                 ? nlohmann::json(double(t[j].cached_tokens) / double(t[j].prompt_tokens))
                                                 : nlohmann::json()},
                   {"preemptions", rr.preemptions}});
  }
  return {{"num_replicas", n},
          {"router", to_string(setup.router.policy)},
          {"per_replica", per},
          {"meaning", "each replica is one GPU group (TP x PP GPUs) with its own scheduler and KV cache; the "
                      "top-level metrics are the cluster's. prefix_cache_hit_rate: prompt tokens found in the "
                      "replica's cache at first admission over its requests' prompt tokens; output_tokens_per_s "
                      "over the cluster's duration"}};
}

nlohmann::json setup_to_json(const SimulationSetup& setup, const SchedulerConfig& c, const CostModels& costs) {
  const HardwareSpec& h = setup.hardware;
  nlohmann::json j;
  j["model"] = model_to_json(setup.model);
  j["hardware"] = {{"name", h.name},
                   {"bf16_flops", h.bf16_flops},
                   {"fp8_flops", h.fp8_flops},
                   {"int8_ops", h.int8_ops},
                   {"memory_bandwidth_bytes_per_s", h.memory_bandwidth},
                   {"memory_bytes", h.memory_bytes}};
  j["scheduler"] = scheduler_to_json(c, setup.scheduler.gpu_memory_utilization);
  j["cost_model"] = costs.describe();
  if (!setup.parallel.single_gpu()) j["parallel"] = setup.parallel.to_json();
  if (setup.num_replicas > 1)
    j["replicas"] = {{"num_replicas", setup.num_replicas},
                     {"router", to_string(setup.router.policy)},
                     {"seed", setup.router.seed},
                     {"balance_abs_threshold", setup.router.balance_abs_threshold},
                     {"balance_rel_threshold", setup.router.balance_rel_threshold}};
  j["workload"] = workload_to_json(setup.workload);
  j["seed"] = setup.workload.seed;
  if (c.num_speculative_tokens > 0)
    j["speculative"] = speculative_to_json(c, setup.draft ? &*setup.draft : nullptr,
                                           setup.acceptance ? &*setup.acceptance : nullptr);
  return j;
}

}  // namespace servesim
