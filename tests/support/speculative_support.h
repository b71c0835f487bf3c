// Helpers of the speculative executor and engine tests: small target and
// draft models, a plain token-by-token reference, and a hand-driven
// "scheduler" that builds plans exactly as the contract with the real one
// says (a decode verifies k' = min(k, output left - 1) drafts).
// Header-only: the tests CMake globs tests/kernels/*.cpp.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <span>
#include <vector>

#include "kernels/decoder/batch_layout.h"
#include "kernels/decoder/decoder_model.h"
#include "kernels/decoder/host_weights.h"
#include "kernels/decoder/prompt_tokens.h"
#include "kernels/decoder/sampler.h"
#include "kernels/decoder/speculative_executor.h"
#include "sim/draft_passes.h"
#include "support/test_support.h"

namespace servesim::spec_test {

constexpr uint64_t kTargetSeed = 3;
constexpr uint64_t kDraftSeed = 9;
constexpr uint64_t kPromptSeed = 5;

// The target: 4 layers, GQA, a 61-token vocabulary (greedy decoding of a
// random model over a small vocabulary still varies its tokens).
inline ModelSpec target_spec() {
  return test::small_model("spec-target", 32, 64, 4, 4, 2, 8, 61, 512, "float32");
}

// A separate, smaller draft over the same vocabulary and hidden size: 2
// layers, 2 heads, a narrower MLP.
inline ModelSpec draft_spec() { return test::small_model("spec-draft", 32, 48, 2, 2, 1, 8, 61, 512, "float32"); }

// The draft kinds the tests use.
enum class DraftKind {
  Separate,  // draft_spec(): its own random layers, the target's embedding, final norm and head
  Self,      // the target's first 2 layers
};

inline const char* to_string(DraftKind kind) { return kind == DraftKind::Separate ? "separate draft" : "self-draft"; }

inline HostWeights target_weights() { return random_weights(target_spec(), kTargetSeed); }

// The draft's weights. Two unrelated random models agree on almost no
// greedy token (acceptance ~0); a separate draft that shares the target's
// embedding, final norm and head (as distilled drafts share a tokenizer's
// embeddings) agrees on some, so acceptance is partial.
inline HostWeights draft_weights(DraftKind kind) {
  HostWeights target = target_weights();
  if (kind == DraftKind::Self) return self_draft_weights(target, 2);
  HostWeights draft = random_weights(draft_spec(), kDraftSeed);
  draft.embedding = std::move(target.embedding);
  draft.final_norm = std::move(target.final_norm);
  draft.lm_head = std::move(target.lm_head);
  return draft;
}

inline std::unique_ptr<DecoderModel> cpu_model(HostWeights&& w, int64_t num_blocks, int32_t block_size) {
  return make_cpu_decoder(std::move(w), num_blocks, block_size, CpuDecoderOptions{1});
}

inline SpeculativeExecutorOptions executor_options(int32_t k, double temperature,
                                                   std::optional<double> acceptance_rate = std::nullopt) {
  SpeculativeExecutorOptions o;
  o.decoding.sampling = SamplingParams{temperature, 1.0, 99};
  o.decoding.prompt_seed = kPromptSeed;
  o.num_speculative_tokens = k;
  o.acceptance_rate = acceptance_rate;
  return o;
}

inline std::unique_ptr<SpeculativeExecutor> make_executor(DraftKind kind, int64_t num_blocks, int32_t block_size,
                                                          const SpeculativeExecutorOptions& options) {
  return std::make_unique<SpeculativeExecutor>(cpu_model(target_weights(), num_blocks, block_size),
                                               cpu_model(draft_weights(kind), num_blocks, block_size), options);
}

// The tokens request (id, prompt, output) generates decoded alone with the
// target, token by token, each drawn by sample_token as a plain run draws it.
inline std::vector<int32_t> reference_output(int64_t id, int32_t prompt, int32_t output, const SamplingParams& params) {
  const ModelSpec spec = target_spec();
  const int32_t bs = 8;
  const int64_t blocks = (prompt + output + bs - 1) / bs;
  auto model = cpu_model(target_weights(), blocks, bs);
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  std::vector<int32_t> tokens, out;
  for (int64_t p = 0; p < prompt; ++p) tokens.push_back(prompt_token_id(kPromptSeed, spec.vocab_size, id, p));
  BatchLayout layout;
  layout.add_sequence(tokens, 0, table, true);
  for (;;) {
    const auto& logits = model->forward(layout);
    const int32_t t = sample_token(logits, params, id, int64_t(tokens.size()));
    out.push_back(t);
    if (int32_t(out.size()) == output) return out;
    tokens.push_back(t);
    layout.clear();
    layout.add_sequence(std::span<const int32_t>(tokens).last(1), int32_t(tokens.size()) - 1, table, true);
  }
}

// One request of the hand-driven loop and its scheduler-side state.
struct HandRequest {
  int64_t id = 0;
  int32_t prompt = 0, output = 0;
  std::vector<int32_t> table;  // its KV blocks, room for prompt + output + k
  int32_t cached = 0;          // tokens in the target's KV (the scheduler's "computed")
  int32_t generated = 0;
  int32_t sampling_prefills = 0;  // prefill items that emitted a token
  bool done() const { return generated >= output; }
};

// Requests with disjoint, interleaved (non-contiguous) block tables.
inline std::vector<HandRequest> hand_requests(const std::vector<std::pair<int32_t, int32_t>>& lengths, int32_t k,
                                              int32_t block_size, int64_t& num_blocks) {
  std::vector<HandRequest> reqs;
  int64_t most = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    HandRequest r;
    r.id = int64_t(i) + 1;
    r.prompt = lengths[i].first;
    r.output = lengths[i].second;
    reqs.push_back(r);
    most = std::max<int64_t>(most, (r.prompt + r.output + k + block_size - 1) / block_size);
  }
  num_blocks = most * int64_t(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i)
    for (int64_t b = 0; b < most; ++b) reqs[i].table.push_back(int32_t(b * int64_t(reqs.size()) + int64_t(i)));
  return reqs;
}

