#include "engine/server/online_engine.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "sim/random.h"

namespace servesim {

namespace {

// The prompt's token identity for the prefix cache: block b of the prompt
// is a span of a source named by a chained hash of every token up to the
// block's end, so two prompts share a block's source exactly where they
// share all its tokens and every token before (as vLLM's chained block
// hashes). A last, partial block has a source of its own (never cached).
TokenIdentity identity_of(const std::vector<int32_t>& prompt, int32_t block_size, int64_t request_id) {
  TokenIdentity identity;
  uint64_t chain = 0x5EED5EED5EEDULL;
  const int32_t n = int32_t(prompt.size());
  for (int32_t start = 0; start < n; start += block_size) {
    const int32_t length = std::min(block_size, n - start);
    for (int32_t i = start; i < start + length; ++i) chain = splitmix64_finalize(chain ^ uint64_t(uint32_t(prompt[size_t(i)])));
    uint64_t source = splitmix64_finalize(chain + uint64_t(length));
    if (length < block_size) source = token_source(TokenSourceKind::RequestTail, uint64_t(request_id));
    identity.prompt_spans.push_back(TokenSpan{source == 0 ? 1 : source, start, length});
  }
  identity.output_source = token_source(TokenSourceKind::Output, uint64_t(request_id));
  return identity;
}

}  // namespace

// Scheduler events of one iteration, at the engine clock's time after it.
class OnlineEngine::Listener final : public SchedulerListener {
 public:
  Listener(OnlineEngine& engine, double now_s) : engine_(engine), now_(now_s) {}
  void on_first_scheduled(int64_t id) override {
    if (auto it = engine_.live_.find(id); it != engine_.live_.end()) {
      it->second.first_scheduled_s = now_;
      engine_.queued_.fetch_sub(1);
    }
  }
  void on_tokens(int64_t id, int32_t n) override {
    auto it = engine_.live_.find(id);
    if (it == engine_.live_.end()) return;
    Live& live = it->second;
    if (live.first_token_s < 0) {
      live.first_token_s = now_;
      engine_.metrics_.observe_ttft(now_ - live.arrival_s);
      engine_.metrics_.add_prompt_tokens(live.prompt_tokens);
      step_tokens_ += live.prompt_tokens;
    } else {
      engine_.metrics_.observe_inter_token(now_ - live.last_token_s);
    }
    live.last_token_s = now_;
    live.generated += n;
    engine_.metrics_.add_generation_tokens(n);
    step_tokens_ += n;
    emitted_ = emitted_ || n > 0;
    // The executor holds prompt + every sampled token; the newest n are new.
    if (const std::vector<int32_t>* tokens = engine_.executor_.tokens_of(id)) {
      const size_t from = tokens->size() >= size_t(n) ? tokens->size() - size_t(n) : 0;
      live.pending.tokens.insert(live.pending.tokens.end(), tokens->begin() + long(from), tokens->end());
    }
    live.has_pending = true;
  }
  void on_finished(int64_t id) override { engine_.finished_ids_.push_back(id); }
  // vLLM's tokens of the step (vllm:iteration_tokens_total, v1/metrics/stats.py):
  // the whole prompt of each request whose first token it emitted, plus
  // every token it emitted; a step that emitted nothing is not observed.
  bool emitted() const { return emitted_; }
  int64_t step_tokens() const { return step_tokens_; }
  void on_preempted(int64_t) override { engine_.metrics_.add_preemptions(1); }
  void on_prefix_cache_lookup(int64_t id, int32_t query, int32_t hit, bool readmission) override {
    if (readmission) return;  // vLLM counts preempted requests' lookups apart
    engine_.metrics_.add_prefix_cache(query, hit);
    if (auto it = engine_.live_.find(id); it != engine_.live_.end()) it->second.cached_tokens = hit;
  }

