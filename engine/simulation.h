// A simulation: a workload served by the one scheduler and serving loop
// (engine/serving_loop.h) on a virtual clock, each iteration costed by a
// cost model (sim/cost/). Shared by `simulate`, `sweep` (which runs
// simulate), `validate`'s predict mode, the benchmarks and the tests.
#pragma once

#include <functional>
#include <optional>
#include <span>

#include <nlohmann/json.hpp>

#include "engine/serving_loop.h"
#include "sim/acceptance.h"
#include "sim/cost/cost_jitter.h"
#include "sim/cost/cost_models.h"
#include "sim/draft_model.h"
#include "sim/draw_band.h"
#include "sim/hardware_spec.h"
#include "sim/metrics.h"
#include "sim/model_spec.h"
#include "sim/parallel_config.h"
#include "sim/scheduler_settings.h"
#include "sim/speculative_stats.h"
#include "sim/workload.h"

namespace servesim {

struct SimulationSetup {
  ModelSpec model;
  HardwareSpec hardware;  // the roofline's device; with a profile it only sizes the KV cache
  SchedulerSettings scheduler;
  CostModelSettings cost;
  WorkloadSpec workload;
  SloTargets slo;
  bool keep_iterations = true;
  // Speculative decoding (scheduler.num_speculative_tokens > 0): the draft
  // and the acceptance model (sim/acceptance.h).
  std::optional<DraftModel> draft;
  std::optional<AcceptanceModel> acceptance;
  // Tensor/pipeline parallelism: the GPUs of one replica
  // (cost.interconnect connects them).
  ParallelConfig parallel;
  // Replicas of that group behind a router (--num-replicas, --router), in
  // one discrete-event simulation (engine/serving_loop.h).
  int32_t num_replicas = 1;
  RouterSettings router;
};

// A parallel run's time on the interconnect: the communication of every
// iteration (CommunicationModel, before any multiplier) beside the busy
// time (every iteration's duration), summed over the pipeline's engines.
struct CommunicationTally {
  double communication_s = 0, busy_s = 0;
  double share() const { return busy_s > 0 ? communication_s / busy_s : 0.0; }
};

struct SimulationOutput {
  SchedulerConfig scheduler;  // as resolved
  RunRecords records;
  RunSummary summary;
  std::optional<SpeculativeStats> speculative;  // a speculative run's statistics
  std::optional<CommunicationTally> communication;  // more than one GPU
};

// How a simulation speculates: acceptance drawn from `acceptance`, seeded
// by `seed`; the draft's cost model is CostModels::draft.
struct SimulatedSpeculation {
  AcceptanceModel acceptance;
  uint64_t seed = 0;
};

// The core of every simulation: `workload` served with the resolved
// `config` on a virtual clock, each iteration costed by `costs` (with
// `speculation` when config.num_speculative_tokens > 0) times every
// multiplier, summarised against `slo`. With costs.parallel's PP > 1, on
// PP virtual engines (engine/pipeline_engines.h) whose records are merged.
SimulationOutput simulate_costed(const SchedulerConfig& config, const Workload& workload, const CostModels& costs,
                                 const SimulatedSpeculation* speculation, std::span<CostMultiplier* const> multipliers,
                                 const SloTargets& slo, const LoopOptions& loop = {});
// The same on `replicas` replicas behind `router` (each with `config`'s KV
// blocks and settings; with PP > 1 each a group of PP virtual engines, the
// router dealing a replica's requests to its engines round-robin);
// replicas = 1 is simulate_costed. InputError for replicas outside 1 .. 4096.
SimulationOutput simulate_replicas(const SchedulerConfig& config, int32_t replicas, const RouterSettings& router,
                                   const Workload& workload, const CostModels& costs,
                                   const SimulatedSpeculation* speculation,
                                   std::span<CostMultiplier* const> multipliers, const SloTargets& slo,
                                   const LoopOptions& loop = {});

// The scheduler configuration `setup` resolves to (InputError when bad).
SchedulerConfig resolve_scheduler_config(const SimulationSetup& setup);

// One simulation of `setup` (of make_workload(setup.workload), or of
// `workload`), its cost models built by build_cost_models from setup.cost.
SimulationOutput simulate(const SimulationSetup& setup, std::function<void(const RunProgress&)> progress = {});
SimulationOutput simulate_workload(const SimulationSetup& setup, const Workload& workload,
                                   std::function<void(const RunProgress&)> progress = {});
// The same with cost models already built for it, every iteration's cost
// times `multipliers` (loop.keep_iterations is setup.keep_iterations).
SimulationOutput simulate_workload(const SimulationSetup& setup, const Workload& workload, const CostModels& costs,
                                   LoopOptions loop, std::span<CostMultiplier* const> multipliers = {});
// build_cost_models for `setup` (the draft only when it speculates).
CostModels setup_cost_models(const SimulationSetup& setup);

// The one draws loop (simulate --draws, validate --predict-draws): `draws`
// simulations, draw d with every iteration's cost times a multiplier drawn
// from `jitter` by a generator seeded draw_seed(seed, d); `simulate_one`
// runs one with the multiplier it is given and returns its summary. The
// band of each latency statistic over the draws (sim/draw_band.h).
// `progress` (optional) hears (done, total) after each.
LatencyBands simulate_draws(int draws, const CostJitter& jitter, uint64_t seed,
                            const std::function<RunSummary(CostMultiplier& jitter)>& simulate_one,
                            const std::function<void(int done, int total)>& progress = {});

// summary.json's "parallel": the layout, memory per GPU (weights and the KV
// blocks of `resolved`) and the communication share of `output`.
nlohmann::json parallel_to_json(const SimulationSetup& setup, const SchedulerConfig& resolved,
                                const SimulationOutput& output);

// summary.json's "replicas" (more than one): the router and each replica's
// requests, throughput, KV peak, prefix-cache hit rate and preemptions.
nlohmann::json replicas_to_json(const SimulationSetup& setup, const SimulationOutput& output);

// Every setting of the run, for summary.json's "config".
nlohmann::json setup_to_json(const SimulationSetup& setup, const SchedulerConfig& resolved,
                             const CostModels& costs);

}  // namespace servesim
