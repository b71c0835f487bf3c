// The real engine end to end: DecoderExecutor driven by the Scheduler and
// the serving loop. Whatever the policy, batch, chunking or preemption, a request
// generates exactly the tokens a plain token-by-token loop over the decoder
// generates for it alone.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kernels/decoder/decoder_executor.h"
#include "engine/decoder_run.h"
#include "kernels/decoder/host_weights.h"
#include "sim/clock.h"
#include "sim/errors.h"
#include "engine/serving_loop.h"
#include "sim/scheduler.h"
#include "support/test_support.h"
#include "sim/workload.h"
#include "validate/host_drift/stoppable_clock.h"

using namespace servesim;
using Catch::Matchers::Contains;

namespace {

constexpr uint64_t kWeightsSeed = 3;
constexpr uint64_t kPromptSeed = 5;

ModelSpec engine_spec() {
  return test::small_model("test-engine", 32, 64, 2, 4, 2, 8, 61, 512, "float32");
}

// Seven requests, all at t = 0 (so the batches formed do not depend on how
// long iterations take), with mixed prompt and output lengths.
Workload engine_workload() {
  const int32_t prompts[] = {5, 17, 9, 30, 3, 12, 22};
  const int32_t outputs[] = {8, 3, 12, 6, 10, 1, 9};
  Workload w;
  for (int64_t i = 0; i < 7; ++i) w.requests.push_back(Request{i, 0.0, prompts[i], outputs[i]});
  return w;
}

DecoderExecutorOptions decoding(double temperature, bool honor_eos = false) {
  DecoderExecutorOptions o;
  o.sampling = SamplingParams{temperature, 1.0, 99};
  o.prompt_seed = kPromptSeed;
  o.honor_eos = honor_eos;
  return o;
}

std::unique_ptr<DecoderModel> make_model(const ModelSpec& spec, int64_t num_blocks, int32_t block_size) {
  return make_cpu_decoder(random_weights(spec, kWeightsSeed), num_blocks, block_size, CpuDecoderOptions{1});
}

// The tokens request `r` generates when decoded alone, token by token, with
// a plain loop over the decoder: the prompt the executor would use, one
// prefill, then one decode per token; each token drawn by sample_token at
// its position, as the executor draws it.
std::vector<int32_t> reference_output(const ModelSpec& spec, const DecoderExecutorOptions& options,
                                      const Request& r) {
  const int32_t bs = 8;
  const int64_t blocks = (r.prompt_tokens + r.output_tokens + bs - 1) / bs;
  DecoderExecutor prompts(make_model(spec, 1, 1), options);  // only for prompt_token
  auto model = make_model(spec, blocks, bs);
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  std::vector<int32_t> tokens, out;
  for (int64_t p = 0; p < r.prompt_tokens; ++p) tokens.push_back(prompts.prompt_token(r.id, p));
  BatchLayout layout;
  layout.add_sequence(tokens, 0, table, true);
  for (;;) {
    const auto& logits = model->forward(layout);
    const int32_t t = sample_token(logits, options.sampling, r.id, int64_t(tokens.size()));
    out.push_back(t);
    if (int32_t(out.size()) == r.output_tokens) return out;
    tokens.push_back(t);
    layout.clear();
    layout.add_sequence(std::span<const int32_t>(tokens).last(1), int32_t(tokens.size()) - 1, table, true);
  }
}

std::vector<std::vector<int32_t>> reference_outputs(const ModelSpec& spec, const DecoderExecutorOptions& options,
                                                    const Workload& w) {
  std::vector<std::vector<int32_t>> out;
  for (const Request& r : w.requests) out.push_back(reference_output(spec, options, r));
  return out;
}

SchedulerConfig config(SchedulerPolicy policy, int32_t max_num_seqs, int32_t max_num_batched_tokens,
                       int64_t num_gpu_blocks) {
  SchedulerConfig c;
  c.policy = policy;
  c.max_num_seqs = max_num_seqs;
  c.max_num_batched_tokens = max_num_batched_tokens;
  c.block_size = 4;
  c.num_gpu_blocks = num_gpu_blocks;
  c.max_model_len = 512;
  return c;
}

struct EngineRun {
  RunRecords records;
  std::unordered_map<int64_t, std::vector<int32_t>> outputs;
};

// Scheduler + serving loop + DecoderExecutor on a virtual clock (the executor
// still measures real durations; with every arrival at t = 0 they decide
// nothing).
EngineRun run_decoder(const ModelSpec& spec, const SchedulerConfig& cfg, const DecoderExecutorOptions& options,
                      const Workload& workload) {
  DecoderExecutor executor(make_model(spec, cfg.num_gpu_blocks, cfg.block_size), options);
  executor.keep_outputs(true);
  Scheduler scheduler(cfg);
  VirtualClock clock;
  EngineRun run;
  run.records = run_serving_loop(scheduler, executor, clock, workload);
  run.outputs = executor.outputs();
  // Finished requests' state is gone from the executor.
  for (const Request& r : workload.requests) REQUIRE(executor.tokens_of(r.id) == nullptr);
  return run;
}

// Every request completed with the expected tokens (and so their count).
void require_outputs(const EngineRun& run, const Workload& w, const std::vector<std::vector<int32_t>>& want) {
  REQUIRE(run.records.requests.size() == w.requests.size());
  for (const Request& r : w.requests) {
    INFO("request " << r.id);
    const RequestRecord& rec = run.records.requests[size_t(r.id)];
    REQUIRE_FALSE(rec.rejected());
    REQUIRE(rec.completed());
    REQUIRE(rec.tokens_emitted == int32_t(want[size_t(r.id)].size()));
    REQUIRE(run.outputs.count(r.id) == 1);
    REQUIRE(run.outputs.at(r.id) == want[size_t(r.id)]);
  }
}

bool any_iteration(const RunRecords& records, bool (*pred)(const IterationRecord&)) {
  return std::any_of(records.iterations.begin(), records.iterations.end(), pred);
}

}  // namespace

