// Speculative decoding in the simulator: the scheduler's k' + 1 query tokens
// and block give-back, the draft-pass rule, the acceptance models against
// their closed forms, and the cost model's speed-up against Leviathan et al.
// (2023), eq. 1 and its walltime corollary.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "sim/acceptance.h"
#include "sim/draft_model.h"
#include "sim/draft_passes.h"
#include "sim/kv_capacity.h"
#include "sim/random.h"
#include "sim/cost/simulated_executor.h"
#include "sim/cost/speculative_cost.h"
#include "sim/speculative_stats.h"

#include "support/test_support.h"

namespace servesim {
namespace {

using test::input_error_of;
using test::request;
using test::scheduler_config;

// Drives a speculative Scheduler directly: each verification accepts a
// random number of its drafts; every plan is checked against the contract.
class SpecDriver final : public SchedulerListener {
 public:
  explicit SpecDriver(const SchedulerConfig& c, uint64_t seed) : cfg(c), sched(c), rng(seed) {}

  void add(const Request& r) {
    REQUIRE_FALSE(sched.add_request(r));
    requests[r.id] = r;
  }

  void step() {
    const size_t running_before = sched.num_running();
    sched.schedule(plan, *this);
    REQUIRE_FALSE(plan.empty());
    IterationResult result;
    result.emitted_tokens.assign(plan.sequences.size(), 0);
    int32_t budget_used = 0;
    for (size_t i = 0; i < plan.sequences.size(); ++i) {
      const ScheduledSequence& s = plan.sequences[i];
      const Request& r = requests[s.request_id];
      budget_used += s.num_query_tokens;
      REQUIRE(s.num_cached_tokens == computed[s.request_id]);
      REQUIRE(int64_t(s.block_table.size()) * cfg.block_size >= s.num_cached_tokens + s.num_query_tokens);
      if (s.is_prefill) {
        if (s.samples) result.emitted_tokens[i] = 1;
        continue;
      }
      // A decode: the newest token plus k' drafts, k' within every limit.
      const int32_t drafts = s.num_query_tokens - 1;
      REQUIRE(s.samples);
      REQUIRE(s.num_sample_rows == s.num_query_tokens);
      REQUIRE(s.num_cached_tokens == r.prompt_tokens + tokens[s.request_id] - 1);
      REQUIRE(drafts >= 0);
      REQUIRE(drafts <= cfg.num_speculative_tokens);
      REQUIRE(drafts + 1 <= r.output_tokens - tokens[s.request_id]);  // never past the end
      if (cfg.speculative_disable_by_batch_size > 0 &&
          int64_t(running_before) >= cfg.speculative_disable_by_batch_size)
        REQUIRE(drafts == 0);
      if (drafts == cfg.num_speculative_tokens) ++full_steps;
      if (cfg.policy != SchedulerPolicy::Static)  // no more blocks than the tokens need
        REQUIRE(int64_t(s.block_table.size()) == sched.kv().blocks_for(s.num_cached_tokens + s.num_query_tokens));
      const int32_t accepted = int32_t(rng() % uint64_t(drafts + 1));
      result.emitted_tokens[i] = accepted + 1;
    }
    if (cfg.policy == SchedulerPolicy::Chunked) REQUIRE(budget_used <= cfg.max_num_batched_tokens);
    sched.complete(plan, result, *this);
    for (size_t i = 0; i < plan.sequences.size(); ++i) {
      const ScheduledSequence& s = plan.sequences[i];
      computed[s.request_id] += s.is_prefill ? s.num_query_tokens : result.emitted_tokens[i];
    }
  }

  void run_to_end() {
    for (int i = 0; i < 100000 && sched.has_unfinished(); ++i) step();
    REQUIRE_FALSE(sched.has_unfinished());
    for (const auto& [id, r] : requests) CHECK(tokens[id] == r.output_tokens);
    CHECK(sched.kv().num_used() == 0);
  }

  void on_first_scheduled(int64_t) override {}
  void on_tokens(int64_t id, int32_t n) override {
    tokens[id] += n;
    REQUIRE(tokens[id] <= requests[id].output_tokens);
  }
  void on_finished(int64_t id) override { REQUIRE(tokens[id] == requests[id].output_tokens); }
  void on_preempted(int64_t id) override { computed[id] = 0; }

