// The speculative executor on hand-built plans (as the scheduler makes
// them): at temperature 0 it emits exactly the plain decoder's tokens, after
// every rollback both KV caches hold what a plain run over the accepted
// tokens holds, controlled acceptance gives (1 - a^(k+1)) / (1 - a) tokens per
// step, and its statistics add up.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/decoder/decoder_executor.h"
#include "kernels/decoder/speculative_executor.h"
#include "support/speculative_support.h"

using namespace servesim;
using namespace servesim::spec_test;

namespace {

constexpr int32_t kBlockSize = 4;

// Prompt and output lengths of three requests decoded side by side.
const std::vector<std::pair<int32_t, int32_t>> kLengths = {{7, 20}, {13, 9}, {3, 26}};

// The SpeculativeStats invariants any run satisfies; `output_tokens` is the
// total the requests emitted, `prefills` the number of sampling prefills.
void require_consistent(const SpeculativeStats& s, int64_t output_tokens, int64_t prefills) {
  const int32_t k = s.num_speculative_tokens();
  REQUIRE(s.attempts_per_position().size() == size_t(k));
  REQUIRE(s.accepts_per_position().size() == size_t(k));
  REQUIRE(s.accepted_length_histogram().size() == size_t(k) + 1);
  // Every step attempts its first draft; later positions only after the
  // earlier ones were accepted.
  REQUIRE(s.attempts_per_position()[0] == s.steps());
  for (int32_t j = 0; j < k; ++j) {
    REQUIRE(s.accepts_per_position()[size_t(j)] <= s.attempts_per_position()[size_t(j)]);
    if (j + 1 < k) REQUIRE(s.attempts_per_position()[size_t(j) + 1] <= s.accepts_per_position()[size_t(j)]);
  }
  int64_t full = 0, full_accepted = 0;
  for (size_t a = 0; a < s.accepted_length_histogram().size(); ++a) {
    full += s.accepted_length_histogram()[a];
    full_accepted += int64_t(a) * s.accepted_length_histogram()[a];
  }
  REQUIRE(full <= s.steps());
  int64_t steps = 0, proposed = 0, accepted = 0;
  for (const auto& [id, r] : s.per_request()) {
    steps += r.steps;
    proposed += r.proposed;
    accepted += r.accepted;
    REQUIRE(r.accepted <= r.proposed);
  }
  REQUIRE(steps == s.steps());
  int64_t accepts = 0;
  for (int64_t a : s.accepts_per_position()) accepts += a;
  REQUIRE(accepts == accepted);
  REQUIRE(full_accepted <= accepted);
  // Every emitted token came from a step (a + 1), a plain decode or a prefill.
  const double from_steps = s.mean_accepted_tokens_per_step() * double(s.steps());
  REQUIRE(from_steps == Approx(double(accepted + steps)));
  REQUIRE(int64_t(std::llround(from_steps)) + s.plain_decodes() + prefills == output_tokens);
  if (proposed > 0) REQUIRE(s.draft_acceptance_rate() == Approx(double(accepted) / double(proposed)));
  REQUIRE(s.draft_seconds() > 0);
}

// Drives the three requests with `kind` and k under `schedule`; after
// every iteration both caches must hold, for the positions they keep, what
// one plain prefill of the same tokens writes; at the end the tokens must
// be `want` and the statistics consistent.
void check_greedy_run(DraftKind kind, int32_t k, const DriveOptions& schedule,
                      const std::vector<std::vector<int32_t>>& want) {
  int64_t num_blocks = 0;
  std::vector<HandRequest> reqs = hand_requests(kLengths, k, kBlockSize, num_blocks);
  auto ex = make_executor(kind, num_blocks, kBlockSize, executor_options(k, 0.0));
  ex->keep_outputs(true);
  float worst_target = 0, worst_draft = 0;
  bool preempted = false;
  drive(*ex, reqs, k, schedule, [&](const std::vector<HandRequest>& rs) {
    for (const HandRequest& r : rs) {
      const std::vector<int32_t>* tokens = ex->tokens_of(r.id);
      REQUIRE(tokens != nullptr);
      // The executor holds prompt + generated tokens; the target's cache
      // holds all but the newest once the prefill is done.
      // (Prompt ids are drawn as the chunks reach them.)
      REQUIRE(int32_t(tokens->size()) == (r.generated == 0 ? r.cached : r.prompt + r.generated));
      if (r.generated == 0 || r.cached < r.prompt + r.generated - 1) {
        // Mid-prefill: a chunked prompt, or a recompute after the preemption.
        preempted = preempted || r.generated > 1;
      } else {
        REQUIRE(r.cached == int32_t(tokens->size()) - 1);
      }
      std::vector<int32_t> plain_table;
      auto plain = prefilled(target_weights(), std::span<const int32_t>(*tokens).first(size_t(r.cached)), kBlockSize,
                             plain_table);
      worst_target = std::max(worst_target, kv_max_difference(ex->target(), r.table, *plain, plain_table, r.cached));
      // The draft's cache: valid up to d <= cached tokens, lagging by at
      // most one token (the last draft of a step that accepted them all).
      const std::optional<int32_t> d = ex->draft_cached_of(r.id);
      REQUIRE(d.has_value());
      REQUIRE(*d <= r.cached);
      REQUIRE(*d >= r.cached - 1);
      std::vector<int32_t> draft_table;
      auto plain_draft =
          prefilled(draft_weights(kind), std::span<const int32_t>(*tokens).first(size_t(*d)), kBlockSize, draft_table);
      worst_draft = std::max(worst_draft, kv_max_difference(ex->draft(), r.table, *plain_draft, draft_table, *d));
    }
  });
  if (schedule.preempt_at_iteration >= 0) REQUIRE(preempted);
  // Batched and chunked passes differ from one prefill by float rounding only.
  INFO("largest KV difference: target " << worst_target << ", draft " << worst_draft);
  REQUIRE(worst_target < 1e-4f);
  REQUIRE(worst_draft < 1e-4f);
  for (size_t i = 0; i < reqs.size(); ++i) {
    INFO("request " << reqs[i].id);
    REQUIRE(ex->outputs().at(reqs[i].id) == want[i]);
  }
  const SpeculativeStats& s = *ex->speculative_stats();
  int64_t output_tokens = 0;
  for (const auto& [p, o] : kLengths) output_tokens += o;
  // A recompute may sample once more from its prefill (or end its prefill
  // one token short, as the scheduler does, and go on decoding).
  int64_t prefills = 0;
  for (const HandRequest& r : reqs) prefills += r.sampling_prefills;
  require_consistent(s, output_tokens, prefills);
  INFO(s.steps() << " steps, " << s.mean_accepted_tokens_per_step() << " tokens per step, draft acceptance "
                 << s.draft_acceptance_rate());
  // Acceptance is partial: some drafts accepted, not all.
  REQUIRE(s.draft_acceptance_rate() > 0.0);
  REQUIRE(s.draft_acceptance_rate() < 1.0);
  for (const HandRequest& r : reqs) ex->on_request_finished(r.id);
  for (const HandRequest& r : reqs) REQUIRE(ex->tokens_of(r.id) == nullptr);
}

}  // namespace