TEST_CASE("engine: greedy tokens are the same alone, batched, chunked and preempted", "[engine]") {
  const ModelSpec spec = engine_spec();
  const Workload w = engine_workload();
  const auto options = decoding(0.0);
  const auto want = reference_outputs(spec, options, w);
  // Greedy decoding of a random model must not be degenerate: the test
  // compares varied token streams.
  std::vector<int32_t> all;
  for (const auto& o : want) all.insert(all.end(), o.begin(), o.end());
  std::sort(all.begin(), all.end());
  REQUIRE(std::unique(all.begin(), all.end()) - all.begin() >= 10);

  SECTION("one request at a time") {
    const auto run = run_decoder(spec, config(SchedulerPolicy::Continuous, 1, 2048, 64), options, w);
    require_outputs(run, w, want);
    REQUIRE_FALSE(any_iteration(run.records, [](const IterationRecord& it) {
      return it.prefill_sequences + it.decode_sequences > 1;
    }));
  }
  SECTION("continuous batching") {
    const auto run = run_decoder(spec, config(SchedulerPolicy::Continuous, 4, 2048, 64), options, w);
    require_outputs(run, w, want);
    REQUIRE(any_iteration(run.records, [](const IterationRecord& it) { return it.decode_sequences >= 3; }));
    REQUIRE(run.records.preemptions == 0);
  }
  SECTION("static batches") {
    const auto run = run_decoder(spec, config(SchedulerPolicy::Static, 3, 2048, 64), options, w);
    require_outputs(run, w, want);
  }
  SECTION("chunked prefill mixed with decodes") {
    // A 7-token budget splits every longer prompt into chunks and packs
    // them with the running decodes.
    const auto run = run_decoder(spec, config(SchedulerPolicy::Chunked, 4, 7, 64), options, w);
    require_outputs(run, w, want);
    REQUIRE(any_iteration(run.records, [](const IterationRecord& it) {
      return it.prefill_tokens > 0 && it.decode_sequences >= 2;
    }));
    REQUIRE(run.records.preemptions == 0);
  }
  SECTION("preemption and recompute under continuous batching") {
    // 12 blocks of 4 tokens hold the longest request (36 tokens) but not
    // several at once: decodes run out of blocks and the newest is
    // preempted, then recomputes its prompt and generated tokens.
    const auto run = run_decoder(spec, config(SchedulerPolicy::Continuous, 7, 2048, 12), options, w);
    REQUIRE(run.records.preemptions > 0);
    require_outputs(run, w, want);
  }
  SECTION("preemption and recompute under chunked prefill") {
    const auto run = run_decoder(spec, config(SchedulerPolicy::Chunked, 7, 16, 12), options, w);
    REQUIRE(run.records.preemptions > 0);
    require_outputs(run, w, want);
  }
}

