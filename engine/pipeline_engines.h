// Pipeline parallelism's batches in flight: PP virtual engines (vLLM's
// virtual_engine), each with its own scheduler, its share of the KV pool
// and of max_num_seqs, and its own requests, whose batches pass the stages
// one after another while the other engines' batches fill the pipeline.
//
// Each engine's iteration takes the whole pipeline's latency (every stage
// plus the transfers). With P engines busy, stage s serves one batch of
// each per cycle, so the cycle is max(each engine's latency, sum over
// engines of their stage-s times); when the engines' batches cost about the
// same, both are one step's latency and the engines do not slow each other.
// That is the assumption here: engines run side by side on their own clocks
// (a P-fold imbalance between engines' batches would be underestimated).
// Requests are dealt to engines round-robin in arrival order (a session's
// turns stay on its first turn's engine; a closed loop's clients are split).
#pragma once

#include <cstdint>
#include <vector>

#include "sim/metrics.h"
#include "sim/scheduler.h"
#include "sim/workload.h"

namespace servesim {

struct EngineShare {
  Workload workload;                   // ids renumbered 0 .. n-1, order kept
  std::vector<int64_t> original_ids;   // engine id -> the workload's id
};

// `engines` >= 1 shares of `workload` (a closed loop of C clients uses
// min(engines, C) of them).
std::vector<EngineShare> split_for_engines(const Workload& workload, int32_t engines);

// Engine `index` of `engines`: floor(blocks / engines) KV blocks and
// max_num_seqs / engines sequences (the first max_num_seqs % engines get one
// more); the token budget is per batch and stays.
SchedulerConfig engine_config(const SchedulerConfig& config, int32_t engines, int32_t index);

// One run's records from its engines' (parts[e] served shares[e]): requests
// under their workload ids, iterations in start order, counters summed
// (peak_kv_blocks: the sum of each engine's peak, an upper bound).
RunRecords merge_engine_records(std::vector<RunRecords>& parts, const std::vector<EngineShare>& shares,
                                size_t total_requests);

}  // namespace servesim
