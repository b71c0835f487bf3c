#include "sim/draw_band.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "sim/errors.h"
#include "sim/random.h"

namespace servesim {
namespace {

// p-th percentile over the draws of one field.
double field_percentile(const std::vector<Distribution>& draws, double Distribution::*field, double p) {
  std::vector<double> values;
  values.reserve(draws.size());
  for (const Distribution& d : draws) values.push_back(d.*field);
  std::sort(values.begin(), values.end());
  return percentile_sorted(values, p);
}

Distribution at_percentile(const std::vector<Distribution>& draws, double p) {
  Distribution out;
  for (double Distribution::*field : {&Distribution::mean, &Distribution::p50, &Distribution::p90,
                                       &Distribution::p95, &Distribution::p99, &Distribution::min,
                                       &Distribution::max})
    out.*field = field_percentile(draws, field, p);
  std::vector<double> counts;
  for (const Distribution& d : draws) counts.push_back(double(d.count));
  std::sort(counts.begin(), counts.end());
  out.count = int64_t(std::llround(percentile_sorted(counts, p)));
  return out;
}

}  // namespace

nlohmann::json quantiles_json(const Distribution& d) {
  return {{"mean", d.mean}, {"p50", d.p50}, {"p90", d.p90}, {"p99", d.p99}};
}

DrawBand band_over_draws(const std::vector<Distribution>& draws) {
  if (draws.empty()) throw InputError("band_over_draws: no draws");
  DrawBand band;
  band.draws = int64_t(draws.size());
  band.p10 = at_percentile(draws, 10);
  band.median = at_percentile(draws, 50);
  band.p90 = at_percentile(draws, 90);
  return band;
}

nlohmann::json band_json(const DrawBand& band) {
  return {{"draws", band.draws}, {"p10", quantiles_json(band.p10)}, {"p90", quantiles_json(band.p90)}};
}

LatencyBands band_latencies(const std::vector<RunSummary>& draws) {
  std::vector<Distribution> ttft, tpot, e2e;
  for (const RunSummary& s : draws) {
    ttft.push_back(s.ttft_s);
    tpot.push_back(s.tpot_s);
    e2e.push_back(s.e2e_s);
  }
  return {band_over_draws(ttft), band_over_draws(tpot), band_over_draws(e2e)};
}

std::string band_line(const LatencyBands& bands) {
  const DrawBand &tt = bands.ttft_s, &tp = bands.tpot_s;
  auto ms = [](double s) { return fmt::format("{:.2f}", s * 1e3); };
  return fmt::format("P10-P90 over {} draws (ms): TTFT p50 {}-{}, p90 {}-{}; TPOT p50 {}-{}, p90 {}-{}", tt.draws,
                     ms(tt.p10.p50), ms(tt.p90.p50), ms(tt.p10.p90), ms(tt.p90.p90), ms(tp.p10.p50), ms(tp.p90.p50),
                     ms(tp.p10.p90), ms(tp.p90.p90));
}

RunSummary with_medians(RunSummary summary, const LatencyBands& bands) {
  summary.ttft_s = bands.ttft_s.median;
  summary.tpot_s = bands.tpot_s.median;
  summary.e2e_s = bands.e2e_s.median;
  return summary;
}

uint64_t draw_seed(uint64_t seed, int draw) { return splitmix64_finalize(seed ^ (uint64_t(draw) + 1)); }

}  // namespace servesim