 private:
  OnlineEngine& engine_;
  double now_;
  int64_t step_tokens_ = 0;
  bool emitted_ = false;
};

OnlineEngine::OnlineEngine(Scheduler& scheduler, ServedExecutor& executor, ServingMetrics& metrics,
                           const OnlineEngineOptions& options)
    : scheduler_(scheduler), executor_(executor), metrics_(metrics), options_(options) {
  if (const SpeculativeStats* stats = executor_.speculative_stats())
    metrics_.enable_speculative(stats->num_speculative_tokens());
  publish_state();
}

OnlineEngine::Admission OnlineEngine::submit(OnlineRequest request, EventSink sink, int64_t* id) {
  std::lock_guard lock(mutex_);
  if (draining_) return Admission::Draining;
  if (queued_.load() >= options_.max_waiting) return Admission::QueueFull;
  queued_.fetch_add(1);
  *id = next_id_++;
  submissions_.push_back(Submission{*id, clock_.now(), std::move(request), std::move(sink)});
  wake_.notify_one();
  return Admission::Accepted;
}

void OnlineEngine::abort(int64_t id, const std::string& reason) {
  std::lock_guard lock(mutex_);
  aborts_.emplace_back(id, reason);
  wake_.notify_one();
}

void OnlineEngine::drain(double grace_s) {
  std::lock_guard lock(mutex_);
  if (!draining_) {
    draining_ = true;
    drain_deadline_s_ = clock_.now() + grace_s;
  }
  wake_.notify_one();
}

OnlineEngine::State OnlineEngine::state() const {
  State s;
  s.running = running_.load();
  s.waiting = waiting_.load();
  s.live = live_count_.load();
  s.kv_blocks_used = kv_used_.load();
  s.kv_blocks = scheduler_.kv().num_blocks();
  s.completed = completed_.load();
  return s;
}

void OnlineEngine::publish_state() {
  running_ = int64_t(scheduler_.num_running());
  waiting_ = int64_t(scheduler_.num_waiting());
  live_count_ = int64_t(live_.size());
  kv_used_ = scheduler_.kv().num_used();
  metrics_.set_state(running_, waiting_, double(kv_used_) / double(scheduler_.kv().num_blocks()));
}

void OnlineEngine::admit(Submission&& s) {
  Request r;
  r.id = s.id;
  r.arrival_s = s.arrival_s;
  r.prompt_tokens = int32_t(s.request.input.prompt.size());
  r.output_tokens = s.request.max_tokens;
  if (scheduler_.config().enable_prefix_caching)
    r.tokens = identity_of(s.request.input.prompt, scheduler_.config().block_size, s.id);
  std::optional<std::string> reason;
  try {
    executor_.set_request_input(s.id, std::move(s.request.input));
    reason = scheduler_.add_request(r);
  } catch (const std::exception& e) {
    reason = e.what();
  }
  if (reason) {
    queued_.fetch_sub(1);
    executor_.on_request_finished(s.id);
    EngineEvent e;
    e.id = s.id;
    e.finished = true;
    e.finish_reason = "rejected";
    e.error = *reason;
    e.prompt_tokens = r.prompt_tokens;
    s.sink(std::move(e));
    return;
  }
  Live live;
  live.sink = std::move(s.sink);
  live.arrival_s = s.arrival_s;
  live.prompt_tokens = r.prompt_tokens;
  live.max_tokens = r.output_tokens;
  live_.emplace(s.id, std::move(live));
}

void OnlineEngine::finish(int64_t id, const std::string& reason) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  Live& live = it->second;
  if (live.first_scheduled_s < 0) queued_.fetch_sub(1);
  FinishedRequestTimes t;
  t.arrival_s = live.arrival_s;
  t.first_scheduled_s = live.first_scheduled_s;
  t.first_token_s = live.first_token_s;
  t.last_token_s = live.last_token_s;
  t.finish_s = clock_.now();
  t.prompt_tokens = live.prompt_tokens;
  t.generation_tokens = live.generated;
  t.max_tokens = live.max_tokens;
  t.finish_reason = reason;
  metrics_.observe_finished(t);
  EngineEvent e = std::move(live.pending);
  e.id = id;
  e.finished = true;
  e.finish_reason = reason;
  e.prompt_tokens = live.prompt_tokens;
  e.cached_tokens = live.cached_tokens;
  EventSink sink = std::move(live.sink);
  live_.erase(it);
  executor_.on_request_finished(id);
  completed_.fetch_add(1);
  sink(std::move(e));
}

void OnlineEngine::take_inbox() {
  std::deque<Submission> submissions;
  std::vector<std::pair<int64_t, std::string>> aborts;
  {
    std::lock_guard lock(mutex_);
    submissions.swap(submissions_);
    aborts.swap(aborts_);
  }
  for (Submission& s : submissions) admit(std::move(s));
  for (const auto& [id, reason] : aborts) {
    if (!live_.count(id)) continue;
    scheduler_.abort_request(id);
    finish(id, reason);
  }
}

void OnlineEngine::step() {
  const double start_s = clock_.now();
  Listener scheduled(*this, start_s);
  plan_.index++;
  scheduler_.schedule(plan_, scheduled);
  result_.reset();
  executor_.execute(plan_, result_);
  clock_.advance(result_.duration_s);
  if (const SpeculativeStats* stats = executor_.speculative_stats()) metrics_.update_speculative(*stats);
  Listener completed(*this, clock_.now());
  finished_ids_.clear();
  scheduler_.complete(plan_, result_, completed);
  if (completed.emitted()) metrics_.observe_iteration_tokens(completed.step_tokens());
  for (int64_t id : finished_ids_) {
    const Live& live = live_.at(id);
    finish(id, live.generated >= live.max_tokens ? "length" : "stop");
  }
  for (auto& [id, live] : live_) {
    if (!live.has_pending) continue;
    EngineEvent e = std::move(live.pending);
    live.pending = EngineEvent{};
    live.has_pending = false;
    e.id = id;
    e.prompt_tokens = live.prompt_tokens;
    e.cached_tokens = live.cached_tokens;
    live.sink(std::move(e));
  }
  // After the tokens went out: the hook's time is not in their latency.
  if (options_.on_iteration) options_.on_iteration(plan_, result_, start_s);
}

void OnlineEngine::run() {
  for (;;) {
    take_inbox();
    bool draining;
    double deadline;
    {
      std::lock_guard lock(mutex_);
      draining = draining_;
      deadline = drain_deadline_s_;
    }
    if (draining && clock_.now() >= deadline) {
      std::vector<int64_t> ids;
      for (const auto& [id, live] : live_) ids.push_back(id);
      for (int64_t id : ids) {
        scheduler_.abort_request(id);
        finish(id, "abort");
      }
    }
    publish_state();
    if (!scheduler_.has_unfinished()) {
      std::unique_lock lock(mutex_);
      if (draining_ && submissions_.empty() && aborts_.empty() && live_.empty()) return;
      // Idle: wake for a request, an abort or the drain (gauges stay fresh).
      wake_.wait_for(lock, std::chrono::milliseconds(200),
                     [&] { return !submissions_.empty() || !aborts_.empty() || draining_; });
      if (draining_ && submissions_.empty() && aborts_.empty() && live_.empty()) return;
      continue;
    }
    step();
    publish_state();
  }
}

}  // namespace servesim
