// Prefix caching in a real run: a hit's KV is the cached block's, nothing is
// recomputed, and the results do not change. Greedy tokens are identical
// with caching on and off (shared prefixes, chunked prefill splitting a
// prefix, preemption and readmission, eviction under memory pressure), and
// the logits of a prompt whose prefix comes from the cache match those of
// the same prompt computed whole, as closely as a chunked prefill matches
// one prefill (tests/kernels/test_decoder.cpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/serving_loop.h"
#include "kernels/decoder/decoder_executor.h"
#include "kernels/decoder/host_weights.h"
#include "kernels/decoder/prompt_tokens.h"
#include "sim/clock.h"
#include "sim/scheduler.h"
#include "sim/workload.h"
#include "support/test_support.h"

using namespace servesim;

namespace {

ModelSpec spec() { return test::small_model("test-prefix", 32, 64, 2, 4, 2, 8, 61, 512, "float32"); }

std::unique_ptr<DecoderModel> make_model(int64_t num_blocks, int32_t block_size) {
  return make_cpu_decoder(random_weights(spec(), 3), num_blocks, block_size, CpuDecoderOptions{1});
}

// Ten requests at t = 0: one of two shared heads (13 and 22 tokens), then a
// tail of their own; request 9 quotes request 2's prompt and output (a
// conversation's next turn) -- it arrives only after request 2 finished.
Workload shared_prefix_workload() {
  const int32_t tails[] = {3, 9, 1, 6, 12, 2, 7, 5, 4};
  const int32_t outputs[] = {6, 3, 8, 5, 2, 9, 4, 7, 3};
  Workload w;
  for (int64_t i = 0; i < 9; ++i) {
    Request r = test::request(i, 0.0, 0, outputs[i]);
    const int32_t head = i % 2 ? 22 : 13;
    r.tokens.prompt_spans = {{token_source(TokenSourceKind::SharedPrefix, uint64_t(i % 2)), 0, head},
                             {token_source(TokenSourceKind::RequestTail, uint64_t(i)), 0, tails[i]}};
    r.tokens.output_source = token_source(TokenSourceKind::Output, uint64_t(i));
    r.prompt_tokens = int32_t(r.tokens.prompt_tokens());
    w.requests.push_back(r);
  }
  Request next = test::request(9, 0.0, 0, 5);
  next.tokens.prompt_spans = w.requests[2].tokens.prompt_spans;
  next.tokens.prompt_spans.push_back({w.requests[2].tokens.output_source, 0, w.requests[2].output_tokens});
  next.tokens.prompt_spans.push_back({token_source(TokenSourceKind::UserMessage, 2, 1), 0, 6});
  next.tokens.output_source = token_source(TokenSourceKind::Output, 9);
  next.prompt_tokens = int32_t(next.tokens.prompt_tokens());
  next.follows = 2;
  w.requests.push_back(next);
  return w;
}

struct EngineRun {
  RunRecords records;
  std::unordered_map<int64_t, std::vector<int32_t>> outputs;
};

EngineRun run(SchedulerConfig c, bool caching, const Workload& w) {
  c.enable_prefix_caching = caching;
  DecoderExecutorOptions o;
  o.sampling = SamplingParams{0.0, 1.0, 99};
  o.prompt_seed = 5;
  DecoderExecutor executor(make_model(c.num_gpu_blocks, c.block_size), o);
  executor.keep_outputs(true);
  Scheduler scheduler(c);
  VirtualClock clock;
  EngineRun out;
  out.records = run_serving_loop(scheduler, executor, clock, w);
  out.outputs = executor.outputs();
  return out;
}

SchedulerConfig config(SchedulerPolicy policy, int32_t max_num_seqs, int32_t budget, int64_t blocks) {
  return test::scheduler_config(policy, max_num_seqs, budget, 4, blocks, 512, 0.0);
}

void require_same_outputs(const EngineRun& on, const EngineRun& off, const Workload& w) {
  for (const Request& r : w.requests) {
    INFO("request " << r.id);
    REQUIRE(on.records.requests[size_t(r.id)].completed());
    REQUIRE(off.records.requests[size_t(r.id)].completed());
    REQUIRE(on.outputs.at(r.id).size() == size_t(r.output_tokens));
    REQUIRE(on.outputs.at(r.id) == off.outputs.at(r.id));
  }
}

}  // namespace

