// Speculative decoding through the real Scheduler and serving loop, and run_engine():
// at temperature 0 every request generates exactly the tokens plain
// decoding generates, whatever k, policy, batch, chunking or preemption; the
// statistics add up; run_engine() builds the draft, sizes both KV caches from one
// memory budget, and refuses inconsistent settings naming the flags.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/decoder_run.h"
#include "kernels/decoder/speculative_executor.h"
#include "sim/clock.h"
#include "sim/errors.h"
#include "engine/serving_loop.h"
#include "sim/scheduler.h"
#include "sim/workload.h"
#include "support/speculative_support.h"

using namespace servesim;
using namespace servesim::spec_test;
using Catch::Matchers::Contains;

namespace {

// Seven requests, all at t = 0 (the batches formed do not depend on how long
// iterations take), with mixed prompt and output lengths.
Workload spec_workload() {
  const int32_t prompts[] = {5, 17, 9, 30, 3, 12, 22};
  const int32_t outputs[] = {8, 3, 12, 6, 10, 1, 9};
  Workload w;
  for (int64_t i = 0; i < 7; ++i) w.requests.push_back(Request{i, 0.0, prompts[i], outputs[i]});
  return w;
}

SchedulerConfig spec_config(SchedulerPolicy policy, int32_t max_num_seqs, int32_t max_num_batched_tokens,
                            int64_t num_gpu_blocks, int32_t k, int32_t disable_by_batch_size = 0) {
  SchedulerConfig c = test::scheduler_config(policy, max_num_seqs, max_num_batched_tokens, 4, num_gpu_blocks, 512, 0.01);
  c.num_speculative_tokens = k;
  c.speculative_disable_by_batch_size = disable_by_batch_size;
  return c;
}

struct SpecRun {
  RunRecords records;
  std::unordered_map<int64_t, std::vector<int32_t>> outputs;
  SpeculativeStats stats{1};
};

SpecRun run_speculative(DraftKind kind, const SchedulerConfig& cfg, const Workload& w, double temperature = 0.0) {
  auto ex = make_executor(kind, cfg.num_gpu_blocks, cfg.block_size,
                          executor_options(cfg.num_speculative_tokens, temperature));
  ex->keep_outputs(true);
  Scheduler scheduler(cfg);
  VirtualClock clock;
  SpecRun run;
  run.records = run_serving_loop(scheduler, *ex, clock, w);
  run.outputs = ex->outputs();
  run.stats = *ex->speculative_stats();
  // Finished requests' state is gone from the executor.
  for (const Request& r : w.requests) REQUIRE(ex->tokens_of(r.id) == nullptr);
  return run;
}

void require_outputs(const SpecRun& run, const Workload& w, const std::vector<std::vector<int32_t>>& want) {
  REQUIRE(run.records.requests.size() == w.requests.size());
  for (const Request& r : w.requests) {
    INFO("request " << r.id);
    const RequestRecord& rec = run.records.requests[size_t(r.id)];
    REQUIRE(rec.completed());
    REQUIRE(rec.tokens_emitted == r.output_tokens);
    REQUIRE(run.outputs.at(r.id) == want[size_t(r.id)]);
  }
}

// Steps, emissions and tokens agree (no preemption: one sampling prefill per request).
void require_stats_add_up(const SpecRun& run, const Workload& w) {
  const SpeculativeStats& s = run.stats;
  int64_t tokens = 0;
  for (const Request& r : w.requests) tokens += r.output_tokens;
  int64_t accepted = 0;
  for (int64_t a : s.accepts_per_position()) accepted += a;
  REQUIRE(s.steps() + accepted + s.plain_decodes() + int64_t(w.requests.size()) == tokens);
  REQUIRE(s.attempts_per_position()[0] == s.steps());
  int64_t full = 0;
  for (int64_t h : s.accepted_length_histogram()) full += h;
  REQUIRE(full <= s.steps());
  int64_t per_request_steps = 0;
  for (const auto& [id, r] : s.per_request()) per_request_steps += r.steps;
  REQUIRE(per_request_steps == s.steps());
}

std::vector<std::vector<int32_t>> reference_outputs(const Workload& w) {
  std::vector<std::vector<int32_t>> out;
  for (const Request& r : w.requests)
    out.push_back(reference_output(r.id, r.prompt_tokens, r.output_tokens, SamplingParams{0.0, 1.0, 99}));
  return out;
}

}  // namespace

