// The centre and spread of a latency statistic over seeded simulations.
//
// With a cost jitter (sim/cost_jitter.h) each simulation of the same
// workload is one draw of the percentiles a run can have; over N draws the
// median of each statistic is the prediction, and the 10th and 90th
// percentiles of it over the draws say how far one run may land from it.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/metrics.h"
#include "sim/stats.h"

namespace servesim {

// The most simulations one prediction draws.
inline constexpr int kMaxDraws = 1000;

struct DrawBand {
  int64_t draws = 0;
  // Each field of Distribution (count, mean, p50, ...) taken over the
  // draws: its 10th percentile, median and 90th percentile.
  Distribution p10, median, p90;
};

// InputError when `draws` is empty.
DrawBand band_over_draws(const std::vector<Distribution>& draws);

// {mean, p50, p90, p99} of one distribution.
nlohmann::json quantiles_json(const Distribution& d);
// {draws, p10 {mean, p50, p90, p99}, p90 {...}}: the band around the median
// (the median itself is reported as the prediction).
nlohmann::json band_json(const DrawBand& band);

// TTFT, TPOT and E2E over the draws' summaries (InputError when none).
struct LatencyBands {
  DrawBand ttft_s, tpot_s, e2e_s;
};
LatencyBands band_latencies(const std::vector<RunSummary>& draws);
// "P10-P90 over N draws (ms): TTFT p50 a-b, p90 c-d; TPOT p50 ..., p90 ...",
// for the tables on stdout.
std::string band_line(const LatencyBands& bands);
// `summary` with its TTFT, TPOT and E2E the medians over the draws.
RunSummary with_medians(RunSummary summary, const LatencyBands& bands);

// The jitter seed of draw `draw` (0, 1, ...) of a simulation seeded `seed`.
uint64_t draw_seed(uint64_t seed, int draw);

}  // namespace servesim
