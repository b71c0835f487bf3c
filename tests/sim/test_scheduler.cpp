// The scheduler's policies, driven directly (no runner, no clock): every plan
// is checked against the contract in iteration_plan.h and the policy's rules,
// and every request's tokens are tracked through to completion.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/errors.h"
#include "sim/iteration_plan.h"
#include "sim/request.h"
#include "sim/scheduler.h"

#include "support/test_support.h"

using servesim::InputError;
using servesim::IterationPlan;
using servesim::IterationResult;
using servesim::Request;
using servesim::Scheduler;
using servesim::SchedulerConfig;
using servesim::SchedulerListener;
using servesim::SchedulerPolicy;
using servesim::test::input_error_of;
using servesim::test::request;
using servesim::test::scheduler_config;

namespace {

// A plan entry copied out of the plan (its block table is only valid until
// the next schedule()).
struct Planned {
  int64_t id = 0;
  int32_t query = 0;
  int32_t cached = 0;
  bool is_prefill = false;
  bool samples = false;
  std::vector<int32_t> blocks;
};
using Plan = std::vector<Planned>;

const Planned* find(const Plan& plan, int64_t id) {
  for (const Planned& p : plan)
    if (p.id == id) return &p;
  return nullptr;
}

// Drives a Scheduler one iteration at a time, one token per sampling
// sequence, and checks every plan against the contract.
class Driver final : public SchedulerListener {
 public:
  explicit Driver(const SchedulerConfig& c) : cfg(c), sched(c) {}

  std::optional<std::string> add(const Request& r) {
    auto reason = sched.add_request(r);
    if (!reason) {
      requests[r.id] = r;
      computed[r.id] = 0;
      tokens[r.id] = 0;
    }
    return reason;
  }

  const Plan& step() {
    iteration = int64_t(history.size());
    preempted_in_step.clear();
    scheduling = true;
    sched.schedule(plan, *this);
    scheduling = false;
    check_plan();
    // vLLM's rule: a step that preempted admits no waiting request (the
    // sequence it just preempted included); only sequences running before
    // it, and not preempted, are in its plan.
    if (!preempted_in_step.empty()) {
      ++preempting_steps;
      for (const auto& s : plan.sequences) {
        INFO("iteration " << iteration << ", request " << s.request_id);
        CHECK(running.count(s.request_id) == 1);
        CHECK(preempted_in_step.count(s.request_id) == 0);
      }
    }
    for (const auto& s : plan.sequences) running.insert(s.request_id);
    Plan copy;
    for (const auto& s : plan.sequences)
      copy.push_back({s.request_id, s.num_query_tokens, s.num_cached_tokens, s.is_prefill, s.samples,
                      std::vector<int32_t>(s.block_table.begin(), s.block_table.end())});
    IterationResult result;  // one token per sampling sequence
    sched.complete(plan, result, *this);
    for (const Planned& p : copy) {
      computed[p.id] += p.query;
      query_total[p.id] += p.query;
    }
    history.push_back(std::move(copy));
    return history.back();
  }

  void run_to_end(int64_t max_steps = 100000) {
    for (int64_t i = 0; i < max_steps && sched.has_unfinished(); ++i) step();
    REQUIRE_FALSE(sched.has_unfinished());
    for (const auto& [id, r] : requests) {
      REQUIRE(finished.count(id) == 1);
      CHECK(tokens[id] == r.output_tokens);
      // Prefill the prompt, decode output - 1 tokens, plus whatever a
      // preemption threw away and had to recompute.
      CHECK(query_total[id] == r.prompt_tokens + r.output_tokens - 1 + lost[id]);
    }
    CHECK(sched.kv().num_used() == 0);
    int64_t preemptions = 0;
    for (const auto& [id, n] : preempted) preemptions += n;
    CHECK(sched.num_preemptions() == preemptions);
  }

