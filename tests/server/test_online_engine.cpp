// The online engine with the real CPU decoder: requests submitted from
// another thread stream their tokens, greedy decoding matches a plain run
// of the same prompt, aborts free KV blocks, the waiting queue is bounded
// and drain() ends the loop.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/server/online_engine.h"
#include "kernels/decoder/host_weights.h"
#include "support/test_support.h"

using namespace servesim;

namespace {

ModelSpec spec() { return test::small_model("online-test", 32, 64, 2, 4, 2, 8, 300, 256, "float32"); }

// What the sinks received, per request, under a lock (they run on the engine thread).
struct Received {
  std::mutex mutex;
  std::condition_variable cv;
  std::map<int64_t, std::vector<int32_t>> tokens;
  std::map<int64_t, EngineEvent> last;
  EventSink sink() {
    return [this](EngineEvent&& e) {
      std::lock_guard lock(mutex);
      auto& t = tokens[e.id];
      t.insert(t.end(), e.tokens.begin(), e.tokens.end());
      if (e.finished) last[e.id] = e;
      cv.notify_all();
    };
  }
  bool wait_finished(int64_t id) {
    std::unique_lock lock(mutex);
    return cv.wait_for(lock, std::chrono::seconds(30), [&] { return last.count(id) > 0; });
  }
};

struct Harness {
  SchedulerConfig config;
  std::unique_ptr<DecoderExecutor> executor;
  std::unique_ptr<Scheduler> scheduler;
  ServingMetrics metrics{"online-test"};
  std::unique_ptr<OnlineEngine> engine;
  std::thread thread;

  explicit Harness(int64_t max_waiting = 64, int32_t max_num_seqs = 8) {
    config.policy = SchedulerPolicy::Chunked;
    config.max_num_seqs = max_num_seqs;
    config.max_num_batched_tokens = 64;
    config.block_size = 4;
    config.num_gpu_blocks = 64;
    config.max_model_len = 256;
    auto model = make_cpu_decoder(random_weights(spec(), 3), config.num_gpu_blocks, config.block_size,
                                  CpuDecoderOptions{1, {}});
    executor = std::make_unique<DecoderExecutor>(std::move(model), DecoderExecutorOptions{});
    scheduler = std::make_unique<Scheduler>(config);
    engine = std::make_unique<OnlineEngine>(*scheduler, *executor, metrics, OnlineEngineOptions{max_waiting});
  }
  void start() {
    thread = std::thread([this] { engine->run(); });
  }
  ~Harness() {
    engine->drain(0);
    if (thread.joinable()) thread.join();
  }
};

OnlineRequest greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  OnlineRequest r;
  r.input.prompt = std::move(prompt);
  r.input.sampling.temperature = 0;
  r.input.stop_at_eos = false;
  r.max_tokens = max_tokens;
  return r;
}

// Tokens a plain token-by-token loop over the decoder generates for `prompt` alone.
std::vector<int32_t> reference_tokens(const std::vector<int32_t>& prompt, int32_t n) {
  Harness h;
  Received got;
  int64_t id = -1;
  h.engine->submit(greedy(prompt, n), got.sink(), &id);
  h.start();
  REQUIRE(got.wait_finished(id));
  return got.tokens[id];
}

}  // namespace

TEST_CASE("server: the online engine streams greedy tokens that batching does not change", "[server]") {
  const std::vector<int32_t> a = {5, 6, 7, 8, 9, 10, 11}, b = {20, 21, 22};
  const std::vector<int32_t> alone_a = reference_tokens(a, 12), alone_b = reference_tokens(b, 9);
  REQUIRE(alone_a.size() == 12);
  Harness h;
  h.start();
  Received got;
  int64_t ia = -1, ib = -1, ic = -1;
  REQUIRE(h.engine->submit(greedy(a, 12), got.sink(), &ia) == OnlineEngine::Admission::Accepted);
  REQUIRE(h.engine->submit(greedy(b, 9), got.sink(), &ib) == OnlineEngine::Admission::Accepted);
  REQUIRE(h.engine->submit(greedy(a, 12), got.sink(), &ic) == OnlineEngine::Admission::Accepted);  // a prefix-cache hit
  REQUIRE(got.wait_finished(ia));
  REQUIRE(got.wait_finished(ib));
  REQUIRE(got.wait_finished(ic));
  CHECK(got.tokens[ia] == alone_a);
  CHECK(got.tokens[ib] == alone_b);
  CHECK(got.tokens[ic] == alone_a);
  CHECK(got.last[ia].finish_reason == "length");
  CHECK(got.last[ia].prompt_tokens == 7);
  CHECK(h.engine->state().completed == 3);
}