TEST_CASE("speculative engine: greedy tokens equal plain decoding through the scheduler, for any k and policy",
          "[speculative][engine]") {
  const Workload w = spec_workload();
  const auto want = reference_outputs(w);
  for (const DraftKind kind : {DraftKind::Separate, DraftKind::Self}) {
    for (const int32_t k : {1, 3, 5}) {
      INFO(to_string(kind) << ", k = " << k);
      {
        INFO("continuous batching");
        const auto run = run_speculative(kind, spec_config(SchedulerPolicy::Continuous, 4, 2048, 64, k), w);
        require_outputs(run, w, want);
        REQUIRE(run.records.preemptions == 0);
        REQUIRE(run.stats.steps() > 0);
        require_stats_add_up(run, w);
      }
      {
        // A 9-token budget splits the longer prompts into chunks packed with
        // the running verifications (and limits k' to what the budget leaves).
        INFO("chunked prefill mixed with verifications");
        const auto run = run_speculative(kind, spec_config(SchedulerPolicy::Chunked, 4, 9, 64, k), w);
        require_outputs(run, w, want);
        REQUIRE(run.records.preemptions == 0);
        require_stats_add_up(run, w);
      }
      {
        // 12 blocks of 4 tokens hold the longest request but not several:
        // the newest is preempted, recomputes its prompt and generated
        // tokens (the draft's cache too) and goes on speculating.
        INFO("preemption and recompute under continuous batching");
        const auto run = run_speculative(kind, spec_config(SchedulerPolicy::Continuous, 7, 2048, 12, k), w);
        REQUIRE(run.records.preemptions > 0);
        require_outputs(run, w, want);
      }
      {
        INFO("preemption under chunked prefill");
        const auto run = run_speculative(kind, spec_config(SchedulerPolicy::Chunked, 7, 16, 10, k), w);
        REQUIRE(run.records.preemptions > 0);
        require_outputs(run, w, want);
      }
    }
  }
}

TEST_CASE("speculative engine: plain decodes of a speculative run (disabled by batch size) keep the tokens",
          "[speculative][engine]") {
  const Workload w = spec_workload();
  const auto want = reference_outputs(w);
  // No speculation while 3 or more sequences run; it starts as they finish.
  const auto run = run_speculative(DraftKind::Self, spec_config(SchedulerPolicy::Continuous, 7, 2048, 64, 3, 3), w);
  require_outputs(run, w, want);
  REQUIRE(run.stats.plain_decodes() > 0);
  REQUIRE(run.stats.steps() > 0);
  require_stats_add_up(run, w);
}

TEST_CASE("speculative engine: rejection sampling at temperature > 0 serves every request", "[speculative][engine]") {
  const Workload w = spec_workload();
  const auto run = run_speculative(DraftKind::Self, spec_config(SchedulerPolicy::Chunked, 4, 9, 64, 3), w, 0.8);
  for (const Request& r : w.requests) {
    INFO("request " << r.id);
    REQUIRE(run.records.requests[size_t(r.id)].completed());
    REQUIRE(int32_t(run.outputs.at(r.id).size()) == r.output_tokens);
  }
  require_stats_add_up(run, w);
  REQUIRE(run.stats.draft_acceptance_rate() > 0.0);
}