  // SchedulerListener
  void on_first_scheduled(int64_t id) override {
    REQUIRE(requests.count(id) == 1);
    REQUIRE(first_scheduled.count(id) == 0);  // once per request, even after a preemption
    first_scheduled[id] = iteration;
  }
  void on_tokens(int64_t id, int32_t n) override {
    REQUIRE(finished.count(id) == 0);
    REQUIRE(n >= 1);
    if (tokens[id] == 0) first_token[id] = iteration;
    tokens[id] += n;
    REQUIRE(tokens[id] <= requests[id].output_tokens);
  }
  void on_finished(int64_t id) override {
    REQUIRE(finished.count(id) == 0);
    REQUIRE(tokens[id] == requests[id].output_tokens);
    finished[id] = iteration;
    running.erase(id);
  }
  void on_preempted(int64_t id) override {
    REQUIRE(finished.count(id) == 0);
    REQUIRE(scheduling);  // preemption happens while scheduling, nowhere else
    preempted_in_step.insert(id);
    running.erase(id);
    preempted[id] += 1;
    lost[id] += computed[id];
    computed[id] = 0;
  }

  SchedulerConfig cfg;
  Scheduler sched;
  IterationPlan plan;
  int64_t iteration = 0;
  std::vector<Plan> history;
  std::map<int64_t, Request> requests;
  std::map<int64_t, int32_t> computed, tokens, preempted, query_total, lost;
  std::map<int64_t, int64_t> first_scheduled, first_token, finished;
  std::set<int64_t> running;            // in a plan since their admission, not finished or preempted
  std::set<int64_t> preempted_in_step;  // preempted by the current schedule()
  bool scheduling = false;
  int64_t preempting_steps = 0;         // steps that preempted

 private:
  void check_plan() {
    REQUIRE_FALSE(plan.empty());  // something is always waiting or running here
    REQUIRE(int64_t(plan.sequences.size()) <= cfg.max_num_seqs);
    REQUIRE(int64_t(sched.num_running()) <= cfg.max_num_seqs);
    REQUIRE(sched.kv().num_used() <= cfg.num_gpu_blocks);

    std::set<int64_t> ids;
    std::set<int32_t> blocks;
    size_t table_blocks = 0;
    int32_t prefill_tokens = 0, decode_tokens = 0, prefill_seqs = 0, decode_seqs = 0, sampling = 0;
    bool seen_prefill = false;
    for (const auto& s : plan.sequences) {
      REQUIRE(requests.count(s.request_id) == 1);
      REQUIRE(finished.count(s.request_id) == 0);
      REQUIRE(ids.insert(s.request_id).second);  // once per plan
      const Request& r = requests[s.request_id];
      const int32_t total = r.prompt_tokens + tokens[s.request_id];  // tokens the sequence holds
      REQUIRE(s.num_query_tokens >= 1);
      REQUIRE(s.num_cached_tokens == computed[s.request_id]);
      REQUIRE(s.num_cached_tokens + s.num_query_tokens <= total);
      REQUIRE(s.samples == (s.num_cached_tokens + s.num_query_tokens == total));

      // The block table covers cached + query tokens with distinct, valid ids.
      const int64_t covered = int64_t(s.block_table.size()) * cfg.block_size;
      REQUIRE(covered >= s.num_cached_tokens + s.num_query_tokens);
      if (cfg.policy == SchedulerPolicy::Static) {
        // Static reserves the whole lifetime on admission.
        REQUIRE(int64_t(s.block_table.size()) ==
                sched.kv().blocks_for(r.prompt_tokens + r.output_tokens));
      } else {
        // Dynamic policies hold no more blocks than the tokens need.
        REQUIRE(int64_t(s.block_table.size()) ==
                sched.kv().blocks_for(s.num_cached_tokens + s.num_query_tokens));
      }
      for (int32_t b : s.block_table) {
        REQUIRE(b >= 0);
        REQUIRE(b < cfg.num_gpu_blocks);
        REQUIRE(blocks.insert(b).second);  // no block shared between sequences
      }
      table_blocks += s.block_table.size();

      if (s.is_prefill) {
        ++prefill_seqs;
        prefill_tokens += s.num_query_tokens;
        seen_prefill = true;
      } else {
        ++decode_seqs;
        decode_tokens += s.num_query_tokens;
        REQUIRE(s.num_query_tokens == 1);
        REQUIRE(s.samples);
        REQUIRE(tokens[s.request_id] >= 1);
        REQUIRE(s.num_cached_tokens == total - 1);
        if (cfg.policy == SchedulerPolicy::Chunked) REQUIRE_FALSE(seen_prefill);  // decodes first
      }
      if (s.samples) ++sampling;
    }
    REQUIRE(int64_t(table_blocks) <= sched.kv().num_used());
    REQUIRE(plan.num_prefill_tokens == prefill_tokens);
    REQUIRE(plan.num_decode_tokens == decode_tokens);
    REQUIRE(plan.num_prefill_sequences == prefill_seqs);
    REQUIRE(plan.num_decode_sequences == decode_seqs);
    REQUIRE(plan.num_sampling_sequences == sampling);

    switch (cfg.policy) {
      case SchedulerPolicy::Chunked:
        REQUIRE(plan.num_tokens() <= cfg.max_num_batched_tokens);
        break;
      case SchedulerPolicy::Continuous:
        REQUIRE((prefill_seqs == 0 || decode_seqs == 0));  // never mixed
        REQUIRE(plan.num_prefill_tokens <= cfg.max_num_batched_tokens);
        for (const auto& s : plan.sequences)
          if (s.is_prefill) {
            REQUIRE(s.num_cached_tokens == 0);  // whole prompt at once
            REQUIRE(s.samples);
          }
        break;
      case SchedulerPolicy::Static:
        REQUIRE((prefill_seqs == 0 || decode_seqs == 0));
        break;
    }
  }
};

}  // namespace

