// The highest arrival rate a deployment serves within its SLOs: the rate at
// which the fraction of requests meeting every SLO (TTFT, TPOT, E2E; a
// rejected request meets none) is still at least the attainment target,
// found by bracketing and bisection, separately for each of several
// workload seeds so that the answer is not one draw's luck.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/simulation.h"

namespace servesim {

struct CapacityOptions {
  double attainment = 0.99;  // in (0, 1]
  double tolerance = 0.01;   // bisection stops once (hi - lo) / lo <= tolerance
  int32_t seeds = 3;         // workload seeds setup.workload.seed + 0 .. seeds - 1
  int32_t jobs = 1;          // seeds searched side by side (threads); the result does not depend on it
  // Called as each seed's search ends (done, total), from the calling thread.
  std::function<void(int done, int total)> progress;
  void validate() const;  // InputError naming the flag
};

// One simulation at one rate and seed.
struct CapacityProbe {
  double rate = 0;
  double attainment = 0;  // requests meeting every SLO / submitted
  int64_t submitted = 0, rejected = 0;
  int64_t ttft_misses = 0, tpot_misses = 0, e2e_misses = 0;  // completed requests over each target
  int64_t preemptions = 0;
  double peak_kv_utilization = 0;
  RunSummary summary;
};

struct SeedCapacity {
  uint64_t seed = 0;
  double max_rate = 0;         // the bracket's lower end: the highest rate seen to pass
  CapacityProbe at_max;        // the probe at max_rate
  CapacityProbe above;         // the lowest rate seen to fail (the bracket's upper end)
  int32_t probes = 0;
};

struct CapacityResult {
  double max_request_rate = 0;         // median over seeds of max_rate
  double min_rate = 0, max_rate = 0;   // their spread
  std::vector<SeedCapacity> seeds;     // in seed order
  size_t median_seed = 0;              // index into seeds of the median
  // What stops the rate going higher, at the median seed's first failing
  // rate: the SLO most requests miss ("ttft", "tpot", "e2e", "rejected" when
  // rejections outnumber them, "none"), and whether KV capacity (preemptions,
  // or a KV cache over 95% full) or compute bounds it.
  std::string limiting_slo, bound_by;
  std::string explanation;
  std::vector<std::string> warnings;  // e.g. too few requests for a steady state
};

// InputError when `setup` has no SLO or no rate to search (below).
void check_capacity_setup(const SimulationSetup& setup);

// Throws InputError when no SLO is set, the workload is not an open loop
// at --rate (poisson, gamma or constant; a trace or a closed loop has no
// rate to search), or even 1e-4 req/s misses the target (the message says
// which SLO and by how much).
CapacityResult find_capacity(const SimulationSetup& setup, const CostModels& costs, const CapacityOptions& options);

// {"max_request_rate", "spread": {min, max}, "attainment_target", "seeds": [...], "limit": {...}}.
nlohmann::json capacity_to_json(const CapacityResult& result, const CapacityOptions& options);

}  // namespace servesim