TEST_CASE("speculative engine: with honor_eos a request stops at its first EOS, even inside a step",
          "[speculative][engine]") {
  const Workload w = spec_workload();
  const auto full = reference_outputs(w);
  // EOS: a token greedy decoding first produces at step j >= 2 of some
  // request that asks for more than j + 1 tokens.
  int32_t eos = -1;
  for (size_t r = 0; r < full.size() && eos < 0; ++r)
    for (size_t j = 2; j + 1 < full[r].size() && eos < 0; ++j)
      if (std::find(full[r].begin(), full[r].begin() + long(j), full[r][j]) == full[r].begin() + long(j))
        eos = full[r][j];
  REQUIRE(eos >= 0);
  std::vector<std::vector<int32_t>> want = full;
  for (auto& o : want) {
    const auto it = std::find(o.begin(), o.end(), eos);
    if (it != o.end()) o.erase(it + 1, o.end());
  }
  for (const int32_t k : {1, 4}) {
    INFO("k = " << k);
    const SchedulerConfig cfg = spec_config(SchedulerPolicy::Chunked, 4, 9, 64, k);
    HostWeights target = target_weights();
    target.spec.eos_token_id = eos;
    SpeculativeExecutorOptions options = executor_options(k, 0.0);
    options.decoding.honor_eos = true;
    SpeculativeExecutor ex(cpu_model(std::move(target), cfg.num_gpu_blocks, cfg.block_size),
                           cpu_model(draft_weights(DraftKind::Self), cfg.num_gpu_blocks, cfg.block_size), options);
    ex.keep_outputs(true);
    Scheduler scheduler(cfg);
    VirtualClock clock;
    const RunRecords records = run_serving_loop(scheduler, ex, clock, w);
    for (const Request& r : w.requests) {
      INFO("request " << r.id);
      REQUIRE(records.requests[size_t(r.id)].completed());
      REQUIRE(ex.outputs().at(r.id) == want[size_t(r.id)]);
      REQUIRE(records.requests[size_t(r.id)].tokens_emitted == int32_t(want[size_t(r.id)].size()));
    }
  }
}

namespace {

EngineSetup small_setup(int32_t k) {
  EngineSetup setup;
  setup.model = target_spec();
  setup.threads = 1;
  setup.decoding.sampling = SamplingParams{0.0, 1.0, 4};
  setup.decoding.prompt_seed = 4;
  setup.scheduler.policy = SchedulerPolicy::Chunked;
  setup.scheduler.max_num_batched_tokens = 32;
  setup.scheduler.block_size = 4;
  setup.scheduler.num_speculative_tokens = k;
  setup.workload.arrival = ArrivalProcess::Closed;
  setup.workload.concurrency = 3;
  setup.workload.num_requests = 8;
  setup.workload.prompt_len = "uniform:4:40";
  setup.workload.output_len = "uniform:1:16";
  setup.workload.seed = 8;
  return setup;
}

// fp32 K and V of one token in every layer of `m`.
double kv_token_bytes(const ModelSpec& m) {
  return 2.0 * double(m.num_hidden_layers * m.num_key_value_heads * m.head_dim) * 4;
}

}  // namespace

TEST_CASE("speculative engine: serve builds the draft and reports what speculation did", "[speculative][engine]") {
  for (const bool self : {false, true}) {
    INFO((self ? "self-draft" : "separate draft"));
    EngineSetup setup = small_setup(3);
    if (self) setup.speculative.self_draft_layers = 2;
    else setup.speculative.draft_model = draft_spec();
    setup.speculative.draft_weights_seed = 21;
    const ModelSpec draft = self ? self_draft_spec(target_spec(), 2) : draft_spec();
    // One budget holds both caches: 40 blocks of 4 tokens of target and draft.
    const double block_bytes = 4 * (kv_token_bytes(target_spec()) + kv_token_bytes(draft));
    setup.kv_cache_bytes = 40 * block_bytes + 100;
    const Workload workload = make_workload(setup.workload);
    std::string ready;
    EngineRunOptions run;
    run.on_ready = [&](const std::string& s) { ready = s; };
    const EngineOutput out = run_engine(setup, workload, run);
    REQUIRE(out.scheduler.num_gpu_blocks == 40);
    REQUIRE(out.kv_cache_bytes == Approx(40 * block_bytes));
    REQUIRE(out.draft_kv_cache_bytes == Approx(40 * 4 * kv_token_bytes(draft)));
    REQUIRE_THAT(ready, Contains(draft.name));
    REQUIRE(out.speculative.has_value());
    REQUIRE(out.speculative->num_speculative_tokens() == 3);
    REQUIRE(out.speculative->steps() > 0);
    int64_t asked = 0;
    for (const Request& r : workload.requests) {
      REQUIRE(out.records.requests[size_t(r.id)].tokens_emitted == r.output_tokens);
      asked += r.output_tokens;
    }
    REQUIRE(out.summary.output_tokens == asked);
    int64_t accepted = 0;
    for (int64_t a : out.speculative->accepts_per_position()) accepted += a;
    REQUIRE(out.speculative->steps() + accepted + out.speculative->plain_decodes() + 8 == asked);

    const nlohmann::json j = engine_setup_to_json(setup, out);
    REQUIRE(j["executor"] == "speculative decoder");
    REQUIRE(j["speculative"]["num_speculative_tokens"] == 3);
    // The simulator's schema for the draft (draft_to_json), plus its weights.
    REQUIRE(j["speculative"]["draft"]["name"] == draft.name);
    REQUIRE(j["speculative"]["draft"]["num_hidden_layers"] == draft.num_hidden_layers);
    REQUIRE(j["speculative"]["draft"]["shares_target_weights"] == self);
    REQUIRE(j["speculative"]["acceptance"]["mode"] == "exact");
    if (self) {
      REQUIRE(j["speculative"]["draft"]["self_draft_layers"] == 2);
      REQUIRE_THAT(j["speculative"]["draft"]["weights"]["source"].get<std::string>(), Contains("first 2 layers"));
    } else {
      REQUIRE(j["speculative"]["draft"]["weights"]["source"] == "random (seed 21)");
    }
  }
}