TEST_CASE("speculative executor: greedy tokens equal plain decoding, and rollback leaves both caches as a plain "
          "run's",
          "[speculative][executor]") {
  const SamplingParams greedy{0.0, 1.0, 99};
  std::vector<std::vector<int32_t>> want;
  for (size_t i = 0; i < kLengths.size(); ++i)
    want.push_back(reference_output(int64_t(i) + 1, kLengths[i].first, kLengths[i].second, greedy));

  // Whole prompts; 5-token prefill chunks; a preemption by recompute (of
  // request 3, mid-decode) with 6-token chunks.
  const DriveOptions schedules[] = {{0, -1, 0}, {5, -1, 0}, {6, 5, 3}};
  for (const DriveOptions& schedule : schedules) {
    for (const DraftKind kind : {DraftKind::Separate, DraftKind::Self}) {
      for (const int32_t k : {1, 3, 5}) {
        INFO(to_string(kind) << ", k = " << k << ", chunk " << schedule.chunk << ", preempted at iteration "
                             << schedule.preempt_at_iteration);
        check_greedy_run(kind, k, schedule, want);
      }
    }
  }
}

TEST_CASE("speculative executor: controlled acceptance gives (1 - a^(k+1)) / (1 - a) tokens per step",
          "[speculative][executor]") {
  const int32_t k = 3;
  // 12 requests of 200 output tokens decoded together: ~1000 full-length steps.
  std::vector<std::pair<int32_t, int32_t>> lengths(12, {4, 200});
  for (const double a : {0.0, 0.5, 0.8, 1.0}) {
    INFO("a = " << a);
    int64_t num_blocks = 0;
    std::vector<HandRequest> reqs = hand_requests(lengths, k, kBlockSize, num_blocks);
    auto ex = make_executor(DraftKind::Self, num_blocks, kBlockSize, executor_options(k, 0.0, a));
    drive(*ex, reqs, k);
    const SpeculativeStats& s = *ex->speculative_stats();
    int64_t prefills = 0;
    for (const HandRequest& r : reqs) prefills += r.sampling_prefills;
    REQUIRE(prefills == 12);
    require_consistent(s, 12 * 200, prefills);
    // Steps that proposed all k drafts (the histogram's): a+1 is a truncated geometric.
    const auto& h = s.accepted_length_histogram();
    double n = 0, sum = 0, sum2 = 0;
    for (size_t acc = 0; acc < h.size(); ++acc) {
      n += double(h[acc]);
      sum += double(acc + 1) * double(h[acc]);
      sum2 += double(acc + 1) * double(acc + 1) * double(h[acc]);
    }
    REQUIRE(n > 400);
    const double mean = sum / n;
    const double want = a == 1.0 ? double(k + 1) : (1 - std::pow(a, k + 1)) / (1 - a);
    if (a == 0.0 || a == 1.0) {
      REQUIRE(mean == want);  // exact: nothing or everything accepted
      for (double rate : s.acceptance_rate_per_position()) REQUIRE(rate == a);
    } else {
      const double se = std::sqrt((sum2 / n - mean * mean) / n);
      INFO(mean << " tokens per full step over " << n << " steps, closed form " << want << ", s.e. " << se);
      REQUIRE(mean == Approx(want).margin(4 * se));
      // Each position is accepted with probability a, given the earlier ones.
      for (size_t j = 0; j < size_t(k); ++j) {
        const double attempts = double(s.attempts_per_position()[j]);
        const double pos_se = std::sqrt(a * (1 - a) / attempts);
        REQUIRE(s.acceptance_rate_per_position()[j] == Approx(a).margin(4 * pos_se));
      }
    }
  }
}

