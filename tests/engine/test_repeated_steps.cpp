// The serving loop's shortcut through stretches of repeated decode steps
// (Scheduler::repeat_step): a simulation that takes it runs exactly the
// plans, durations and records of one that schedules every step in full --
// under both continuous policies, preemption, prefix caching with the
// longest-prefix-match queue, and a full batch with requests waiting.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/router.h"
#include "engine/serving_loop.h"
#include "engine/simulation.h"
#include "sim/clock.h"
#include "sim/cost/simulated_executor.h"
#include "sim/scheduler.h"
#include "sim/workload.h"
#include "support/test_support.h"

using namespace servesim;

namespace {

// One scheduled sequence as the executor saw it, block table included.
struct SeenSequence {
  int64_t request_id;
  int32_t query, cached, prefix_hit, sample_rows;
  bool prefill, samples;
  std::vector<int32_t> blocks;
  bool operator==(const SeenSequence&) const = default;
};

// A plan's counts and sums: all a lazy executor reads.
struct PlanCounts {
  int32_t prefill_tokens, decode_tokens, prefill_sequences, decode_sequences, sampling, sample_rows, prefix_hits;
  int64_t prefill_cached, prefill_pairs, decode_cached, decode_pairs;
  bool operator==(const PlanCounts&) const = default;
};

// A simulation's executor (roofline costs) that keeps every plan it ran
// and allows the shortcut or not; a lazy one reads only the plans' counts
// and sums (Executor::needs_plan_items), so the shortcut leaves the items
// of repeated decodes as they were.
class RecordingExecutor final : public Executor {
 public:
  RecordingExecutor(const CostModel& costs, const Clock& clock, bool shortcut, bool lazy)
      : inner_(costs, clock), shortcut_(shortcut), lazy_(lazy) {}
  bool needs_plan_items() const override { return !lazy_; }
  std::string name() const override { return "recording"; }
  bool emits_one_token_per_sequence() const override { return shortcut_; }
  void execute(const IterationPlan& plan, IterationResult& result) override {
    inner_.execute(plan, result);
    counts.push_back({plan.num_prefill_tokens, plan.num_decode_tokens, plan.num_prefill_sequences,
                      plan.num_decode_sequences, plan.num_sampling_sequences, plan.num_sample_rows,
                      plan.num_prefix_hit_tokens, plan.prefill_attention.cached_tokens, plan.prefill_attention.pairs,
                      plan.decode_attention.cached_tokens, plan.decode_attention.pairs});
    indices.push_back(plan.index);
    lagged += plan.items_lag ? 1 : 0;
    if (lazy_) return;
    std::vector<SeenSequence>& seen = plans.emplace_back();
    for (const ScheduledSequence& s : plan.sequences)
      seen.push_back({s.request_id, s.num_query_tokens, s.num_cached_tokens, s.prefix_hit_tokens, s.num_sample_rows,
                      s.is_prefill, s.samples, std::vector<int32_t>(s.block_table.begin(), s.block_table.end())});
  }
  std::vector<std::vector<SeenSequence>> plans;  // not kept by a lazy one
  std::vector<PlanCounts> counts;
  std::vector<int64_t> indices;
  int64_t lagged = 0;  // plans whose items lagged

 private:
  SimulatedExecutor inner_;
  bool shortcut_, lazy_;
};

struct Run {
  RunRecords records;
  std::vector<std::vector<SeenSequence>> plans;
  std::vector<PlanCounts> counts;
  std::vector<int64_t> indices;
  int64_t lagged = 0;
  int64_t repeated_steps = 0;
  int64_t observed = 0;  // after_iteration calls
};

class CountingObserver final : public LoopObserver {
 public:
  explicit CountingObserver(bool needs_items) : needs_items_(needs_items) {}
  bool needs_plan_items() const override { return needs_items_; }
  void after_iteration(const IterationPlan& plan, const IterationResult&, const IterationRecord& rec) override {
    ++calls;
    if (rec.index != plan.index) mismatched = true;
  }
  int64_t calls = 0;
  bool mismatched = false;