TEST_CASE("Scheduler policy names round-trip, unknown names are input errors", "[scheduler]") {
  for (auto p : {SchedulerPolicy::Static, SchedulerPolicy::Continuous, SchedulerPolicy::Chunked})
    CHECK(servesim::parse_scheduler_policy(servesim::to_string(p)) == p);
  CHECK_THROWS_AS(servesim::parse_scheduler_policy("fcfs"), InputError);
}

TEST_CASE("SchedulerConfig::validate names the offending flag", "[scheduler]") {
  const SchedulerConfig good =
      scheduler_config(SchedulerPolicy::Chunked, 4, 64, 16, 100, 1000, 0.0);
  CHECK_NOTHROW(good.validate());
  // One bad field each, and what the message must name.
  struct Case {
    void (*spoil)(SchedulerConfig&);
    const char* flag;
  };
  const Case cases[] = {
      {[](SchedulerConfig& c) { c.max_num_seqs = 0; }, "--max-num-seqs"},
      {[](SchedulerConfig& c) { c.max_num_batched_tokens = 0; }, "--max-num-batched-tokens"},
      {[](SchedulerConfig& c) { c.block_size = 0; }, "--block-size"},
      {[](SchedulerConfig& c) { c.num_gpu_blocks = 0; }, "--num-gpu-blocks"},
      {[](SchedulerConfig& c) { c.max_model_len = 0; }, "--max-model-len"},
      {[](SchedulerConfig& c) { c.watermark = 1.0; }, "watermark"},
  };
  for (const Case& k : cases) {
    INFO(k.flag);
    SchedulerConfig c = good;
    k.spoil(c);
    CHECK_THAT(input_error_of([&] { c.validate(); }), Catch::Contains(k.flag));
  }
  SchedulerConfig c = good;
  c.watermark = 1.0;
  CHECK_THROWS_AS(Scheduler(c), InputError);
}

TEST_CASE("An idle scheduler makes an empty plan", "[scheduler]") {
  for (auto p : {SchedulerPolicy::Static, SchedulerPolicy::Continuous, SchedulerPolicy::Chunked}) {
    Driver d(scheduler_config(p, 4, 64, 16, 100, 1000, 0.0));
    d.sched.schedule(d.plan, d);
    CHECK(d.plan.empty());
    CHECK_FALSE(d.sched.has_unfinished());
  }
}