TEST_CASE("server: an aborted request frees its KV blocks and ends as abort", "[server]") {
  Harness h;
  h.start();
  Received got;
  // The sink holds the engine thread once 3 tokens have arrived until the
  // abort is queued: the tiny model would otherwise finish all 200 tokens
  // before the test thread gets to abort() on a fast machine.
  std::mutex gate_mutex;
  std::condition_variable gate_cv;
  bool abort_queued = false;
  EventSink record = got.sink();
  EventSink gated = [&](EngineEvent&& e) {
    const int64_t request = e.id;
    record(std::move(e));
    size_t received;
    {
      std::lock_guard lock(got.mutex);
      received = got.tokens[request].size();
    }
    if (received < 3) return;
    std::unique_lock lock(gate_mutex);
    gate_cv.wait_for(lock, std::chrono::seconds(30), [&] { return abort_queued; });
  };
  int64_t id = -1;
  REQUIRE(h.engine->submit(greedy(std::vector<int32_t>(30, 9), 200), gated, &id) ==
          OnlineEngine::Admission::Accepted);
  {
    std::unique_lock lock(got.mutex);
    REQUIRE(got.cv.wait_for(lock, std::chrono::seconds(30), [&] { return got.tokens[id].size() >= 3; }));
  }
  h.engine->abort(id);
  {
    std::lock_guard lock(gate_mutex);
    abort_queued = true;
  }
  gate_cv.notify_all();
  REQUIRE(got.wait_finished(id));
  CHECK(got.last[id].finish_reason == "abort");
  CHECK(got.tokens[id].size() < 200);
  for (int i = 0; i < 100 && h.engine->state().kv_blocks_used > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(h.engine->state().kv_blocks_used == 0);
  CHECK(h.engine->state().live == 0);
}

TEST_CASE("server: stop token ids, min_tokens, rejections and the waiting bound", "[server]") {
  const std::vector<int32_t> prompt = {40, 41, 42};
  const std::vector<int32_t> free_run = reference_tokens(prompt, 10);
  Harness h(/*max_waiting=*/2);
  Received got;
  // A stop token (the run's 4th token) ends the request there, unless min_tokens asks for more.
  OnlineRequest stop = greedy(prompt, 10);
  stop.input.stop_token_ids = {free_run[3]};
  OnlineRequest at_least = stop;
  at_least.input.min_tokens = 6;
  int64_t i_stop = -1, i_min = -1, i_full = -1;
  REQUIRE(h.engine->submit(stop, got.sink(), &i_stop) == OnlineEngine::Admission::Accepted);
  REQUIRE(h.engine->submit(at_least, got.sink(), &i_min) == OnlineEngine::Admission::Accepted);
  // Two wait: the third is refused before the engine even runs.
  CHECK(h.engine->submit(greedy(prompt, 4), got.sink(), &i_full) == OnlineEngine::Admission::QueueFull);
  h.start();
  REQUIRE(got.wait_finished(i_stop));
  REQUIRE(got.wait_finished(i_min));
  const auto first = std::find(free_run.begin(), free_run.end(), free_run[3]) - free_run.begin();
  CHECK(got.tokens[i_stop] == std::vector<int32_t>(free_run.begin(), free_run.begin() + first + 1));
  CHECK(got.last[i_stop].finish_reason == "stop");
  CHECK(got.tokens[i_min].size() >= 6);
  // Longer than the model admits: rejected with the scheduler's reason.
  int64_t i_long = -1;
  REQUIRE(h.engine->submit(greedy(std::vector<int32_t>(200, 7), 60), got.sink(), &i_long) ==
          OnlineEngine::Admission::Accepted);
  REQUIRE(got.wait_finished(i_long));
  CHECK(got.last[i_long].finish_reason == "rejected");
  CHECK_FALSE(got.last[i_long].error.empty());
  // After drain() nothing new is taken.
  h.engine->drain(5);
  int64_t late = -1;
  CHECK(h.engine->submit(greedy(prompt, 2), got.sink(), &late) == OnlineEngine::Admission::Draining);
}