TEST_CASE("speculative engine: serve loads a draft's safetensors", "[speculative][engine]") {
  test::TempDir dir("spec_draft_weights");
  save_safetensors_weights(random_weights(draft_spec(), 13), dir.path().string(), "F32");
  EngineSetup setup = small_setup(2);
  setup.speculative.draft_model = draft_spec();
  setup.speculative.draft_weights_dir = dir.path().string();
  setup.kv_cache_bytes = 4e5;
  const Workload workload = make_workload(setup.workload);
  const EngineOutput out = run_engine(setup, workload);
  REQUIRE(out.draft_weights_source == dir.path().string());
  REQUIRE(out.speculative.has_value());
  REQUIRE(out.speculative->steps() > 0);
  // A folder without weights names the draft's flag.
  setup.speculative.draft_weights_dir = (dir.path() / "missing").string();
  REQUIRE_THAT(test::input_error_of([&] { run_engine(setup, workload); }), Contains("--draft-weights") && Contains("missing"));
}

TEST_CASE("speculative engine: run_engine with controlled acceptance and an observer", "[speculative][engine]") {
  EngineSetup setup = small_setup(2);
  setup.speculative.self_draft_layers = 1;
  setup.speculative.acceptance_rate = 1.0;
  setup.kv_cache_bytes = 4e5;
  const Workload workload = make_workload(setup.workload);
  // An observer of the loop sees every verification; run_engine reads the
  // statistics of the executor it built.
  struct Watch final : LoopObserver {
    int64_t iterations = 0, emitted = 0;
    void after_iteration(const IterationPlan&, const IterationResult& result, const IterationRecord&) override {
      ++iterations;
      for (int32_t n : result.emitted_tokens) emitted += n;
    }
  } watch;
  EngineRunOptions run;
  run.observers = {&watch};
  run.before_run = [](Executor& served) { REQUIRE(dynamic_cast<SpeculativeExecutor*>(&served) != nullptr); };
  const EngineOutput out = run_engine(setup, workload, run);
  REQUIRE(watch.iterations == out.records.num_iterations);
  REQUIRE(watch.emitted == out.summary.output_tokens);
  REQUIRE(out.speculative.has_value());
  // Rate 1: every proposed draft accepted.
  REQUIRE(out.speculative->draft_acceptance_rate() == 1.0);
  const nlohmann::json acceptance = engine_setup_to_json(setup, out)["speculative"]["acceptance"];
  REQUIRE(acceptance["mode"] == "controlled");
  REQUIRE(acceptance["model"] == "independent");
  REQUIRE(acceptance["rate"] == 1.0);
  REQUIRE(acceptance["expected_tokens_per_step"] == 3.0);  // k + 1 at rate 1
}