TEST_CASE("complete() refuses a plan the scheduler did not make", "[scheduler]") {
  Driver d(scheduler_config(SchedulerPolicy::Chunked, 4, 64, 16, 100, 1000, 0.0));
  REQUIRE_FALSE(d.add(request(0, 0.0, 10, 3)));
  REQUIRE_FALSE(d.add(request(1, 0.0, 10, 3)));
  d.sched.schedule(d.plan, d);
  REQUIRE(d.plan.sequences.size() == 2);
  IterationPlan other = d.plan;
  other.sequences.pop_back();
  CHECK_THROWS_AS(d.sched.complete(other, IterationResult{}, d), std::logic_error);
}

TEST_CASE("Static: a request arriving mid-batch waits until the batch finishes", "[scheduler]") {
  Driver d(scheduler_config(SchedulerPolicy::Static, 4, 4096, 16, 1000, 4096, 0.0));
  const int32_t a_out = 6;
  REQUIRE_FALSE(d.add(request(0, 0.0, 30, a_out)));
  const Plan& first = d.step();
  REQUIRE(first.size() == 1);
  CHECK(first[0].is_prefill);
  CHECK(first[0].query == 30);
  CHECK(first[0].samples);

  // B arrives while A's batch (of one, with three free seats) runs.
  REQUIRE_FALSE(d.add(request(1, 0.0, 10, 2)));
  while (d.finished.count(0) == 0) {
    const Plan& p = d.step();
    REQUIRE(p.size() == 1);
    CHECK(p[0].id == 0);
    CHECK_FALSE(p[0].is_prefill);
  }
  // A took one prefill and a_out - 1 decodes; B starts right after.
  CHECK(d.finished[0] == a_out - 1);
  const Plan& next = d.step();
  REQUIRE(next.size() == 1);
  CHECK(next[0].id == 1);
  CHECK(next[0].is_prefill);
  CHECK(d.first_scheduled[1] == a_out);
  d.run_to_end();
}

TEST_CASE("Static: batches hold at most max_num_seqs and last as long as their longest member",
          "[scheduler]") {
  Driver d(scheduler_config(SchedulerPolicy::Static, 2, 4096, 16, 1000, 4096, 0.0));
  const std::vector<int32_t> outputs = {3, 7, 2, 4, 5};
  for (size_t i = 0; i < outputs.size(); ++i)
    REQUIRE_FALSE(d.add(request(int64_t(i), 0.0, 20, outputs[i])));
  d.run_to_end();
  // Batches {0, 1}, {2, 3}, {4}: each runs max(outputs) iterations.
  CHECK(d.first_scheduled[0] == 0);
  CHECK(d.first_scheduled[1] == 0);
  CHECK(d.first_scheduled[2] == 7);
  CHECK(d.first_scheduled[3] == 7);
  CHECK(d.first_scheduled[4] == 11);
  CHECK(d.history.size() == 7 + 4 + 5);
  for (size_t k = 0; k < d.history.size(); ++k) {
    CHECK(d.history[k].size() <= 2);
    // Request 0 finished after iteration 2: request 1 then decodes alone
    // although requests 2..4 wait.
    if (k >= 3 && k < 7) CHECK((d.history[k].size() == 1 && d.history[k][0].id == 1));
  }
}

TEST_CASE("Static: a batch stops at the token budget", "[scheduler]") {
  Driver d(scheduler_config(SchedulerPolicy::Static, 8, 100, 16, 1000, 100, 0.0));
  REQUIRE_FALSE(d.add(request(0, 0.0, 60, 2)));
  REQUIRE_FALSE(d.add(request(1, 0.0, 30, 2)));
  REQUIRE_FALSE(d.add(request(2, 0.0, 20, 2)));  // 60 + 30 + 20 > 100
  const Plan& p = d.step();
  REQUIRE(p.size() == 2);
  CHECK(p[0].id == 0);
  CHECK(p[1].id == 1);
  d.run_to_end();
  CHECK(d.first_scheduled[2] == 2);
}

