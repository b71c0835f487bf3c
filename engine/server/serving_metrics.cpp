#include "engine/server/serving_metrics.h"

#include <algorithm>
#include <vector>

namespace servesim {

namespace {

// vLLM's bucket bounds (vllm/v1/metrics/loggers.py).
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
                                          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kTokenLatencyBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                                  0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kRequestLatencyBuckets = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,  15.0,  20.0,
                                                    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

const std::vector<double> kIterationTokenBuckets = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};

// 1, 2, 5, 10, 20, 50, ... up to `max` (vLLM's build_1_2_5_buckets).
std::vector<double> buckets_1_2_5(double max) {
  std::vector<double> out;
  for (double base = 1; base <= max; base *= 10)
    for (double m : {1.0, 2.0, 5.0})
      if (base * m <= max) out.push_back(base * m);
  return out;
}

}  // namespace

ServingMetrics::ServingMetrics(const std::string& model_name)
    : labels_{{"engine", "0"}, {"model_name", model_name}},
      running_(registry_.gauge("vllm:num_requests_running", "Number of requests in model execution batches.", labels_)),
      waiting_(registry_.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels_)),
      kv_usage_(registry_.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels_)),
      prompt_tokens_(registry_.counter("vllm:prompt_tokens", "Number of prefill tokens processed.", labels_)),
      generation_tokens_(registry_.counter("vllm:generation_tokens", "Number of generation tokens processed.", labels_)),
      preemptions_(registry_.counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", labels_)),
      prefix_queries_(registry_.counter("vllm:prefix_cache_queries",
                                        "Prefix cache queries, in terms of number of queried tokens.", labels_)),
      prefix_hits_(registry_.counter("vllm:prefix_cache_hits",
                                     "Prefix cache hits, in terms of number of cached tokens.", labels_)),
      ttft_(registry_.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                                labels_, kTtftBuckets)),
      itl_(registry_.histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                               labels_, kTokenLatencyBuckets)),
      tpot_(registry_.histogram("vllm:time_per_output_token_seconds",
                                "Histogram of time per output token in seconds (deprecated: inter_token_latency).",
                                labels_, kTokenLatencyBuckets)),
      request_tpot_(registry_.histogram("vllm:request_time_per_output_token_seconds",
                                        "Histogram of time_per_output_token_seconds per request.", labels_,
                                        kTokenLatencyBuckets)),
      e2e_(registry_.histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                               labels_, kRequestLatencyBuckets)),
      queue_(registry_.histogram("vllm:request_queue_time_seconds",
                                 "Histogram of time spent in WAITING phase for request.", labels_,
                                 kRequestLatencyBuckets)),
      inference_(registry_.histogram("vllm:request_inference_time_seconds",
                                     "Histogram of time spent in RUNNING phase for request.", labels_,
                                     kRequestLatencyBuckets)),
      prefill_(registry_.histogram("vllm:request_prefill_time_seconds",
                                   "Histogram of time spent in PREFILL phase for request.", labels_,
                                   kRequestLatencyBuckets)),
      decode_(registry_.histogram("vllm:request_decode_time_seconds",
                                  "Histogram of time spent in DECODE phase for request.", labels_,
                                  kRequestLatencyBuckets)),
      request_prompt_tokens_(registry_.histogram("vllm:request_prompt_tokens",
                                                 "Number of prefill tokens processed.", labels_,
                                                 buckets_1_2_5(1 << 20))),
      request_generation_tokens_(registry_.histogram("vllm:request_generation_tokens",
                                                     "Number of generation tokens processed.", labels_,
                                                     buckets_1_2_5(1 << 20))),
      iteration_tokens_(registry_.histogram("vllm:iteration_tokens_total",
                                            "Histogram of number of tokens per engine_step.", labels_,
                                            kIterationTokenBuckets)) {
  for (const char* reason : {"stop", "length", "abort"}) {
    PromLabels l = labels_;
    l["finished_reason"] = reason;
    registry_.counter("vllm:request_success", "Count of successfully processed requests.", l);
  }
}

void ServingMetrics::enable_speculative(int32_t k) {
  spec_drafts_ = &registry_.counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", labels_);
  spec_draft_tokens_ = &registry_.counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", labels_);
  spec_accepted_ = &registry_.counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", labels_);
  spec_accepted_per_pos_.clear();
  for (int32_t position = 0; position < k; ++position) {
    PromLabels l = labels_;
    l["position"] = std::to_string(position);
    spec_accepted_per_pos_.push_back(&registry_.counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                                                        "Accepted tokens per draft position.", l));
  }
  counted_per_pos_.assign(size_t(k), 0);
}

void ServingMetrics::update_speculative(const SpeculativeStats& stats) {
  if (!spec_drafts_) return;
  spec_drafts_->inc(double(stats.steps() - counted_steps_));
  spec_draft_tokens_->inc(double(stats.proposed_tokens() - counted_proposed_));
  spec_accepted_->inc(double(stats.accepted_tokens() - counted_accepted_));
  counted_steps_ = stats.steps();
  counted_proposed_ = stats.proposed_tokens();
  counted_accepted_ = stats.accepted_tokens();
  const std::vector<int64_t>& accepts = stats.accepts_per_position();
  for (size_t j = 0; j < accepts.size() && j < spec_accepted_per_pos_.size(); ++j) {
    spec_accepted_per_pos_[j]->inc(double(accepts[j] - counted_per_pos_[j]));
    counted_per_pos_[j] = accepts[j];
  }
}

void ServingMetrics::set_state(int64_t running, int64_t waiting, double kv_cache_usage) {
  running_.set(double(running));
  waiting_.set(double(waiting));
  kv_usage_.set(kv_cache_usage);
}

void ServingMetrics::observe_finished(const FinishedRequestTimes& r) {
  PromLabels l = labels_;
  l["finished_reason"] = r.finish_reason;
  registry_.counter("vllm:request_success", "Count of successfully processed requests.", l).inc();
  e2e_.observe(r.finish_s - r.arrival_s);
  // Phases as vLLM splits them: queued until first scheduled, prefill until
  // the first token, decode until the last one.
  const double scheduled = r.first_scheduled_s >= 0 ? r.first_scheduled_s : r.finish_s;
  queue_.observe(scheduled - r.arrival_s);
  if (r.first_token_s >= 0) {
    prefill_.observe(r.first_token_s - scheduled);
    decode_.observe(r.last_token_s - r.first_token_s);
    inference_.observe(r.last_token_s - scheduled);
    if (r.generation_tokens > 1)
      request_tpot_.observe((r.last_token_s - r.first_token_s) / double(r.generation_tokens - 1));
  }
  request_prompt_tokens_.observe(double(r.prompt_tokens));
  request_generation_tokens_.observe(double(r.generation_tokens));
}

}  // namespace servesim