 private:
  bool needs_items_;
};

Run run(const SchedulerConfig& config, const Workload& workload, const CostModel& costs, bool shortcut,
        bool lazy = false) {
  Scheduler scheduler(config);
  VirtualClock clock;
  RecordingExecutor executor(costs, clock, shortcut, lazy);
  CountingObserver observer(!lazy);
  LoopOptions options;
  options.observers.push_back(&observer);
  Run out;
  out.records = run_serving_loop(scheduler, executor, clock, workload, options);
  out.plans = std::move(executor.plans);
  out.counts = std::move(executor.counts);
  out.indices = std::move(executor.indices);
  out.lagged = executor.lagged;
  out.repeated_steps = scheduler.num_repeated_steps();
  out.observed = observer.calls;
  REQUIRE_FALSE(observer.mismatched);
  return out;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void require_identical(const Run& fast, const Run& full) {
  // A lazy run keeps no items: its plans' counts and sums are compared.
  if (!fast.plans.empty() || fast.counts.empty()) {
    REQUIRE(fast.plans.size() == full.plans.size());
    for (size_t i = 0; i < fast.plans.size(); ++i) {
      INFO("plan " << i);
      REQUIRE(fast.plans[i] == full.plans[i]);
    }
  }
  REQUIRE(fast.counts.size() == full.counts.size());
  for (size_t i = 0; i < fast.counts.size(); ++i) {
    INFO("plan " << i);
    REQUIRE(fast.counts[i] == full.counts[i]);
  }
  CHECK(fast.indices == full.indices);
  CHECK(fast.observed == full.observed);
  const RunRecords &a = fast.records, &b = full.records;
  REQUIRE(a.requests.size() == b.requests.size());
  for (size_t i = 0; i < a.requests.size(); ++i) {
    const RequestRecord &x = a.requests[i], &y = b.requests[i];
    INFO("request " << i);
    CHECK(same_bits(x.arrival_s, y.arrival_s));
    CHECK(same_bits(x.first_scheduled_s, y.first_scheduled_s));
    CHECK(same_bits(x.first_token_s, y.first_token_s));
    CHECK(same_bits(x.last_token_s, y.last_token_s));
    CHECK(same_bits(x.finish_s, y.finish_s));
    CHECK(x.tokens_emitted == y.tokens_emitted);
    CHECK(x.emissions == y.emissions);
    CHECK(x.preemptions == y.preemptions);
    CHECK(x.cached_tokens == y.cached_tokens);
    CHECK(x.rejection == y.rejection);
  }
  REQUIRE(a.iterations.size() == b.iterations.size());
  for (size_t i = 0; i < a.iterations.size(); ++i) {
    const IterationRecord &x = a.iterations[i], &y = b.iterations[i];
    INFO("iteration " << i);
    CHECK(x.index == y.index);
    CHECK(same_bits(x.start_s, y.start_s));
    CHECK(same_bits(x.duration_s, y.duration_s));
    CHECK(x.prefill_tokens == y.prefill_tokens);
    CHECK(x.decode_tokens == y.decode_tokens);
    CHECK(x.decode_sequences == y.decode_sequences);
    CHECK(x.sampled_sequences == y.sampled_sequences);
    CHECK(x.prefix_hit_tokens == y.prefix_hit_tokens);
    CHECK(x.kv_blocks_used == y.kv_blocks_used);
    CHECK(x.waiting == y.waiting);
    CHECK(x.emitted_tokens == y.emitted_tokens);
    CHECK(x.first_token_prompt_tokens == y.first_token_prompt_tokens);
  }
  // vLLM's step tokens add up to the requests': every emitted token once,
  // every prompt once, at its first token (a recomputation after a
  // preemption emits again but is not a first token).
  int64_t emitted = 0, first_prompts = 0, tokens_emitted = 0, prompts = 0;
  for (const IterationRecord& it : a.iterations) {
    emitted += it.emitted_tokens;
    first_prompts += it.first_token_prompt_tokens;
  }
  for (const RequestRecord& r : a.requests) {
    tokens_emitted += r.tokens_emitted;
    if (r.emissions > 0) prompts += r.prompt_tokens;
  }
  CHECK(emitted == tokens_emitted);
  CHECK(first_prompts == prompts);
  CHECK(a.num_iterations == b.num_iterations);
  CHECK(a.batch_tokens == b.batch_tokens);
  CHECK(a.batch_sequences == b.batch_sequences);
  CHECK(a.preemptions == b.preemptions);
  CHECK(a.peak_kv_blocks == b.peak_kv_blocks);
  CHECK(a.prefix_cache.hits_tokens == b.prefix_cache.hits_tokens);
  CHECK(a.prefix_cache.evicted_blocks == b.prefix_cache.evicted_blocks);
  CHECK(same_bits(a.end_s, b.end_s));
  StreamingSamples itl_a = a.itl_s, itl_b = b.itl_s;
  const Distribution x = itl_a.summarize(), y = itl_b.summarize();
  CHECK(x.count == y.count);
  CHECK(same_bits(x.mean, y.mean));
  CHECK(same_bits(x.p50, y.p50));
  CHECK(same_bits(x.p99, y.p99));
  CHECK(same_bits(x.max, y.max));
}

struct Case {
  const char* name;
  SchedulerPolicy policy;
  double rate;
  int64_t requests;
  int64_t gpu_blocks;  // 0: what the h200 holds
  int32_t max_num_seqs;
  int64_t shared_prefix_groups;
  WaitingOrder order;
};

}  // namespace

TEST_CASE("Repeated decode steps give the plans and records of full scheduling", "[runner][repeats]") {
  const Case cases[] = {
      {"chunked", SchedulerPolicy::Chunked, 20, 300, 0, 256, 0, WaitingOrder::Fcfs},
      {"continuous", SchedulerPolicy::Continuous, 12, 200, 0, 256, 0, WaitingOrder::Fcfs},
      {"chunked, preempting", SchedulerPolicy::Chunked, 40, 300, 1500, 256, 0, WaitingOrder::Fcfs},
      {"continuous, preempting", SchedulerPolicy::Continuous, 40, 300, 1500, 256, 0, WaitingOrder::Fcfs},
      {"chunked, full batch, prefix cache, lpm", SchedulerPolicy::Chunked, 30, 300, 2500, 6, 3,
       WaitingOrder::LongestPrefixMatch},
      {"continuous, full batch, prefix cache, lpm", SchedulerPolicy::Continuous, 30, 200, 2500, 5, 3,
       WaitingOrder::LongestPrefixMatch},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.name) {
      SimulationSetup setup = test::roofline_setup(c.policy, c.rate, c.requests, "lognormal:600:1.0:16:2000",
                                                   "lognormal:150:1.0:1:600", 11);
      setup.scheduler.max_num_seqs = c.max_num_seqs;
      if (c.gpu_blocks > 0) setup.scheduler.num_gpu_blocks = c.gpu_blocks;
      setup.scheduler.waiting_order = c.order;
      setup.workload.shared_prefix_groups = c.shared_prefix_groups;
      setup.workload.shared_prefix_len = c.shared_prefix_groups > 0 ? 300 : 0;
      const SchedulerConfig config = resolve_scheduler_config(setup);
      const Workload workload = make_workload(setup.workload);
      const CostModels costs = setup_cost_models(setup);
      const Run fast = run(config, workload, *costs.target, true);
      const Run full = run(config, workload, *costs.target, false);
      CHECK(full.repeated_steps == 0);
      // The shortcut was taken for a good share of the steps.
      CHECK(fast.repeated_steps > int64_t(fast.plans.size()) / 10);
      if (c.gpu_blocks > 0 && c.shared_prefix_groups == 0) CHECK(full.records.preemptions > 0);
      if (c.shared_prefix_groups > 0) CHECK(full.records.prefix_cache.hits_tokens > 0);
      require_identical(fast, full);
      // Lazily (the roofline reads the plans' sums): the same records and
      // counts, the repeated steps' items left lagging.
      const Run lazy = run(config, workload, *costs.target, true, true);
      CHECK(lazy.repeated_steps == fast.repeated_steps);
      CHECK(lazy.lagged == lazy.repeated_steps);
      require_identical(lazy, full);
    }
  }
}

