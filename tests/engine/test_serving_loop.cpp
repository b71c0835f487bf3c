// The runner's event loop: arrivals, idling, iteration records, rejections,
// closed loops, multi-token emissions, end-of-sequence, and byte-identical
// outputs for a seed.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sim/clock.h"
#include "sim/metrics.h"
#include "sim/report.h"
#include "engine/serving_loop.h"
#include "sim/scheduler.h"
#include "engine/simulation.h"
#include "sim/workload.h"

#include "support/test_support.h"

using namespace servesim;
using namespace servesim::test;

namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

SimulationSetup small_roofline_setup(uint64_t seed) {
  SimulationSetup setup =
      roofline_setup(SchedulerPolicy::Chunked, 20, 300, "lognormal:1024:1.0:16:4096",
                     "lognormal:128:1.0:1:512", seed);
  setup.slo.ttft_s = 0.5;
  setup.slo.tpot_s = 0.03;
  return setup;
}

void write_outputs(const SimulationSetup& setup, const std::filesystem::path& dir) {
  SimulationOutput out = simulate(setup);
  write_run_outputs(dir.string(), out.records,
                    summary_to_json(out.summary, setup.slo, setup_to_json(setup, out.scheduler, setup_cost_models(setup))));
}

}  // namespace

TEST_CASE("The runner idles until each arrival and chains iterations back to back", "[runner]") {
  // Two requests far apart: each finds the server idle.
  Workload w;
  w.requests = {request(0, 1.25, 40, 5), request(1, 7.5, 30, 4)};
  const double a = 2e-3, b = 1e-5;
  FixedCostExecutor ex(a, b);
  const RunRecords rec =
      run(scheduler_config(SchedulerPolicy::Chunked, 64, 512, 16, 10000, 4096, 0.01), ex, w, true);

  REQUIRE(rec.iterations.size() == 5 + 4);  // one prefill + (output - 1) decodes each
  CHECK(rec.num_iterations == 9);
  CHECK(rec.iterations[0].start_s == 1.25);
  CHECK(rec.iterations[5].start_s == 7.5);
  for (size_t k = 0; k < rec.iterations.size(); ++k) {
    CHECK(rec.iterations[k].index == int64_t(k));
    if (k + 1 < rec.iterations.size() && k != 4) {
      // Busy: the next iteration starts when this one ends.
      CHECK(rec.iterations[k + 1].start_s ==
            Approx(rec.iterations[k].start_s + rec.iterations[k].duration_s).epsilon(1e-12));
    }
  }
  for (const RequestRecord& r : rec.requests) {
    CHECK(r.first_scheduled_s == r.arrival_s);  // no queueing on an idle server
    CHECK(r.completed());
  }
  CHECK(rec.end_s == rec.requests[1].finish_s);
  // Request 0 finished before request 1 arrived.
  CHECK(rec.requests[0].finish_s == Approx(1.25 + (a + 40 * b) + 4 * (a + b)).epsilon(1e-12));
}

// Every call an observer gets, in order.
struct Watcher final : LoopObserver {
  const Clock* clock = nullptr;
  std::vector<std::pair<double, double>> idle;  // (now, until)
  std::vector<std::string> events;              // "before" / "after" in call order
  std::vector<double> after_at;                 // the clock at each after_iteration
  std::vector<IterationRecord> given;
  std::vector<size_t> plan_sizes_before, plan_sizes_after;
  void on_idle(double now_s, double until_s) override { idle.emplace_back(now_s, until_s); }
  void before_execute(const IterationPlan& plan) override {
    events.push_back("before");
    plan_sizes_before.push_back(plan.sequences.size());
  }
  void after_iteration(const IterationPlan& plan, const IterationResult& result,
                       const IterationRecord& record) override {
    events.push_back("after");
    after_at.push_back(clock->now());
    given.push_back(record);
    plan_sizes_after.push_back(plan.sequences.size());
    CHECK(result.duration_s == record.duration_s);
  }
};

