#include "engine/client/bench_results.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include <fmt/format.h>

#include "sim/stats.h"

namespace servesim {

using nlohmann::json;

RunRecords bench_records(const LoadPlan& plan, const LoadResult& result) {
  RunRecords records;
  records.requests.resize(plan.requests.size());
  for (size_t i = 0; i < plan.requests.size(); ++i) {
    const PlannedRequest& p = plan.requests[i];
    const RequestMeasurement& m = result.requests[i];
    RequestRecord& r = records.requests[i];
    r.id = int64_t(i);
    r.output_tokens = p.output_tokens;
    r.prompt_tokens = m.usage_prompt_tokens ? int32_t(*m.usage_prompt_tokens) : p.prompt_tokens;
    r.arrival_s = m.sent ? m.send_s : -1;
    if (!m.sent) continue;
    if (!m.ok()) {
      auto& reasons = records.rejection_reasons;
      auto it = std::find(reasons.begin(), reasons.end(), m.error);
      if (it == reasons.end()) it = reasons.insert(reasons.end(), m.error);
      r.rejection = int32_t(it - reasons.begin());
      continue;
    }
    r.first_token_s = m.chunk_s.front();
    r.last_token_s = m.chunk_s.back();
    r.finish_s = m.chunk_s.back();
    r.tokens_emitted = int32_t(m.output_tokens());
    r.emissions = int32_t(m.chunk_s.size());
    for (size_t k = 1; k < m.chunk_s.size(); ++k) records.itl_s.add(m.chunk_s[k] - m.chunk_s[k - 1]);
    records.end_s = std::max(records.end_s, r.finish_s);
  }
  return records;
}

namespace {

// mean, median, std (population, numpy's default) and p99, in ms, named as
// vLLM names them; zeros when there is no sample (numpy's mean of [0]).
void put_stats(json& j, const std::string& name, std::vector<double> seconds) {
  double mean = 0, stdev = 0, median = 0, p99 = 0;
  if (!seconds.empty()) {
    std::sort(seconds.begin(), seconds.end());
    for (double x : seconds) mean += x;
    mean /= double(seconds.size());
    for (double x : seconds) stdev += (x - mean) * (x - mean);
    stdev = std::sqrt(stdev / double(seconds.size()));
    median = percentile_sorted(seconds, 50);
    p99 = percentile_sorted(seconds, 99);
  }
  j["mean_" + name + "_ms"] = mean * 1e3;
  j["median_" + name + "_ms"] = median * 1e3;
  j["std_" + name + "_ms"] = stdev * 1e3;
  j["p99_" + name + "_ms"] = p99 * 1e3;
}

std::string local_date(std::chrono::system_clock::time_point t) {
  const std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  localtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);  // vLLM's format
  return buf;
}

}  // namespace

json vllm_result_json(const LoadPlan& plan, const LoadResult& result, const VllmResultMeta& meta) {
  json j;
  j["date"] = local_date(result.started_at);
  j["backend"] = meta.backend;
  j["model_id"] = meta.model_id;
  j["tokenizer_id"] = meta.tokenizer_id;
  j["num_prompts"] = plan.requests.size();
  j["request_rate"] = meta.request_rate > 0 ? json(meta.request_rate) : json("inf");
  j["burstiness"] = meta.burstiness;
  j["max_concurrency"] = meta.max_concurrency > 0 ? json(meta.max_concurrency) : json(nullptr);
  std::vector<double> ttfts, tpots, itls, e2els;
  json input_lens = json::array(), output_lens = json::array(), ttft_list = json::array(),
       itl_lists = json::array(), texts = json::array(), errors = json::array(), starts = json::array();
  int64_t completed = 0, total_input = 0, total_output = 0;
  for (size_t i = 0; i < plan.requests.size(); ++i) {
    const PlannedRequest& p = plan.requests[i];
    const RequestMeasurement& m = result.requests[i];
    const int64_t prompt = m.usage_prompt_tokens ? *m.usage_prompt_tokens : p.prompt_tokens;
    input_lens.push_back(prompt);
    starts.push_back(m.send_s);
    texts.push_back(m.text);
    errors.push_back(m.error);
    json itl = json::array();
    if (!m.ok()) {
      output_lens.push_back(0);
      ttft_list.push_back(0.0);
      itl_lists.push_back(itl);
      continue;
    }
    ++completed;
    const int64_t out = m.output_tokens();
    total_input += prompt;
    total_output += out;
    output_lens.push_back(out);
    ttft_list.push_back(m.ttft_s());
    ttfts.push_back(m.ttft_s());
    e2els.push_back(m.latency_s());
    if (out > 1) tpots.push_back((m.latency_s() - m.ttft_s()) / double(out - 1));
    for (size_t k = 1; k < m.chunk_s.size(); ++k) {
      const double gap = m.chunk_s[k] - m.chunk_s[k - 1];
      itl.push_back(gap);
      itls.push_back(gap);
    }
    itl_lists.push_back(itl);
  }
  const double d = result.duration_s;
  j["duration"] = d;
  j["completed"] = completed;
  j["failed"] = int64_t(plan.requests.size()) - completed;
  j["total_input_tokens"] = total_input;
  j["total_output_tokens"] = total_output;
  j["request_throughput"] = d > 0 ? double(completed) / d : 0.0;
  j["output_throughput"] = d > 0 ? double(total_output) / d : 0.0;
  j["total_token_throughput"] = d > 0 ? double(total_input + total_output) / d : 0.0;
  j["max_concurrent_requests"] = result.max_in_flight;
  put_stats(j, "ttft", ttfts);
  put_stats(j, "tpot", tpots);
  put_stats(j, "itl", itls);
  put_stats(j, "e2el", e2els);
  j["input_lens"] = std::move(input_lens);
  j["output_lens"] = std::move(output_lens);
  j["ttfts"] = std::move(ttft_list);
  j["itls"] = std::move(itl_lists);
  j["generated_texts"] = std::move(texts);
  j["errors"] = std::move(errors);
  j["start_times"] = std::move(starts);
  return j;
}

}  // namespace servesim
