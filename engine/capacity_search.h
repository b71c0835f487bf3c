// `servesim capacity --search`: the capacity of every point of a small grid
// (TP x quantization x max-num-seqs x token budget), per GPU, and the Pareto
// front of output throughput per GPU against TPOT (and TTFT): which
// configurations no other beats on both.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "engine/capacity.h"

namespace servesim {

struct SearchAxes {
  std::vector<int32_t> tensor_parallel_size;
  std::vector<std::string> quantization;  // --quantization names
  std::vector<int32_t> max_num_seqs;
  std::vector<int32_t> max_num_batched_tokens;
};

struct SearchPoint {
  int32_t tensor_parallel_size = 1, pipeline_parallel_size = 1;
  std::string quantization;
  int32_t max_num_seqs = 0, max_num_batched_tokens = 0;
  std::optional<CapacityResult> capacity;  // unset: the point failed, `error` says why
  std::string error;
  int32_t gpus() const { return tensor_parallel_size * pipeline_parallel_size; }
  // At the median seed's capacity (0 without one).
  double rate_per_gpu() const;
  double output_tokens_per_s_per_gpu() const;
  bool pareto_tpot = false, pareto_ttft = false;
};

// "1,2,4" -> {1, 2, 4}; InputError naming `flag` for an empty or bad item.
std::vector<int32_t> parse_int_list(const std::string& text, const std::string& flag);
std::vector<std::string> parse_name_list(const std::string& text, const std::string& flag);

// Every point's capacity: `base` with each point's settings, searched with
// `options` (options.jobs points side by side, each point's seeds in
// turn); points come back in grid order (TP outermost, then quantization,
// max-num-seqs, token budget) whatever the number of jobs. `progress`
// hears (points done, total).
std::vector<SearchPoint> search_capacity(const SimulationSetup& base, const SearchAxes& axes,
                                         const CapacityOptions& options,
                                         const std::function<void(int, int)>& progress);

// Marks the Pareto fronts: a point is on the TPOT front when no other
// point has at least its throughput per GPU and at most its TPOT P50, one
// of them strictly (likewise TTFT P50).
void mark_pareto(std::vector<SearchPoint>& points);

// search.csv: one row per point (its settings, capacity, spread, per-GPU
// figures, latencies at capacity, limit, fronts, error).
void write_search_csv(std::ostream& out, const std::vector<SearchPoint>& points);

}  // namespace servesim
