// The server's metrics under vLLM's names, label sets and bucket bounds
// (vllm/v1/metrics/loggers.py), so dashboards made for vLLM read them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/server/prometheus.h"
#include "sim/speculative_stats.h"

namespace servesim {

// Times of one finished request, seconds (engine clock).
struct FinishedRequestTimes {
  double arrival_s = 0, first_scheduled_s = -1, first_token_s = -1, last_token_s = -1, finish_s = 0;
  int32_t prompt_tokens = 0, generation_tokens = 0, max_tokens = 0;
  std::string finish_reason;  // "stop", "length" or "abort"
};

class ServingMetrics {
 public:
  explicit ServingMetrics(const std::string& model_name);

  // Engine state after each iteration (and while idle).
  void set_state(int64_t running, int64_t waiting, double kv_cache_usage);
  void add_prompt_tokens(int64_t n) { prompt_tokens_.inc(double(n)); }
  void add_generation_tokens(int64_t n) { generation_tokens_.inc(double(n)); }
  void add_preemptions(int64_t n) { preemptions_.inc(double(n)); }
  void add_prefix_cache(int64_t queries, int64_t hits) {
    prefix_queries_.inc(double(queries));
    prefix_hits_.inc(double(hits));
  }
  void observe_ttft(double s) { ttft_.observe(s); }
  // A gap between two emissions of one request (vLLM observes it under the
  // inter-token name and, deprecated, the time-per-output-token one).
  void observe_inter_token(double s) {
    itl_.observe(s);
    tpot_.observe(s);
  }
  void observe_finished(const FinishedRequestTimes& r);
  // The tokens of one engine step that emitted tokens, as vLLM V1 counts
  // them: the prompts of the requests whose first token it emitted, plus
  // the tokens it emitted.
  void observe_iteration_tokens(int64_t n) { iteration_tokens_.observe(double(n)); }
  // vLLM V1's speculative-decoding counters (vllm:spec_decode_num_drafts,
  // _num_draft_tokens, _num_accepted_tokens, _num_accepted_tokens_per_pos
  // with a `position` label 0 .. k-1), registered at zero for a server that
  // drafts up to `k` tokens a step.
  void enable_speculative(int32_t k);
  // Advances those counters to the totals in `stats` (what the executor
  // counted so far). Engine thread only.
  void update_speculative(const SpeculativeStats& stats);

  std::string render() const { return registry_.render(); }
  PromRegistry& registry() { return registry_; }

 private:
  PromRegistry registry_;
  PromLabels labels_;
  PromRegistry::Gauge &running_, &waiting_, &kv_usage_;
  PromRegistry::Counter &prompt_tokens_, &generation_tokens_, &preemptions_, &prefix_queries_, &prefix_hits_;
  PromRegistry::Histogram &ttft_, &itl_, &tpot_, &request_tpot_, &e2e_, &queue_, &inference_, &prefill_, &decode_;
  PromRegistry::Histogram &request_prompt_tokens_, &request_generation_tokens_, &iteration_tokens_;
  // Speculative decoding (enable_speculative), with the totals already counted.
  PromRegistry::Counter *spec_drafts_ = nullptr, *spec_draft_tokens_ = nullptr, *spec_accepted_ = nullptr;
  std::vector<PromRegistry::Counter*> spec_accepted_per_pos_;
  int64_t counted_steps_ = 0, counted_proposed_ = 0, counted_accepted_ = 0;
  std::vector<int64_t> counted_per_pos_;
};

}  // namespace servesim