TEST_CASE("The serving loop tells observers of idle waits with their times", "[runner]") {
  Workload w;
  w.requests = {request(0, 1.25, 40, 5), request(1, 7.5, 30, 4)};
  FixedCostExecutor ex(2e-3, 1e-5);
  Scheduler scheduler(scheduler_config(SchedulerPolicy::Chunked, 64, 512, 16, 10000, 4096, 0.01));
  VirtualClock clock;
  Watcher watcher;
  watcher.clock = &clock;
  LoopOptions loop;
  loop.observers = {&watcher};
  const RunRecords rec = run_serving_loop(scheduler, ex, clock, w, loop);
  const auto& calls = watcher.idle;
  REQUIRE(calls.size() == 2);  // before request 0, and between request 0's finish and request 1
  CHECK(calls[0].first == 0.0);
  CHECK(calls[0].second == 1.25);
  CHECK(calls[1].first == Approx(rec.requests[0].finish_s));
  CHECK(calls[1].second == 7.5);
}

TEST_CASE("The serving loop calls before_execute and after_iteration once per iteration, in order", "[runner]") {
  Workload w;
  w.requests = {request(0, 0.0, 40, 5), request(1, 0.5, 30, 4)};
  FixedCostExecutor ex(2e-3, 1e-5);
  Scheduler scheduler(scheduler_config(SchedulerPolicy::Chunked, 64, 512, 16, 10000, 4096, 0.01));
  VirtualClock clock;
  Watcher watcher, second;
  watcher.clock = second.clock = &clock;
  LoopOptions loop;
  loop.observers = {&watcher, &second};
  const RunRecords rec = run_serving_loop(scheduler, ex, clock, w, loop);
  const auto& at = watcher.after_at;
  const auto& given = watcher.given;
  REQUIRE(int64_t(at.size()) == rec.num_iterations);
  REQUIRE(second.after_at.size() == at.size());  // every observer hears every iteration
  REQUIRE(watcher.events.size() == 2 * at.size());
  for (size_t i = 0; i < at.size(); ++i) {
    CHECK(watcher.events[2 * i] == "before");
    CHECK(watcher.events[2 * i + 1] == "after");
    CHECK(watcher.plan_sizes_before[i] == watcher.plan_sizes_after[i]);
    CHECK(at[i] == Approx(rec.iterations[i].start_s + rec.iterations[i].duration_s));
    CHECK(given[i].index == rec.iterations[i].index);
    CHECK(given[i].decode_sequences == rec.iterations[i].decode_sequences);
  }
}

TEST_CASE("Iteration records match the plans the executor ran", "[runner]") {
  const Workload w = poisson_workload(400, 40, "uniform:1:600", "uniform:1:80", 3);
  FixedCostExecutor ex(1e-3, 2e-5);
  ex.record_plans = true;
  const RunRecords rec =
      run(scheduler_config(SchedulerPolicy::Chunked, 32, 256, 16, 10000, 4096, 0.01), ex, w, true);

  REQUIRE(rec.iterations.size() == ex.seen.size());
  CHECK(rec.num_iterations == int64_t(ex.seen.size()));
  int64_t sampled = 0, query_tokens = 0, max_used = 0;
  for (size_t k = 0; k < ex.seen.size(); ++k) {
    const IterationRecord& it = rec.iterations[k];
    const auto& s = ex.seen[k];
    CHECK(it.index == int64_t(k));
    CHECK(it.prefill_tokens == s.prefill_tokens);
    CHECK(it.decode_tokens == s.decode_tokens);
    CHECK(it.prefill_sequences == s.prefill_sequences);
    CHECK(it.decode_sequences == s.decode_sequences);
    CHECK(it.sampled_sequences == s.sampled);
    CHECK(it.duration_s == s.duration_s);
    CHECK(it.prefill_tokens + it.decode_tokens <= 256);
    CHECK(it.kv_blocks_used <= rec.num_gpu_blocks);
    CHECK(it.waiting >= 0);
    if (k > 0) CHECK(it.start_s >= rec.iterations[k - 1].start_s + rec.iterations[k - 1].duration_s - 1e-12);
    sampled += it.sampled_sequences;
    query_tokens += it.prefill_tokens + it.decode_tokens;
    max_used = std::max(max_used, it.kv_blocks_used);
  }
  REQUIRE(rec.preemptions == 0);  // a big cache
  // No preemptions: the peak is reached right after some iteration's
  // allocations, and every query token is a prompt token or one decode per
  // output token but the last.
  CHECK(rec.peak_kv_blocks == max_used);
  int64_t want_tokens = 0, emissions = 0, gaps = 0;
  for (const RequestRecord& r : rec.requests) {
    REQUIRE(r.completed());
    CHECK(r.tokens_emitted == r.output_tokens);
    CHECK(r.emissions == r.output_tokens);  // one token per emission
    want_tokens += r.prompt_tokens + r.output_tokens - 1;
    emissions += r.emissions;
    gaps += r.emissions - 1;
  }
  CHECK(query_tokens == want_tokens);
  CHECK(sampled == emissions);
  CHECK(rec.itl_s.count() == gaps);
}