// How drive() schedules: prefill chunks of at most `chunk` tokens (0: whole
// prompts), and optionally one preemption by recompute.
struct DriveOptions {
  int32_t chunk = 0;
  int64_t preempt_at_iteration = -1;  // before this iteration, request `preempt_id` loses its KV
  int64_t preempt_id = 0;
};

// Runs every request to completion, all in the same plans, as the scheduler
// would: prefill chunks (the last one samples), then decodes verifying k' =
// min(k, output left - 1) drafts, each result applied as the scheduler
// applies it (a decode's cached count grows by the tokens it emitted). A
// preempted request recomputes prompt + generated tokens, then samples its
// next token. `after` sees the requests after every iteration.
inline void drive(SpeculativeExecutor& ex, std::vector<HandRequest>& reqs, int32_t k, const DriveOptions& options = {},
                  const std::function<void(const std::vector<HandRequest>&)>& after = {}) {
  IterationPlan plan;
  IterationResult result;
  for (int64_t index = 0;; ++index) {
    if (index == options.preempt_at_iteration)
      for (HandRequest& r : reqs)
        if (r.id == options.preempt_id && !r.done()) r.cached = 0;
    plan.clear();
    plan.index = index;
    std::vector<HandRequest*> in_plan;
    for (HandRequest& r : reqs) {
      if (r.done()) continue;
      const int32_t total = r.prompt + r.generated, remaining = total - r.cached;
      ScheduledSequence s;
      s.request_id = r.id;
      s.num_cached_tokens = r.cached;
      s.is_prefill = remaining > 1 || r.generated == 0;
      s.num_query_tokens = s.is_prefill ? (options.chunk > 0 ? std::min(options.chunk, remaining) : remaining)
                                        : 1 + std::min(k, r.output - r.generated - 1);
      s.samples = r.cached + s.num_query_tokens >= total;
      s.num_sample_rows = !s.samples ? 0 : s.is_prefill ? 1 : s.num_query_tokens;
      s.block_table = r.table;
      plan.add(s);
      in_plan.push_back(&r);
    }
    if (plan.empty()) return;
    result.reset();
    ex.execute(plan, result);
    REQUIRE(result.emitted_tokens.size() == plan.sequences.size());
    REQUIRE(result.duration_s > 0);
    for (size_t i = 0; i < in_plan.size(); ++i) {
      HandRequest& r = *in_plan[i];
      const ScheduledSequence& s = plan.sequences[i];
      if (!s.samples) {
        r.cached += s.num_query_tokens;
        continue;
      }
      const int32_t e = result.emitted_tokens[i];
      REQUIRE(e >= 1);
      REQUIRE(e <= (s.is_prefill ? 1 : s.num_query_tokens));
      r.cached += s.is_prefill ? s.num_query_tokens : e;
      r.generated += e;
      r.sampling_prefills += s.is_prefill ? 1 : 0;
      REQUIRE(r.generated <= r.output);
    }
    if (after) after(reqs);
  }
}

// Largest |a - b| between `model`'s cached K and V of positions 0 .. n - 1
// of a sequence (blocks `table`) and those of `plain`, which prefilled the
// same tokens in one pass at blocks `plain_table`.
inline float kv_max_difference(const DecoderModel& model, std::span<const int32_t> table, const DecoderModel& plain,
                               std::span<const int32_t> plain_table, int32_t n) {
  const ModelSpec& m = model.spec();
  const size_t width = size_t(m.num_key_value_heads * m.head_dim);
  std::vector<float> k1(width), v1(width), k2(width), v2(width);
  float worst = 0;
  for (int32_t layer = 0; layer < int32_t(m.num_hidden_layers); ++layer)
    for (int32_t pos = 0; pos < n; ++pos) {
      model.read_kv(layer, table, pos, k1, v1);
      plain.read_kv(layer, plain_table, pos, k2, v2);
      for (size_t i = 0; i < width; ++i) worst = std::max({worst, std::abs(k1[i] - k2[i]), std::abs(v1[i] - v2[i])});
    }
  return worst;
}

// A model with `weights` that has prefilled `tokens` in one pass on a
// contiguous block table (returned in `table`).
inline std::unique_ptr<DecoderModel> prefilled(HostWeights&& weights, std::span<const int32_t> tokens,
                                               int32_t block_size, std::vector<int32_t>& table) {
  const int64_t blocks = std::max<int64_t>(1, (int64_t(tokens.size()) + block_size - 1) / block_size);
  table.resize(size_t(blocks));
  std::iota(table.begin(), table.end(), 0);
  auto model = cpu_model(std::move(weights), blocks, block_size);
  BatchLayout layout;
  layout.add_sequence(tokens, 0, table, false);
  model->forward(layout);
  return model;
}

}  // namespace servesim::spec_test