TEST_CASE("speculative executor: at temperature > 0 a draft identical to the target is always accepted",
          "[speculative][executor]") {
  // q = p up to float rounding of differently batched passes: min(1, p/q)
  // is within ~1e-6 of 1 for every draft.
  const int32_t k = 3;
  int64_t num_blocks = 0;
  std::vector<HandRequest> reqs = hand_requests(kLengths, k, kBlockSize, num_blocks);
  SpeculativeExecutor ex(cpu_model(target_weights(), num_blocks, kBlockSize),
                         cpu_model(target_weights(), num_blocks, kBlockSize), executor_options(k, 0.9));
  drive(ex, reqs, k);
  const SpeculativeStats& s = *ex.speculative_stats();
  REQUIRE(s.steps() > 10);
  REQUIRE(s.draft_acceptance_rate() == 1.0);
}

TEST_CASE("speculative executor: rejection sampling emits tokens the target's sampler can emit",
          "[speculative][executor]") {
  // At temperature 0.8 with top-p 0.5 every emitted token must lie in the
  // target's nucleus at its position: recompute each one with a plain pass.
  const int32_t k = 3;
  int64_t num_blocks = 0;
  std::vector<HandRequest> reqs = hand_requests(kLengths, k, kBlockSize, num_blocks);
  SpeculativeExecutorOptions options = executor_options(k, 0.8);
  options.decoding.sampling.top_p = 0.5;
  auto ex = make_executor(DraftKind::Self, num_blocks, kBlockSize, options);
  ex->keep_outputs(true);
  drive(*ex, reqs, k);
  const ModelSpec spec = target_spec();
  for (const HandRequest& r : reqs) {
    INFO("request " << r.id);
    std::vector<int32_t> tokens;
    for (int32_t p = 0; p < r.prompt; ++p) tokens.push_back(prompt_token_id(kPromptSeed, spec.vocab_size, r.id, p));
    const std::vector<int32_t>& out = ex->outputs().at(r.id);
    REQUIRE(int32_t(out.size()) == r.output);
    // One pass over prompt + output with every row sampled gives p at each position.
    tokens.insert(tokens.end(), out.begin(), out.end());
    std::vector<int32_t> table;
    const int64_t blocks = (int64_t(tokens.size()) + kBlockSize - 1) / kBlockSize;
    table.resize(size_t(blocks));
    std::iota(table.begin(), table.end(), 0);
    auto plain = cpu_model(target_weights(), blocks, kBlockSize);
    BatchLayout layout;
    layout.add_sequence_sampling_last(tokens, 0, table, int32_t(tokens.size()));
    const std::vector<float>& logits = plain->forward(layout);
    std::vector<double> p(size_t(spec.vocab_size));
    for (size_t j = 0; j < out.size(); ++j) {
      const size_t row = size_t(r.prompt) - 1 + j;  // the row before token j predicts it
      sampling_distribution(std::span<const float>(logits).subspan(row * size_t(spec.vocab_size),
                                                                   size_t(spec.vocab_size)),
                            options.decoding.sampling, p);
      INFO("output token " << j);
      REQUIRE(p[size_t(out[j])] > 0.0);
    }
  }
}