TEST_CASE("keep_iterations(false) drops the records but not the run", "[runner]") {
  const Workload w = poisson_workload(200, 30, "uniform:1:400", "uniform:1:50", 9);
  FixedCostExecutor ex1(1e-3, 2e-5), ex2(1e-3, 2e-5);
  const SchedulerConfig config =
      scheduler_config(SchedulerPolicy::Continuous, 64, 512, 16, 10000, 4096, 0.01);
  const RunRecords kept = run(config, ex1, w, true);
  const RunRecords dropped = run(config, ex2, w, false);
  CHECK(dropped.iterations.empty());
  CHECK(dropped.num_iterations == int64_t(kept.iterations.size()));
  REQUIRE(dropped.requests.size() == kept.requests.size());
  for (size_t i = 0; i < kept.requests.size(); ++i) {
    CHECK(dropped.requests[i].first_token_s == kept.requests[i].first_token_s);
    CHECK(dropped.requests[i].finish_s == kept.requests[i].finish_s);
  }
}

TEST_CASE("The mean batch does not depend on keeping the iteration records", "[runner]") {
  const Workload w = poisson_workload(200, 30, "uniform:1:400", "uniform:1:50", 9);
  FixedCostExecutor ex1(1e-3, 2e-5), ex2(1e-3, 2e-5);
  const SchedulerConfig config =
      scheduler_config(SchedulerPolicy::Chunked, 64, 256, 16, 10000, 4096, 0.01);
  RunRecords kept = run(config, ex1, w, true);
  RunRecords dropped = run(config, ex2, w, false);
  int64_t tokens = 0, sequences = 0;
  for (const IterationRecord& it : kept.iterations) {
    tokens += it.prefill_tokens + it.decode_tokens;
    sequences += it.prefill_sequences + it.decode_sequences;
  }
  CHECK(kept.batch_tokens == tokens);
  CHECK(kept.batch_sequences == sequences);
  const RunSummary a = summarize_run(kept, {}), b = summarize_run(dropped, {});
  CHECK(a.mean_batch_tokens == double(tokens) / double(kept.iterations.size()));
  CHECK(b.mean_batch_tokens == a.mean_batch_tokens);
  CHECK(b.mean_batch_sequences == a.mean_batch_sequences);
  CHECK(a.mean_batch_sequences > 1);
}