TEST_CASE("engine: sampled tokens do not depend on batching either", "[engine]") {
  // Each draw is seeded by (seed, request, position): with temperature the
  // tokens are still those of the request decoded alone.
  const ModelSpec spec = engine_spec();
  const Workload w = engine_workload();
  const auto options = decoding(0.8);
  const auto want = reference_outputs(spec, options, w);
  require_outputs(run_decoder(spec, config(SchedulerPolicy::Chunked, 4, 7, 64), options, w), w, want);
  const auto preempted = run_decoder(spec, config(SchedulerPolicy::Continuous, 7, 2048, 12), options, w);
  REQUIRE(preempted.records.preemptions > 0);
  require_outputs(preempted, w, want);
  // And they differ from greedy decoding.
  REQUIRE(want != reference_outputs(spec, decoding(0.0), w));
}

TEST_CASE("engine: with honor_eos a request stops at the model's end-of-sequence token", "[engine]") {
  ModelSpec spec = engine_spec();
  const Workload w = engine_workload();
  const auto full = reference_outputs(spec, decoding(0.0), w);
  // Make EOS a token greedy decoding produces for the first time at step
  // k >= 2 of some request that asks for more than k + 1 tokens.
  int32_t eos = -1;
  for (size_t r = 0; r < full.size() && eos < 0; ++r)
    for (size_t k = 2; k + 1 < full[r].size() && eos < 0; ++k)
      if (std::find(full[r].begin(), full[r].begin() + long(k), full[r][k]) == full[r].begin() + long(k))
        eos = full[r][k];
  REQUIRE(eos >= 0);
  spec.eos_token_id = eos;
  // Every request's output up to and including its first EOS.
  std::vector<std::vector<int32_t>> want = full;
  int stopped_early = 0;
  for (auto& o : want) {
    const auto it = std::find(o.begin(), o.end(), eos);
    if (it != o.end() && it + 1 != o.end()) {
      o.erase(it + 1, o.end());
      ++stopped_early;
    }
  }
  REQUIRE(stopped_early >= 1);

  SECTION("honoured: requests end at EOS, the others are unaffected") {
    const auto run = run_decoder(spec, config(SchedulerPolicy::Chunked, 4, 7, 64), decoding(0.0, true), w);
    require_outputs(run, w, want);
    for (const Request& r : w.requests) {
      const RequestRecord& rec = run.records.requests[size_t(r.id)];
      REQUIRE(rec.tokens_emitted <= rec.output_tokens);
    }
  }
  SECTION("honoured under preemption") {
    const auto run = run_decoder(spec, config(SchedulerPolicy::Continuous, 7, 2048, 12), decoding(0.0, true), w);
    require_outputs(run, w, want);
  }
  SECTION("ignored by default: every request generates all it asked for") {
    const auto run = run_decoder(spec, config(SchedulerPolicy::Chunked, 4, 7, 64), decoding(0.0, false), w);
    require_outputs(run, w, full);
  }
}

namespace {

// Counts the iterations it observes.
struct Counter final : LoopObserver {
  int64_t iterations = 0;
  void after_iteration(const IterationPlan&, const IterationResult&, const IterationRecord&) override {
    ++iterations;
  }
};

}  // namespace

TEST_CASE("engine: run_engine calls its hooks with the served decoder, before the first iteration and after the last",
          "[engine]") {
  EngineSetup setup;
  setup.model = engine_spec();
  setup.threads = 1;
  setup.workload.arrival = ArrivalProcess::Poisson;
  setup.workload.rate = 500;
  setup.workload.num_requests = 4;
  setup.workload.prompt_len = "uniform:4:20";
  setup.workload.output_len = "uniform:2:6";
  const Workload workload = make_workload(setup.workload);
  Counter counter;
  std::vector<int64_t> executed_at;  // the observer's count when each hook ran
  EngineRunOptions run;
  run.observers = {&counter};
  run.before_run = [&](Executor& decoder) {
    CHECK(dynamic_cast<DecoderExecutor*>(&decoder) != nullptr);
    executed_at.push_back(counter.iterations);
  };
  run.after_run = [&](Executor& decoder) {
    CHECK(dynamic_cast<DecoderExecutor*>(&decoder) != nullptr);
    executed_at.push_back(counter.iterations);
  };
  const EngineOutput out = run_engine(setup, workload, run);
  REQUIRE(out.summary.completed == 4);
  REQUIRE(executed_at.size() == 2);
  CHECK(executed_at[0] == 0);
  CHECK(executed_at[1] == out.records.num_iterations);
}

