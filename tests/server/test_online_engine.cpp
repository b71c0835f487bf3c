// The online engine with the real CPU decoder: requests submitted from
// another thread stream their tokens, greedy decoding matches a plain run
// of the same prompt, aborts free KV blocks, the waiting queue is bounded
// and drain() ends the loop.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/server/online_engine.h"
#include "kernels/decoder/decoder_executor.h"
#include "kernels/decoder/host_weights.h"
#include "kernels/decoder/speculative_executor.h"
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

// An online engine on the small model; with `speculative_k` > 0 it drafts
// that many tokens a step with a self-draft of the model's first layer.
struct Harness {
  SchedulerConfig config;
  std::unique_ptr<ServedExecutor> executor;
  std::unique_ptr<Scheduler> scheduler;
  ServingMetrics metrics{"online-test"};
  std::unique_ptr<OnlineEngine> engine;
  std::thread thread;

  explicit Harness(int64_t max_waiting = 64, int32_t max_num_seqs = 8, int32_t speculative_k = 0) {
    config.policy = SchedulerPolicy::Chunked;
    config.max_num_seqs = max_num_seqs;
    config.max_num_batched_tokens = 64;
    config.block_size = 4;
    config.num_gpu_blocks = 64;
    config.max_model_len = 256;
    config.num_speculative_tokens = speculative_k;
    HostWeights weights = random_weights(spec(), 3);
    if (speculative_k > 0) {
      auto draft = make_cpu_decoder(self_draft_weights(weights, 1), config.num_gpu_blocks, config.block_size,
                                    CpuDecoderOptions{1, {}});
      auto model = make_cpu_decoder(std::move(weights), config.num_gpu_blocks, config.block_size,
                                    CpuDecoderOptions{1, {}});
      SpeculativeExecutorOptions options;
      options.num_speculative_tokens = speculative_k;
      executor = std::make_unique<SpeculativeExecutor>(std::move(model), std::move(draft), options);
    } else {
      auto model = make_cpu_decoder(std::move(weights), config.num_gpu_blocks, config.block_size,
                                    CpuDecoderOptions{1, {}});
      executor = std::make_unique<DecoderExecutor>(std::move(model), DecoderExecutorOptions{});
    }
    scheduler = std::make_unique<Scheduler>(config);
    OnlineEngineOptions options;
    options.max_waiting = max_waiting;
    engine = std::make_unique<OnlineEngine>(*scheduler, *executor, metrics, options);
  }
  void start() {
    thread = std::thread([this] { engine->run(); });
  }
  ~Harness() {
    engine->drain(0);
    if (thread.joinable()) thread.join();
  }
};

std::vector<int32_t> tokens_alone(const OnlineRequest& request, int32_t speculative_k = 0);

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
  return tokens_alone(greedy(prompt, n));
}