TEST_CASE("decoder: a sequence may sample its last n rows, the logits come back in position order",
          "[speculative][decoder]") {
  const ModelSpec spec = target_spec();
  const int64_t V = spec.vocab_size;
  // Two sequences in one pass: 5 new tokens after 8 cached, all 5 rows
  // sampled; 3 new tokens after 2 cached, the last 2 sampled.
  const std::vector<int32_t> a = {11, 40, 7, 23, 59, 3, 18, 44, 9, 31, 5, 50, 27};
  const std::vector<int32_t> b = {8, 17, 33, 2, 41};
  const std::vector<int32_t> table_a = {0, 1, 2, 3}, table_b = {4, 5};
  auto model = cpu_model(target_weights(), 6, 4);
  BatchLayout layout;
  layout.add_sequence(std::span<const int32_t>(a).first(8), 0, table_a, false);
  layout.add_sequence(std::span<const int32_t>(b).first(2), 0, table_b, false);
  model->forward(layout);
  layout.clear();
  layout.add_sequence_sampling_last(std::span<const int32_t>(a).subspan(8), 8, table_a, 5);
  layout.add_sequence_sampling_last(std::span<const int32_t>(b).subspan(2), 2, table_b, 2);
  REQUIRE(layout.sample_rows == std::vector<int32_t>{0, 1, 2, 3, 4, 6, 7});
  const std::vector<float> got = model->forward(layout);
  REQUIRE(got.size() == size_t(7 * V));
  // Each row against a one-pass prefill of the prefix it ends.
  auto prefix_logits = [&](const std::vector<int32_t>& tokens, size_t n) {
    const std::vector<int32_t> table = {0, 1, 2, 3};
    auto plain = cpu_model(target_weights(), 4, 4);
    BatchLayout l;
    l.add_sequence(std::span<const int32_t>(tokens).first(n), 0, table, true);
    return plain->forward(l);
  };
  size_t row = 0;
  for (size_t n = 9; n <= 13; ++n, ++row) {
    INFO("sequence a, prefix " << n);
    const std::vector<float> want = prefix_logits(a, n);
    for (int64_t v = 0; v < V; ++v) REQUIRE(got[row * size_t(V) + size_t(v)] == Approx(want[size_t(v)]).margin(1e-4));
  }
  for (size_t n = 4; n <= 5; ++n, ++row) {
    INFO("sequence b, prefix " << n);
    const std::vector<float> want = prefix_logits(b, n);
    for (int64_t v = 0; v < V; ++v) REQUIRE(got[row * size_t(V) + size_t(v)] == Approx(want[size_t(v)]).margin(1e-4));
  }
  REQUIRE_THROWS_AS(layout.add_sequence_sampling_last(b, 0, table_b, 6), std::logic_error);
}

TEST_CASE("speculative executor: prompts are the plain executor's for the same seed", "[speculative][executor]") {
  auto spec = make_executor(DraftKind::Self, 4, 4, executor_options(2, 0.0));
  DecoderExecutor plain(cpu_model(target_weights(), 4, 4), executor_options(2, 0.0).decoding);
  for (int64_t id : {0, 1, 77})
    for (int64_t pos : {0, 1, 5, 300}) REQUIRE(spec->prompt_token(id, pos) == plain.prompt_token(id, pos));
}

TEST_CASE("speculative executor: a draft that does not fit the target is refused", "[speculative][executor]") {
  ModelSpec other = draft_spec();
  other.vocab_size = 64;
  REQUIRE_THROWS_AS(SpeculativeExecutor(cpu_model(target_weights(), 8, 4), cpu_model(random_weights(other, 1), 8, 4),
                                        executor_options(2, 0.0)),
                    std::invalid_argument);
  REQUIRE_THROWS_AS(SpeculativeExecutor(cpu_model(target_weights(), 8, 4),
                                        cpu_model(draft_weights(DraftKind::Separate), 9, 4), executor_options(2, 0.0)),
                    std::invalid_argument);
}
