// `servesim capacity --search`: the capacity of every point of a small grid
// (TP x quantization x max-num-seqs x token budget), per GPU, and the Pareto
// fronts of output throughput per GPU against TPOT and TTFT: which
// configurations no other beats on both. A point's result is a JSON row
// (search_row), from which search.csv, the fronts and a merge of shards
// (computed on several machines) are all made, so that one machine and
// merged shards write the same bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/capacity.h"

namespace servesim {

struct SearchAxes {
  std::vector<int32_t> tensor_parallel_size;
  std::vector<std::string> quantization;  // --quantization names
  std::vector<int32_t> max_num_seqs;
  std::vector<int32_t> max_num_batched_tokens;  // 0: the scheduler's default
};

struct SearchPoint {
  int32_t tensor_parallel_size = 1, pipeline_parallel_size = 1;
  int32_t replicas = 1;  // --num-replicas: the unit searched is that many behind the router
  std::string quantization;
  int32_t max_num_seqs = 0, max_num_batched_tokens = 0;
  std::optional<CapacityResult> capacity;  // unset: the point failed, `error` says why
  std::string error;
  int32_t gpus() const { return tensor_parallel_size * pipeline_parallel_size * replicas; }
};

// "1,2,4" -> {1, 2, 4}; InputError naming `flag` for an empty or bad item.
std::vector<int32_t> parse_int_list(const std::string& text, const std::string& flag);
std::vector<std::string> parse_name_list(const std::string& text, const std::string& flag);

// The grid's points in order: TP outermost, then quantization, max-num-seqs,
// token budget.
std::vector<SearchPoint> search_grid(const SimulationSetup& base, const SearchAxes& axes);

// The rows of the points `include` selects (all without it), each point
// searched with `options` (options.jobs points side by side, each point's
// seeds in turn); rows in grid order whatever the number of jobs, their
// fronts marked among themselves. `progress` hears (points done, total).
// InputError first when `base` has no SLO or rate to search.
nlohmann::json search_capacity(const SimulationSetup& base, const SearchAxes& axes, const CapacityOptions& options,
                               const std::function<void(int, int)>& progress,
                               const std::function<bool(size_t)>& include = {});

// A point's row: "index" (in the grid), its settings, "gpus", and either
// "capacity" (capacity_to_json), "max_request_rate", "rate_per_gpu",
// "output_tokens_per_s_per_gpu" (at the median seed's capacity), or "error".
nlohmann::json search_row(size_t index, const SearchPoint& point, const CapacityOptions& options);

// Sets each row's "pareto_tpot" ("pareto_ttft"): true when no other row
// with a capacity has at least its output tokens/s per GPU and at most its
// TPOT (TTFT) P50 at capacity, one of them strictly.
void mark_pareto(nlohmann::json& rows);

// search.csv: one line per row (its settings, capacity, spread, per-GPU
// figures, latencies at capacity, limit, fronts, error).
void write_search_csv(std::ostream& out, const nlohmann::json& rows);

}  // namespace servesim
