#include "engine/pipeline_engines.h"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace servesim {

std::vector<EngineShare> split_for_engines(const Workload& workload, int32_t engines) {
  if (engines < 1) throw std::invalid_argument("split_for_engines: engines must be >= 1");
  const auto& requests = workload.requests;
  int64_t used = engines;
  if (workload.closed_loop) used = std::max<int64_t>(1, std::min<int64_t>(engines, workload.concurrency));
  std::vector<EngineShare> shares(static_cast<size_t>(used));
  std::vector<int32_t> engine_of(requests.size(), 0);
  int64_t independent = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    // A session's later turn follows an earlier id, whose engine is known.
    engine_of[i] = r.follows < 0 ? int32_t(independent++ % used) : engine_of[size_t(r.follows)];
  }
  std::vector<int64_t> local_id(requests.size(), -1);
  for (size_t i = 0; i < requests.size(); ++i) {
    EngineShare& share = shares[size_t(engine_of[i])];
    Request r = requests[i];
    local_id[i] = int64_t(share.original_ids.size());
    r.id = local_id[i];
    if (r.follows >= 0) r.follows = local_id[size_t(r.follows)];
    share.original_ids.push_back(int64_t(i));
    share.workload.requests.push_back(std::move(r));
  }
  for (int64_t e = 0; e < used; ++e) {
    Workload& w = shares[size_t(e)].workload;
    w.closed_loop = workload.closed_loop;
    if (workload.closed_loop) w.concurrency = workload.concurrency / used + (e < workload.concurrency % used ? 1 : 0);
  }
  return shares;
}

SchedulerConfig engine_config(const SchedulerConfig& config, int32_t engines, int32_t index) {
  SchedulerConfig c = config;
  c.num_gpu_blocks = std::max<int64_t>(1, config.num_gpu_blocks / engines);
  c.max_num_seqs = std::max(1, config.max_num_seqs / engines + (index < config.max_num_seqs % engines ? 1 : 0));
  return c;
}

RunRecords merge_engine_records(std::vector<RunRecords>& parts, const std::vector<EngineShare>& shares,
                                size_t total_requests) {
  RunRecords out;
  out.requests.resize(total_requests);
  std::map<std::string, int32_t> reason_index;
  for (size_t e = 0; e < parts.size(); ++e) {
    RunRecords& part = parts[e];
    const EngineShare& share = shares[e];
    for (size_t j = 0; j < part.requests.size(); ++j) {
      RequestRecord r = part.requests[j];
      r.id = share.original_ids[j];
      if (r.rejection >= 0) {
        const std::string& reason = part.rejection_reasons[size_t(r.rejection)];
        auto [it, added] = reason_index.emplace(reason, int32_t(out.rejection_reasons.size()));
        if (added) out.rejection_reasons.push_back(reason);
        r.rejection = it->second;
      }
      out.requests[size_t(r.id)] = r;
    }
    out.iterations.insert(out.iterations.end(), part.iterations.begin(), part.iterations.end());
    out.itl_s.merge(part.itl_s);
    out.num_iterations += part.num_iterations;
    out.batch_tokens += part.batch_tokens;
    out.batch_sequences += part.batch_sequences;
    out.preemptions += part.preemptions;
    out.peak_kv_blocks += part.peak_kv_blocks;
    out.num_gpu_blocks += part.num_gpu_blocks;
    out.block_size = part.block_size;
    out.prefix_cache.queries_tokens += part.prefix_cache.queries_tokens;
    out.prefix_cache.hits_tokens += part.prefix_cache.hits_tokens;
    out.prefix_cache.preempted_queries_tokens += part.prefix_cache.preempted_queries_tokens;
    out.prefix_cache.preempted_hits_tokens += part.prefix_cache.preempted_hits_tokens;
    out.prefix_cache.evicted_blocks += part.prefix_cache.evicted_blocks;
    out.end_s = std::max(out.end_s, part.end_s);
  }
  std::stable_sort(out.iterations.begin(), out.iterations.end(),
                   [](const IterationRecord& a, const IterationRecord& b) { return a.start_s < b.start_s; });
  for (size_t i = 0; i < out.iterations.size(); ++i) out.iterations[i].index = int64_t(i);
  return out;
}

}  // namespace servesim