TEST_CASE("Continuous: prefills come first, in iterations of their own", "[scheduler]") {
  Driver d(scheduler_config(SchedulerPolicy::Continuous, 8, 512, 16, 1000, 512, 0.0));
  REQUIRE_FALSE(d.add(request(0, 0.0, 50, 10)));
  CHECK(d.step()[0].is_prefill);
  const Plan& decode = d.step();
  REQUIRE(decode.size() == 1);
  CHECK_FALSE(decode[0].is_prefill);

  // Two prompts arrive while request 0 decodes: the next iteration prefills
  // both (whole prompts) and request 0 does not decode in it.
  REQUIRE_FALSE(d.add(request(1, 0.0, 40, 5)));
  REQUIRE_FALSE(d.add(request(2, 0.0, 30, 5)));
  const Plan& p = d.step();
  REQUIRE(p.size() == 2);
  CHECK(find(p, 0) == nullptr);
  for (int64_t id : {1, 2}) {
    const Planned* s = find(p, id);
    REQUIRE(s);
    CHECK(s->is_prefill);
    CHECK(s->cached == 0);
    CHECK(s->query == d.requests[id].prompt_tokens);
    CHECK(s->samples);
  }
  // Then everyone decodes together.
  const Plan& all = d.step();
  CHECK(all.size() == 3);
  for (const Planned& s : all) CHECK_FALSE(s.is_prefill);
  d.run_to_end();
}

TEST_CASE("Continuous: the token budget splits prefills over iterations, ahead of decodes",
          "[scheduler]") {
  Driver d(scheduler_config(SchedulerPolicy::Continuous, 8, 100, 16, 1000, 100, 0.0));
  REQUIRE_FALSE(d.add(request(0, 0.0, 20, 10)));
  d.step();
  REQUIRE_FALSE(d.add(request(1, 0.0, 60, 5)));
  REQUIRE_FALSE(d.add(request(2, 0.0, 60, 5)));  // 60 + 60 > 100: one per iteration
  const Plan& p1 = d.step();
  REQUIRE(p1.size() == 1);
  CHECK(p1[0].id == 1);
  const Plan& p2 = d.step();
  REQUIRE(p2.size() == 1);
  CHECK(p2[0].id == 2);  // still a prefill before anyone decodes
  CHECK(p2[0].is_prefill);
  CHECK(d.step().size() == 3);
  d.run_to_end();
}

TEST_CASE("Continuous: the watermark holds back an admission that would fill the cache",
          "[scheduler]") {
  // 100 blocks of 16 tokens; a watermark of 0.1 keeps 10 blocks free.
  for (double watermark : {0.0, 0.1}) {
    Driver d(scheduler_config(SchedulerPolicy::Continuous, 8, 2048, 16, 100, 2048, watermark));
    REQUIRE_FALSE(d.add(request(0, 0.0, 16 * 50, 3)));  // 50 blocks
    REQUIRE_FALSE(d.add(request(1, 0.0, 16 * 45, 3)));  // 45 more would leave 5 free
    const Plan& p = d.step();
    if (watermark == 0.0) {
      CHECK(p.size() == 2);
    } else {
      CHECK(p.size() == 1);
      d.run_to_end();
      CHECK(d.first_scheduled[1] > d.finished[0]);  // only once request 0 has left
    }
  }
}

