#include "engine/simulation.h"

#include <stdexcept>

#include <fmt/format.h>

#include "sim/clock.h"
#include "sim/config_json.h"
#include "sim/cost/simulated_executor.h"
#include "sim/errors.h"

namespace servesim {

SimulationOutput simulate_costed(const SchedulerConfig& config, const Workload& workload, const CostModels& costs,
                                 const SimulatedSpeculation* speculation, std::span<CostMultiplier* const> multipliers,
                                 const SloTargets& slo, const LoopOptions& loop) {
  SimulationOutput out;
  out.scheduler = config;
  Scheduler scheduler(out.scheduler);
  VirtualClock clock;
  SimulatedExecutor executor(*costs.target, clock);
  if (config.num_speculative_tokens > 0) {
    if (!speculation || !costs.draft)
      throw std::logic_error("simulate_costed: a speculative configuration without a draft or acceptance");
    executor.speculate(*costs.draft, speculation->acceptance, config.num_speculative_tokens, speculation->seed);
  }
  for (CostMultiplier* m : multipliers) executor.multiply_by(*m);
  out.records = run_serving_loop(scheduler, executor, clock, workload, loop);
  out.summary = summarize_run(out.records, slo);
  if (const SpeculativeStats* stats = executor.speculative_stats()) out.speculative = *stats;
  return out;
}

SchedulerConfig resolve_scheduler_config(const SimulationSetup& setup) {
  return resolve_scheduler_config(setup.scheduler, setup.model, setup.hardware,
                                  setup.draft ? &*setup.draft : nullptr);
}

CostModels setup_cost_models(const SimulationSetup& setup) {
  const bool speculating = setup.scheduler.num_speculative_tokens > 0 && setup.draft;
  return build_cost_models(setup.cost, setup.model, setup.hardware, speculating ? &*setup.draft : nullptr);
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
  return simulate_costed(config, workload, costs, speculation ? &*speculation : nullptr, multipliers, setup.slo,
                         loop);
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
  j["workload"] = workload_to_json(setup.workload);
  j["seed"] = setup.workload.seed;
  if (c.num_speculative_tokens > 0)
    j["speculative"] = speculative_to_json(c, setup.draft ? &*setup.draft : nullptr,
                                           setup.acceptance ? &*setup.acceptance : nullptr);
  return j;
}

}  // namespace servesim
