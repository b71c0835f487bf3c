// What a run records, and the metrics computed from it (DESIGN.md):
//   TTFT  = first token emitted - arrival (includes queueing)
//   TPOT  = (last token - first token) / (output tokens - 1), per request with
//           >= 2 output tokens; aggregated request-weighted (vLLM's benchmark)
//   ITL   = gaps between successive emissions of a request (an emission may
//           carry several tokens with speculative decoding)
//   E2E   = completion - arrival;  queueing = first scheduled - arrival
//   throughput = completed requests (output tokens) / duration, where
//           duration = last completion - first arrival
//   goodput = requests that meet every given SLO / duration
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/scheduler.h"
#include "sim/stats.h"

namespace servesim {

struct RequestRecord {
  int64_t id = 0;
  double arrival_s = 0;
  int32_t prompt_tokens = 0;
  int32_t output_tokens = 0;  // asked for
  double first_scheduled_s = -1;
  double first_token_s = -1;
  double last_token_s = -1;
  double finish_s = -1;
  int32_t tokens_emitted = 0;
  int32_t emissions = 0;
  int32_t preemptions = 0;
  // Prompt tokens found in the prefix cache at its first admission (vLLM's
  // num_cached_tokens); a readmission after preemption does not change it.
  int32_t cached_tokens = 0;
  int32_t rejection = -1;  // index into RunRecords::rejection_reasons, -1 if accepted
  int32_t replica = 0;     // the replica it was routed to (--num-replicas)

  bool submitted() const { return arrival_s >= 0; }
  bool completed() const { return finish_s >= 0; }
  bool rejected() const { return rejection >= 0; }
};

struct IterationRecord {
  int64_t index = 0;
  double start_s = 0;
  double duration_s = 0;
  int32_t prefill_tokens = 0;
  int32_t decode_tokens = 0;
  int32_t prefill_sequences = 0;
  int32_t decode_sequences = 0;
  int32_t sampled_sequences = 0;
  int32_t prefix_hit_tokens = 0;  // tokens admissions found in the prefix cache
  int64_t kv_blocks_used = 0;  // after the iteration's allocations
  int32_t waiting = 0;         // queue length when it was scheduled
  int32_t replica = 0;         // the replica that ran it (--num-replicas)
  // As vLLM V1's vllm:iteration_tokens_total counts a step (v1/metrics/
  // stats.py): the tokens it emitted, and the whole prompts of the requests
  // whose first token it emitted (not written to iterations.csv).
  int32_t emitted_tokens = 0;
  int64_t first_token_prompt_tokens = 0;
};

// What one replica of several did, beside its requests' records.
struct ReplicaRecord {
  int64_t preemptions = 0;
  int64_t peak_kv_blocks = 0, num_gpu_blocks = 0;
};

// vLLM's prefix_cache_queries / prefix_cache_hits, in tokens, counted at
// admission; preempted requests' readmissions apart.
struct PrefixCacheCounts {
  int64_t queries_tokens = 0, hits_tokens = 0;
  int64_t preempted_queries_tokens = 0, preempted_hits_tokens = 0;
  int64_t evicted_blocks = 0;  // cached blocks whose slot was reused
};

struct RunRecords {
  std::vector<RequestRecord> requests;  // indexed by request id
  std::vector<IterationRecord> iterations;
  std::vector<std::string> rejection_reasons;
  StreamingSamples itl_s;  // every inter-token gap
  int64_t num_iterations = 0;
  // Tokens and sequences summed over every iteration (the mean batch),
  // kept or not.
  int64_t batch_tokens = 0, batch_sequences = 0;
  int64_t preemptions = 0;
  int64_t peak_kv_blocks = 0;
  int64_t num_gpu_blocks = 0;
  int32_t block_size = 0;
  PrefixCacheCounts prefix_cache;
  double end_s = 0;  // clock when the last request finished
  // With more than one replica, each one's (peak_kv_blocks and
  // num_gpu_blocks above are then the sums over replicas).
  std::vector<ReplicaRecord> replicas;
};

// Records scheduler events at the runner's current time.
class MetricsRecorder final : public SchedulerListener {
 public:
  explicit MetricsRecorder(RunRecords& records) : records_(records) {}
  void set_now(double now_s) { now_ = now_s; }

  void on_arrival(int64_t id, double arrival_s, int32_t prompt, int32_t output);
  void on_rejected(int64_t id, const std::string& reason);
  void on_first_scheduled(int64_t id) override;
  void on_tokens(int64_t id, int32_t tokens) override;
  void on_finished(int64_t id) override;
  void on_preempted(int64_t id) override;
  void on_prefix_cache_lookup(int64_t id, int32_t query_tokens, int32_t hit_tokens, bool readmission) override;

  // Scheduler::repeat_step's stretches, recorded as on_tokens would: each
  // repeated step adds `sequences` equal inter-token gaps; when a sequence
  // leaves the stretch or the stretch ends (now), its `tokens` repeated
  // emissions, the last one now.
  void on_repeated_step(double gap_s, int64_t sequences) { records_.itl_s.add_repeated(gap_s, sequences); }
  void on_repeated_tokens(int64_t id, int32_t tokens) override;

  // Tokens emitted through on_tokens, and prompt tokens of the requests
  // whose first token that was, since the last call.
  struct StepTokens {
    int64_t emitted = 0, first_token_prompts = 0;
  };
  StepTokens take_step_tokens() {
    const StepTokens t = step_tokens_;
    step_tokens_ = {};
    return t;
  }

  // Requests finished since the last call (closed-loop arrivals follow them).
  int64_t take_finished() {
    int64_t n = finished_since_;
    finished_since_ = 0;
    return n;
  }
  // Ids of the requests completed since the last call (for the executor).
  std::vector<int64_t>& completed_ids() { return completed_ids_; }

 private:
  RunRecords& records_;
  double now_ = 0;
  int64_t finished_since_ = 0;
  std::vector<int64_t> completed_ids_;
  StepTokens step_tokens_;
};

struct SloTargets {
  std::optional<double> ttft_s, tpot_s, e2e_s;
  bool any() const { return ttft_s || tpot_s || e2e_s; }
};

struct RunSummary {
  Distribution ttft_s, tpot_s, itl_s, e2e_s, queueing_s;
  bool itl_exact = true;
  int64_t submitted = 0, completed = 0, rejected = 0;
  int64_t prompt_tokens = 0, output_tokens = 0;
  double duration_s = 0;
  double requests_per_s = 0, output_tokens_per_s = 0;
  std::optional<double> goodput_requests_per_s;
  int64_t slo_met = 0;
  int64_t preemptions = 0;
  int64_t iterations = 0;
  int64_t peak_kv_blocks = 0, num_gpu_blocks = 0;
  double peak_kv_utilization = 0;
  PrefixCacheCounts prefix_cache;
  // hits / queries of first admissions; unset when nothing was looked up.
  std::optional<double> prefix_cache_hit_rate;
  double mean_batch_tokens = 0, mean_batch_sequences = 0;
  std::vector<std::pair<std::string, int64_t>> rejections;  // reason, count
};

// True when the request completed and meets every SLO that is set. A request
// with one output token has no TPOT and meets any TPOT target.
bool meets_slo(const RequestRecord& r, const SloTargets& slo);
double request_tpot_s(const RequestRecord& r);  // -1 when undefined

RunSummary summarize_run(RunRecords& records, const SloTargets& slo);

}  // namespace servesim