TEST_CASE("iterations.csv streamed row by row is the file written from kept records", "[runner][outputs]") {
  const auto dir = std::filesystem::temp_directory_path() / "servesim_iterations_stream";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const bool with_replica : {false, true}) {
    RunRecords records;
    if (with_replica) records.replicas.resize(2);
    for (int i = 0; i < 5; ++i) {
      IterationRecord it;
      it.index = i;
      it.start_s = 0.1 * i + 1.0 / 3;
      it.duration_s = 1e-3 * (i + 1) / 7;
      it.prefill_tokens = 100 * (i % 2);
      it.decode_tokens = i;
      it.prefill_sequences = i % 2;
      it.decode_sequences = i;
      it.sampled_sequences = i;
      it.kv_blocks_used = 1000 + i;
      it.waiting = 3 - i;
      it.replica = i % 2;
      records.iterations.push_back(it);
    }
    const auto kept = dir / "kept.csv", streamed = dir / "streamed.csv";
    write_iterations_csv(kept.string(), records);
    IterationsCsvWriter writer(streamed.string(), with_replica);
    for (const IterationRecord& it : records.iterations) writer.add(it);
    writer.finish();
    const std::string text = slurp(kept);
    CHECK(slurp(streamed) == text);
    CHECK(text.starts_with("index,kind,start_s,duration_s,"));
    CHECK(text.find(with_replica ? ",waiting,replica\n" : ",waiting\n") != std::string::npos);
    CHECK(text.find("\n1,mixed,0.43333333333333335,") != std::string::npos);  // shortest exact doubles
  }
  {
    // A run that fails before finish() leaves no partial file.
    IterationsCsvWriter writer((dir / "failed.csv").string(), false);
    writer.add(IterationRecord{});
  }
  CHECK_FALSE(std::filesystem::exists(dir / "failed.csv"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("Static: a request arriving mid-batch starts when the batch has finished", "[runner]") {
  Workload w;
  w.requests = {request(0, 0.0, 100, 8), request(1, 0.0, 50, 3), request(2, 0.01, 20, 2)};
  const double a = 5e-3, b = 1e-5;
  FixedCostExecutor ex(a, b);
  const RunRecords rec =
      run(scheduler_config(SchedulerPolicy::Static, 8, 512, 16, 10000, 4096, 0.01), ex, w, true);
  const auto& r = rec.requests;
  // The batch {0, 1}: one prefill of 150 tokens, then decodes of 2 tokens
  // while both run (2 of them), then of 1 token (5 more) for request 0.
  const double batch_end = (a + 150 * b) + 2 * (a + 2 * b) + 5 * (a + b);
  // It arrived mid-batch, with seats free (max_num_seqs = 8).
  REQUIRE(r[2].arrival_s > r[0].first_scheduled_s);
  REQUIRE(r[2].arrival_s < r[0].finish_s);
  CHECK(r[0].finish_s == Approx(batch_end).epsilon(1e-12));
  CHECK(r[2].first_scheduled_s == r[0].finish_s);
  CHECK(r[2].first_token_s == Approx(batch_end + a + 20 * b).epsilon(1e-12));
}

TEST_CASE("Rejected requests are counted and never left hanging", "[runner]") {
  // Every third request is too long for the model; the rest are served.
  Workload w;
  const int64_t n = 60;
  for (int64_t i = 0; i < n; ++i)
    w.requests.push_back(
        request(i, 0.01 * double(i), i % 3 == 0 ? 3000 : 100, i % 3 == 0 ? 2000 : 10));
  for (auto policy : {SchedulerPolicy::Static, SchedulerPolicy::Continuous, SchedulerPolicy::Chunked}) {
    INFO("policy " << to_string(policy));
    FixedCostExecutor ex(1e-3, 1e-5);
    RunRecords rec = run(scheduler_config(policy, 8, 4096, 16, 10000, 4096, 0.01), ex, w, true);
    const RunSummary s = summarize_run(rec, SloTargets{});
    CHECK(s.submitted == n);
    CHECK(s.rejected == n / 3);
    CHECK(s.completed == n - n / 3);
    REQUIRE(s.rejections.size() == 1);
    CHECK_THAT(s.rejections[0].first, Catch::Contains("max model length"));
    CHECK(s.rejections[0].second == n / 3);
    for (const RequestRecord& r : rec.requests) {
      CHECK(r.rejected() == (r.id % 3 == 0));
      if (r.rejected()) {
        CHECK_FALSE(r.completed());
        CHECK(r.first_scheduled_s < 0);
        CHECK(r.tokens_emitted == 0);
      }
    }
  }
}

TEST_CASE("Closed loop keeps its clients busy and survives runs of rejections", "[runner]") {
  // Requests 0 and 1 (the first released), 5, 6, 7 and the last two are
  // rejected: each rejection must free its client at once, however many come
  // in a row, so every request is submitted and the next one arrives at the
  // very moment of the rejection.
  for (int64_t concurrency : {1, 2}) {
    INFO("concurrency " << concurrency);
    Workload w;
    w.closed_loop = true;
    w.concurrency = concurrency;
    const int64_t n = 30;
    const std::set<int64_t> bad = {0, 1, 5, 6, 7, 28, 29};
    for (int64_t i = 0; i < n; ++i)
      w.requests.push_back(
          request(i, 0.0, bad.count(i) ? 5000 : 50 + int32_t(i), bad.count(i) ? 10 : 4));
    FixedCostExecutor ex(1e-3, 1e-5);
    RunRecords rec =
        run(scheduler_config(SchedulerPolicy::Chunked, 8, 512, 16, 10000, 4096, 0.01), ex, w, true);
    const RunSummary s = summarize_run(rec, SloTargets{});
    CHECK(s.submitted == n);
    CHECK(s.rejected == int64_t(bad.size()));
    CHECK(s.completed == n - int64_t(bad.size()));

    // Each release happens when a client frees up: at a completion or at the
    // arrival of a rejected request.
    std::vector<double> frees;
    for (const RequestRecord& r : rec.requests) {
      if (r.completed()) frees.push_back(r.finish_s);
      if (r.rejected()) frees.push_back(r.arrival_s);
    }
    for (const RequestRecord& r : rec.requests) {
      INFO("request " << r.id << " arrived at " << r.arrival_s);
      REQUIRE(r.submitted());
      if (r.id < concurrency) {
        CHECK(r.arrival_s == 0.0);
      } else {
        CHECK(std::find(frees.begin(), frees.end(), r.arrival_s) != frees.end());
      }
    }
    // Never more than `concurrency` requests in flight.
    for (const RequestRecord& probe : rec.requests) {
      if (!probe.completed()) continue;
      int64_t in_flight = 0;
      for (const RequestRecord& r : rec.requests)
        if (r.completed() && r.arrival_s <= probe.arrival_s && probe.arrival_s < r.finish_s)
          ++in_flight;
      CHECK(in_flight <= concurrency);
    }
    // Arrivals follow id order.
    for (size_t i = 1; i < rec.requests.size(); ++i)
      CHECK(rec.requests[i].arrival_s >= rec.requests[i - 1].arrival_s);
  }
}

TEST_CASE("Multi-token emissions are clamped to the requested output", "[runner]") {
  // Speculation with k = 2 and every draft accepted: each sampling decode
  // reports 3 tokens, fewer near a request's end. Checked: no request gets
  // more tokens than it asked for, and tokens, emissions and gaps are
  // counted apart.
  Workload w;
  w.requests = {request(0, 0.0, 64, 11), request(1, 0.0, 64, 12), request(2, 0.0, 64, 1),
                request(3, 0.5, 16, 40)};
  FixedCostExecutor ex(1e-3, 1e-5);
  ex.decode_emit = 3;
  SchedulerConfig config = scheduler_config(SchedulerPolicy::Chunked, 64, 512, 16, 10000, 4096, 0.01);
  config.num_speculative_tokens = 2;
  RunRecords rec = run(config, ex, w, true);
  int64_t gaps = 0, tokens = 0;
  for (const RequestRecord& r : rec.requests) {
    INFO("request " << r.id);
    REQUIRE(r.completed());
    CHECK(r.tokens_emitted == r.output_tokens);  // clamped: never more than asked
    if (r.output_tokens >= 3) CHECK(r.emissions < r.tokens_emitted);
    CHECK(r.emissions >= 1 + (r.output_tokens - 1 + 2) / 3);  // at most 3 per emission
    gaps += r.emissions - 1;
    tokens += r.output_tokens;
  }
  CHECK(rec.itl_s.count() == gaps);
  const RunSummary s = summarize_run(rec, SloTargets{});
  CHECK(s.output_tokens == tokens);
  CHECK(s.tpot_s.count == 3);  // request 2 has a single token: no TPOT
}

TEST_CASE("End of sequence finishes a request early", "[runner]") {
  Workload w;
  w.requests = {request(0, 0.0, 30, 50), request(1, 0.0, 30, 20)};
  FixedCostExecutor ex(1e-3, 1e-5);
  ex.eos_id = 0;
  ex.eos_after = 7;
  RunRecords rec =
      run(scheduler_config(SchedulerPolicy::Chunked, 64, 512, 16, 10000, 4096, 0.01), ex, w, true);
  REQUIRE(rec.requests[0].completed());
  CHECK(rec.requests[0].tokens_emitted == 7);
  CHECK(rec.requests[1].tokens_emitted == 20);
  const RunSummary s = summarize_run(rec, SloTargets{});
  CHECK(s.completed == 2);
  CHECK(s.output_tokens == 27);
}

TEST_CASE("The same seed gives byte-identical outputs and another seed different ones",
          "[runner][determinism]") {
  TempDir tmp("determinism");
  write_outputs(small_roofline_setup(17), tmp.path() / "a");
  write_outputs(small_roofline_setup(17), tmp.path() / "b");
  write_outputs(small_roofline_setup(18), tmp.path() / "c");
  for (const char* file : {"summary.json", "requests.csv", "iterations.csv"}) {
    INFO(file);
    const std::string a = slurp(tmp.path() / "a" / file);
    const std::string b = slurp(tmp.path() / "b" / file);
    const std::string c = slurp(tmp.path() / "c" / file);
    CHECK(a.size() > 100);
    CHECK(a == b);
    CHECK(a != c);
  }
}

// ---------------------------------------------------------------- sessions

namespace {

// A follow-up turn: `id` is sent `think_s` after request `follows` ended.
Request turn(int64_t id, int64_t follows, double think_s, int32_t prompt_tokens, int32_t output_tokens) {
  Request r = request(id, 0.0, prompt_tokens, output_tokens);
  r.follows = follows;
  r.think_time_s = think_s;
  return r;
}

SchedulerConfig session_config() {
  return scheduler_config(SchedulerPolicy::Chunked, 64, 512, 16, 10000, 4096, 0.01);
}

}  // namespace

TEST_CASE("A follow-up turn is released exactly its think time after the turn it follows",
          "[runner][sessions]") {
  // 0 at t = 1; 1 follows 0 after 2.5 s; 2 follows 1 at once (think 0).
  Workload w;
  w.requests = {request(0, 1.0, 40, 5), turn(1, 0, 2.5, 60, 4), turn(2, 1, 0.0, 80, 3)};
  FixedCostExecutor ex(2e-3, 1e-5);
  Scheduler scheduler(session_config());
  VirtualClock clock;
  Watcher watcher;
  watcher.clock = &clock;
  LoopOptions loop;
  loop.observers = {&watcher};
  const RunRecords rec = run_serving_loop(scheduler, ex, clock, w, loop);

  const auto& r = rec.requests;
  for (const RequestRecord& x : r) REQUIRE(x.completed());
  CHECK(r[0].arrival_s == 1.0);
  CHECK(r[1].arrival_s == r[0].finish_s + 2.5);
  CHECK(r[2].arrival_s == r[1].finish_s);
  CHECK(r[1].first_scheduled_s == r[1].arrival_s);  // an idle server takes it at once
  CHECK(r[2].first_scheduled_s == r[2].arrival_s);
  // The loop idled until each release, and told the observers so; with
  // think time 0 the next turn is taken in without an idle wait.
  REQUIRE(watcher.idle.size() == 2);
  CHECK(watcher.idle[0] == std::pair{0.0, 1.0});
  CHECK(watcher.idle[1] == std::pair{r[0].finish_s, r[0].finish_s + 2.5});
  CHECK(rec.end_s == r[2].finish_s);
}

TEST_CASE("A turn released while the server is busy arrives at its release time",
          "[runner][sessions]") {
  // Request 1 (a long prompt at t = 0) keeps the server busy across the
  // release of 2, which follows the short request 0 after 1 ms.
  Workload w;
  w.requests = {request(0, 0.0, 16, 1), request(1, 0.0, 4000, 50), turn(2, 0, 1e-3, 30, 2)};
  FixedCostExecutor ex(1e-3, 1e-5);
  RunRecords rec = run(session_config(), ex, w, true);
  const auto& r = rec.requests;
  REQUIRE(r[2].completed());
  CHECK(r[2].arrival_s == r[0].finish_s + 1e-3);
  // Released mid-iteration: taken in when that iteration ends.
  CHECK(r[2].first_scheduled_s > r[2].arrival_s);
  CHECK(r[1].finish_s > r[2].arrival_s);
  const RunSummary s = summarize_run(rec, SloTargets{});
  CHECK(s.submitted == 3);
  CHECK(s.completed == 3);
  // TTFT counts from the release, not from 0.
  CHECK(s.ttft_s.max < r[1].finish_s);
}

TEST_CASE("A rejected turn releases the next one at its rejection time plus think time",
          "[runner][sessions]") {
  // Turn 1 is too long for the model (max 4096 tokens): rejected when it is
  // released; turn 2 follows it 0.5 s later and is served; turn 3 follows 2
  // with think 0 but is rejected too, and turn 4 comes at once after it.
  Workload w;
  w.requests = {request(0, 0.25, 100, 4), turn(1, 0, 1.0, 5000, 10), turn(2, 1, 0.5, 100, 3),
                turn(3, 2, 0.0, 3000, 2000), turn(4, 3, 0.0, 50, 2)};
  FixedCostExecutor ex(1e-3, 1e-5);
  RunRecords rec = run(session_config(), ex, w, true);
  const auto& r = rec.requests;
  CHECK(r[1].rejected());
  CHECK(r[1].arrival_s == r[0].finish_s + 1.0);
  CHECK(r[2].arrival_s == r[1].arrival_s + 0.5);
  CHECK(r[3].rejected());
  CHECK(r[3].arrival_s == r[2].finish_s);
  CHECK(r[4].arrival_s == r[3].arrival_s);
  CHECK(r[4].completed());
  const RunSummary s = summarize_run(rec, SloTargets{});
  CHECK(s.submitted == 5);
  CHECK(s.rejected == 2);
  CHECK(s.completed == 3);
}

TEST_CASE("Generated sessions run to the end, each turn think time after the previous",
          "[runner][sessions]") {
  WorkloadSpec spec;
  spec.arrival = ArrivalProcess::Poisson;
  spec.rate = 20;
  spec.num_requests = 300;
  spec.prompt_len = "uniform:16:256";
  spec.output_len = "uniform:4:64";
  spec.session_turns = "uniform:1:6";
  spec.think_time = "exponential:0.2s";
  spec.shared_prefix_groups = 2;
  spec.shared_prefix_len = 128;
  spec.seed = 9;
  const Workload w = make_workload(spec);
  FixedCostExecutor ex(1e-3, 2e-5);
  RunRecords rec = run(session_config(), ex, w, true);
  int64_t follow_ups = 0;
  for (const Request& q : w.requests) {
    const RequestRecord& r = rec.requests[size_t(q.id)];
    INFO("request " << q.id);
    REQUIRE(r.completed());
    REQUIRE(r.prompt_tokens == q.prompt_tokens);
    if (q.follows < 0) {
      REQUIRE(r.arrival_s == q.arrival_s);
    } else {
      ++follow_ups;
      REQUIRE(r.arrival_s == rec.requests[size_t(q.follows)].finish_s + q.think_time_s);
    }
  }
  CHECK(follow_ups > 150);
  const RunSummary s = summarize_run(rec, SloTargets{});
  CHECK(s.completed == 300);
  // The same workload again: the same run.
  FixedCostExecutor ex2(1e-3, 2e-5);
  const RunRecords again = run(session_config(), ex2, w, true);
  for (size_t i = 0; i < rec.requests.size(); ++i) {
    REQUIRE(again.requests[i].arrival_s == rec.requests[i].arrival_s);
    REQUIRE(again.requests[i].finish_s == rec.requests[i].finish_s);
  }
}

TEST_CASE("The serving loop refuses follow-ups it cannot release", "[runner][sessions]") {
  FixedCostExecutor ex(1e-3, 1e-5);
  Workload w;
  w.requests = {request(0, 0.0, 10, 2), turn(1, 1, 0.0, 10, 2)};  // follows itself
  CHECK_THROWS_AS(run(session_config(), ex, w, true), std::invalid_argument);
  w.requests = {turn(0, 1, 0.0, 10, 2), request(1, 0.0, 10, 2)};  // follows a later one
  CHECK_THROWS_AS(run(session_config(), ex, w, true), std::invalid_argument);
  w.requests = {request(0, 0.0, 10, 2), turn(1, 0, 0.0, 10, 2)};
  w.closed_loop = true;
  w.concurrency = 1;
  CHECK_THROWS_AS(run(session_config(), ex, w, true), std::invalid_argument);
}

TEST_CASE("A released turn quotes what the turns before it really generated", "[runner][sessions]") {
  // One conversation: 0, then 1 quoting 0's output, then 2 quoting both.
  auto src = [](TokenSourceKind kind, uint64_t a) { return token_source(kind, a); };
  auto with_spans = [&](Request r, std::vector<TokenSpan> spans) {
    r.tokens.prompt_spans = std::move(spans);
    r.tokens.output_source = src(TokenSourceKind::Output, uint64_t(r.id));
    r.prompt_tokens = int32_t(r.tokens.prompt_tokens());
    return r;
  };
  const TokenSpan a{src(TokenSourceKind::UserMessage, 0), 0, 100};
  const TokenSpan out0{src(TokenSourceKind::Output, 0), 0, 40};
  const TokenSpan out1{src(TokenSourceKind::Output, 1), 0, 30};
  const TokenSpan c{src(TokenSourceKind::UserMessage, 2), 0, 50};

  SECTION("a turn that stopped at end of sequence contributes the tokens it emitted") {
    const TokenSpan b{src(TokenSourceKind::UserMessage, 1), 0, 60};
    Workload w;
    w.requests = {with_spans(request(0, 0.5, 0, 40), {a}),
                  with_spans(turn(1, 0, 0.25, 0, 30), {a, out0, b}),
                  with_spans(turn(2, 1, 0.25, 0, 5), {a, out0, b, out1, c})};
    FixedCostExecutor ex(1e-3, 1e-5);
    ex.eos_id = 0;  // request 0 ends after 12 of its 40 tokens
    ex.eos_after = 12;
    const RunRecords rec = run(session_config(), ex, w, true);
    const auto& r = rec.requests;
    REQUIRE(r[0].tokens_emitted == 12);
    CHECK(r[1].prompt_tokens == 100 + 12 + 60);
    CHECK(r[2].prompt_tokens == 100 + 12 + 60 + 30 + 50);
    for (const RequestRecord& x : r) CHECK(x.completed());
  }
  SECTION("a rejected turn contributes nothing") {
    const TokenSpan b{src(TokenSourceKind::UserMessage, 1), 0, 5000};  // over max-model-len 4096
    Workload w;
    w.requests = {with_spans(request(0, 0.5, 0, 40), {a}),
                  with_spans(turn(1, 0, 0.25, 0, 30), {a, out0, b}),
                  with_spans(turn(2, 1, 0.25, 0, 5), {a, out0, b, out1, c})};
    FixedCostExecutor ex(1e-3, 1e-5);
    const RunRecords rec = run(session_config(), ex, w, true);
    const auto& r = rec.requests;
    CHECK(r[1].rejected());
    CHECK(r[1].prompt_tokens == 100 + 40 + 5000);
    CHECK(r[2].prompt_tokens == 100 + 40 + 5000 + 50);
    CHECK(r[2].arrival_s == r[1].arrival_s + 0.25);
  }
}