  SchedulerConfig cfg;
  Scheduler sched;
  std::mt19937_64 rng;
  IterationPlan plan;
  std::map<int64_t, Request> requests;
  std::map<int64_t, int32_t> computed, tokens;
  int64_t full_steps = 0;
};

TEST_CASE("Speculative decodes ask for k'+1 tokens within every limit, rejected drafts give their blocks back",
          "[speculative][scheduler]") {
  for (SchedulerPolicy policy : {SchedulerPolicy::Static, SchedulerPolicy::Continuous, SchedulerPolicy::Chunked}) {
    for (int32_t k : {1, 3, 7}) {
      INFO("policy " << to_string(policy) << ", k = " << k);
      SchedulerConfig c = scheduler_config(policy, 8, 256, 4, 4096, 4096, 0.0);
      c.num_speculative_tokens = k;
      SpecDriver d(c, uint64_t(k));
      for (int64_t i = 0; i < 12; ++i) d.add(request(i, 0.0, 5 + int32_t(i) * 3, 1 + int32_t(i) * 5));
      d.run_to_end();
      CHECK(d.full_steps > 0);
    }
  }
}

TEST_CASE("Speculation survives preemption when the KV cache is short", "[speculative][scheduler]") {
  // 40 blocks of 4 tokens for 10 requests of up to 60 tokens: preemptions.
  SchedulerConfig c = scheduler_config(SchedulerPolicy::Chunked, 10, 64, 4, 40, 4096, 0.0);
  c.num_speculative_tokens = 4;
  SpecDriver d(c, 7);
  for (int64_t i = 0; i < 10; ++i) d.add(request(i, 0.0, 20, 40));
  d.run_to_end();
  CHECK(d.sched.num_preemptions() > 0);
}

TEST_CASE("No speculation while the batch is at --speculative-disable-by-batch-size", "[speculative][scheduler]") {
  SchedulerConfig c = scheduler_config(SchedulerPolicy::Continuous, 16, 4096, 16, 4096, 4096, 0.0);
  c.num_speculative_tokens = 3;
  c.speculative_disable_by_batch_size = 4;
  SpecDriver d(c, 3);
  for (int64_t i = 0; i < 8; ++i) d.add(request(i, 0.0, 8, 10 + 4 * int32_t(i)));
  // The driver checks k' = 0 whenever 4 or more sequences run; once the
  // short requests finish, the last ones speculate again.
  d.run_to_end();
  CHECK(d.full_steps > 0);
}

TEST_CASE("KvBlockPool::shrink_to returns the blocks past the tokens kept", "[speculative][kv]") {
  KvBlockPool kv(10, 4);
  std::vector<int32_t> table;
  REQUIRE(kv.grow_to(table, 13));  // 4 blocks
  CHECK(kv.num_free() == 6);
  kv.shrink_to(table, 9);  // 3 blocks hold 9 tokens
  CHECK(table.size() == 3);
  CHECK(kv.num_free() == 7);
  kv.shrink_to(table, 12);  // never grows
  CHECK(table.size() == 3);
}

TEST_CASE("Draft passes: prefill mirrored, decodes catch up then propose one draft per pass",
          "[speculative][draft]") {
  const std::vector<int32_t> blocks = {0, 1, 2, 3, 4, 5, 6, 7};
  IterationPlan target;
  ScheduledSequence prefill{.request_id = 1, .num_query_tokens = 30, .num_cached_tokens = 10, .is_prefill = true,
                            .samples = false, .num_sample_rows = 0, .block_table = blocks};
  ScheduledSequence spec3{.request_id = 2, .num_query_tokens = 4, .num_cached_tokens = 50, .is_prefill = false,
                          .samples = true, .num_sample_rows = 4, .block_table = blocks};
  ScheduledSequence spec1{.request_id = 3, .num_query_tokens = 2, .num_cached_tokens = 20, .is_prefill = false,
                          .samples = true, .num_sample_rows = 2, .block_table = blocks};
  ScheduledSequence plain{.request_id = 4, .num_query_tokens = 1, .num_cached_tokens = 9, .is_prefill = false,
                          .samples = true, .num_sample_rows = 1, .block_table = blocks};
  for (const auto& s : {prefill, spec3, spec1, plain}) target.add(s);
  // Request 2 accepted everything last time: its draft lags by two tokens.
  const std::vector<int32_t> draft_cached = {0, 49, 20, 9};
  std::vector<IterationPlan> passes;
  plan_draft_passes(target, draft_cached, passes);
  REQUIRE(passes.size() == 3);  // max k' = 3

  const auto& p1 = passes[0].sequences;
  REQUIRE(p1.size() == 4);
  CHECK((p1[0].is_prefill && p1[0].num_query_tokens == 30 && p1[0].num_cached_tokens == 10 && !p1[0].samples));
  CHECK((p1[1].num_query_tokens == 2 && p1[1].num_cached_tokens == 49 && p1[1].samples));
  CHECK((p1[2].num_query_tokens == 1 && p1[2].num_cached_tokens == 20 && p1[2].samples));
  CHECK((p1[3].num_query_tokens == 1 && p1[3].num_cached_tokens == 9 && !p1[3].samples));
  CHECK(passes[0].num_sample_rows == 2);
  REQUIRE(passes[1].sequences.size() == 1);
  CHECK((passes[1].sequences[0].request_id == 2 && passes[1].sequences[0].num_cached_tokens == 51));
  REQUIRE(passes[2].sequences.size() == 1);
  CHECK(passes[2].sequences[0].num_cached_tokens == 52);
  for (const auto& pass : passes)
    for (const auto& s : pass.sequences) CHECK(s.block_table.data() == blocks.data());

  // After verification: the draft holds what it computed and the target kept.
  CHECK(draft_cached_after(target.sequences[0], 0) == 40);
  CHECK(draft_cached_after(target.sequences[1], 0) == 51);  // rejected draft 1: c + 1
  CHECK(draft_cached_after(target.sequences[1], 1) == 52);
  CHECK(draft_cached_after(target.sequences[1], 3) == 53);  // all accepted: draft 3 never fed
  CHECK(draft_cached_after(target.sequences[3], 0) == 10);

  const std::vector<int32_t> ahead = {0, 51, 20, 9};  // more than the target holds
  CHECK_THROWS_AS(plan_draft_passes(target, ahead, passes), std::logic_error);
}

TEST_CASE("SpeculativeStats counts positions, the full-k histogram and per-request totals", "[speculative][stats]") {
  SpeculativeStats s(3);
  s.record_step(1, 3, 3);  // all accepted: positions 1-3 attempted and accepted
  s.record_step(1, 3, 0);  // first rejected: position 1 attempted only
  s.record_step(2, 2, 1);  // cut short near the end: not in the histogram
  s.record_plain_decode();
  CHECK(s.steps() == 3);
  CHECK(s.attempts_per_position() == std::vector<int64_t>{3, 2, 1});
  CHECK(s.accepts_per_position() == std::vector<int64_t>{2, 1, 1});
  CHECK(s.accepted_length_histogram() == std::vector<int64_t>{1, 0, 0, 1});
  CHECK(s.mean_accepted_tokens_per_step() == Approx((4.0 + 1.0 + 2.0) / 3));
  CHECK(s.draft_acceptance_rate() == Approx(4.0 / 8));
  CHECK(s.per_request().at(1).accepted == 3);
  CHECK(s.plain_decodes() == 1);
  CHECK_THROWS_AS(s.record_step(1, 4, 0), std::logic_error);
  CHECK_THROWS_AS(s.record_step(1, 2, 3), std::logic_error);
  const auto j = s.to_json();
  CHECK(j["acceptance_rate_per_position"].size() == 3);
  CHECK(j["mean_accepted_tokens_per_step"].get<double>() == Approx(7.0 / 3));
}

// Mean and standard error of the tokens per step of `steps` draws.
std::pair<double, double> sample_tokens(AcceptanceModel& m, int32_t k, int64_t steps, uint64_t seed,
                                        int64_t requests = 1) {
  Rng rng(seed);
  double sum = 0, sum_sq = 0;
  for (int64_t i = 0; i < steps; ++i) {
    const double t = 1 + m.sample(i % requests, k, rng);
    sum += t;
    sum_sq += t * t;
  }
  const double mean = sum / double(steps);
  const double var = sum_sq / double(steps) - mean * mean;
  return {mean, std::sqrt(var / double(steps))};
}

TEST_CASE("Independent acceptance: tokens per step = (1 - a^(k+1)) / (1 - a)", "[speculative][acceptance]") {
  for (double a : {0.5, 0.7, 0.9}) {
    for (int32_t k : {1, 4, 8}) {
      AcceptanceModel m = AcceptanceModel::independent(a);
      const double expected = (1 - std::pow(a, k + 1)) / (1 - a);
      CHECK(m.expected_tokens_per_step(k) == Approx(expected).epsilon(1e-12));
      const auto [mean, se] = sample_tokens(m, k, 200000, uint64_t(k * 100 + a * 10));
      INFO("a = " << a << ", k = " << k << ": " << mean << " +- " << se << " vs " << expected);
      CHECK(std::abs(mean - expected) < 4 * se);
    }
  }
  AcceptanceModel always = AcceptanceModel::independent(1.0), never = AcceptanceModel::independent(0.0);
  Rng rng(1);
  CHECK(always.sample(0, 5, rng) == 5);
  CHECK(never.sample(0, 5, rng) == 0);
}

TEST_CASE("Curve and histogram acceptance follow their conditional rates", "[speculative][acceptance]") {
  AcceptanceModel curve = AcceptanceModel::parse_curve("0.9,0.5,0.25");
  // P(>= 1) = 0.9, P(>= 2) = 0.45, P(>= 3) = 0.1125.
  CHECK(curve.expected_tokens_per_step(3) == Approx(1 + 0.9 + 0.45 + 0.1125));
  const auto [mean, se] = sample_tokens(curve, 3, 200000, 5);
  CHECK(std::abs(mean - (1 + 0.9 + 0.45 + 0.1125)) < 4 * se);
  CHECK(input_error_of([&] { curve.require_covers(4); }).find("--acceptance-curve") != std::string::npos);

  // A histogram of accepted lengths 0..3 -> its conditional rates.
  AcceptanceModel h = AcceptanceModel::histogram({10, 20, 30, 40}, "test");
  const std::vector<double> rates = h.conditional_rates(3);
  CHECK(rates[0] == Approx(90.0 / 100));
  CHECK(rates[1] == Approx(70.0 / 90));
  CHECK(rates[2] == Approx(40.0 / 70));
  // Cut to k = 3 the histogram's own mean comes back: (0*10+1*20+2*30+3*40)/100 + 1.
  CHECK(h.expected_tokens_per_step(3) == Approx(1 + 2.0));
  CHECK(input_error_of([&] { h.require_covers(4); }).find("--acceptance-hist") != std::string::npos);

  CHECK(input_error_of([] { AcceptanceModel::parse_curve("0.9,x"); }).find("not a number") != std::string::npos);
  CHECK(input_error_of([] { AcceptanceModel::parse_curve("0.9,1.5"); }).find("probability") != std::string::npos);
  CHECK(input_error_of([] { AcceptanceModel::independent(-0.1); }).find("--acceptance-rate") != std::string::npos);
  CHECK(input_error_of([] { AcceptanceModel::histogram({0, 0}, "h"); }).find("no steps") != std::string::npos);
}

TEST_CASE("Histogram files: a run's summary.json or a CSV, malformed ones are named", "[speculative][acceptance]") {
  test::TempDir dir("speculative");
  auto file = [&](const char* name) { return (dir.path() / name).string(); };
  const std::string json_path = file("summary.json");
  {
    std::ofstream(json_path) << R"({"speculative": {"accepted_length_histogram": [5, 5, 10]}})";
  }
  AcceptanceModel from_json = AcceptanceModel::load_histogram(json_path);
  CHECK(from_json.conditional_rates(2)[0] == Approx(15.0 / 20));
  CHECK(from_json.conditional_rates(2)[1] == Approx(10.0 / 15));

  const std::string csv_path = file("hist.csv");
  { std::ofstream(csv_path) << "accepted,count\n0,5\n1,5\n2,10\n"; }
  CHECK(AcceptanceModel::load_histogram(csv_path).conditional_rates(2) == from_json.conditional_rates(2));

  const std::string bad_csv = file("bad.csv");
  { std::ofstream(bad_csv) << "accepted,count\n0,5\n2,10\n"; }
  CHECK(input_error_of([&] { AcceptanceModel::load_histogram(bad_csv); }).find("bad.csv:3") != std::string::npos);
  const std::string no_hist = file("plain.json");
  { std::ofstream(no_hist) << R"({"ttft_s": {}})"; }
  CHECK(input_error_of([&] { AcceptanceModel::load_histogram(no_hist); }).find("accepted_length_histogram") !=
        std::string::npos);
  CHECK(input_error_of([&] { AcceptanceModel::load_histogram(file("missing.csv")); }).find("cannot open") !=
        std::string::npos);
}

TEST_CASE("Beta acceptance: rates vary by request, steps follow E[a^j]", "[speculative][acceptance]") {
  const double A = 4, B = 2;
  AcceptanceModel m = AcceptanceModel::parse_beta("4:2");
  m.set_seed(11);
  // Many requests, a few steps each: the population mean of tokens per step.
  const auto [mean, se] = sample_tokens(m, 4, 200000, 3, 20000);
  INFO(mean << " +- " << se << " vs " << m.expected_tokens_per_step(4));
  CHECK(std::abs(mean - m.expected_tokens_per_step(4)) < 5 * se);
  // Per-request rates: mean A/(A+B), variance AB/((A+B)^2 (A+B+1)).
  Rng rng(9);
  std::vector<double> rates;
  for (int64_t id = 0; id < 4000; ++id) {
    int64_t accepted = 0, proposed = 0;
    for (int i = 0; i < 200; ++i) {
      accepted += m.sample(id, 1, rng);
      ++proposed;
    }
    rates.push_back(double(accepted) / double(proposed));
  }
  double s = 0, s2 = 0;
  for (double r : rates) {
    s += r;
    s2 += r * r;
  }
  const double rmean = s / double(rates.size()), rvar = s2 / double(rates.size()) - rmean * rmean;
  CHECK(rmean == Approx(A / (A + B)).epsilon(0.02));
  // Binomial noise (r(1-r)/200 on average) adds to the Beta variance.
  const double beta_var = A * B / ((A + B) * (A + B) * (A + B + 1));
  CHECK(rvar == Approx(beta_var + (rmean - s2 / double(rates.size())) / 200).epsilon(0.15));
  CHECK(input_error_of([] { AcceptanceModel::parse_beta("4"); }).find("A:B") != std::string::npos);
  CHECK(input_error_of([] { AcceptanceModel::parse_beta("0:1"); }).find("> 0") != std::string::npos);
}

// Every pass costs the same, whatever it holds.
// A cost model whose every pass takes `seconds`, counting them.
class PassCost final : public CostModel {
 public:
  explicit PassCost(double seconds) : seconds_(seconds) {}
  std::string name() const override { return "pass-cost"; }
  double seconds(const IterationPlan&) const override {
    ++passes;
    return seconds_;
  }
  nlohmann::json describe() const override { return {{"executor", "pass-cost"}}; }
  mutable int64_t passes = 0;