TEST_CASE("Chunked: decodes first, then a long prompt in chunks within the budget",
          "[scheduler]") {
  const int32_t budget = 64;
  Driver d(scheduler_config(SchedulerPolicy::Chunked, 8, budget, 16, 1000, 4096, 0.0));
  REQUIRE_FALSE(d.add(request(0, 0.0, 20, 30)));
  d.step();  // request 0's prefill
  d.step();  // and a decode
  const int32_t prompt = 200;
  REQUIRE_FALSE(d.add(request(1, 0.0, prompt, 3)));

  // Each iteration: request 0 decodes (1 token), request 1 takes the rest.
  int32_t cached = 0;
  int chunks = 0;
  while (cached < prompt) {
    const Plan& p = d.step();
    REQUIRE(p.size() == 2);
    CHECK(p[0].id == 0);  // the decode goes first and is never stalled
    CHECK_FALSE(p[0].is_prefill);
    const Planned& c = p[1];
    CHECK(c.id == 1);
    CHECK(c.is_prefill);
    CHECK(c.cached == cached);  // successive chunks add up
    CHECK(c.query == std::min(budget - 1, prompt - cached));
    cached += c.query;
    CHECK(c.samples == (cached == prompt));  // only the last chunk samples
    CHECK(d.tokens[1] == (cached == prompt ? 1 : 0));
    ++chunks;
  }
  CHECK(chunks == 4);  // 63 + 63 + 63 + 11
  d.run_to_end();
}

TEST_CASE("Chunked: a long prompt alone fills the whole budget", "[scheduler]") {
  Driver d(scheduler_config(SchedulerPolicy::Chunked, 8, 64, 16, 1000, 4096, 0.0));
  REQUIRE_FALSE(d.add(request(0, 0.0, 150, 2)));
  const std::vector<int32_t> want = {64, 64, 22};
  for (size_t i = 0; i < want.size(); ++i) {
    const Plan& p = d.step();
    REQUIRE(p.size() == 1);
    CHECK(p[0].query == want[i]);
    CHECK(p[0].samples == (i + 1 == want.size()));
  }
  d.run_to_end();
  CHECK(d.first_token[0] == 2);
}

TEST_CASE("Chunked: new prompts share the budget FCFS, the last one partly", "[scheduler]") {
  Driver d(scheduler_config(SchedulerPolicy::Chunked, 8, 64, 16, 1000, 4096, 0.0));
  for (int64_t id = 0; id < 3; ++id) REQUIRE_FALSE(d.add(request(id, 0.0, 30, 4)));
  const Plan& p0 = d.step();
  REQUIRE(p0.size() == 3);
  CHECK(p0[0].query == 30);
  CHECK(p0[1].query == 30);
  CHECK(p0[2].query == 4);  // 64 - 60
  CHECK_FALSE(p0[2].samples);
  // Then two decodes and the rest of request 2's prompt.
  const Plan& p1 = d.step();
  REQUIRE(p1.size() == 3);
  CHECK_FALSE(p1[0].is_prefill);
  CHECK_FALSE(p1[1].is_prefill);
  CHECK(p1[2].id == 2);
  CHECK(p1[2].cached == 4);
  CHECK(p1[2].query == 26);
  CHECK(p1[2].samples);
  d.run_to_end();
}

TEST_CASE("max_num_seqs caps the running sequences", "[scheduler]") {
  for (auto policy : {SchedulerPolicy::Continuous, SchedulerPolicy::Chunked}) {
    Driver d(scheduler_config(policy, 3, 4096, 16, 1000, 4096, 0.0));
    for (int64_t id = 0; id < 10; ++id) REQUIRE_FALSE(d.add(request(id, 0.0, 10, 5)));
    CHECK(d.step().size() == 3);
    CHECK(d.sched.num_running() == 3);
    CHECK(d.sched.num_waiting() == 7);
    d.run_to_end();  // the driver checks every plan against max_num_seqs
    CHECK(d.first_scheduled[3] == 5);  // the first three leave after 5 iterations
  }
}

