#include "sim/metrics.h"

#include <algorithm>
#include <limits>
#include <span>

namespace servesim {

void MetricsRecorder::on_arrival(int64_t id, double arrival_s, int32_t prompt, int32_t output) {
  RequestRecord& r = records_.requests[size_t(id)];
  r.id = id;
  r.arrival_s = arrival_s;
  r.prompt_tokens = prompt;
  r.output_tokens = output;
}

void MetricsRecorder::on_rejected(int64_t id, const std::string& reason) {
  auto& reasons = records_.rejection_reasons;
  auto it = std::find(reasons.begin(), reasons.end(), reason);
  if (it == reasons.end()) it = reasons.insert(reasons.end(), reason);
  records_.requests[size_t(id)].rejection = int32_t(it - reasons.begin());
  ++finished_since_;  // a closed-loop client moves on to its next request
}

void MetricsRecorder::on_first_scheduled(int64_t id) {
  records_.requests[size_t(id)].first_scheduled_s = now_;
}

void MetricsRecorder::on_tokens(int64_t id, int32_t tokens) {
  RequestRecord& r = records_.requests[size_t(id)];
  step_tokens_.emitted += tokens;
  if (r.emissions == 0) {
    r.first_token_s = now_;
    step_tokens_.first_token_prompts += r.prompt_tokens;
  } else {
    records_.itl_s.add(now_ - r.last_token_s);
  }
  r.last_token_s = now_;
  r.tokens_emitted += tokens;
  r.emissions += 1;
}

void MetricsRecorder::on_repeated_tokens(int64_t id, int32_t tokens) {
  RequestRecord& r = records_.requests[size_t(id)];
  r.tokens_emitted += tokens;
  r.emissions += tokens;
  r.last_token_s = now_;
}

void MetricsRecorder::on_finished(int64_t id) {
  records_.requests[size_t(id)].finish_s = now_;
  records_.end_s = std::max(records_.end_s, now_);
  ++finished_since_;
  completed_ids_.push_back(id);
}

void MetricsRecorder::on_preempted(int64_t id) {
  records_.requests[size_t(id)].preemptions += 1;
  records_.preemptions += 1;
}

void MetricsRecorder::on_prefix_cache_lookup(int64_t id, int32_t query_tokens, int32_t hit_tokens,
                                             bool readmission) {
  PrefixCacheCounts& c = records_.prefix_cache;
  if (readmission) {
    c.preempted_queries_tokens += query_tokens;
    c.preempted_hits_tokens += hit_tokens;
    return;
  }
  c.queries_tokens += query_tokens;
  c.hits_tokens += hit_tokens;
  records_.requests[size_t(id)].cached_tokens = hit_tokens;
}

double request_tpot_s(const RequestRecord& r) {
  if (!r.completed() || r.tokens_emitted < 2) return -1;
  return (r.last_token_s - r.first_token_s) / double(r.tokens_emitted - 1);
}

bool meets_slo(const RequestRecord& r, const SloTargets& slo) {
  if (!r.completed()) return false;
  if (slo.ttft_s && r.first_token_s - r.arrival_s > *slo.ttft_s) return false;
  if (slo.e2e_s && r.finish_s - r.arrival_s > *slo.e2e_s) return false;
  const double tpot = request_tpot_s(r);
  if (slo.tpot_s && tpot >= 0 && tpot > *slo.tpot_s) return false;
  return true;
}

RunSummary summarize_run(RunRecords& records, const SloTargets& slo) {
  RunSummary s;
  std::vector<double> ttft, tpot, e2e, queueing;
  double first_arrival = std::numeric_limits<double>::infinity();
  std::vector<int64_t> rejection_counts(records.rejection_reasons.size(), 0);
  for (const RequestRecord& r : records.requests) {
    if (!r.submitted()) continue;
    ++s.submitted;
    first_arrival = std::min(first_arrival, r.arrival_s);
    if (r.rejected()) {
      ++s.rejected;
      ++rejection_counts[size_t(r.rejection)];
      continue;
    }
    if (!r.completed()) continue;
    ++s.completed;
    s.prompt_tokens += r.prompt_tokens;
    s.output_tokens += r.tokens_emitted;
    ttft.push_back(r.first_token_s - r.arrival_s);
    e2e.push_back(r.finish_s - r.arrival_s);
    queueing.push_back(r.first_scheduled_s - r.arrival_s);
    const double t = request_tpot_s(r);
    if (t >= 0) tpot.push_back(t);
    if (slo.any() && meets_slo(r, slo)) ++s.slo_met;
  }
  s.ttft_s = summarize(ttft);
  s.tpot_s = summarize(tpot);
  s.e2e_s = summarize(e2e);
  s.queueing_s = summarize(queueing);
  s.itl_exact = records.itl_s.exact();
  s.itl_s = records.itl_s.summarize();

  s.duration_s = s.completed > 0 ? records.end_s - first_arrival : 0.0;
  if (s.duration_s > 0) {
    s.requests_per_s = double(s.completed) / s.duration_s;
    s.output_tokens_per_s = double(s.output_tokens) / s.duration_s;
    if (slo.any()) s.goodput_requests_per_s = double(s.slo_met) / s.duration_s;
  } else if (slo.any()) {
    s.goodput_requests_per_s = 0.0;
  }
  s.preemptions = records.preemptions;
  s.iterations = records.num_iterations;
  s.peak_kv_blocks = records.peak_kv_blocks;
  s.num_gpu_blocks = records.num_gpu_blocks;
  s.prefix_cache = records.prefix_cache;
  if (records.prefix_cache.queries_tokens > 0)
    s.prefix_cache_hit_rate = double(records.prefix_cache.hits_tokens) / double(records.prefix_cache.queries_tokens);
  s.peak_kv_utilization =
      records.num_gpu_blocks > 0 ? double(records.peak_kv_blocks) / double(records.num_gpu_blocks) : 0;
  if (records.num_iterations > 0) {
    s.mean_batch_tokens = double(records.batch_tokens) / double(records.num_iterations);
    s.mean_batch_sequences = double(records.batch_sequences) / double(records.num_iterations);
  }
  for (size_t i = 0; i < rejection_counts.size(); ++i)
    if (rejection_counts[i] > 0) s.rejections.emplace_back(records.rejection_reasons[i], rejection_counts[i]);
  return s;
}

}  // namespace servesim