TEST_CASE("Replicas behind a router repeat decode steps as one replica does", "[runner][repeats]") {
  // Each replica's stretches are interleaved with the others' steps and
  // with arrivals routed on the replicas' state.
  for (const RouterPolicy policy : {RouterPolicy::RoundRobin, RouterPolicy::LeastRequests, RouterPolicy::PrefixAffinity}) {
    INFO("router " << int(policy));
    SimulationSetup setup = test::roofline_setup(SchedulerPolicy::Chunked, 60, 400, "lognormal:600:1.0:16:2000",
                                                 "lognormal:150:1.0:1:600", 5);
    setup.scheduler.num_gpu_blocks = 3000;
    setup.workload.shared_prefix_groups = 4;
    setup.workload.shared_prefix_len = 200;
    const SchedulerConfig config = resolve_scheduler_config(setup);
    const Workload workload = make_workload(setup.workload);
    const CostModels costs = setup_cost_models(setup);
    std::vector<Run> runs;
    for (const bool shortcut : {true, false}) {
      std::vector<std::unique_ptr<Scheduler>> schedulers;
      std::vector<std::unique_ptr<VirtualClock>> clocks;
      std::vector<std::unique_ptr<RecordingExecutor>> executors;
      std::vector<ServingReplica> parts;
      for (int j = 0; j < 3; ++j) {
        schedulers.push_back(std::make_unique<Scheduler>(config));
        clocks.push_back(std::make_unique<VirtualClock>());
        executors.push_back(std::make_unique<RecordingExecutor>(*costs.target, *clocks.back(), shortcut, false));
        parts.push_back({schedulers.back().get(), executors.back().get(), clocks.back().get()});
      }
      RouterSettings settings;
      settings.policy = policy;
      Router router(settings);
      Run& run = runs.emplace_back();
      run.records = run_cluster_loop(parts, router, workload);
      for (int j = 0; j < 3; ++j) {
        // Every replica's plans, one after another, in its own order.
        for (auto& plan : executors[size_t(j)]->plans) run.plans.push_back(std::move(plan));
        for (int64_t index : executors[size_t(j)]->indices) run.indices.push_back(index);
        run.repeated_steps += schedulers[size_t(j)]->num_repeated_steps();
      }
    }
    CHECK(runs[0].repeated_steps > int64_t(runs[0].plans.size()) / 10);
    CHECK(runs[1].repeated_steps == 0);
    for (size_t i = 0; i < runs[0].records.requests.size(); ++i)
      REQUIRE(runs[0].records.requests[i].replica == runs[1].records.requests[i].replica);
    require_identical(runs[0], runs[1]);
  }
}

TEST_CASE("A run that may not repeat steps (speculation, static) makes none", "[runner][repeats]") {
  SimulationSetup setup = test::roofline_setup(SchedulerPolicy::Static, 20, 100, "lognormal:300:1.0:16:1000",
                                               "lognormal:100:1.0:1:300", 3);
  const SchedulerConfig config = resolve_scheduler_config(setup);
  const Workload workload = make_workload(setup.workload);
  const CostModels costs = setup_cost_models(setup);
  CHECK(run(config, workload, *costs.target, true).repeated_steps == 0);
}