TEST_CASE("Preemption by recompute evicts the newest sequence, which later completes",
          "[scheduler]") {
  // 10 blocks of 4 tokens, no watermark. Two requests of 8 + 20 tokens each
  // need 7 blocks at the end, so both cannot finish together: decoding in
  // lockstep they hold 5 blocks each when request 0 needs its 6th (at 21
  // tokens, after 13 outputs), and request 1, the newest, is evicted.
  for (auto policy : {SchedulerPolicy::Continuous, SchedulerPolicy::Chunked}) {
    INFO("policy " << servesim::to_string(policy));
    Driver d(scheduler_config(policy, 8, 64, 4, 10, 64, 0.0));
    REQUIRE_FALSE(d.add(request(0, 0.0, 8, 20)));
    REQUIRE_FALSE(d.add(request(1, 0.0, 8, 20)));
    int32_t tokens_before = -1;
    while (d.sched.has_unfinished()) {
      const bool was_preempted = d.preempted[1] > 0;
      const int32_t emitted = d.tokens[1];
      const Plan& p = d.step();
      if (!was_preempted && d.preempted[1] > 0) tokens_before = emitted;
      const Planned* b = find(p, 1);
      if (b && d.preempted[1] > 0 && b->cached == 0) {
        // The recompute prefills prompt and every generated token at once
        // and samples the next token.
        CHECK(b->is_prefill);
        CHECK(b->query == 8 + tokens_before);
        CHECK(b->samples);
      }
      REQUIRE(d.history.size() < 1000);
    }
    d.run_to_end();
    CHECK(d.sched.num_preemptions() == 1);
    CHECK(d.preempted[1] == 1);
    CHECK(d.preempted[0] == 0);
    CHECK(tokens_before == 13);
    CHECK(d.lost[1] == 8 + 13 - 1);  // its KV held every token but the newest
    CHECK(d.finished[0] < d.finished[1]);
    CHECK(d.sched.kv().peak_used() == 10);
  }
}

TEST_CASE("Chunked: a step that preempts admits no waiting request, so the preempted one waits a step",
          "[scheduler]") {
  // 10 blocks of 4 tokens, no watermark, a budget of 8 tokens. Two requests
  // of 8 + 30 tokens decode in lockstep, a block each every 4 tokens, until
  // request 0 needs its 6th block at 21 tokens and none is free: request 1,
  // the newest, is preempted and frees 5 blocks. Request 0 takes one; the
  // other 4 hold the first 7-token chunk of request 1's recompute, so a
  // scheduler that took waiting requests in the same step would readmit it
  // at once. vLLM does not, and neither does this one: it waits a step.
  Driver d(scheduler_config(SchedulerPolicy::Chunked, 8, 8, 4, 10, 64, 0.0));
  REQUIRE_FALSE(d.add(request(0, 0.0, 8, 30)));
  REQUIRE_FALSE(d.add(request(1, 0.0, 8, 30)));
  int64_t preempted_at = -1, readmitted_at = -1;
  while (d.sched.has_unfinished()) {
    const int32_t before = d.preempted[1];
    const Plan& p = d.step();  // the driver checks every step against the rule
    if (preempted_at < 0 && d.preempted[1] > before) {
      preempted_at = d.iteration;
      CHECK(find(p, 1) == nullptr);  // not in the plan of the step that preempted it
      REQUIRE(find(p, 0) != nullptr);
    } else if (preempted_at >= 0 && readmitted_at < 0 && find(p, 1)) {
      readmitted_at = d.iteration;
    }
    REQUIRE(d.history.size() < 1000);
  }
  d.run_to_end();
  REQUIRE(preempted_at >= 0);
  CHECK(readmitted_at == preempted_at + 1);  // the next step, which preempts nothing
  CHECK(d.preempted[0] == 0);
}

