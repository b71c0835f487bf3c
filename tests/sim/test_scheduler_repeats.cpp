// Scheduler::repeat_step against schedule() + complete(), step by step: two
// schedulers fed the same requests, one scheduling every step in full, the
// other repeating decode steps where it may. Their plans, block tables,
// free blocks and prefix caches (blocks that decodes filled included) must
// agree after every step.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "sim/iteration_plan.h"
#include "sim/request.h"
#include "sim/scheduler.h"
#include "support/test_support.h"

using namespace servesim;

namespace {

Request with_tokens(int64_t id, int32_t prompt, int32_t output) {
  Request r = test::request(id, 0, 0, output);
  r.tokens.prompt_spans = {{token_source(TokenSourceKind::RequestTail, uint64_t(id)), 0, prompt}};
  r.tokens.output_source = token_source(TokenSourceKind::Output, uint64_t(id));
  r.prompt_tokens = prompt;
  return r;
}

// Request r's prompt followed by its first `generated` output tokens: what
// the prefix cache holds of it is what its decodes cached.
Request quoting_output(const Request& r, int32_t generated) {
  Request q = r;
  q.id = 1000 + r.id;
  q.tokens.prompt_spans.push_back({r.tokens.output_source, 0, generated});
  q.prompt_tokens = int32_t(q.tokens.prompt_tokens());
  return q;
}

struct SeqView {
  int64_t id;
  int32_t query, cached;
  bool prefill;
  std::vector<int32_t> blocks;
  bool operator==(const SeqView&) const = default;
};

std::vector<SeqView> view(const IterationPlan& plan) {
  std::vector<SeqView> v;
  for (const ScheduledSequence& s : plan.sequences)
    v.push_back({s.request_id, s.num_query_tokens, s.num_cached_tokens, s.is_prefill,
                 std::vector<int32_t>(s.block_table.begin(), s.block_table.end())});
  return v;
}

// A plan's counts and sums: what a lazy executor reads.
std::vector<int64_t> counts(const IterationPlan& p) {
  return {p.num_prefill_tokens,           p.num_decode_tokens,           p.num_prefill_sequences,
          p.num_decode_sequences,         p.num_sampling_sequences,      p.num_sample_rows,
          p.num_prefix_hit_tokens,        p.prefill_attention.cached_tokens, p.prefill_attention.pairs,
          p.decode_attention.cached_tokens, p.decode_attention.pairs,   int64_t(p.sequences.size())};
}

// Steps both schedulers `steps` times (adding `late` before step `late_at`);
// returns how many steps the second one repeated. `lazy`: the second one
// leaves repeated decodes' items lagging (Scheduler::set_lazy_repeats), so
// the plans' counts and sums are compared, not their items.
int64_t step_side_by_side(SchedulerConfig config, const std::vector<Request>& requests, int steps,
                          const std::vector<Request>& late = {}, int late_at = -1, bool lazy = false) {
  Scheduler full(config), fast(config);
  fast.set_lazy_repeats(lazy);
  test::QuietListener listener;
  for (const Request& r : requests) {
    REQUIRE_FALSE(full.add_request(r));
    REQUIRE_FALSE(fast.add_request(r));
  }
  IterationPlan full_plan, fast_plan;
  const IterationResult result;  // one token per sampling sequence
  std::vector<int32_t> generated(requests.size() + late.size(), 0);
  for (int step = 0; step < steps && full.has_unfinished(); ++step) {
    INFO("step " << step);
    if (step == late_at) {
      for (const Request& r : late) {
        REQUIRE_FALSE(full.add_request(r));
        REQUIRE_FALSE(fast.add_request(r));
      }
    }
    full.schedule(full_plan, listener);
    // As the serving loop does: repeat while it may, else a full step.
    const bool repeated = fast.repeating() && fast.repeat_step(fast_plan, listener);
    if (!repeated) fast.schedule(fast_plan, listener);
    fast_plan.index = full_plan.index;
    REQUIRE(counts(fast_plan) == counts(full_plan));
    if (!fast_plan.items_lag) REQUIRE(view(fast_plan) == view(full_plan));
    full.complete(full_plan, result, listener);
    if (!repeated) {
      fast.complete(fast_plan, result, listener);
      fast.begin_repeats(fast_plan);
    } else {
      fast.complete_repeat(fast_plan, result, listener);
    }
    REQUIRE(fast.num_running() == full.num_running());
    for (const ScheduledSequence& s : full_plan.sequences)
      if (s.samples) ++generated[size_t(s.request_id)];
    REQUIRE(fast.kv().num_free() == full.kv().num_free());
    REQUIRE(fast.num_waiting() == full.num_waiting());
    REQUIRE(fast.num_preemptions() == full.num_preemptions());
    for (const Request& r : requests)
      REQUIRE(fast.cached_prefix_tokens(quoting_output(r, generated[size_t(r.id)])) ==
              full.cached_prefix_tokens(quoting_output(r, generated[size_t(r.id)])));
  }
  return fast.num_repeated_steps();
}

}  // namespace

TEST_CASE("Repeated decode steps cache the blocks their tokens fill, as full steps do", "[scheduler][repeats]") {
  for (const SchedulerPolicy policy : {SchedulerPolicy::Chunked, SchedulerPolicy::Continuous}) {
    INFO(to_string(policy));
    const SchedulerConfig config = test::scheduler_config(policy, 8, 512, 16, 400, 4096, 0.0);
    const std::vector<Request> requests = {with_tokens(0, 40, 120), with_tokens(1, 33, 90), with_tokens(2, 50, 200)};
    CHECK(step_side_by_side(config, requests, 260) > 150);
  }
}