namespace {

// Between every iteration, with the run's clock stopped: 3 decode steps of
// one sequence of 9 tokens on the 4 blocks past the scheduler's 40, and a
// pause of 20 ms (what validate/host_drift/ does between served iterations).
struct Prober final : LoopObserver {
  Executor* decoder = nullptr;
  StoppableWallClock* clock = nullptr;
  int64_t calls = 0;
  void after_iteration(const IterationPlan&, const IterationResult&, const IterationRecord&) override {
    clock->stopped_while([&] {
      CHECK(dynamic_cast<DecoderExecutor&>(*decoder).model().kv_num_blocks() == 44);
      ScheduledSequence seq;
      seq.request_id = int64_t(1) << 40;
      seq.num_query_tokens = 1;
      seq.is_prefill = false;
      seq.samples = true;
      const std::vector<int32_t> own_blocks = {40, 41, 42, 43};
      seq.block_table = own_blocks;
      IterationResult result;
      for (int32_t cached = 9; cached < 12; ++cached) {
        seq.num_cached_tokens = cached;
        IterationPlan plan;
        plan.add(seq);
        result.reset();
        decoder->execute(plan, result);
      }
      decoder->on_request_finished(seq.request_id);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ++calls;
      return true;
    });
  }
};

}  // namespace

TEST_CASE("engine: an observer's work between iterations, on blocks and ids of its own and with the clock stopped, "
          "changes no token and no latency",
          "[engine]") {
  EngineSetup setup;
  setup.model = engine_spec();
  setup.threads = 1;
  setup.decoding = decoding(0.0);
  setup.scheduler.block_size = 4;
  setup.kv_cache_bytes = 40 * 4 * 256 + 100;  // 40 blocks of 4 tokens (see the next case)
  setup.workload.arrival = ArrivalProcess::Closed;  // the batches do not depend on time
  setup.workload.concurrency = 3;
  setup.workload.num_requests = 8;
  setup.workload.prompt_len = "uniform:4:40";
  setup.workload.output_len = "uniform:2:12";
  setup.workload.seed = 4;
  const Workload workload = make_workload(setup.workload);

  auto serve_keeping_outputs = [&](EngineRunOptions run) {
    std::unordered_map<int64_t, std::vector<int32_t>> outputs;
    const auto before = run.before_run;
    run.before_run = [&, before](Executor& decoder) {
      dynamic_cast<DecoderExecutor&>(decoder).keep_outputs(true);
      if (before) before(decoder);
    };
    run.after_run = [&](Executor& decoder) { outputs = dynamic_cast<DecoderExecutor&>(decoder).outputs(); };
    EngineOutput out = run_engine(setup, workload, run);
    return std::make_pair(std::move(out), outputs);
  };
  const auto [plain, plain_outputs] = serve_keeping_outputs({});
  REQUIRE(plain.summary.completed == 8);

  Prober prober;
  EngineRunOptions probing;
  probing.extra_kv_blocks = 4;
  probing.observers = {&prober};
  probing.before_run = [&](Executor& decoder) { prober.decoder = &decoder; };
  probing.make_clock = [&]() -> std::unique_ptr<Clock> {
    auto clock = std::make_unique<StoppableWallClock>();
    prober.clock = clock.get();
    return clock;
  };
  const auto [probed, probed_outputs] = serve_keeping_outputs(probing);
  REQUIRE(probed.summary.completed == 8);
  CHECK(probed.scheduler.num_gpu_blocks == 40);
  auto served_outputs = probed_outputs;
  CHECK(served_outputs.erase(int64_t(1) << 40) == 1);  // the probe's own tokens
  CHECK(served_outputs == plain_outputs);
  CHECK(prober.calls == probed.records.num_iterations);
  // The run's clock left the pauses out: it ended before their total.
  CHECK(probed.records.end_s < 0.02 * double(prober.calls));
}