TEST_CASE("speculative engine: inconsistent settings are input errors naming the flags", "[speculative][engine]") {
  EngineSetup setup = small_setup(2);
  setup.kv_cache_bytes = 1e6;
  setup.workload.num_requests = 1;
  const Workload workload = make_workload(setup.workload);
  auto message = [&](const EngineSetup& s) { return test::input_error_of([&] { run_engine(s, workload); }); };

  SECTION("k > 0 without a draft") {
    REQUIRE_THAT(message(setup), Contains("--num-speculative-tokens") && Contains("--draft-model") &&
                                     Contains("--self-draft-layers"));
  }
  SECTION("a draft with k = 0") {
    EngineSetup s = small_setup(0);
    s.speculative.self_draft_layers = 2;
    REQUIRE_THAT(message(s), Contains("--self-draft-layers") && Contains("--num-speculative-tokens"));
    s.speculative.self_draft_layers = 0;
    s.speculative.draft_model = draft_spec();
    REQUIRE_THAT(message(s), Contains("--draft-model") && Contains("--num-speculative-tokens"));
    s.speculative.draft_model.reset();
    s.speculative.acceptance_rate = 0.5;
    REQUIRE_THAT(message(s), Contains("--acceptance-rate"));
  }
  SECTION("two drafts") {
    setup.speculative.self_draft_layers = 2;
    setup.speculative.draft_model = draft_spec();
    REQUIRE_THAT(message(setup), Contains("--draft-model") && Contains("--self-draft-layers"));
  }
  SECTION("a draft with another vocabulary") {
    ModelSpec other = draft_spec();
    other.vocab_size = 62;
    setup.speculative.draft_model = other;
    REQUIRE_THAT(message(setup), Contains("--draft-model") && Contains("62") && Contains("61"));
  }
  SECTION("self-draft layers outside 1 .. L - 1") {
    for (const int32_t layers : {-1, 4, 9}) {
      setup.speculative.self_draft_layers = layers;
      REQUIRE_THAT(message(setup), Contains("--self-draft-layers") && Contains("1 .. 3"));
    }
  }
  SECTION("an acceptance rate outside [0, 1]") {
    setup.speculative.self_draft_layers = 2;
    for (const double a : {-0.1, 1.5}) {
      setup.speculative.acceptance_rate = a;
      REQUIRE_THAT(message(setup), Contains("--acceptance-rate"));
    }
  }
  SECTION("a KV budget without room for one block of both caches") {
    setup.speculative.self_draft_layers = 2;
    setup.kv_cache_bytes = 4 * kv_token_bytes(target_spec()) + 10;  // one target block, no draft
    REQUIRE_THAT(message(setup), Contains("--kv-cache-memory") && Contains("draft"));
  }
}

TEST_CASE("speculative engine: greedy tokens are identical with prefix caching on and off", "[engine][speculative][prefix]") {
  // Ten requests sharing one of two heads (13 and 22 tokens): hits cover
  // blocks both the target and the draft wrote, and the draft's cache is
  // addressed by the target's block ids.
  Workload w;
  const int32_t tails[] = {3, 9, 1, 6, 12, 2, 7, 5, 4, 8};
  const int32_t outputs[] = {6, 3, 8, 5, 2, 9, 4, 7, 3, 6};
  for (int64_t i = 0; i < 10; ++i) {
    Request r = test::request(i, 0.0, 0, outputs[i]);
    r.tokens.prompt_spans = {{token_source(TokenSourceKind::SharedPrefix, uint64_t(i % 2)), 0, i % 2 ? 22 : 13},
                             {token_source(TokenSourceKind::RequestTail, uint64_t(i)), 0, tails[i]}};
    r.tokens.output_source = token_source(TokenSourceKind::Output, uint64_t(i));
    r.prompt_tokens = int32_t(r.tokens.prompt_tokens());
    w.requests.push_back(r);
  }
  for (DraftKind kind : {DraftKind::Separate, DraftKind::Self}) {
    for (SchedulerPolicy policy : {SchedulerPolicy::Continuous, SchedulerPolicy::Chunked}) {
      INFO(to_string(kind) << ", " << servesim::to_string(policy));
      SchedulerConfig on = spec_config(policy, 3, policy == SchedulerPolicy::Chunked ? 7 : 512, 128, 3);
      SchedulerConfig off = on;
      off.enable_prefix_caching = false;
      const SpecRun a = run_speculative(kind, on, w), b = run_speculative(kind, off, w);
      CHECK(a.records.prefix_cache.hits_tokens > 0);
      for (const Request& r : w.requests) {
        INFO("request " << r.id);
        REQUIRE(a.outputs.at(r.id).size() == size_t(r.output_tokens));
        REQUIRE(a.outputs.at(r.id) == b.outputs.at(r.id));
      }
    }
  }
}