TEST_CASE("engine: greedy tokens are identical with prefix caching on and off", "[engine][prefix]") {
  const Workload w = shared_prefix_workload();
  struct Case {
    const char* name;
    SchedulerConfig c;
  };
  const Case cases[] = {
      {"continuous, two at a time", config(SchedulerPolicy::Continuous, 2, 2048, 128)},
      {"chunked, a 5-token budget splits the shared prefixes", config(SchedulerPolicy::Chunked, 3, 5, 128)},
      {"chunked, memory pressure: preemption, readmission, eviction", config(SchedulerPolicy::Chunked, 6, 16, 18)},
      {"continuous, memory pressure", config(SchedulerPolicy::Continuous, 6, 2048, 18)},
      {"static batches of three", config(SchedulerPolicy::Static, 3, 2048, 128)},
  };
  for (const Case& k : cases) {
    INFO(k.name);
    const EngineRun on = run(k.c, true, w);
    const EngineRun off = run(k.c, false, w);
    require_same_outputs(on, off, w);
    // Caching on reused blocks; off, nothing was looked up.
    CHECK(on.records.prefix_cache.hits_tokens > 0);
    // Nothing a hit covers was computed again.
    auto computed_tokens = [](const RunRecords& r) {
      int64_t n = 0;
      for (const auto& it : r.iterations) n += it.prefill_tokens + it.decode_tokens;
      return n;
    };
    if (on.records.preemptions == 0 && off.records.preemptions == 0)
      CHECK(computed_tokens(on.records) + on.records.prefix_cache.hits_tokens == computed_tokens(off.records));
    CHECK(off.records.prefix_cache.queries_tokens == 0);
    // The turn that quotes request 2 found request 2's prompt and output
    // (under memory pressure some of it may have been evicted).
    CHECK(on.records.requests[9].cached_tokens >= (k.c.num_gpu_blocks == 18 ? 12 : 20));
    if (k.c.num_gpu_blocks == 18) {
      CHECK(on.records.preemptions + off.records.preemptions > 0);
      CHECK(on.records.prefix_cache.evicted_blocks > 0);
    }
  }
}

TEST_CASE("engine: a prompt whose prefix comes from the cache has the logits of the whole prompt computed",
          "[engine][prefix]") {
  // Request A prefills 12 tokens into blocks 0-2; request B shares its first
  // 8 tokens and computes only its 5-token tail on blocks {0, 1, 3, 4}. A
  // fresh decoder computes B's 13 tokens whole.
  const int32_t bs = 4;
  PromptTokens ids(5, spec().vocab_size);
  auto tokens_of = [&](std::vector<TokenSpan> spans, int64_t id) {
    TokenIdentity identity{std::move(spans), token_source(TokenSourceKind::Output, uint64_t(id))};
    ScheduledSequence item;
    item.request_id = id;
    item.tokens = &identity;
    std::vector<int32_t> out;
    ids.fill(item, out, identity.prompt_tokens());
    return out;
  };
  const uint64_t head = token_source(TokenSourceKind::SharedPrefix, 0);
  const std::vector<int32_t> a = tokens_of({{head, 0, 12}}, 0);
  const std::vector<int32_t> b = tokens_of({{head, 0, 8}, {token_source(TokenSourceKind::RequestTail, 1), 0, 5}}, 1);
  REQUIRE(std::vector<int32_t>(a.begin(), a.begin() + 8) == std::vector<int32_t>(b.begin(), b.begin() + 8));

  auto cached = make_model(8, bs);
  BatchLayout layout;
  const std::vector<int32_t> table_a{0, 1, 2};
  layout.add_sequence(a, 0, table_a, true);
  cached->forward(layout);
  layout.clear();
  const std::vector<int32_t> table_b{0, 1, 3, 4};
  layout.add_sequence(std::span<const int32_t>(b).subspan(8), 8, table_b, true);
  const std::vector<float> with_hit = cached->forward(layout);

  auto fresh = make_model(8, bs);
  layout.clear();
  const std::vector<int32_t> table_whole{0, 1, 2, 3};
  layout.add_sequence(b, 0, table_whole, true);
  const std::vector<float> whole = fresh->forward(layout);
  REQUIRE(with_hit.size() == whole.size());
  double worst = 0;
  for (size_t i = 0; i < whole.size(); ++i) worst = std::max(worst, double(std::abs(with_hit[i] - whole[i])));
  // Not bit for bit: the cached K and V were written by a batch of 12 rows,
  // the whole prompt's by one of 13, and Eigen's GEMM blocks the sums by
  // the row count (measured: 4.8e-7, a few fp32 ulp). The same bound as
  // the chunked-prefill path; a wrong block or position is off by O(1).
  double scale = 0;
  for (float x : whole) scale = std::max(scale, double(std::abs(x)));
  CHECK(worst <= 1e-5 * scale);
}