TEST_CASE("engine: the decoder refuses a plan that names a KV block past its cache", "[engine]") {
  DecoderExecutor executor(make_model(engine_spec(), 4, 4), decoding(0.0));
  ScheduledSequence seq;
  seq.request_id = 1;
  seq.num_query_tokens = 1;
  seq.num_cached_tokens = 3;
  seq.is_prefill = false;
  seq.samples = true;
  const std::vector<int32_t> past = {4};  // blocks 0 .. 3 exist
  seq.block_table = past;
  IterationPlan plan;
  plan.add(seq);
  IterationResult result;
  CHECK_THROWS_WITH(executor.execute(plan, result), Contains("KV block 4") && Contains("holds 4"));
}

TEST_CASE("engine: serve completes every request with exactly its output tokens", "[engine]") {
  SECTION("a hand-built model, closed loop, a small KV cache") {
    EngineSetup setup;
    setup.model = engine_spec();
    setup.threads = 1;
    setup.decoding = decoding(0.0);
    setup.scheduler.policy = SchedulerPolicy::Chunked;
    setup.scheduler.max_num_batched_tokens = 32;
    setup.scheduler.block_size = 4;
    // K and V of one token: 2 (K, V) * 2 layers * 2 KV heads * 8 dims * 4 bytes = 256 bytes.
    setup.kv_cache_bytes = 40 * 4 * 256 + 100;  // 40 blocks of 4 tokens and a bit
    REQUIRE(cpu_kv_blocks(setup.model, setup.kv_cache_bytes, 4) == 40);
    setup.workload.arrival = ArrivalProcess::Closed;
    setup.workload.concurrency = 3;
    setup.workload.num_requests = 12;
    setup.workload.prompt_len = "uniform:4:40";
    setup.workload.output_len = "uniform:1:16";
    setup.workload.seed = 8;
    const Workload workload = make_workload(setup.workload);
    std::string ready;
    EngineRunOptions run;
    run.on_ready = [&](const std::string& s) { ready = s; };
    const EngineOutput out = run_engine(setup, workload, run);
    REQUIRE_THAT(ready, Contains("test-engine"));
    REQUIRE(out.scheduler.num_gpu_blocks == 40);
    REQUIRE(out.kv_cache_bytes == 40.0 * 4 * 256);
    REQUIRE(out.weights_source == "random (seed 0)");
    REQUIRE_THAT(out.device, Contains("cpu"));
    int64_t asked = 0;
    for (const Request& r : workload.requests) {
      INFO("request " << r.id);
      const RequestRecord& rec = out.records.requests[size_t(r.id)];
      REQUIRE(rec.completed());
      REQUIRE(rec.tokens_emitted == r.output_tokens);
      asked += r.output_tokens;
    }
    REQUIRE(out.summary.completed == 12);
    REQUIRE(out.summary.rejected == 0);
    REQUIRE(out.summary.output_tokens == asked);
  }
  SECTION("tiny-15m, Poisson arrivals") {
    EngineSetup setup;
    setup.model = resolve_model("tiny-15m");
    setup.threads = 1;
    setup.kv_cache_bytes = 16e6;
    setup.scheduler.max_num_batched_tokens = 64;
    setup.workload.arrival = ArrivalProcess::Poisson;
    setup.workload.rate = 200;
    setup.workload.num_requests = 6;
    setup.workload.prompt_len = "uniform:8:48";
    setup.workload.output_len = "uniform:2:8";
    setup.workload.seed = 1;
    const Workload workload = make_workload(setup.workload);
    const EngineOutput out = run_engine(setup, workload);
    for (const Request& r : workload.requests) {
      INFO("request " << r.id);
      REQUIRE(out.records.requests[size_t(r.id)].completed());
      REQUIRE(out.records.requests[size_t(r.id)].tokens_emitted == r.output_tokens);
    }
    REQUIRE(out.summary.completed == 6);
  }
  SECTION("bad setups are input errors") {
    EngineSetup setup;
    setup.model = engine_spec();
    setup.workload.num_requests = 1;
    const Workload workload = make_workload(setup.workload);
    setup.device = "tpu";
    REQUIRE_THROWS_WITH(run_engine(setup, workload), Contains("--device"));
    setup.device = "cpu";
    setup.kv_cache_bytes = 100;  // less than one 16-token block (4096 bytes)
    REQUIRE_THROWS_AS(run_engine(setup, workload), InputError);
    REQUIRE_THROWS_WITH(cpu_kv_blocks(setup.model, 100, 16), Contains("--kv-cache-memory"));
  }
}