 private:
  double seconds_;
};

TEST_CASE("Batch-1 walltime speed-up = (1 - a^(k+1)) / ((1 - a)(k c + 1))", "[speculative][cost]") {
  // Leviathan et al. (2023), Theorem 3.8: a draft pass costs c target passes.
  const int32_t output = 20000;
  Workload w;
  w.requests = {request(0, 0.0, 16, output)};
  SchedulerConfig plain = scheduler_config(SchedulerPolicy::Continuous, 1, 40000, 16, 4096, 40000, 0.0);
  const PassCost baseline_target(1.0);
  VirtualClock base_clock;
  SimulatedExecutor baseline(baseline_target, base_clock);
  Scheduler base_scheduler(plain);
  const RunRecords base = run_serving_loop(base_scheduler, baseline, base_clock, w);
  const double base_decode_s = base.requests[0].finish_s - base.requests[0].first_token_s;

  for (double a : {0.6, 0.8}) {
    for (int32_t k : {2, 5}) {
      const double c = 0.1;
      const PassCost target(1.0), draft(c);
      VirtualClock clock;
      SimulatedExecutor model(target, clock);
      model.speculate(draft, AcceptanceModel::independent(a), k, 42);
      SchedulerConfig spec = plain;
      spec.num_speculative_tokens = k;
      Scheduler scheduler(spec);
      const RunRecords rec = run_serving_loop(scheduler, model, clock, w);
      REQUIRE(rec.requests[0].completed());
      REQUIRE(rec.requests[0].tokens_emitted == output);
      const double decode_s = rec.requests[0].finish_s - rec.requests[0].first_token_s;
      const double speedup = base_decode_s / decode_s;
      const double expected = (1 - std::pow(a, k + 1)) / ((1 - a) * (k * c + 1));
      INFO("a = " << a << ", k = " << k << ": speed-up " << speedup << " vs " << expected);
      // ~20000 / 3 steps: the mean tokens per step is known to ~1%; the last
      // few steps near the end propose fewer drafts.
      CHECK(speedup == Approx(expected).epsilon(0.03));
      const SpeculativeStats& stats = *model.speculative_stats();
      CHECK(stats.mean_accepted_tokens_per_step() == Approx((1 - std::pow(a, k + 1)) / (1 - a)).epsilon(0.03));
      int64_t full_steps = 0;
      for (int64_t n : stats.accepted_length_histogram()) full_steps += n;
      CHECK(draft.passes >= k * full_steps);  // k draft passes per full step
      CHECK(full_steps > stats.steps() - 10);  // only the last few steps are cut short
    }
  }
}

TEST_CASE("A speculative iteration costs its draft passes and one verification, the draft cache follows acceptance",
          "[speculative][cost]") {
  const PassCost target(1.0), draft(0.25);
  const SpeculativeCost cost(target, draft);
  const std::vector<int32_t> blocks = {0, 1, 2};
  IterationPlan plan;
  plan.add(ScheduledSequence{.request_id = 7, .num_query_tokens = 4, .num_cached_tokens = 20, .is_prefill = false,
                             .samples = true, .num_sample_rows = 4, .block_table = blocks});
  plan.add(ScheduledSequence{.request_id = 8, .num_query_tokens = 12, .num_cached_tokens = 0, .is_prefill = true,
                             .samples = true, .num_sample_rows = 1, .block_table = blocks});
  DraftCacheState cache;
  std::vector<int32_t> draft_cached;
  cache.lookup(plan, draft_cached);
  CHECK(draft_cached == std::vector<int32_t>{20, 0});  // not seen yet: the target's
  const SpeculativeCost::Seconds s = cost.seconds(plan, draft_cached);
  CHECK(s.draft == Approx(3 * 0.25));            // three draft passes
  CHECK(s.total == Approx(3 * 0.25 + 1.0));      // and one verification
  // Accepting 2 of 3 drafts leaves c + min(k', a + 1) tokens in the draft's cache.
  cache.advance(plan.sequences[0], 2);
  cache.advance(plan.sequences[1], 0);
  cache.lookup(plan, draft_cached);
  CHECK(draft_cached == std::vector<int32_t>{20, 0});  // capped at the target's cached tokens
  IterationPlan next;
  next.add(ScheduledSequence{.request_id = 7, .num_query_tokens = 1, .num_cached_tokens = 24, .is_prefill = false,
                             .samples = true, .num_sample_rows = 1, .block_table = blocks});
  cache.lookup(next, draft_cached);
  CHECK(draft_cached == std::vector<int32_t>{23});
  cache.forget(7);
  cache.lookup(next, draft_cached);
  CHECK(draft_cached == std::vector<int32_t>{24});
}

TEST_CASE("The KV capacity rule makes room for the draft's weights and KV", "[speculative][kv]") {
  const ModelSpec target = resolve_model("llama-3.1-8b");
  const HardwareSpec h200 = resolve_hardware("h200");
  const int64_t alone = kv_capacity_blocks(target, h200, 0.9, 16);
  const DraftModel separate = make_separate_draft(target, resolve_model("llama-3.2-1b"));
  const DraftModel self = make_self_draft(target, 8);
  const int64_t with_separate = kv_capacity_blocks(target, h200, 0.9, 16, &separate);
  const int64_t with_self = kv_capacity_blocks(target, h200, 0.9, 16, &self);
  const double budget = h200.memory_bytes * 0.9;
  CHECK(with_separate == int64_t(std::floor((budget - target.weight_bytes() - separate.spec.weight_bytes()) /
                                            (16 * (target.kv_bytes_per_token() + separate.spec.kv_bytes_per_token())))));
  CHECK(with_self == int64_t(std::floor((budget - target.weight_bytes()) /
                                        (16 * target.kv_bytes_per_token() * (1 + 8.0 / 32)))));
  CHECK(with_separate < alone);
  CHECK(with_self < alone);
  CHECK(input_error_of([&] { make_self_draft(target, 32); }).find("--self-draft-layers") != std::string::npos);
  CHECK(input_error_of([&] { make_separate_draft(target, resolve_model("qwen2.5-7b")); }).find("vocabulary") !=
        std::string::npos);
}

}  // namespace
}  // namespace servesim