TEST_CASE("Rejections name the limit and queue nothing", "[scheduler]") {
  SECTION("max model length") {
    Driver d(scheduler_config(SchedulerPolicy::Chunked, 8, 64, 16, 1000, 100, 0.0));
    auto reason = d.add(request(0, 0.0, 60, 41));
    REQUIRE(reason);
    CHECK_THAT(*reason, Catch::Contains("max model length"));
    CHECK_FALSE(d.sched.has_unfinished());
    CHECK_FALSE(d.add(request(1, 0.0, 60, 40)));  // exactly max_model_len fits
    d.run_to_end();
  }
  SECTION("more KV blocks than the whole cache") {
    Driver d(scheduler_config(SchedulerPolicy::Chunked, 8, 64, 16, 10, 4096, 0.0));
    auto reason = d.add(request(0, 0.0, 100, 61));  // 161 tokens: 11 blocks of 16
    REQUIRE(reason);
    CHECK_THAT(*reason, Catch::Contains("KV blocks"));
    CHECK_FALSE(d.sched.has_unfinished());
    CHECK_FALSE(d.add(request(1, 0.0, 100, 60)));  // 160 tokens: exactly 10 blocks
    d.run_to_end();
  }
  SECTION("the watermark's blocks are not admittable") {
    // floor(0.1 * 10) = 1 block kept free: 9 blocks = 144 tokens usable.
    Driver d(scheduler_config(SchedulerPolicy::Chunked, 8, 64, 16, 10, 4096, 0.1));
    CHECK(d.add(request(0, 0.0, 100, 45)));
    CHECK_FALSE(d.add(request(1, 0.0, 100, 44)));
    d.run_to_end();
  }
  SECTION("a prompt longer than the budget under a policy that cannot chunk") {
    for (auto policy : {SchedulerPolicy::Continuous, SchedulerPolicy::Static}) {
      Driver d(scheduler_config(policy, 8, 64, 16, 1000, 4096, 0.0));
      auto reason = d.add(request(0, 0.0, 70, 1));
      REQUIRE(reason);
      CHECK_THAT(*reason, Catch::Contains("--max-num-batched-tokens"));
      CHECK_FALSE(d.sched.has_unfinished());
    }
    // Chunked serves it in two chunks.
    Driver d(scheduler_config(SchedulerPolicy::Chunked, 8, 64, 16, 1000, 4096, 0.0));
    REQUIRE_FALSE(d.add(request(0, 0.0, 70, 1)));
    d.run_to_end();
    REQUIRE(d.history.size() == 2);
    CHECK(d.history[0][0].query == 64);
    CHECK(d.history[1][0].query == 6);
  }
  SECTION("an empty prompt or output") {
    Driver d(scheduler_config(SchedulerPolicy::Chunked, 8, 64, 16, 1000, 4096, 0.0));
    CHECK(d.add(request(0, 0.0, 0, 5)));
    CHECK(d.add(request(1, 0.0, 5, 0)));
    CHECK_FALSE(d.sched.has_unfinished());
  }
}

TEST_CASE("Every policy keeps the plan contract on a random stream with a tight cache",
          "[scheduler]") {
  // Requests arrive between iterations; 120 blocks of 16 tokens hold only a
  // few of them at once, so the dynamic policies preempt. The driver checks
  // each plan (block tables, budgets, ordering, cached-token continuity) and
  // every request's tokens.
  for (auto policy : {SchedulerPolicy::Static, SchedulerPolicy::Continuous, SchedulerPolicy::Chunked}) {
    INFO("policy " << servesim::to_string(policy));
    const int32_t budget = policy == SchedulerPolicy::Chunked ? 128 : 512;
    Driver d(scheduler_config(policy, 16, budget, 16, 120, 512, 0.01));
    std::mt19937_64 rng(7);
    int64_t next_id = 0;
    const int64_t n = 300;
    while (next_id < n || d.sched.has_unfinished()) {
      const int arrivals = int(rng() % 3);  // 0, 1 or 2 per iteration
      for (int k = 0; k < arrivals && next_id < n; ++k, ++next_id) {
        const int32_t prompt = 1 + int32_t(rng() % 300);
        const int32_t output = 1 + int32_t(rng() % 60);
        REQUIRE_FALSE(d.add(request(next_id, 0.0, prompt, output)));
      }
      if (d.sched.has_unfinished()) d.step();
      REQUIRE(d.history.size() < 100000);
    }
    d.run_to_end();
    CHECK(d.finished.size() == size_t(n));
    if (policy == SchedulerPolicy::Static) {
      CHECK(d.sched.num_preemptions() == 0);
    } else {
      CHECK(d.sched.num_preemptions() > 0);
    }
    CHECK(d.sched.kv().peak_used() <= 120);
  }
}
