// Scheduler::abort_request: a client gone away takes its request out of the
// waiting queue or the running batch and gives back every KV block.
#include <catch2/catch.hpp>

#include "sim/scheduler.h"
#include "support/test_support.h"

using namespace servesim;

namespace {

Request request(int64_t id, int32_t prompt, int32_t output) {
  Request r;
  r.id = id;
  r.prompt_tokens = prompt;
  r.output_tokens = output;
  return r;
}

}  // namespace

TEST_CASE("sim: abort_request frees a running request's blocks and drops a waiting one", "[scheduler]") {
  SchedulerConfig c;
  c.policy = SchedulerPolicy::Chunked;
  c.max_num_seqs = 1;  // the second request waits
  c.max_num_batched_tokens = 64;
  c.block_size = 16;
  c.num_gpu_blocks = 32;
  c.max_model_len = 256;
  c.watermark = 0;
  Scheduler s(c);
  test::QuietListener quiet;
  REQUIRE_FALSE(s.add_request(request(7, 40, 10)));
  REQUIRE_FALSE(s.add_request(request(8, 20, 10)));
  IterationPlan plan;
  s.schedule(plan, quiet);
  REQUIRE(plan.sequences.size() == 1);
  CHECK(plan.sequences[0].request_id == 7);
  IterationResult result;
  s.complete(plan, result, quiet);
  CHECK(s.kv().num_used() == 3);  // 40 prompt tokens + the first output's slot
  CHECK(s.num_running() == 1);
  CHECK(s.num_waiting() == 1);

  CHECK(s.abort_request(8));  // waiting
  CHECK(s.num_waiting() == 0);
  CHECK(s.abort_request(7));  // running
  CHECK(s.num_running() == 0);
  CHECK(s.kv().num_used() == 0);
  CHECK_FALSE(s.has_unfinished());
  CHECK_FALSE(s.abort_request(7));  // gone already
  CHECK_FALSE(s.abort_request(99));

  // The scheduler goes on: a new request runs to its end.
  REQUIRE_FALSE(s.add_request(request(9, 16, 2)));
  int iterations = 0;
  while (s.has_unfinished() && iterations < 10) {
    s.schedule(plan, quiet);
    result.reset();
    s.complete(plan, result, quiet);
    ++iterations;
  }
  CHECK_FALSE(s.has_unfinished());
  CHECK(s.kv().num_used() == 0);
}