TEST_CASE("Repeated decode steps stop where blocks run short or a request may be admitted",
          "[scheduler][repeats]") {
  SECTION("a cache too small for every sequence's growth: preemption") {
    for (const SchedulerPolicy policy : {SchedulerPolicy::Chunked, SchedulerPolicy::Continuous}) {
      INFO(to_string(policy));
      const SchedulerConfig config = test::scheduler_config(policy, 8, 512, 16, 24, 4096, 0.0);
      const std::vector<Request> requests = {with_tokens(0, 40, 150), with_tokens(1, 70, 120),
                                             with_tokens(2, 20, 160)};
      CHECK(step_side_by_side(config, requests, 500) > 50);
    }
  }
  SECTION("a preempted sequence readmitted in small chunks, the step after its preemption") {
    // Chunked, without token identity (the admission check is the plain
    // one): a 40-token budget lets the victim back a chunk at a time.
    const SchedulerConfig config = test::scheduler_config(SchedulerPolicy::Chunked, 8, 40, 16, 24, 4096, 0.0);
    const std::vector<Request> requests = {test::request(0, 0, 40, 150), test::request(1, 0, 70, 120),
                                           test::request(2, 0, 20, 160)};
    CHECK(step_side_by_side(config, requests, 600) > 50);
    CHECK(step_side_by_side(config, requests, 600, {}, -1, true) > 50);
  }
  SECTION("a full batch with a request waiting, and a late arrival that fits") {
    for (const SchedulerPolicy policy : {SchedulerPolicy::Chunked, SchedulerPolicy::Continuous}) {
      INFO(to_string(policy));
      const SchedulerConfig config = test::scheduler_config(policy, 2, 512, 16, 200, 4096, 0.0);
      const std::vector<Request> requests = {with_tokens(0, 40, 60), with_tokens(1, 30, 90), with_tokens(2, 20, 50)};
      CHECK(step_side_by_side(config, requests, 400, {with_tokens(3, 25, 30)}, 70) > 50);
    }
  }
  SECTION("a request waiting for blocks the decodes keep taking") {
    for (const SchedulerPolicy policy : {SchedulerPolicy::Chunked, SchedulerPolicy::Continuous}) {
      INFO(to_string(policy));
      // Two decodes hold 17 of 40 blocks and take more; the prompt that
      // arrives at step 5 (400 tokens, 25 blocks) waits until one finishes.
      const SchedulerConfig config = test::scheduler_config(policy, 8, 512, 16, 40, 4096, 0.0);
      // Without token identity: no prefix hit can change the admission.
      const std::vector<Request> requests = {test::request(0, 0, 150, 100), test::request(1, 0, 100, 60)};
      CHECK(step_side_by_side(config, requests, 400, {test::request(2, 0, 400, 20)}, 5) > 80);
      CHECK(step_side_by_side(config, requests, 400, {test::request(2, 0, 400, 20)}, 5, true) > 80);
    }
  }
}

TEST_CASE("Repeated decode steps go on through the steps in which sequences finish, from the prompts' last chunks on",
          "[scheduler][repeats]") {
  // Every prompt fits the first step (request 3 finishes in it: one output
  // token). Its plan is all last chunks, so every later step repeats: the
  // longest request's 199 decode steps, through requests 1 and 0 finishing.
  const std::vector<Request> requests = {test::request(0, 0, 40, 120), test::request(1, 0, 33, 90),
                                         test::request(2, 0, 50, 200), test::request(3, 0, 20, 1)};
  for (const SchedulerPolicy policy : {SchedulerPolicy::Chunked, SchedulerPolicy::Continuous}) {
    INFO(to_string(policy));
    const SchedulerConfig config = test::scheduler_config(policy, 8, 512, 16, 400, 4096, 0.0);
    CHECK(step_side_by_side(config, requests, 400) == 199);
    // Lazily: growths from the ring, completions from the calendar.
    CHECK(step_side_by_side(config, requests, 400, {}, -1, true) == 199);
  }
  SECTION("prompts split over steps: a stretch goes on through their chunks") {
    // A 64-token budget: request 0's prompt and the first 24 tokens of
    // request 1's fill the first step (scheduled in full); from the second
    // on, every step repeats: request 0 decodes in a group that request 1
    // joins after its last chunk and requests 2 and 3 after theirs,
    // admitted in repeated steps, until request 2's last token in step 200.
    const SchedulerConfig config = test::scheduler_config(SchedulerPolicy::Chunked, 8, 64, 16, 400, 4096, 0.0);
    CHECK(step_side_by_side(config, requests, 400) == 200);
    CHECK(step_side_by_side(config, requests, 400, {}, -1, true) == 200);
  }
}

TEST_CASE("Chunked repeated steps admit a waiting prompt as schedule() would, in a repeated step",
          "[scheduler][repeats]") {
  // Two sequence slots: request 2 waits until request 0's last token (step
  // 60), is admitted in step 61 beside request 1's decode (a repeated step)
  // and decodes from step 62 to its last token in step 110. Only the first
  // step is scheduled in full.
  const SchedulerConfig config = test::scheduler_config(SchedulerPolicy::Chunked, 2, 512, 16, 200, 4096, 0.0);
  const std::vector<Request> requests = {test::request(0, 0, 40, 60), test::request(1, 0, 30, 90),
                                         test::request(2, 0, 20, 50)};
  CHECK(step_side_by_side(config, requests, 400) == 109);
}