// The tokens `request` gets served alone (speculating with `speculative_k` drafts).
std::vector<int32_t> tokens_alone(const OnlineRequest& request, int32_t speculative_k) {
  Harness h(64, 8, speculative_k);
  Received got;
  int64_t id = -1;
  h.engine->submit(request, got.sink(), &id);
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

namespace {

// The value of one series of the rendered metrics (the first whose line
// starts with `series`), or -1 when absent.
double rendered_value(const std::string& text, const std::string& series) {
  for (size_t at = text.find(series); at != std::string::npos; at = text.find(series, at + 1)) {
    if (at != 0 && text[at - 1] != '\n') continue;
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end - at);
    return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

}  // namespace

TEST_CASE("server: a speculating engine serves the plain engine's greedy tokens, stops mid-step and counts its "
          "drafts as vLLM does",
          "[server]") {
  const std::vector<int32_t> a = {5, 6, 7, 8, 9, 10, 11}, b = {20, 21, 22}, c = {40, 41, 42};
  const std::vector<int32_t> alone_a = reference_tokens(a, 12), alone_b = reference_tokens(b, 9);
  const std::vector<int32_t> free_run = reference_tokens(c, 10);
  // A stop token (the plain run's 4th token), and the same with min_tokens 6:
  // it then ends at the stop token's first occurrence from the 6th token on.
  OnlineRequest stop = greedy(c, 10);
  stop.input.stop_token_ids = {free_run[3]};
  OnlineRequest at_least = stop;
  at_least.input.min_tokens = 6;
  const size_t first_stop = size_t(std::find(free_run.begin(), free_run.end(), free_run[3]) - free_run.begin());
  size_t min_stop = 5;
  while (min_stop < free_run.size() && free_run[min_stop] != free_run[3]) ++min_stop;
  const std::vector<int32_t> want_stop(free_run.begin(), free_run.begin() + long(first_stop) + 1);
  const std::vector<int32_t> want_min(free_run.begin(), free_run.begin() + long(std::min(min_stop + 1, free_run.size())));

  Harness h(64, 8, /*speculative_k=*/3);
  h.start();
  Received got;
  int64_t ia = -1, ib = -1, ia2 = -1, is = -1, im = -1;
  REQUIRE(h.engine->submit(greedy(a, 12), got.sink(), &ia) == OnlineEngine::Admission::Accepted);
  REQUIRE(h.engine->submit(greedy(b, 9), got.sink(), &ib) == OnlineEngine::Admission::Accepted);
  REQUIRE(h.engine->submit(greedy(a, 12), got.sink(), &ia2) == OnlineEngine::Admission::Accepted);
  REQUIRE(h.engine->submit(stop, got.sink(), &is) == OnlineEngine::Admission::Accepted);
  REQUIRE(h.engine->submit(at_least, got.sink(), &im) == OnlineEngine::Admission::Accepted);
  for (int64_t id : {ia, ib, ia2, is, im}) REQUIRE(got.wait_finished(id));
  CHECK(got.tokens[ia] == alone_a);
  CHECK(got.tokens[ib] == alone_b);
  CHECK(got.tokens[ia2] == alone_a);
  CHECK(got.last[ia].finish_reason == "length");
  CHECK(got.tokens[is] == want_stop);
  CHECK(got.last[is].finish_reason == "stop");
  CHECK(got.tokens[im] == want_min);

  const std::string text = h.metrics.render();
  const std::string labels = "{engine=\"0\",model_name=\"online-test\"}";
  const double drafts = rendered_value(text, "vllm:spec_decode_num_drafts_total" + labels);
  const double draft_tokens = rendered_value(text, "vllm:spec_decode_num_draft_tokens_total" + labels);
  const double accepted = rendered_value(text, "vllm:spec_decode_num_accepted_tokens_total" + labels);
  INFO(text);
  CHECK(drafts > 0);
  CHECK(draft_tokens >= drafts);
  CHECK(draft_tokens <= 3 * drafts);
  CHECK(accepted >= 0);
  CHECK(accepted <= draft_tokens);
  double per_position = 0;
  for (int position = 0; position < 3; ++position)
    per_position += rendered_value(text, "vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",model_name=\"online-"
                                         "test\",position=\"" + std::to_string(position) + "\"}");
  CHECK(per_position == accepted);
  // Every output token came from a prefill, a plain decode or a step's a + 1.
  CHECK(rendered_value(text, "vllm:generation_tokens_total" + labels) ==
        double(alone_a.size() * 2 + alone_b.size() + want_stop.size() + want_min.size()));
}

TEST_CASE("server: a speculating engine samples a seeded request the same way every time", "[server]") {
  OnlineRequest r = greedy({7, 8, 9, 10}, 16);
  r.input.sampling.temperature = 1.0;
  r.input.sampling.top_p = 0.9;
  r.input.seeded = true;
  r.input.sampling.seed = 1234;
  Harness h(64, 8, /*speculative_k=*/2);
  h.start();
  Received got;
  int64_t first = -1, second = -1;
  REQUIRE(h.engine->submit(r, got.sink(), &first) == OnlineEngine::Admission::Accepted);
  REQUIRE(h.engine->submit(greedy({3, 4}, 5), got.sink(), &second) == OnlineEngine::Admission::Accepted);
  REQUIRE(got.wait_finished(first));
  int64_t again = -1;
  REQUIRE(h.engine->submit(r, got.sink(), &again) == OnlineEngine::Admission::Accepted);
  REQUIRE(got.wait_finished(again));
  REQUIRE(got.tokens[first].size() == 16);
  CHECK(got.tokens[again] == got.tokens[first]);
  // And not the greedy tokens: the request's own temperature was used.
  CHECK(got.tokens[first] != tokens_alone(greedy({7, 8, 9, 10}, 16), 2));
}
